"""Reading parallel text: UTF-8 lines, whitespace or sentencepiece tokens, length filtering.

Every error names the file and line. Tokens are split on any run of whitespace (spaces, tabs), so
there is never an empty token.
"""

import dataclasses
import itertools
import os
import stat
from collections.abc import Callable, Iterator

from onmt_lite.utils.errors import UserError, where


BOM = "\ufeff"  # a byte order mark some editors put at the start of a UTF-8 file


STDIN = "-"  # a path that names standard input


def read_once(path: str) -> bool:
    """Whether ``path`` can be read only once: standard input (``-``), a pipe, a FIFO, a terminal,
    a socket (links followed: ``/dev/stdin`` is what standard input is). A regular file and
    /dev/null can be read again; a missing file or a directory is not read at all: opening it
    reports the error."""
    if path == STDIN:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return False
    return not os.path.samefile(path, os.devnull)


def same_stream(path: str, other: str) -> bool:
    """Whether ``path`` and ``other`` name one stream that can be read only once (``-`` and
    ``/dev/stdin``, a FIFO named twice): what one of them reads, the other never sees."""
    if not (read_once(path) and read_once(other)):
        return False
    try:
        first = os.fstat(0) if path == STDIN else os.stat(path)
        second = os.fstat(0) if other == STDIN else os.stat(other)
    except OSError:
        return False
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def require_rereadable(path: str, option: str, why: str) -> None:
    """A UserError naming ``option`` if ``path`` can be read only once (``read_once``): a command
    that reads it twice (``why``) would see nothing the second time."""
    if read_once(path):
        raise UserError(
            f"{option} {path}: can be read only once (not a regular file), and {why}; give a "
            "regular file"
        )


def line_passes(path: str) -> Callable[[], Iterator[tuple[int, str]]]:
    """A function that makes a new pass over ``read_lines(path)`` at each call: the file read
    again, or, where it can be read only once (``read_once``), its lines read at the first call
    and kept in memory."""
    if not read_once(path):
        return lambda: read_lines(path)
    kept = []

    def passes():
        if not kept:
            kept.append(list(read_lines(path)))
        return iter(kept[0])

    return passes


def read_lines(path):
    """Yield ``(line_number, text)`` for each line of a UTF-8 file, or of standard input for
    ``-`` (line numbers from 1); a byte order mark at the start of the file is not part of the first
    line's text."""
    try:
        f = os.fdopen(os.dup(0), "rb") if path == STDIN else open(path, "rb")
    except OSError as err:
        raise UserError(f"{path}: cannot open ({err.strerror})") from None
    with f:
        for lineno, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise UserError(
                    f"{where(path, lineno)}: not valid UTF-8 (byte 0x{raw[err.start]:02x} at "
                    f"column {err.start + 1})"
                ) from None
            if "\x00" in text:
                raise UserError(f"{where(path, lineno)}: contains a NUL byte")
            if lineno == 1 and text.startswith(BOM):
                text = text[len(BOM) :]
            yield lineno, text


def _count_remaining(lines):
    return sum(1 for _ in lines)


def read_parallel(src_path, tgt_path):
    """Yield ``(line_number, src_text, tgt_text)``; the two files must have the same line count."""
    src_lines = read_lines(src_path)
    tgt_lines = read_lines(tgt_path)
    n = 0
    for src, tgt in itertools.zip_longest(src_lines, tgt_lines):
        if src is None or tgt is None:
            n_src = n + (src is not None) + _count_remaining(src_lines)
            n_tgt = n + (tgt is not None) + _count_remaining(tgt_lines)
            raise UserError(
                f"parallel files differ in length: {src_path} has {n_src} lines, "
                f"{tgt_path} has {n_tgt}"
            )
        n += 1
        yield src[0], src[1], tgt[1]


