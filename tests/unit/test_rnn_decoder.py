"""Decoders: stepping one position at a time equals the whole-sequence call; state map and
detach."""

import pytest
import torch

from tests.model_helpers import make_batch, make_model, random_pairs

DECODERS = {
    "input-feed-lstm": ["-input_feed", 1],
    "input-feed-gru-mlp": ["-input_feed", 1, "-rnn_type", "GRU", "-global_attention", "mlp"],
    "std-lstm": ["-input_feed", 0],
    "std-gru-dot": ["-input_feed", 0, "-rnn_type", "GRU", "-global_attention", "dot"],
}
EXTRAS = {"plain": [], "copy-coverage": ["-copy_attn", "-coverage_attn"]}


@pytest.mark.parametrize("extra", EXTRAS)
@pytest.mark.parametrize("decoder", DECODERS)
def test_step_by_step_decoding_equals_the_whole_sequence(decoder, extra):
    model, _ = make_model(*DECODERS[decoder], *EXTRAS[extra])
    batch = make_batch(random_pairs(3, seed=7))
    with torch.no_grad():
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        whole, whole_attns, whole_state = model.decode(batch.tgt[:-1], memory_bank, lengths, state)
        outs = []
        attns = {k: [] for k in whole_attns}
        for t in range(batch.tgt.size(0) - 1):
            out, step_attns, state = model.decode(batch.tgt[t : t + 1], memory_bank, lengths, state)
            outs.append(out)
            for key, value in step_attns.items():
                attns[key].append(value)
    torch.testing.assert_close(torch.cat(outs), whole)
    for key in whole_attns:
        torch.testing.assert_close(torch.cat(attns[key]), whole_attns[key])
    for mine, theirs in zip(state.hidden, whole_state.hidden):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("decoder", DECODERS)
def test_state_map_reorders_the_batch(decoder):
    model, _ = make_model(*DECODERS[decoder], "-coverage_attn")
    pairs = random_pairs(3, seed=8)
    order = [2, 0, 1]
    batch = make_batch(pairs)
    reordered = make_batch(pairs, order)
    index = torch.tensor(order)
    with torch.no_grad():
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        _, _, state = model.decode(batch.tgt[:2], memory_bank, lengths, state)
        mapped = state.map(lambda t, dim: t.index_select(dim, index))
        out, _, _ = model.decode(
            batch.tgt[2:3, index], memory_bank[:, index], lengths[index], mapped
        )
        memory_r, lengths_r, state_r = model.encode(reordered.src, reordered.src_lengths)
        _, _, state_r = model.decode(reordered.tgt[:2], memory_r, lengths_r, state_r)
        expected, _, _ = model.decode(reordered.tgt[2:3], memory_r, lengths_r, state_r)
    torch.testing.assert_close(out[:, :, :], expected[:, :, :])


def test_detach_keeps_values_and_cuts_the_graph():
    model, _ = make_model("-coverage_attn")
    batch = make_batch(random_pairs(2))
    memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
    _, _, state = model.decode(batch.tgt[:2], memory_bank, lengths, state)
    detached = state.detach()
    for before, after in zip(
        state.hidden + (state.input_feed, state.coverage),
        detached.hidden + (detached.input_feed, detached.coverage),
    ):
        assert before.grad_fn is not None and after.grad_fn is None
        assert torch.equal(before, after)


def test_step_dropout_masks_zero_a_fraction_p_and_scale_the_rest():
    from onmt_lite.models.dropout import step_dropout_masks

    dropout = torch.nn.Dropout(0.3)
    torch.manual_seed(0)
    masks = step_dropout_masks(dropout, 20, 2, torch.zeros(64, 128))
    assert masks.shape == (20, 2, 64, 128)
    dropped = masks == 0
    assert abs(dropped.float().mean().item() - 0.3) < 0.01  # 327,680 draws: 0.3 within 0.01
    assert torch.equal(masks[~dropped], torch.full_like(masks[~dropped], 1 / 0.7))
    assert abs(masks.mean().item() - 1) < 0.02  # the expectation is kept
    assert not torch.equal(masks[0], masks[1])  # each step its own mask
    dropout.eval()
    assert step_dropout_masks(dropout, 20, 2, torch.zeros(64, 128)) is None
    assert step_dropout_masks(torch.nn.Dropout(0.0), 20, 2, torch.zeros(64, 128)) is None


