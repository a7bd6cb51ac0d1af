"""ModelStepper: rows moved between steppers (joins, leaves) step as each example would on its own;
mlp attention projects the memory once per example, not at every step."""

import pytest
import torch

from onmt_lite.data.vocab import BOS_ID
from onmt_lite.translate.stepper import ModelStepper
from tests.model_helpers import TGT_VOCAB, TRANSFORMER, make_batch, make_model, random_pairs

BEAM = 2


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["-global_attention", "mlp"],
        ["-global_attention", "mlp", "-copy_attn"],
        ["-copy_attn", "-copy_attn_type", "mlp", "-input_feed", 0],
        [*TRANSFORMER, "-copy_attn"],
        [*TRANSFORMER, "-max_relative_positions", 2],
        # joined rows have decoded fewer positions: their own position encodings and windows
        ["-encoder_type", "cnn", "-decoder_type", "cnn", "-position_encoding", "-param_init", 0.5],
    ],
)
def test_rows_that_join_and_leave_step_as_each_example_alone(args):
    """Examples 0-2 start with a row each and get two after their first step; 3-4 join after one
    step and get theirs after their own first step; example 1 leaves after two: every output row
    equals that example's row when it is decoded alone with the same inputs. (A Transformer's cache
    of the joining rows is then padded on the left, and trimmed once the first rows have left.)"""
    model, _ = make_model(*args)
    model.eval()
    pairs = random_pairs(5, seed=11, min_len=2)
    vocab = len(TGT_VOCAB)
    generator = torch.Generator().manual_seed(0)
    inputs = [
        torch.full((3,), BOS_ID),
        torch.cat([torch.randint(4, vocab, (6,), generator=generator), torch.full((2,), BOS_ID)]),
        torch.randint(4, vocab, (8,), generator=generator),
    ]
    # a row per beam: the rows of example e are 2e and 2e + 1
    beams = torch.tensor([0, 0, 1, 1, 2, 2])
    kept = torch.tensor([0, 1, 4, 5, 6, 7, 8, 9])  # the rows of examples 0, 2, 3 and 4
    with torch.no_grad():
        stepper = ModelStepper(model, make_batch(pairs[:3]), vocab)
        outputs = [stepper.step(inputs[0])]
        stepper.reorder(beams, beams)
        stepper.extend(ModelStepper(model, make_batch(pairs[3:]), vocab))
        outputs.append(stepper.step(inputs[1]))
        joined = torch.cat([torch.arange(6), torch.tensor([6, 6, 7, 7])])
        stepper.reorder(joined, joined)
        stepper.reorder(kept, kept)
        outputs.append(stepper.step(inputs[2]))
        for example, pair in enumerate(pairs):
            alone = ModelStepper(model, make_batch([pair]), vocab)
            # (step, rows of this example in the joint stepper at that step, its input there)
            if example < 3:
                rows = torch.arange(2 * example, 2 * example + 2)
                steps = [(0, torch.tensor([example]), inputs[0][:1]), (1, rows, inputs[1][rows])]
            else:
                steps = [(1, torch.tensor([example + 3]), inputs[1][6:7])]
            if example != 1:
                later = (kept == 2 * example).nonzero().item()
                steps.append((2, torch.arange(later, later + 2), inputs[2][later : later + 2]))
            src_len = len(pair[0])
            for step, rows, tokens in steps:
                log_probs, attns = alone.step(tokens)
                if tokens.numel() == 1:  # the example's first step: then a row per beam
                    alone.reorder(
                        torch.zeros(BEAM, dtype=torch.long), torch.zeros(BEAM, dtype=torch.long)
                    )
                joint_log_probs, joint_attns = outputs[step]
                torch.testing.assert_close(joint_log_probs[rows, :vocab], log_probs[:, :vocab])
                for name in attns:
                    torch.testing.assert_close(
                        joint_attns[name][rows, :src_len], attns[name][:, :src_len]
                    )


def test_mlp_attention_projects_the_memory_once_per_stepper():
    model, _ = make_model("-global_attention", "mlp")
    model.eval()
    calls = []
    model.decoder.attn.linear_memory.register_forward_hook(
        lambda module, args, out: calls.append(args[0].shape)
    )
    batch = make_batch(random_pairs(3, seed=4))
    with torch.no_grad():
        stepper = ModelStepper(model, batch, len(TGT_VOCAB))
        stepper.step(torch.full((3,), BOS_ID))
        beams = torch.arange(3).repeat_interleave(BEAM)
        stepper.reorder(beams, beams)
        for _ in range(3):
            stepper.step(torch.full((3 * BEAM,), BOS_ID))
    # the untiled memory bank, before the first step
    assert calls == [torch.Size([3, batch.src.size(0), 8])]


@pytest.mark.parametrize("args", [[*TRANSFORMER], [*TRANSFORMER, "-copy_attn"], []])
def test_a_stepper_that_keeps_no_attention_gives_the_same_log_probabilities_and_no_attention(
    args, monkeypatch
):
    """Without kept attention the Transformer's top layer runs on the fused kernel (no weights): the
    log-probabilities are those of the written-out attention; copy models still copy."""
    from onmt_lite.models import multihead

    model, _ = make_model(*args)
    model.eval()
    batch = make_batch(random_pairs(3, seed=4, min_len=2))
    vocab = len(TGT_VOCAB)
    written_out = []
    attend = multihead.MultiHeadAttention._attend
    monkeypatch.setattr(
        multihead.MultiHeadAttention,
        "_attend",
        lambda self, *a: written_out.append(1) or attend(self, *a),
    )
    tokens = (
        torch.full((3,), BOS_ID),
        torch.randint(4, vocab, (3,), generator=torch.Generator().manual_seed(1)),
    )
    outputs = {}
    for keep in (True, False):
        written_out.clear()
        with torch.no_grad():
            stepper = ModelStepper(model, batch, vocab, keep_attention=keep)
            outputs[keep] = [stepper.step(t) for t in tokens]
        outputs[keep].append(len(written_out))
    for (kept_lp, kept_attn), (bare_lp, bare_attn) in zip(outputs[True][:2], outputs[False][:2]):
        torch.testing.assert_close(bare_lp, kept_lp, rtol=1e-5, atol=1e-6)
        assert set(kept_attn) >= {"std"} and bare_attn == {}
    if args == TRANSFORMER:  # one written-out top layer per step, and none without kept attention
        assert outputs[True][2] == 2 and outputs[False][2] == 0
