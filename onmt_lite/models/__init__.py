"""The model: embeddings, RNN, mean and Transformer encoders, attention, RNN and Transformer
decoders, generators, the builder and checkpoints."""
