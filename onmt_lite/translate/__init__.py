"""Translation: the Translator, search (greedy, sampling, beam), penalties, continuous batching and
the fast paths of the CPU."""