def test_input_feed_decoder_in_training_drops_units_of_the_fed_output():
    """With dropout 0.5 the decoder's outputs in training are its masked outputs: about half the
    entries exactly 0, the others scaled; with the same seed, the same outputs."""
    model, _ = make_model("-input_feed", 1, "-dropout", 0.5)
    batch = make_batch(random_pairs(6, seed=3))
    model.train()
    outputs = []
    for _ in range(2):
        torch.manual_seed(7)
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        outputs.append(model.decode(batch.tgt[:-1], memory_bank, lengths, state)[0])
    assert torch.equal(outputs[0], outputs[1])
    zero = (outputs[0] == 0).double().mean().item()  # tanh outputs are never 0 by themselves
    assert 0.4 < zero < 0.6
    model.eval()
    with torch.no_grad():
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        assert (model.decode(batch.tgt[:-1], memory_bank, lengths, state)[0] != 0).all()


def test_input_feed_training_stacks_the_layers_states_once_not_at_every_position():
    """Stacking the layers' states at each position cost a copy forward and, per layer, a gradient
    of the whole stack backward: on a GPU some ten kernels a position. Now the loop keeps each
    layer's state apart, so the stacks and their gradients do not grow with the target."""
    from onmt_lite.utils.host_syncs import HostSyncCounter

    model, _ = make_model("-input_feed", 1, "-layers", 2, "-dropout", 0.3)
    model.train()
    batch = make_batch(random_pairs(4, seed=5, min_len=9))
    counts = []
    for positions in (3, 8):
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        with HostSyncCounter() as counter:
            out, _, state = model.decode(batch.tgt[:positions], memory_bank, lengths, state)
            (out.sum() + state.hidden[0].sum()).backward()
        counts.append(counter.counts)
    assert counts[0]["stack"] == counts[1]["stack"], (counts[0]["stack"], counts[1]["stack"])
    assert counts[1]["select_backward"] == 0
    assert state.hidden[0].shape[0] == 2  # [layers x B x H]


@pytest.mark.parametrize("decoder", DECODERS)
def test_the_attention_masks_the_source_padding_made_once_a_pass_not_at_every_position(decoder):
    """The attention masks the source padding at every target position; the mask is made once a
    pass as the padding itself (before 2026-11-28 each position negated the real positions' mask:
    a kernel a position)."""
    from onmt_lite.utils.host_syncs import HostSyncCounter

    model, _ = make_model(*DECODERS[decoder], "-coverage_attn")
    batch = make_batch(random_pairs(4, seed=6, min_len=9))
    counts = []
    for positions in (3, 8):
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        with HostSyncCounter() as counter:
            model.decode(batch.tgt[:positions], memory_bank, lengths, state)
        counts.append(counter.counts)
    assert counts[1]["bitwise_not"] == 0
    assert counts[0]["arange"] == counts[1]["arange"]


def _autocast_training_pass(model, batch, positions):
    """Outputs, gradients and conversions (``_to_copy``) of a training pass of ``positions``
    target positions under CPU bfloat16 autocast, dropout drawn from seed 3."""
    from onmt_lite.utils.host_syncs import HostSyncCounter

    torch.manual_seed(3)
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        with HostSyncCounter() as counter:
            out, _, state = model.decode(batch.tgt[:positions], memory_bank, lengths, state)
            (out.float().square().sum() + state.hidden[0].float().sum()).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return out.detach(), grads, counter.counts["_to_copy"]


