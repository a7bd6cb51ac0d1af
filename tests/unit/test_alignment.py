"""Guided alignment: Pharaoh lines, links through truncation, shards and batches, the reference
matrix, the alignment head's attention and loss against a re-computation written here, exact
sharding, refusals."""

import math

import pytest
import torch

from onmt_lite.data.alignment import AlignmentLine, reference_alignment
from onmt_lite.data.batch import ShardView
from onmt_lite.data.corpus import CorpusStats, LengthLimits, Tokenizer, tokenize_lines
from onmt_lite.data.example import make_example
from onmt_lite.data.shards import make_shard
from onmt_lite.loss import build_loss_compute
from onmt_lite.models.alignment_head import AlignmentHead
from onmt_lite.utils.errors import UserError
from tests.model_helpers import (
    SRC_VOCAB,
    TGT_VOCAB,
    TRANSFORMER,
    assert_grads_equal,
    grads,
    make_model,
    model_options,
    random_pairs,
)


# --- Pharaoh lines and links ----------------------------------------------------------------------


def test_a_pharaoh_line_gives_its_source_target_pairs_in_order():
    assert AlignmentLine("a.txt", 1, "0-1 2-0  1-1\n").links(3, 2) == [(0, 1), (2, 0), (1, 1)]
    assert AlignmentLine("a.txt", 1, "\n").links(3, 2) == []


@pytest.mark.parametrize(
    "text,message",
    [
        ("0-1 x", "'x' is not a Pharaoh alignment pair"),
        ("0-1 1--0", "'1--0' is not a Pharaoh"),
        ("0-1 -1-0", "'-1-0' is not a Pharaoh"),
        ("0-1 1-", "'1-' is not a Pharaoh"),
        ("0:1", "'0:1' is not a Pharaoh"),
        ("3-0", "link 3-0 is outside the sentence pair (3 source and 2 target tokens)"),
        ("0-2", "link 0-2 is outside the sentence pair"),
    ],
)
def test_a_bad_pair_is_an_error_naming_file_and_line(text, message):
    with pytest.raises(UserError) as err:
        AlignmentLine("data/a.txt", 7, text).links(3, 2)
    assert str(err.value).startswith("data/a.txt:7: ")
    assert message in str(err.value)


def test_truncation_drops_the_links_beyond_it_and_filtering_the_whole_pair():
    lines = [
        (1, "a b c d", "x y z", AlignmentLine("a", 1, "0-0 3-1 1-2 2-1 1-1")),
        (2, "a b c d e f", "x", AlignmentLine("a", 2, "5-0")),
        (3, "a", "x", AlignmentLine("a", 3, "0-0")),
    ]
    stats = CorpusStats()
    kept = list(tokenize_lines(lines, Tokenizer(), Tokenizer(), LengthLimits(0, 2, 4, 2), stats))
    # the target is cut to 2 tokens: the link to target token 2 goes; line 2's 6 source tokens are
    # too many
    assert kept == [
        (1, ["a", "b", "c", "d"], ["x", "y"], [(0, 0), (3, 1), (2, 1), (1, 1)]),
        (3, ["a"], ["x"], [(0, 0)]),
    ]
    assert (stats.truncated, stats.too_long, stats.kept) == (1, 1, 2)
    kept = list(
        tokenize_lines(lines[:1], Tokenizer(), Tokenizer(), LengthLimits(2, 0), CorpusStats())
    )
    # the source cut to 2 tokens: links from tokens 2 and 3 go
    assert kept[0][3] == [
        (0, 0),
        (1, 2),
        (1, 1),
    ]


# --- shards, batches and the reference matrix -----------------------------------------------------

PAIRS = [
    ("s0 s1 s2", "t0 t1 t2 t3", [(0, 0), (2, 0), (1, 2)]),  # a row with two links, rows with none
    ("s3 s4", "t4 t5", [(1, 0), (0, 1)]),
    ("s5", "t6 t7 t0", []),
]


def aligned_batch(pairs, order):
    examples = [
        make_example(i, s.split(), t.split(), SRC_VOCAB, TGT_VOCAB, False, links=links)
        for i, (s, t, links) in enumerate(pairs)
    ]
    return ShardView(make_shard(examples)).batch(order)


