"""onmt_lite: a small, readable RNN sequence-to-sequence toolkit in the OpenNMT tradition."""
__version__ = "0.1.0"
