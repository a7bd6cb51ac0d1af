#!/usr/bin/env python
"""Turn GloVe or word2vec text embeddings into the tensors ``-pre_word_vecs_enc/-pre_word_vecs_dec``
read.

    python tools/embeddings_to_torch.py -emb_file_both glove.txt \
        -dict_file data/demo.vocab.pt -output_file data/emb
    onmt_lite_train ... -pre_word_vecs_enc data/emb.enc.pt -pre_word_vecs_dec data/emb.dec.pt \
        -word_vec_size DIM

``-emb_file_both FILE`` reads one file for both sides; ``-emb_file_enc`` and ``-emb_file_dec`` read
one file for each (as in OpenNMT-py 1.x, give one or the other way). An embedding file is UTF-8
text, one ``word v1 v2 ...`` a line (any run of whitespace separates fields), after the first
``-skip_lines`` lines. With ``-type word2vec`` the first line read must be word2vec's ``COUNT DIM``
header; with ``-type GloVe`` (the default) a first line ``N DIM`` is taken as such a header and
skipped. Every line must have as many values as the first (and the header's DIM); the values of a
vocabulary word's vector must be finite as float32 (nan, inf and 1e40, which overflows float32 to
inf, are refused, naming the file, line and word, rather than training to a nan loss).
``PREFIX.enc.pt`` and ``PREFIX.dec.pt`` are float32 tensors ``[len(vocab) x dim]`` in the order of
the source and target vocabularies of ``-dict_file`` (the ``.vocab.pt`` file of
onmt_lite_preprocess): the file's vector for each word found and zeros for the others; they are
written together, or neither. ``-verbose`` lists the vocabulary words that were not found.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onmt_lite.data.corpus import read_lines
from onmt_lite.opts import OptionParser, add, choice, int_at_least, parse
from onmt_lite.utils.errors import UserError, run_command, where
from onmt_lite.utils.files import StagedOutputs
from onmt_lite.utils.output_paths import require_file_path

if TYPE_CHECKING:  # torch is imported where needed, so that -h and bad options do not load it
    import torch

PROG = "embeddings_to_torch.py"
TYPES = ("GloVe", "word2vec")
SIDES = {"enc": "src", "dec": "tgt"}


def build_parser():
    """The option parser of embeddings_to_torch.py."""
    parser = OptionParser(
        PROG, "Convert text embeddings into -pre_word_vecs_enc/-pre_word_vecs_dec tensors."
    )
    group = parser.add_argument_group("Conversion")
    add(
        group,
        "emb_file_both",
        help="Embeddings for both source and target (GloVe or word2vec text)",
    )
    add(
        group, "emb_file_enc", help="Source embeddings (GloVe or word2vec text), with -emb_file_dec"
    )
    add(
        group, "emb_file_dec", help="Target embeddings (GloVe or word2vec text), with -emb_file_enc"
    )
    add(
        group,
        "dict_file",
        required=True,
        help="The vocabulary file PREFIX.vocab.pt of onmt_lite_preprocess",
    )
    add(
        group,
        "output_file",
        required=True,
        help="Output prefix: writes PREFIX.enc.pt and PREFIX.dec.pt",
    )
    add(
        group,
        "skip_lines",
        type=int_at_least(0),
        default=0,
        help="Skip this many lines at the start of each embeddings file",
    )
    add(
        group,
        "type",
        default="GloVe",
        type=choice("type", TYPES),
        help="GloVe: 'word v1 v2 ...' lines; word2vec: the same after a 'COUNT DIM' header line",
    )
    add(
        group,
        "verbose",
        action="store_true",
        help="List the vocabulary words not found in the embeddings",
    )
    return parser


def embedding_files(opt):
    """``{"enc": path, "dec": path}`` from -emb_file_both or -emb_file_enc/-emb_file_dec."""
    if opt.emb_file_both:
        if opt.emb_file_enc or opt.emb_file_dec:
            raise UserError(
                "give -emb_file_both, or -emb_file_enc and -emb_file_dec, not both ways"
            )
        return {"enc": opt.emb_file_both, "dec": opt.emb_file_both}
    if not (opt.emb_file_enc and opt.emb_file_dec):
        raise UserError(
            "give -emb_file_both FILE (one file for both sides), or -emb_file_enc FILE and "
            "-emb_file_dec FILE"
        )
    return {"enc": opt.emb_file_enc, "dec": opt.emb_file_dec}


def is_header(fields):
    """True for a word2vec header line ``N DIM``."""
    return len(fields) == 2 and all(f.isascii() and f.isdigit() for f in fields)


def parse_vector(path: str, lineno: int, fields: list[str]) -> torch.Tensor:
    """The float32 vector of the line ``fields`` (``word v1 v2 ...``); a UserError naming the file,
    line and word for a value that is not a number, or not finite (nan, inf) once stored as float32
    (1e40 overflows to inf): training on it would only stop later, at a nan loss."""
    import torch

    try:
        values = [float(v) for v in fields[1:]]
    except ValueError as err:
        raise UserError(f"{where(path, lineno)}: {err}") from None
    vector = torch.tensor(values, dtype=torch.float32)
    finite = torch.isfinite(vector)
    if not finite.all():
        position = int((~finite).nonzero()[0])
        raise UserError(
            f"{where(path, lineno)}: the vector of {fields[0]!r} has value "
            f"{position + 1} {fields[position + 1]!r}, which is not a finite float32 "
            f"number (nan, inf, or beyond +-3.4e38); embeddings must be finite"
        )
    return vector


def read_embeddings(path, wanted, skip_lines=0, word2vec=False):
    """``({word: float32 vector} for the words in ``wanted``, dim)``; a word's first vector wins.

    The first ``skip_lines`` lines are skipped; with ``word2vec`` the next line must be a
    ``COUNT DIM`` header, otherwise such a line (the first read) is taken as a header. The values of
    the vectors of ``wanted`` words must be finite as float32 (``parse_vector``); other lines are
    not parsed."""
    vectors = {}
    dim = None
    header_dim = None
    first = True
    for lineno, text in read_lines(path):
        if lineno <= skip_lines:
            continue
        fields = text.split()
        if first and word2vec and not is_header(fields):
            raise UserError(
                f"{where(path, lineno)}: -type word2vec: expected the header 'COUNT DIM', "
                f"found {text.strip()[:40]!r}"
            )
        if first and (word2vec or is_header(fields)):
            header_dim = int(fields[1])
            first = False
            continue
        first = False
        if not fields:
            continue
        if dim is None:
            dim = len(fields) - 1
            if dim < 1 or (header_dim is not None and dim != header_dim):
                raise UserError(
                    f"{where(path, lineno)}: {dim} values, expected "
                    f"{header_dim if header_dim is not None else 'at least 1'}"
                )
        if len(fields) - 1 != dim:
            raise UserError(
                f"{where(path, lineno)}: {len(fields) - 1} values, the first vector has {dim}"
            )
        if fields[0] in wanted and fields[0] not in vectors:
            vectors[fields[0]] = parse_vector(path, lineno, fields)
    if dim is None:
        raise UserError(
            f"{path}: no embeddings in the file"
            + (f" after the first {skip_lines} lines" if skip_lines else "")
        )
    return vectors, dim


def embedding_tensor(words, vectors, dim):
    """A float32 ``[len(words) x dim]`` tensor: the vector of each word found, zeros elsewhere."""
    import torch

    tensor = torch.zeros(len(words), dim)
    for i, word in enumerate(words):
        if word in vectors:
            tensor[i] = vectors[word]
    return tensor


def convert(emb_path, words, side, vectors, dim, verbose=False):
    """The tensor for ``words`` from the ``vectors`` read from ``emb_path``; prints how many words
    were found (and with ``verbose`` the others)."""
    found = sum(word in vectors for word in words)
    print(
        f"{side}: found {found} of {len(words)} vocabulary words "
        f"({100.0 * found / len(words):.1f}%) in {emb_path}; dimension {dim}"
    )
    if verbose:
        for word in words:
            if word not in vectors:
                print(f"{side}: not found: {word}")
    return embedding_tensor(words, vectors, dim)


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run embeddings_to_torch.py with ``argv`` (default: the command line)."""
    opt = parse(build_parser(), argv)
    files = embedding_files(opt)
    outputs = {side: f"{opt.output_file}.{side}.pt" for side in SIDES}
    for path in outputs.values():
        require_file_path(path, "-output_file")
    # imported after the checks, so that -h and bad options do not load torch
    from onmt_lite.data.shards import VOCAB_FORMAT, load_plain

    vocab = load_plain(opt.dict_file, VOCAB_FORMAT, "vocabulary file (from onmt_lite_preprocess)")
    words = {side: vocab[SIDES[side]] for side in SIDES}
    word2vec = opt.type == "word2vec"
    if opt.emb_file_both:  # read once, for both vocabularies
        both = read_embeddings(
            opt.emb_file_both, set(words["enc"]) | set(words["dec"]), opt.skip_lines, word2vec
        )
        read = {side: both for side in SIDES}
    else:
        read = {
            side: read_embeddings(files[side], set(words[side]), opt.skip_lines, word2vec)
            for side in SIDES
        }
    tensors = {
        side: convert(files[side], words[side], side, *read[side], opt.verbose) for side in SIDES
    }
    with StagedOutputs() as staged:  # both files or neither
        for side, tensor in tensors.items():
            staged.save(tensor, outputs[side])
        staged.commit()
    for path in outputs.values():
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
