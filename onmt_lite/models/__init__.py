"""The model: embeddings, RNN encoder, attention, RNN decoders, generators, the builder and checkpoints."""