def test_a_batch_carries_each_examples_links_as_example_target_source_rows():
    batch = aligned_batch(PAIRS, [2, 0, 1])
    assert sorted(map(tuple, batch.align.tolist())) == [
        (1, 0, 0),
        (1, 0, 2),
        (1, 2, 1),
        (2, 0, 1),
        (2, 1, 0),
    ]


def test_the_reference_matrix_normalises_each_target_row_over_its_links():
    batch = aligned_batch(PAIRS, [1, 0, 2])
    ref = reference_alignment(batch.align, 5, 3, 3)  # [T x B x S], T: tokens and </s>
    expected = torch.zeros(5, 3, 3)
    expected[0, 0] = torch.tensor([0.0, 1.0, 0.0])  # "s3 s4" / "t4 t5": t4-s4, t5-s3
    expected[1, 0] = torch.tensor([1.0, 0.0, 0.0])
    expected[0, 1] = torch.tensor([0.5, 0.0, 0.5])  # t0 linked to s0 and s2
    expected[2, 1] = torch.tensor([0.0, 1.0, 0.0])  # t1 and t3 have no link: zero rows
    torch.testing.assert_close(ref, expected)
    doubled = reference_alignment(torch.tensor([[0, 0, 1], [0, 0, 1]]), 1, 1, 2)
    # a link given twice counts once
    torch.testing.assert_close(doubled, torch.tensor([[[0.0, 1.0]]]))


# --- the alignment head and its loss --------------------------------------------------------------


def random_aligned_pairs(n, seed):
    """``random_pairs`` with random links (some rows with several links, some with none)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for src, tgt in random_pairs(n, seed=seed):
        links = {
            (int(torch.randint(len(src), (1,), generator=gen)), t)
            for t in range(len(tgt))
            for _ in range(2)
            if torch.rand(1, generator=gen) < 0.6
        }
        out.append((" ".join(src), " ".join(tgt), sorted(links)))
    return out


def captured_context_queries(layer):
    """Records the input of ``layer``'s context query projection at every call."""
    seen = []
    layer.context_query.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    return seen


def recomputed_alignment(model, batch, layer_index, heads, query_input):
    """softmax(Q K^T / sqrt(d)) of decoder layer ``layer_index`` written out from its weights, the
    first ``heads`` heads averaged: ``[T x B x S]``."""
    decoder = model.decoder
    _, memory_bank, _ = model.encoder(batch.src, batch.src_lengths)
    size = memory_bank.size(2)
    n_heads = decoder.layers[0].context_attn.heads
    d = size // n_heads
    # the layer's keys in the projection
    rows = slice(2 * layer_index * size, (2 * layer_index + 1) * size)
    keys = (
        memory_bank @ decoder.memory_projection.weight[rows].t()
        + decoder.memory_projection.bias[rows]
    )
    queries = decoder.layers[layer_index].context_query(query_input)  # [B x T x H]
    k = keys.permute(1, 0, 2).reshape(keys.size(1), keys.size(0), n_heads, d).transpose(1, 2)
    q = queries.reshape(queries.size(0), queries.size(1), n_heads, d).transpose(1, 2)
    scores = q @ k.transpose(2, 3) / math.sqrt(d)
    padded = torch.arange(batch.src.size(0))[None, :] >= batch.src_lengths[:, None]  # [B x S]
    weights = torch.softmax(scores.masked_fill(padded[:, None, None, :], float("-inf")), -1)
    return weights[:, : heads or n_heads].mean(1).transpose(0, 1)


def alignment_args(layer, heads, full_context=False, lambda_align=0.5):
    return [
        *TRANSFORMER,
        "-lambda_align",
        lambda_align,
        "-alignment_layer",
        layer,
        "-alignment_heads",
        heads,
        *(["-full_context_alignment"] if full_context else []),
    ]


