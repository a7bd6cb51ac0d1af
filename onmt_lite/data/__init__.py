"""Data: vocabularies, reading text, the dynamic dictionary for copying, shards, batches."""
