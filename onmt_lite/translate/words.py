"""OutputWords: a search's token ids made words and text (copied words, ``-replace_unk``,
``-phrase_table``, sentencepiece), and written into a ``Result``."""

from __future__ import annotations

from onmt_lite.data.corpus import Tokenizer
from onmt_lite.data.vocab import UNK_ID
from onmt_lite.translate.finished import Hypothesis
from onmt_lite.translate.result import Result


class OutputWords:
    """The words of the target vocabulary ``vocab``; ``tokenizer``: the target side's
    ``data.corpus.Tokenizer``, which makes the words text; ``copy``: the model copies source words
    (ids past the vocabulary name an example's own words); ``replace_unk``: an ``<unk>`` becomes
    the source word it attends to most (through ``phrase_table``, ``{source word: target}``, when
    there)."""

    def __init__(
        self,
        vocab,
        tokenizer: Tokenizer,
        copy: bool = False,
        replace_unk: bool = False,
        phrase_table: dict | None = None,
    ):
        self.vocab = vocab
        self.tokenizer = tokenizer
        self.copy = copy
        self.replace_unk = replace_unk
        self.phrase_table = phrase_table or {}

    def word(self, token: int, ex_words: list | None) -> str:
        """The word of a token id: the target vocabulary's, or a copied source word
        (``ex_words``)."""
        vocab_size = len(self.vocab)
        return self.vocab.itos[token] if token < vocab_size else ex_words[token - vocab_size]

    def words(self, hyp: Hypothesis, src_tokens: list | None, ex_words: list | None) -> list[str]:
        """A hypothesis's words: copied words from the source, ``<unk>`` replaced when asked."""
        align = hyp.attention.get("copy" if self.copy else "std")
        replacing = self.replace_unk and align is not None and src_tokens is not None
        words = []
        for position, token in enumerate(hyp.tokens):
            if token == UNK_ID and replacing:
                source_word = src_tokens[int(align[position, : len(src_tokens)].argmax())]
                words.append(self.phrase_table.get(source_word, source_word))
            else:
                words.append(self.word(token, ex_words))
        return words

    def detokenize(self, words: list[str]) -> str:
        """Output words as text (sentencepiece pieces decoded)."""
        return self.tokenizer.detokenize(words)

    def fill(self, result: Result, nbest: list[Hypothesis], ex_words: list | None) -> None:
        """Put an example's n-best hypotheses into its Result."""
        for hyp in nbest:
            words = self.words(hyp, result.source, ex_words)
            result.tokens.append(words)
            result.hypotheses.append(self.detokenize(words))
            result.scores.append(hyp.score)
            result.log_probs.append(hyp.log_prob)
            result.attention.append(hyp.attention.get("std"))
            result.copy_attention.append(hyp.attention.get("copy"))
            result.p_copy.append(hyp.attention.get("p_copy"))