@pytest.mark.parametrize("extra", [[], ["-context_gate", "both"], ["-rnn_type", "GRU"]])
def test_under_autocast_inputs_and_masks_are_converted_once_with_the_same_numbers(
    monkeypatch, extra
):
    """The embeddings (without a context gate) and the dropout masks are converted into the
    autocast dtype once, not at every position; the outputs and gradients are those of converting
    at every position, bit for bit."""
    from onmt_lite.models import recurrent, rnn_decoder

    # the encoder in float32, as on a CPU without bfloat16 recurrent kernels: with them (AVX-512
    # BF16) its bfloat16 outputs change what the decoder converts (no gate 4, a gate 0 more)
    monkeypatch.setattr(recurrent, "cpu_bf16_rnn", lambda: False)
    model, _ = make_model("-input_feed", 1, "-layers", 2, "-dropout", 0.3, *extra)
    model = model.float().train()
    batch = make_batch(random_pairs(4, seed=5, min_len=9))
    once = [_autocast_training_pass(model, batch, positions) for positions in (3, 8)]
    monkeypatch.setattr(rnn_decoder, "in_autocast_dtype", lambda x: x)
    monkeypatch.setattr(
        rnn_decoder.DropoutMasks, "drop", lambda self, t, x, i: x * self.drawn[t, i].to(x.dtype)
    )
    each = [_autocast_training_pass(model, batch, positions) for positions in (3, 8)]
    for (out, grads, _), (out_each, grads_each, _) in zip(once, each):
        assert out.dtype == torch.bfloat16
        assert torch.equal(out, out_each)
        assert grads.keys() == grads_each.keys()
        assert all(torch.equal(grads[name], grads_each[name]) for name in grads)
    per_position = (once[1][2] - once[0][2]) / 5
    per_position_each = (each[1][2] - each[0][2]) / 5
    # the output's mask; without a context gate also the fed output raised to float32 to join
    # the embedding and the cell's input lowered again, forward and backward
    assert per_position_each - per_position == (1 if extra[:1] == ["-context_gate"] else 5)


@pytest.mark.parametrize("decoder", ["input-feed-lstm", "input-feed-gru-mlp", "std-lstm"])
def test_a_search_step_reorders_the_state_with_one_index_and_a_step_stacks_nothing(decoder):
    """A search reorders the decoder's state at every step: the layers' hidden states and the input
    feed as one buffer (one index_select, where each was one before 2026-11-28), and a step of the
    input-feed decoder leaves its layers' states unstacked (it stacked h and c at every step)."""
    from onmt_lite.utils.host_syncs import HostSyncCounter

    model, _ = make_model(*DECODERS[decoder], "-layers", 2)
    batch = make_batch(random_pairs(3, seed=4))
    rows = torch.tensor([2, 2, 0])
    with torch.no_grad():
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        _, _, state = model.decode(batch.tgt[:1], memory_bank, lengths, state)
        expected = [h.index_select(1, rows) for h in state.hidden]
        expected_feed = state.input_feed.index_select(0, rows)
        with HostSyncCounter() as counter:
            state = state.map(lambda t, dim: t.index_select(dim, rows))
            reorder = dict(counter.counts)
            model.decode(batch.tgt[1:2, rows], memory_bank[:, rows], lengths[rows], state)
    assert reorder.get("index_select") == 1, reorder
    assert reorder.get("stack", 0) <= 1, reorder  # the rows joined once, if a step left them apart
    stacks = counter.counts.get("stack", 0) - reorder.get("stack", 0)
    # (the standard decoder's nn.LSTM stacks its layers' states itself on the CPU)
    assert stacks == 0 or decoder.startswith("std"), counter.counts
    for mine, theirs in zip(state.hidden, expected):
        assert torch.equal(mine, theirs)
    assert torch.equal(state.input_feed, expected_feed)


def test_a_state_of_mixed_dtypes_is_reordered_and_joined_keeping_each_dtype():
    """Under autocast a state's tensors may differ in dtype; one buffer would convert them all, so
    such a state reorders and joins its tensors one by one."""
    from onmt_lite.models.rnn_state import DecoderState

    h = torch.randn(2, 3, 4)
    c = torch.randn(2, 3, 4)
    feed = torch.randn(3, 4, dtype=torch.bfloat16)
    state = DecoderState((h, c), feed, torch.rand(3, 5))
    rows = torch.tensor([1, 1, 0])
    mapped = state.map(lambda t, dim: t.index_select(dim, rows))
    joined = mapped.concat(state)
    for result, expected_rows in ((mapped, rows), (joined, torch.tensor([1, 1, 0, 0, 1, 2]))):
        assert torch.equal(result.hidden[0], h[:, expected_rows])
        assert torch.equal(result.hidden[1], c[:, expected_rows])
        assert result.input_feed.dtype == torch.bfloat16
        assert torch.equal(result.input_feed, feed[expected_rows])
        assert torch.equal(result.coverage, state.coverage[expected_rows])
