#!/usr/bin/env python
"""Turn GloVe or word2vec text embeddings into the tensors ``-pre_word_vecs_enc/-pre_word_vecs_dec`` read.

    python tools/embeddings_to_torch.py -emb_file_enc glove.txt -emb_file_dec glove.txt \
        -dict_file data/demo.vocab.pt -output_file data/emb
    onmt_lite_train ... -pre_word_vecs_enc data/emb.enc.pt -pre_word_vecs_dec data/emb.dec.pt \
        -word_vec_size DIM

An embedding file is UTF-8 text, one ``word v1 v2 ...`` a line (any run of whitespace separates
fields); a word2vec header line ``N DIM`` is skipped. Every line must have as many values as the
first. ``PREFIX.enc.pt`` and ``PREFIX.dec.pt`` are float32 tensors ``[len(vocab) x dim]`` in the
order of the source and target vocabularies of ``-dict_file`` (the ``.vocab.pt`` file of
onmt_lite_preprocess): the file's vector for each word found and zeros for the others.
"""
from __future__ import annotations

from onmt_lite.data.corpus import read_lines
from onmt_lite.opts import OptionParser, add, parse
from onmt_lite.utils.errors import UserError, run_command, where
from onmt_lite.utils.files import require_directory, save_tensors

PROG = "embeddings_to_torch.py"


def build_parser():
    """The option parser of embeddings_to_torch.py."""
    parser = OptionParser(PROG, "Convert text embeddings into -pre_word_vecs_enc/-pre_word_vecs_dec tensors.")
    group = parser.add_argument_group("Conversion")
    add(group, "emb_file_enc", required=True, help="Source embeddings (GloVe or word2vec text)")
    add(group, "emb_file_dec", required=True, help="Target embeddings (GloVe or word2vec text)")
    add(group, "dict_file", required=True, help="The vocabulary file PREFIX.vocab.pt of onmt_lite_preprocess")
    add(group, "output_file", required=True, help="Output prefix: writes PREFIX.enc.pt and PREFIX.dec.pt")
    return parser


def is_header(fields):
    """True for a word2vec header line ``N DIM``."""
    return len(fields) == 2 and all(f.isascii() and f.isdigit() for f in fields)


def read_embeddings(path, wanted):
    """``({word: [floats]} for the words in ``wanted``, dim)``; the first vector of a word wins."""
    vectors, dim, header_dim = {}, None, None
    for lineno, text in read_lines(path):
        fields = text.split()
        if not fields:
            continue
        if dim is None and header_dim is None and is_header(fields):
            header_dim = int(fields[1])
            continue
        if dim is None:
            dim = len(fields) - 1
            if dim < 1 or (header_dim is not None and dim != header_dim):
                raise UserError(f"{where(path, lineno)}: {dim} values, expected "
                                f"{header_dim if header_dim is not None else 'at least 1'}")
        if len(fields) - 1 != dim:
            raise UserError(f"{where(path, lineno)}: {len(fields) - 1} values, the first vector has {dim}")
        if fields[0] in wanted and fields[0] not in vectors:
            try:
                vectors[fields[0]] = [float(v) for v in fields[1:]]
            except ValueError as err:
                raise UserError(f"{where(path, lineno)}: {err}") from None
    if dim is None:
        raise UserError(f"{path}: no embeddings in the file")
    return vectors, dim


def embedding_tensor(words, vectors, dim):
    """A float32 ``[len(words) x dim]`` tensor: the vector of each word found, zeros elsewhere."""
    import torch

    tensor = torch.zeros(len(words), dim)
    for i, word in enumerate(words):
        if word in vectors:
            tensor[i] = torch.tensor(vectors[word])
    return tensor


def convert(emb_path, words, side):
    """The tensor for ``words`` from ``emb_path``; prints how many words were found."""
    vectors, dim = read_embeddings(emb_path, set(words))
    print(f"{side}: found {len(vectors)} of {len(words)} vocabulary words "
          f"({100.0 * len(vectors) / len(words):.1f}%) in {emb_path}; dimension {dim}")
    return embedding_tensor(words, vectors, dim)


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run embeddings_to_torch.py with ``argv`` (default: the command line)."""
    opt = parse(build_parser(), argv)
    # imported after parsing, so that -h does not load torch
    from onmt_lite.data.shards import VOCAB_FORMAT, load_plain

    require_directory(opt.output_file, "-output_file")
    vocab = load_plain(opt.dict_file, VOCAB_FORMAT, "vocabulary file (from onmt_lite_preprocess)")
    tensors = {"enc": convert(opt.emb_file_enc, vocab["src"], "enc"),
               "dec": convert(opt.emb_file_dec, vocab["tgt"], "dec")}
    for side, tensor in tensors.items():  # written only when both files were read
        save_tensors(tensor, f"{opt.output_file}.{side}.pt")
        print(f"wrote {opt.output_file}.{side}.pt")


if __name__ == "__main__":
    main()
