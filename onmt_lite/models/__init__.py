"""The model: embeddings, RNN encoder, attention, RNN decoders, generators, and the builder."""
