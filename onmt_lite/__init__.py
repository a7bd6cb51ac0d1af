"""onmt_lite: a small, readable sequence-to-sequence toolkit in the OpenNMT tradition (RNNs with
attention, the Transformer, copy attention, coverage)."""

__version__ = "0.1.0"


def __getattr__(name):
    # ``from onmt_lite import Translator`` without importing torch for every ``import onmt_lite``
    if name == "Translator":
        from onmt_lite.translate.translator import Translator

        return Translator
    raise AttributeError(name)
