"""Models that travel: OpenNMT-py checkpoints read and written, CTranslate2 models written
(``onmt_lite_convert``; docs/interop.md)."""
