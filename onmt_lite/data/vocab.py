"""Vocab: a word list with the special tokens at fixed ids, saved and loaded as plain data."""

import collections

from onmt_lite.utils.errors import UserError, where

UNK = "<unk>"
PAD = "<blank>"
BOS = "<s>"
EOS = "</s>"
SPECIALS = (UNK, PAD, BOS, EOS)
UNK_ID, PAD_ID, BOS_ID, EOS_ID = range(4)


class Vocab:
    """Maps words to ids and back. Ids 0-3 are always ``<unk> <blank> <s> </s>``.

    Args:
        words: the non-special words in id order (ids start at 4). Duplicates and specials are
            dropped, keeping the first occurrence.
    """

    def __init__(self, words=()):
        self.itos = list(SPECIALS)
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        for word in words:
            if word not in self.stoi:
                self.stoi[word] = len(self.itos)
                self.itos.append(word)

    def padded_to_multiple(self, multiple):
        """This vocabulary with unused words appended (1.x's ``averyunlikelytokenN``) until its
        size, specials included, is a multiple of ``multiple``; itself when it is one already."""
        missing = -len(self.itos) % multiple
        if missing == 0:
            return self
        return Vocab(
            self.itos[len(SPECIALS) :] + [f"averyunlikelytoken{i}" for i in range(missing)]
        )

    def truncated(self, max_size):
        """This vocabulary with its first ``max_size`` words only (0: all); itself when it has no
        more."""
        if not max_size or len(self.itos) - len(SPECIALS) <= max_size:
            return self
        return Vocab(self.itos[len(SPECIALS) : len(SPECIALS) + max_size])

    @classmethod
    def from_counter(cls, counter, max_size, min_frequency=0):
        """The ``max_size`` most frequent words seen at least ``min_frequency`` times.

        Ties in frequency are broken alphabetically, so the result does not depend on reading order.
        """
        ranked = sorted(
            ((-n, w) for w, n in counter.items() if w not in SPECIALS and n >= min_frequency)
        )
        return cls(w for _, w in ranked[:max_size])

    @classmethod
    def from_file(cls, path, max_size):
        """Read one word a line (anything after the first whitespace, such as a count, is
        ignored); the first ``max_size`` distinct words (0: all)."""
        words = []
        try:
            with open(path, "rb") as f:
                for lineno, raw in enumerate(f, 1):
                    try:
                        fields = raw.decode("utf-8").split()
                    except UnicodeDecodeError as err:
                        raise UserError(
                            f"{where(path, lineno)}: not valid UTF-8 ({err.reason})"
                        ) from None
                    if fields:
                        words.append(fields[0])
        except OSError as err:
            raise UserError(f"{path}: cannot read vocabulary file ({err.strerror})") from None
        vocab = cls(words)
        if len(vocab) == len(SPECIALS):
            raise UserError(f"{path}: the vocabulary file has no words")
        return vocab.truncated(max_size)

    def __len__(self):
        return len(self.itos)

    def __eq__(self, other):
        return isinstance(other, Vocab) and self.itos == other.itos

    def __contains__(self, word):
        return word in self.stoi

    def lookup(self, word):
        return self.stoi.get(word, UNK_ID)

    def numericalize(self, tokens):
        """A list of ids for ``tokens``; unknown words get ``UNK_ID``."""
        get = self.stoi.get
        return [get(t, UNK_ID) for t in tokens]

    def to_words(self, ids):
        return [self.itos[i] for i in ids]

    def to_plain(self):
        """The vocabulary as a plain list of words (specials included), for checkpoints."""
        return list(self.itos)

    @classmethod
    def from_plain(cls, itos):
        if list(itos[: len(SPECIALS)]) != list(SPECIALS):
            raise UserError(
                f"vocabulary does not start with the special tokens {' '.join(SPECIALS)}"
            )
        return cls(itos[len(SPECIALS) :])


def count_words(sentences):
    """A Counter of the tokens in an iterable of token lists."""
    counter = collections.Counter()
    for tokens in sentences:
        counter.update(tokens)
    return counter


def vocabs_to_plain(vocabs):
    """``{"src": Vocab, "tgt": Vocab, "src_feats": [Vocab, ..]}`` as plain word lists (for
    checkpoints); ``src_feats`` only when the source has word features, so that a model without them
    is saved as before."""
    plain = {"src": vocabs["src"].to_plain(), "tgt": vocabs["tgt"].to_plain()}
    if vocabs.get("src_feats"):
        plain["src_feats"] = [vocab.to_plain() for vocab in vocabs["src_feats"]]
    return plain


def vocabs_from_plain(plain):
    """The vocabularies of ``vocabs_to_plain`` (or of a vocab file's record); ``src_feats`` is
    ``[]`` where the data or checkpoint has no word features (those of earlier versions
    included)."""
    return {
        "src": Vocab.from_plain(plain["src"]),
        "tgt": Vocab.from_plain(plain["tgt"]),
        "src_feats": [Vocab.from_plain(words) for words in plain.get("src_feats") or []],
    }