@pytest.mark.parametrize(
    "layer,heads,full_context", [(-2, 1, False), (1, 0, False), (0, 2, True), (-1, 1, True)]
)
def test_the_alignment_loss_is_the_formula_over_the_chosen_layers_and_heads_attention(
    layer, heads, full_context
):
    model, opt = make_model(*alignment_args(layer, heads, full_context), seed=3)
    model.eval()
    pairs = random_aligned_pairs(4, seed=5)
    batch = aligned_batch(pairs, [0, 1, 2, 3])
    seen = captured_context_queries(model.decoder.layers[layer])
    memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
    dec_out, attns, _ = model.decode(
        batch.tgt[:-1], memory_bank, lengths, state, need_alignment=True
    )
    expected_align = recomputed_alignment(model, batch, layer % 2, heads, seen[-1])
    torch.testing.assert_close(attns["align"], expected_align)
    # the reference, written out: row t of example b is target token t's links, each 1 / (its number
    # of links)
    ref = torch.zeros_like(expected_align)
    for b, (_, _, links) in enumerate(pairs):
        for src, tgt in links:
            ref[tgt, b, src] = 1.0 / sum(1 for _, t in links if t == tgt)
    formula = -(ref * expected_align.clamp(min=1e-18).log()).sum()
    with_align, _ = build_loss_compute(model, TGT_VOCAB, opt)(
        batch, dec_out, attns, normalization=4
    )
    opt.lambda_align = 0.0
    without, _ = build_loss_compute(model, TGT_VOCAB, opt)(batch, dec_out, attns, normalization=4)
    torch.testing.assert_close(with_align - without, 0.5 * formula / 4)
    assert formula > 0


@pytest.mark.parametrize("full_context", [False, True])
def test_only_the_full_context_alignment_sees_later_target_tokens(full_context):
    model, _ = make_model(*alignment_args(-1, 0, full_context), seed=4)
    model.eval()
    batch = aligned_batch(
        [("s0 s1 s2", "t0 t1 t2 t3 t4", []), ("s3 s4", "t4 t5 t6 t7", [])], [0, 1]
    )
    changed = batch.tgt.clone()
    changed[3] = TGT_VOCAB.lookup("s1")  # the third target token, the input at position 3
    aligns = []
    for tgt in (batch.tgt, changed):
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        _, attns, _ = model.decode(tgt[:-1], memory_bank, lengths, state, need_alignment=True)
        aligns.append(attns["align"])
    # inputs from position 3 on differ: positions 0..2 see them only with the full context
    assert not torch.equal(aligns[0][3:], aligns[1][3:])
    # float64: any dependence shows
    assert torch.equal(aligns[0][:3], aligns[1][:3]) is not full_context


def test_the_full_context_pass_ignores_target_padding():
    model, _ = make_model(*alignment_args(0, 0, True), seed=4)
    model.eval()
    pairs = random_aligned_pairs(3, seed=7)
    batch = aligned_batch(pairs, [0, 1, 2])
    memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
    _, attns, _ = model.decode(batch.tgt[:-1], memory_bank, lengths, state, need_alignment=True)
    for b, (src, tgt, links) in enumerate(pairs):
        alone = aligned_batch([(src, tgt, links)], [0])
        memory_bank, lengths, state = model.encode(alone.src, alone.src_lengths)
        _, own, _ = model.decode(alone.tgt[:-1], memory_bank, lengths, state, need_alignment=True)
        n = own["align"].size(0)
        s = len(src.split())
        torch.testing.assert_close(attns["align"][:n, b, :s], own["align"][:, 0, :s])


def loss_and_grads(model, opt, batch, shard_size, trunc=None):
    model.zero_grad()
    loss_compute = build_loss_compute(model, TGT_VOCAB, opt)
    n_positions = batch.tgt.size(0) - 1
    state = None
    for start in range(0, n_positions, trunc or n_positions):
        memory_bank, lengths, first = model.encode(batch.src, batch.src_lengths)
        window = batch.tgt[start : min(start + (trunc or n_positions), n_positions)]
        dec_out, attns, state = model.decode(
            window, memory_bank, lengths, state or first, need_alignment=True
        )
        loss, _ = loss_compute(batch, dec_out, attns, 3.0, shard_size, start, window.size(0))
        if loss is not None:
            loss.backward()
        state = state.detach()
    return grads(model)


