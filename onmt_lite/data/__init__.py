"""Data: vocabularies, reading text, examples, the dynamic dictionary for copying, shards,
batches."""