class Tokenizer:
    """Text to tokens: optional lowercasing, then whitespace split or a sentencepiece model.

    Args:
        spm_model: path of a sentencepiece model, or "" for whitespace tokens.
        lower: lowercase the text first.
    """

    def __init__(self, spm_model="", lower=False):
        self.lower = lower
        self.spm_model = spm_model
        self._sp = None
        if spm_model:
            if not os.path.isfile(spm_model):
                raise UserError(f"{spm_model}: sentencepiece model not found")
            import sentencepiece

            try:
                self._sp = sentencepiece.SentencePieceProcessor(model_file=spm_model)
            except (RuntimeError, OSError) as err:
                raise UserError(f"{spm_model}: not a sentencepiece model ({err})") from None

    # a sentencepiece processor does not pickle: worker processes reload the model
    def __getstate__(
        self,
    ):
        return {"lower": self.lower, "spm_model": self.spm_model}

    def __setstate__(self, state):
        self.__init__(state["spm_model"], state["lower"])

    def __call__(self, text):
        if self.lower:
            text = text.lower()
        if self._sp is not None:
            return self._sp.encode(text.strip(), out_type=str)
        return text.split()

    def detokenize(self, tokens: list[str]) -> str:
        """Tokens as text: sentencepiece pieces decoded, other tokens joined by spaces."""
        if self._sp is not None:
            return self._sp.decode(tokens)
        return " ".join(tokens)


@dataclasses.dataclass
class CorpusStats:
    """Counts of one pass over a parallel corpus."""

    read: int = 0
    kept: int = 0
    empty: int = 0
    too_long: int = 0
    truncated: int = 0

    def add(self, other):
        """Add the counts of ``other`` (another part of the same pass) to these."""
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def summary(self):
        return (
            f"{self.read} pairs read, {self.kept} kept, {self.empty} with an empty side skipped, "
            f"{self.too_long} too long filtered, {self.truncated} truncated"
        )


@dataclasses.dataclass
class LengthLimits:
    """Truncate first (0: never), then drop pairs longer than the maxima (None: keep all)."""

    src_trunc: int = 0
    tgt_trunc: int = 0
    src_max: int = None
    tgt_max: int = None


def tokenized_pairs(src_path, tgt_path, src_tok, tgt_tok, limits, stats):
    """Yield ``(line_number, src_tokens, tgt_tokens)`` for the pairs kept, counting into
    ``stats``."""
    return tokenize_lines(read_parallel(src_path, tgt_path), src_tok, tgt_tok, limits, stats)


def links_within(links, src_len, tgt_len):
    """The alignment links ``(source, target)`` among the first ``src_len`` source and ``tgt_len``
    target tokens (those a truncation keeps)."""
    return [(src, tgt) for src, tgt in links if src < src_len and tgt < tgt_len]


def tokenize_lines(lines, src_tok, tgt_tok, limits, stats):
    """Yield ``(line_number, src_tokens, tgt_tokens)`` for the pairs of ``lines`` (``(line_number,
    src_text, tgt_text)`` tuples) that the limits keep, counting into ``stats``. A line with a
    fourth item, its ``alignment.AlignmentLine``, gives its links checked against the tokens (and
    cut as they are) as a fourth item too."""
    for lineno, src_text, tgt_text, *alignment in lines:
        stats.read += 1
        src = src_tok(src_text)
        tgt = tgt_tok(tgt_text)
        links = [line.links(len(src), len(tgt)) for line in alignment]
        if not src or not tgt:
            stats.empty += 1
            continue
        if (limits.src_trunc and len(src) > limits.src_trunc) or (
            limits.tgt_trunc and len(tgt) > limits.tgt_trunc
        ):
            stats.truncated += 1
            src = src[: limits.src_trunc or None]
            tgt = tgt[: limits.tgt_trunc or None]
            links = [links_within(pairs, len(src), len(tgt)) for pairs in links]
        if (limits.src_max is not None and len(src) > limits.src_max) or (
            limits.tgt_max is not None and len(tgt) > limits.tgt_max
        ):
            stats.too_long += 1
            continue
        stats.kept += 1
        yield (lineno, src, tgt, *links)
