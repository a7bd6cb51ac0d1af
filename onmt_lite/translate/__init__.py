"""Translation: search (greedy, sampling, beam), penalties, the Translator."""