@pytest.mark.parametrize("extra", [[], ["-copy_attn"], ["-full_context_alignment"]])
@pytest.mark.parametrize("shard_size", [1, 3])
def test_sharded_gradients_with_the_alignment_loss_equal_the_unsharded_ones(extra, shard_size):
    model, opt = make_model(*alignment_args(-2, 1), *extra, seed=2)
    pairs = random_aligned_pairs(4, seed=8)
    batch = aligned_batch(pairs, [3, 1, 0, 2])
    if "-copy_attn" in extra:
        copy_batch = ShardView(
            make_shard(
                [
                    make_example(i, s.split(), t.split(), SRC_VOCAB, TGT_VOCAB, True, links=lk)
                    for i, (s, t, lk) in enumerate(pairs)
                ]
            )
        ).batch([3, 1, 0, 2])
        batch = copy_batch
        copy_batch.src_map = copy_batch.src_map.double()
    expected = loss_and_grads(model, opt, batch, 0)
    assert_grads_equal(expected, loss_and_grads(model, opt, batch, shard_size))
    # the alignment term reaches the gradients (the shared lower layers' at least)
    opt.lambda_align = 0.0
    without = loss_and_grads(model, opt, batch, 0)
    assert not torch.allclose(
        expected["decoder.layers.0.context_query.weight"],
        without["decoder.layers.0.context_query.weight"],
    )


def test_truncated_windows_with_sharding_give_the_gradients_of_truncation_alone():
    model, opt = make_model(*alignment_args(-1, 0), seed=2)
    batch = aligned_batch(random_aligned_pairs(3, seed=9), [0, 1, 2])
    assert_grads_equal(
        loss_and_grads(model, opt, batch, 0, trunc=3), loss_and_grads(model, opt, batch, 2, trunc=3)
    )


def test_the_windows_alignment_losses_sum_to_the_whole_targets():
    model, opt = make_model(*alignment_args(-1, 0), seed=2)
    batch = aligned_batch(random_aligned_pairs(3, seed=9), [0, 1, 2])
    loss_compute = build_loss_compute(model, TGT_VOCAB, opt)
    opt.lambda_align = 0.0
    nll_compute = build_loss_compute(model, TGT_VOCAB, opt)
    with torch.no_grad():
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        dec_out, attns, _ = model.decode(
            batch.tgt[:-1], memory_bank, lengths, state, need_alignment=True
        )
        full = loss_compute(batch, dec_out, attns)[0] - nll_compute(batch, dec_out, attns)[0]
        total = 0.0
        n_positions = batch.tgt.size(0) - 1
        for start in range(0, n_positions, 2):
            window = batch.tgt[start : min(start + 2, n_positions)]
            dec_out, attns, state = model.decode(
                window, memory_bank, lengths, state, need_alignment=True
            )
            args = (batch, dec_out, attns, 1.0, 0, start, window.size(0))
            total = total + loss_compute(*args)[0] - nll_compute(*args)[0]
    torch.testing.assert_close(total, full)
    assert full > 0


# --- refusals and the head's description ----------------------------------------------------------


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["-lambda_align", 1.0],
            "-lambda_align (guided alignment) needs -decoder_type transformer",
        ),
        (
            [*TRANSFORMER, "-lambda_align", 1.0],
            "-alignment_layer -3 is not a layer of the 2-layer decoder (from -2 to 1)",
        ),
        (
            [*TRANSFORMER, "-lambda_align", 1.0, "-alignment_layer", 2],
            "-alignment_layer 2 is not a layer",
        ),
        (
            [*TRANSFORMER, "-lambda_align", 1.0, "-alignment_layer", 0, "-alignment_heads", 3],
            "-alignment_heads 3 is more than the decoder's 2 heads",
        ),
    ],
)
def test_alignment_options_a_model_cannot_have_are_refused(args, message):
    with pytest.raises(UserError) as err:
        make_model(*args)
    assert message in str(err.value)


def test_without_lambda_align_the_alignment_options_are_only_recorded():
    model, _ = make_model(
        *TRANSFORMER, "-alignment_layer", 5, "-alignment_heads", 1, "-full_context_alignment"
    )
    assert model.decoder.alignment == AlignmentHead(5, 1, True)
    batch = aligned_batch(PAIRS, [0, 1, 2])
    memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
    with pytest.raises(
        ValueError, match="-alignment_layer 5 is not a layer of the 2-layer decoder"
    ):
        model.decode(batch.tgt[:-1], memory_bank, lengths, state, need_alignment=True)
    assert model_options().alignment_layer == -3 and model_options().alignment_heads == 0
