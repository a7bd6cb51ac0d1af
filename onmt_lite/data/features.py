"""Source word features (OpenNMT-py 1.x): tokens ``word￨feat1￨feat2`` (U+FFE8 between the parts).

Every token of a source line carries the same number of features, and every line of a corpus the
number of its first non-empty line; the word and each feature value of a token are non-empty
(``￨A`` and ``b￨`` are refused); the target side takes none. A model with features has one
vocabulary per feature and reads, beside the word ids, ``[len x batch x n_feats]`` feature ids.
"""

import dataclasses

from onmt_lite.data.corpus import read_lines
from onmt_lite.utils.errors import UserError, where

FEAT_SEP = "\uffe8"


def n_token_features(token):
    """The number of features a token carries (0 for a plain word)."""
    return token.count(FEAT_SEP)


def corpus_feature_count(path):
    """The number of features of the whitespace tokens of the first non-empty line of ``path`` (0
    without features)."""
    for _, text in read_lines(path):
        tokens = text.split()
        if tokens:
            return n_token_features(tokens[0])
    return 0


@dataclasses.dataclass(frozen=True)
class FeatureReader:
    """Splits the source tokens of ``path``'s lines into words and ``n_feats`` feature columns,
    refusing a line whose tokens carry another number of features, and the target tokens of
    ``tgt_path`` that carry features (as in 1.x, the target side has none), naming the file and
    line."""

    n_feats: int
    path: str
    tgt_path: str = ""
    holder: str = "the corpus's tokens"  # what has ``n_feats`` features, for the error

    def split(self, lineno, tokens):
        """``(words, columns)``: the words, and for each feature the list of its values, one a
        token."""
        if not self.n_feats and not any(FEAT_SEP in token for token in tokens):
            return tokens, []
        parts = [token.split(FEAT_SEP) for token in tokens]
        for position, token_parts in enumerate(parts, 1):
            if len(token_parts) != self.n_feats + 1:
                raise UserError(
                    f"{where(self.path, lineno)}: token {position} ({tokens[position - 1]!r}) has "
                    f"{len(token_parts) - 1} word feature(s) where {self.holder} have "
                    f"{self.n_feats} (features are separated by U+FFE8 '{FEAT_SEP}')"
                )
            if "" in token_parts:  # ￨A or b￨: the empty string would become a vocabulary entry
                self._refuse_empty_part(lineno, position, tokens[position - 1], token_parts)
        words = [token_parts[0] for token_parts in parts]
        return words, [[token_parts[i + 1] for token_parts in parts] for i in range(self.n_feats)]

    def _refuse_empty_part(self, lineno: int, position: int, token: str, parts: list[str]) -> None:
        """Refuse the token ``token``, split into ``parts``, for its first empty part."""
        empty = parts.index("")
        what = "an empty word" if empty == 0 else f"an empty value of feature {empty}"
        raise UserError(
            f"{where(self.path, lineno)}: token {position} ({token!r}) has {what} "
            f"(a token is word{FEAT_SEP}feature..., each part non-empty)"
        )

    def check_target(self, lineno, tokens):
        """Refuse target tokens holding the feature separator."""
        for position, token in enumerate(tokens, 1):
            if FEAT_SEP in token:
                raise UserError(
                    f"{where(self.tgt_path, lineno)}: target token {position} ({token!r}) carries "
                    f"word features (U+FFE8 '{FEAT_SEP}'); only the source side may have features"
                )
