"""OpenNMT-py's vocabularies as word lists: 3.x's lists, or 1.x's torchtext fields as
``utils.safe_pickle`` reads them (stand-ins, no torchtext code run). The converter reads a
checkpoint's; preprocessing reads a 1.x run's vocab.pt (``-src_vocab``, as 1.x took it)."""

from __future__ import annotations

from typing import Any

from onmt_lite.utils.errors import UserError
from onmt_lite.utils.safe_pickle import Foreign


def _refused(path: str, what: str) -> UserError:
    return UserError(f"{path}: cannot read {what}")


def peer_words(field: Any, side: str, path: str) -> list[str]:
    """The word list of one side of a peer ``vocab``: 3.x's list, or the ``itos`` of 1.x's field
    (``TextMultiField`` -> its first ``Field`` -> ``Vocab``), specials included."""
    if isinstance(field, list) and all(isinstance(word, str) for word in field):
        return field
    node = field
    for _ in range(4):
        if not isinstance(node, Foreign):
            break
        if node.get("itos") is not None:
            return list(node.get("itos"))
        fields = node.get("fields")
        if fields:
            if len(fields) > 1:
                raise _refused(path, f"source word features ({len(fields) - 1})")
            node = fields[0][1]
            continue
        node = node.get("vocab")
    raise _refused(path, f"its {side} vocabulary (neither a word list nor a 1.x field with one)")


def peer_vocabularies(vocab: Any, path: str) -> dict[str, list[str]]:
    """``{"src": words, "tgt": words}`` of a peer ``vocab`` (3.x's dict of lists, 1.x's dict of
    fields or its older list of ``(name, field)`` pairs)."""
    if isinstance(vocab, list):
        vocab = dict(vocab)
    if not isinstance(vocab, dict) or "src" not in vocab or "tgt" not in vocab:
        raise _refused(path, "a file without src and tgt vocabularies")
    if vocab.get("src_feats"):
        raise _refused(path, "source word features")
    return {side: peer_words(vocab[side], side, path) for side in ("src", "tgt")}
