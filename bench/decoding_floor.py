"""The least time a search's matrix products can take: counted while onmt_lite decodes, over this
machine's float32 matrix-multiply rate.

    .venv/bin/python bench/decoding_floor.py -model M.pt -src FILE [-beam_size 5] \
        [-batch_size 32]

Decodes ``-src`` with the checkpoint as ``translate_speed.py`` has ``onmt_lite_translate`` do it
(its ``SEARCH_OPTIONS``: no length penalty, at most 100 tokens), on one thread so that every step is
seen in this process, and counts what the products multiply:

    encoder, per source token     every weight matrix of the encoder (each LSTM/GRU direction and
                                  layer)
    decoder, per row of a step    every weight matrix of the decoder and generator: the cells, the
                                  attention's query and output layers, the vocabulary projection
                                  (and a copy model's copy attention and switch)
    attention, per row and source position of its example: 2 x hidden (scores and context), per
                                  attention layer

A multiply-add is 2 operations. A row is one hypothesis in one step (a beam search steps up to
``beam`` rows per example); what a search skips (examples that have left, an example's first step
computed once for its beams) is not counted, so this is the work any implementation of the same
search on the same model has to do (to within 0.1%: the rows of beams that have ended while their
example goes on are counted). The time is that work at the rate of torch.mm on 1024 x 1024
matrices with the machine's default thread count (2 here), best of 3: a limit no decoder of these
products reaches, since the step's small products, ``log_softmax`` and the search itself come on
top. Prints one line of JSON: rows, source tokens, GFLOP, rate (GFLOP/s) and seconds at that rate.
The attention layers must be dot or general (an mlp attention projects each memory once per
example, which the per-row count would not describe).
"""

import argparse
import json
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from roofline import matmul_rate  # noqa: E402
from translate_speed import SEARCH_OPTIONS  # noqa: E402


def weight_macs(module):
    """Multiply-adds of one use of every weight matrix of ``module`` (embeddings are lookups, not
    products)."""
    return sum(
        p.numel()
        for m in module.modules()
        if not isinstance(m, nn.Embedding)
        for p in m.parameters(recurse=False)
        if p.dim() == 2
    )


def count_search(model_path, sources, beam_size, batch_size):
    """``(rows, source tokens, source positions over the rows)`` of decoding ``sources``."""
    from onmt_lite import Translator
    from onmt_lite.translate import stepper as stepper_module

    counts = {"rows": 0, "src_tokens": 0, "row_positions": 0}
    ModelStepper = stepper_module.ModelStepper
    init = ModelStepper.__init__
    step = ModelStepper.step

    def counting_init(self, model, batch, *args, **kwargs):
        counts["src_tokens"] += int(batch.src_lengths.sum())
        init(self, model, batch, *args, **kwargs)

    def counting_step(self, tokens):
        counts["rows"] += tokens.numel()
        counts["row_positions"] += int(self.lengths.sum())
        return step(self, tokens)

    ModelStepper.__init__ = counting_init
    ModelStepper.step = counting_step
    try:
        translator = Translator.load(
            [model_path],
            beam_size=beam_size,
            batch_size=batch_size,
            attention=False,
            **SEARCH_OPTIONS,
        )
        translator.translate(sources)
    finally:
        ModelStepper.__init__ = init
        ModelStepper.step = step
    return counts


def floor(model_path, sources, beam_size, batch_size):
    from onmt_lite.models.attention import GlobalAttention
    from onmt_lite.translate.translator import load_models

    threads = torch.get_num_threads()
    (model,), _, _ = load_models([model_path], torch.device("cpu"))
    attention = [m for m in model.decoder.modules() if isinstance(m, GlobalAttention)]
    if any(a.attn_type == "mlp" for a in attention):
        raise SystemExit(
            f"{model_path}: mlp attention; the count here is for dot and general attention"
        )
    torch.set_num_threads(1)
    counts = count_search(model_path, sources, beam_size, batch_size)
    torch.set_num_threads(threads)
    macs = (
        counts["src_tokens"] * weight_macs(model.encoder)
        + counts["rows"] * (weight_macs(model.decoder) + weight_macs(model.generator))
        + counts["row_positions"] * sum(2 * a.dim for a in attention)
    )
    rate = max(matmul_rate(1024, 3) for _ in range(3))
    return {
        **counts,
        "gflop": 2 * macs / 1e9,
        "threads": threads,
        "matmul_gflop_s": rate / 1e9,
        "seconds": 2 * macs / rate,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-model", required=True)
    parser.add_argument("-src", required=True)
    parser.add_argument("-beam_size", type=int, default=5)
    parser.add_argument("-batch_size", type=int, default=32)
    opt = parser.parse_args()
    with open(opt.src, encoding="utf-8") as f:
        sources = f.read().splitlines()
    print(json.dumps(floor(opt.model, sources, opt.beam_size, opt.batch_size)))


if __name__ == "__main__":
    main()
