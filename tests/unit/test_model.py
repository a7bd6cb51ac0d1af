"""NMTModel: batch invariance over every architecture combination; the forward contract."""

import itertools

import pytest
import torch

from tests.model_helpers import make_batch, make_model, random_pairs

COMBINATIONS = list(
    itertools.product(
        ["rnn", "brnn"],
        ["LSTM", "GRU"],
        [0, 1],
        ["dot", "general", "mlp"],
        [False, True],
        [False, True],
        [False, True],
    )
)


def options(encoder, rnn_type, input_feed, attention, bridge, copy, coverage):
    args = [
        "-encoder_type",
        encoder,
        "-rnn_type",
        rnn_type,
        "-input_feed",
        input_feed,
        "-global_attention",
        attention,
    ]
    args += ["-bridge"] * bridge + ["-copy_attn"] * copy + ["-coverage_attn"] * coverage
    if copy and attention != "mlp":
        args += ["-copy_attn_type", "mlp"]  # a separate copy attention of another type
    return args


def run(model, batch):
    """Everything the model computes for a batch, time-major."""
    memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
    dec_out, attns, _ = model.decode(batch.tgt[:-1], memory_bank, lengths, state)
    out = {"memory_bank": memory_bank, "dec_out": dec_out, "init_h": state.hidden[0], **attns}
    if "copy" in attns:
        n_pos, n_batch, _ = dec_out.shape
        scores = model.generator(
            dec_out.reshape(n_pos * n_batch, -1),
            attns["copy"].reshape(n_pos * n_batch, -1),
            batch.src_map,
        )
        out["copy_probs"] = scores.exp().view(n_pos, n_batch, -1)
    return out


@pytest.mark.parametrize("combination", COMBINATIONS, ids=lambda c: "-".join(map(str, c)))
def test_an_example_gives_the_same_outputs_alone_and_inside_a_padded_batch(combination):
    model, _ = make_model(*options(*combination))
    model.eval()
    pairs = random_pairs(5, seed=1)
    order = [3, 0, 4, 1, 2]
    with torch.no_grad():
        together = run(model, make_batch(pairs, order))
        for position, index in enumerate(order):
            alone = run(model, make_batch([pairs[index]]))
            # predictions: tokens + </s>
            src_len = len(pairs[index][0])
            tgt_len = len(pairs[index][1]) + 1
            torch.testing.assert_close(
                together["memory_bank"][:src_len, position], alone["memory_bank"][:, 0]
            )
            torch.testing.assert_close(together["init_h"][:, position], alone["init_h"][:, 0])
            torch.testing.assert_close(
                together["dec_out"][:tgt_len, position], alone["dec_out"][:, 0]
            )
            for key in ("std", "copy", "coverage"):
                if key in alone:
                    torch.testing.assert_close(
                        together[key][:tgt_len, position, :src_len], alone[key][:, 0]
                    )
                    assert (together[key][:tgt_len, position, src_len:] == 0).all(), key
            if "copy_probs" in alone:
                width = alone["copy_probs"].size(2)
                torch.testing.assert_close(
                    together["copy_probs"][:tgt_len, position, :width],
                    alone["copy_probs"][:, 0],
                    atol=1e-5,
                    rtol=1e-5,
                )
                assert (together["copy_probs"][:tgt_len, position, width:] < 1e-15).all()


def test_forward_returns_one_position_fewer_than_the_target():
    model, _ = make_model("-copy_attn", "-coverage_attn")
    batch = make_batch(random_pairs(3))
    dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
    assert dec_out.shape == (batch.tgt.size(0) - 1, 3, 8)
    assert set(attns) == {"std", "copy", "coverage"}
    assert all(a.shape == (batch.tgt.size(0) - 1, 3, batch.src.size(0)) for a in attns.values())
