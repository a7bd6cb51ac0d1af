"""Small random models and batches for the model and loss tests (float64, CPU)."""

import random

import torch

from onmt_lite.data.batch import ShardView
from onmt_lite.data.shards import make_shard
from onmt_lite.data.vocab import Vocab
from onmt_lite.models.builder import build_model
from onmt_lite.opts import build_parser, model_opts, parse, train_opts

SRC_VOCAB = Vocab([f"s{i}" for i in range(12)])
TGT_VOCAB = Vocab([f"s{i}" for i in range(6)] + [f"t{i}" for i in range(8)])
VOCABS = {"src": SRC_VOCAB, "tgt": TGT_VOCAB}


# a small Transformer (encoder and decoder): model size 8, 2 heads, no dropout anywhere
TRANSFORMER = [
    "-encoder_type",
    "transformer",
    "-decoder_type",
    "transformer",
    "-word_vec_size",
    8,
    "-heads",
    2,
    "-transformer_ff",
    16,
    "-position_encoding",
    "-attention_dropout",
    0,
]


def model_options(*args):
    """Parsed model and training options: small sizes, no dropout, plus ``args``."""
    base = [
        "-data",
        "unused",
        "-rnn_size",
        "8",
        "-word_vec_size",
        "6",
        "-layers",
        "2",
        "-dropout",
        "0",
    ]
    return parse(build_parser("test", [model_opts, train_opts]), base + [str(a) for a in args])


def make_model(*args, seed=0):
    torch.manual_seed(seed)
    opt = model_options(*args)
    return build_model(opt, VOCABS).double(), opt


def random_pairs(n, seed=0, min_len=1, max_len=9):
    """Token pairs; sources hold unknown words ("oovK") that their targets sometimes copy."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        src = [
            rng.choice(["s0", "s1", "s2", "s3", "s4", "s9", "oov1", "oov2", "oov3"])
            for _ in range(rng.randint(min_len, max_len))
        ]
        tgt = [
            rng.choice(["t0", "t1", "t2", "s1", "s2", "s9", "oov1", "oov3", "oov7"])
            for _ in range(rng.randint(min_len, max_len))
        ]
        pairs.append((src, tgt))
    return pairs


def make_batch(pairs, order=None):
    """The Batch of ``pairs`` (with copy data) in ``order``, built as preprocessing and training
    do."""
    from onmt_lite.data.example import make_example

    examples = [make_example(i, s, t, SRC_VOCAB, TGT_VOCAB, True) for i, (s, t) in enumerate(pairs)]
    batch = ShardView(make_shard(examples)).batch(
        list(range(len(pairs))) if order is None else order
    )
    batch.src_map = batch.src_map.double()
    return batch


def grads(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_grads_equal(expected, actual, rtol=1e-6, atol=1e-10):
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=rtol, atol=atol, msg=name)
