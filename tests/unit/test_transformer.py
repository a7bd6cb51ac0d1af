"""The Transformer: incremental decoding equals the teacher-forced pass, padding and future
positions get exactly no attention, the cache joins and compacts as the search needs, relative
positions and position encodings against hand computations, and the option checks."""

import math

import pytest
import torch

from onmt_lite.models.embeddings import sinusoids
from onmt_lite.models.multihead import (
    MultiHeadAttention,
    StepMasks,
    additive_mask,
    relative_positions,
)
from onmt_lite.models.transformer_state import TransformerState
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.host_syncs import HostSyncCounter
from tests.model_helpers import (
    TGT_VOCAB,
    TRANSFORMER,
    make_batch,
    make_model,
    model_options,
    random_pairs,
)

VARIANTS = {
    "plain": [],
    "relative": ["-max_relative_positions", 2],
    "copy": ["-copy_attn"],
    "relative-copy-no-position-encoding": [
        "-max_relative_positions",
        3,
        "-copy_attn",
        "-layers",
        3,
    ],
    "rnn-encoder": ["-encoder_type", "brnn", "-copy_attn"],
    "average": ["-self_attn_type", "average", "-layers", 2],
    "average-ffn-copy": ["-self_attn_type", "average", "-aan_useffn", "-copy_attn"],
}


def transformer(*args, seed=0):
    model, _ = make_model(*TRANSFORMER, *args, seed=seed)
    return model.eval()


def step_by_step(model, batch):
    """dec_out ``[T x B x H]`` and attns of the teacher-forced targets, decoded one position at a
    time."""
    memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
    keys = model.decoder.memory_keys(memory_bank)
    outs = []
    attns = []
    for t in range(batch.tgt.size(0) - 1):
        out, step_attns, state = model.decode(
            batch.tgt[t : t + 1], memory_bank, lengths, state, keys
        )
        outs.append(out)
        attns.append(step_attns)
    return torch.cat(outs), {name: torch.cat([a[name] for a in attns]) for name in attns[0]}


@pytest.mark.parametrize("variant", VARIANTS)
def test_incremental_decoding_equals_the_teacher_forced_pass_at_every_position(variant):
    args = list(VARIANTS[variant])
    if "relative-copy-no-position-encoding" == variant:
        model, _ = make_model(*[a for a in TRANSFORMER if a != "-position_encoding"], *args)
        model.eval()
    else:
        model = transformer(*args)
    batch = make_batch(random_pairs(6, seed=4, min_len=1, max_len=9))
    with torch.no_grad():
        full, full_attns = model(batch.src, batch.tgt, batch.src_lengths)
        stepped, stepped_attns = step_by_step(model, batch)
    assert full.shape == stepped.shape == (batch.tgt.size(0) - 1, 6, 8)
    torch.testing.assert_close(stepped, full, rtol=0, atol=1e-9)
    assert (
        set(full_attns)
        == set(stepped_attns)
        == ({"std", "copy"} if "-copy_attn" in args else {"std"})
    )
    for name in full_attns:
        torch.testing.assert_close(stepped_attns[name], full_attns[name], rtol=0, atol=1e-9)


def test_attention_to_source_padding_is_exactly_zero_and_rows_sum_to_one():
    model = transformer("-copy_attn")
    pairs = random_pairs(5, seed=6, min_len=1, max_len=9)
    batch = make_batch(pairs)
    with torch.no_grad():
        _, attns = model(batch.src, batch.tgt, batch.src_lengths)
    for b, (src, _) in enumerate(pairs):
        assert torch.equal(
            attns["std"][:, b, len(src) :], torch.zeros_like(attns["std"][:, b, len(src) :])
        )
        torch.testing.assert_close(
            attns["std"][:, b].sum(-1), torch.ones(attns["std"].size(0), dtype=torch.float64)
        )


@pytest.mark.parametrize("variant", ["plain", "relative", "average"])
def test_later_target_words_change_nothing_before_them(variant):
    """Future positions get exactly zero attention: outputs before position t are bit-identical
    whatever the words at t and after."""
    model = transformer(*VARIANTS[variant])
    batch = make_batch(random_pairs(3, seed=7, min_len=6, max_len=9))
    changed = batch.tgt.clone()
    changed[4:] = (changed[4:] + 3) % len(TGT_VOCAB)
    with torch.no_grad():
        out, _ = model(batch.src, batch.tgt, batch.src_lengths)
        out_changed, _ = model(batch.src, changed, batch.src_lengths)
    assert torch.equal(out[:4], out_changed[:4])
    assert not torch.equal(out[4:], out_changed[4:])


@pytest.mark.parametrize("variant", ["plain", "relative", "copy", "average-ffn-copy"])
def test_a_sentence_alone_and_padded_beside_a_longer_one_gives_the_same_outputs(variant):
    model = transformer(*VARIANTS[variant])
    short = random_pairs(1, seed=8, min_len=2, max_len=3)[0]
    long = random_pairs(1, seed=9, min_len=8, max_len=9)[0]
    alone = make_batch([short])
    together = make_batch([short, long])
    with torch.no_grad():
        memory_alone, _, _ = model.encode(alone.src, alone.src_lengths)
        memory_together, _, _ = model.encode(together.src, together.src_lengths)
        out_alone, attns_alone = model(alone.src, alone.tgt, alone.src_lengths)
        out_together, attns_together = model(together.src, together.tgt, together.src_lengths)
    src_len = len(short[0])
    tgt_len = len(short[1]) + 1
    torch.testing.assert_close(memory_together[:src_len, 0], memory_alone[:, 0], rtol=0, atol=1e-12)
    assert torch.equal(memory_together[src_len:, 0], torch.zeros_like(memory_together[src_len:, 0]))
    torch.testing.assert_close(out_together[:tgt_len, 0], out_alone[:, 0], rtol=0, atol=1e-12)
    torch.testing.assert_close(
        attns_together["std"][:tgt_len, 0, :src_len], attns_alone["std"][:, 0], rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("variant", ["relative", "average"])
def test_a_cache_joined_later_is_padded_on_the_left_and_compacted_when_the_first_rows_leave(
    variant,
):
    """Example A decodes two positions; B joins (its cache padded on the left); A leaves (the
    columns only A used are dropped): B's outputs at each step equal B's decoded alone (an
    average too: the padding columns count for nothing)."""
    model = transformer(*VARIANTS[variant])
    (pair_a, pair_b) = random_pairs(2, seed=10, min_len=3, max_len=6)
    batch_a = make_batch([pair_a])
    batch_b = make_batch([pair_b])
    tokens_b = batch_b.tgt[:3]
    with torch.no_grad():
        memory_b, lengths_b, state_b = model.encode(batch_b.src, batch_b.src_lengths)
        alone = []
        for t in range(3):
            out, _, state_b = model.decode(tokens_b[t : t + 1], memory_b, lengths_b, state_b)
            alone.append(out[0, 0])
        memory_a, lengths_a, state = model.encode(batch_a.src, batch_a.src_lengths)
        for t in range(2):
            _, _, state = model.decode(batch_a.tgt[t : t + 1], memory_a, lengths_a, state)
        _, _, joining = model.encode(batch_b.src, batch_b.src_lengths)
        state = state.concat(joining)
        assert state.cached == 2 and state.start.tolist() == [0, 2]
        width = max(memory_a.size(0), memory_b.size(0))
        pad = torch.nn.functional.pad
        memory = torch.cat(
            [
                pad(memory_a, (0, 0, 0, 0, 0, width - memory_a.size(0))),
                pad(memory_b, (0, 0, 0, 0, 0, width - memory_b.size(0))),
            ],
            1,
        )
        lengths = torch.cat([lengths_a, lengths_b])
        tokens = torch.stack([batch_a.tgt[2:3, 0], tokens_b[0:1, 0]], 1)
        buffer = state.cache.data_ptr()
        out, _, state = model.decode(tokens, memory, lengths, state)
        # the joined buffer had room for the next position: written in place, not copied again
        assert state.cache.data_ptr() == buffer
        torch.testing.assert_close(out[0, 1], alone[0], rtol=0, atol=1e-12)
        keep_b = torch.tensor([1])
        # A leaves: its 2 columns are no row's any more
        state = state.map(lambda t, dim: t.index_select(dim, keep_b)).compact(2)
        assert state.cached == 1 and state.start.tolist() == [0]
        for t in (1, 2):
            out, _, state = model.decode(tokens_b[t : t + 1], memory[:, 1:], lengths[1:], state)
            torch.testing.assert_close(out[0, 0], alone[t], rtol=0, atol=1e-12)


def test_truncated_windows_give_the_forward_pass_of_the_whole_target():
    """The cache carries the earlier windows: -truncated_decoder cuts only the gradient."""
    model = transformer("-copy_attn")
    batch = make_batch(random_pairs(4, seed=12, min_len=4, max_len=9))
    with torch.no_grad():
        full, _ = model(batch.src, batch.tgt, batch.src_lengths)
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        windows = []
        for start in range(0, batch.tgt.size(0) - 1, 3):
            out, _, state = model.decode(
                batch.tgt[start : min(start + 3, batch.tgt.size(0) - 1)],
                memory_bank,
                lengths,
                state.detach(),
            )
            windows.append(out)
    torch.testing.assert_close(torch.cat(windows), full, rtol=0, atol=1e-9)


def test_sinusoids_match_the_formula():
    table = sinusoids(torch.arange(7), 6)
    for pos in range(7):
        for i in range(3):
            angle = pos / 10000 ** (2 * i / 6)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_decoder_positions_count_from_each_rows_own_start():
    """A row whose cache starts at column 2 embeds its first word at position 0."""
    model = transformer()
    embeddings = model.decoder.embeddings
    ids = torch.tensor([[5, 5]])
    with torch.no_grad():
        at = embeddings(ids, torch.tensor([0, 3]))
    scale = math.sqrt(8)
    torch.testing.assert_close(
        at[0, 0], embeddings.lut.weight[5] * scale + sinusoids(torch.tensor(0), 8).double()
    )
    torch.testing.assert_close(
        at[0, 1], embeddings.lut.weight[5] * scale + sinusoids(torch.tensor(3), 8).double()
    )


def test_the_position_table_grows_as_asked_and_stays_out_of_the_checkpoint():
    """Positions past the table's first size (64) read rows of a grown table, equal to the formula;
    the table follows the model's dtype, and no checkpoint holds it."""
    model = transformer()
    embeddings = model.decoder.embeddings
    ids = torch.tensor([[5, 5], [6, 6]])  # [len x batch]
    with torch.no_grad():
        at = embeddings(ids, torch.tensor([1, 200]), max_offset=200)
    assert embeddings._encoding_table.size(0) >= 202
    scale = math.sqrt(8)
    for t, word in enumerate([5, 6]):
        for b, offset in enumerate([1, 200]):
            expected = embeddings.lut.weight[word] * scale
            expected = expected + sinusoids(torch.tensor(offset + t), 8).double()
            torch.testing.assert_close(at[t, b], expected)
    assert not any("encoding" in name for name in model.state_dict())
    half = embeddings.half()
    with torch.no_grad():
        at_half = half(ids, torch.tensor([1, 200]), max_offset=200)
    assert at_half.dtype == torch.float16
    torch.testing.assert_close(at_half.double(), at, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("relative", [0, 2])
@pytest.mark.parametrize("need_weights", [False, True])
def test_an_additive_mask_gives_what_the_bool_mask_gives(relative, need_weights):
    """The stacks hand the layers their masks as addends (0 or -inf), made once; the fused kernel
    and the written-out form give with them exactly what they give with the bool mask."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 2, 0.0, max_relative_positions=relative).eval()
    query, keys, values = (torch.randn(3, 2, 5, 8) for _ in range(3))
    mask = (torch.arange(5) < torch.tensor([[5], [3], [1]])).view(3, 1, 1, 5)
    addend = additive_mask(mask, torch.float32)
    assert addend.dtype == torch.float32
    assert set(addend.unique().tolist()) == {0.0, float("-inf")}
    with torch.no_grad():
        out, weights = attention(query, keys, values, mask, need_weights)
        out_added, weights_added = attention(query, keys, values, addend, need_weights)
    assert torch.equal(out, out_added)
    if need_weights:
        assert torch.equal(weights, weights_added)
        assert (weights_added[1, :, :, 3:] == 0).all()
    assert additive_mask(mask, torch.bfloat16).dtype == torch.bfloat16


def test_relative_positions_against_a_hand_computation():
    """Scores q·(k_j + r_{j-i}) / sqrt(d) and outputs Σ_j w_ij (v_j + r_{j-i}), clipped
    distances."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(4, 1, 0.0, max_relative_positions=1).double().eval()
    q, k, v = (torch.randn(1, 1, 3, 4, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    out, weights = attention(q, k, v, mask, need_weights=True)
    table = attention.relative.weight
    assert relative_positions(3, 3, 1, "cpu").tolist() == [[1, 2, 2], [0, 1, 2], [0, 0, 1]]
    expected = torch.zeros(3, 4, dtype=torch.float64)
    for i in range(3):
        rel = [table[max(-1, min(1, j - i)) + 1] for j in range(3)]
        scores = torch.stack([q[0, 0, i] @ (k[0, 0, j] + rel[j]) for j in range(3)]) / 2
        w = torch.softmax(scores, 0)
        torch.testing.assert_close(weights[0, 0, i], w)
        expected[i] = sum(w[j] * (v[0, 0, j] + rel[j]) for j in range(3))
    torch.testing.assert_close(out[0], attention.out(expected))


def test_the_fused_and_the_written_out_attention_agree():
    torch.manual_seed(1)
    attention = MultiHeadAttention(8, 2, 0.0).double().eval()
    q = torch.randn(2, 2, 3, 4).double()
    k = torch.randn(2, 2, 5, 4).double()
    v = torch.randn(2, 2, 5, 4).double()
    mask = (torch.arange(5) < torch.tensor([[3], [5]])).view(2, 1, 1, 5)
    fused, _ = attention(q, k, v, mask)
    written, weights = attention(q, k, v, mask, need_weights=True)
    torch.testing.assert_close(fused, written, rtol=0, atol=1e-12)
    assert torch.equal(weights[0, :, :, 3:], torch.zeros(2, 3, 2, dtype=torch.float64))


def test_decoding_writes_each_step_into_the_spare_columns_and_keeps_earlier_positions():
    """Step by step without a reorder, the cache grows in place (no copy while there is room), and a
    step and a reorder between steps leave the earlier positions' keys as they were."""
    model = transformer()
    batch = make_batch(random_pairs(3, seed=5, min_len=6, max_len=9))
    with torch.no_grad():
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        history = []
        for t in range(6):
            before = state
            _, _, state = model.decode(batch.tgt[t : t + 1], memory_bank, lengths, state)
            assert state.cached == t + 1 and state.cache.size(3) >= t + 1
            if before.cache.size(3) > t:  # room left: the same buffer, one column more
                assert state.cache.data_ptr() == before.cache.data_ptr()
            history.append(state.cache[:, :, :, : t + 1].clone())
            if t == 3:  # the search's reorder: rows swapped, the spare columns kept
                state = state.map(lambda x, dim: x.index_select(dim, torch.tensor([2, 0, 1])))
                history = [h.index_select(1, torch.tensor([2, 0, 1])) for h in history]
        for t, keys in enumerate(history):
            assert torch.equal(state.cache[:, :, :, : t + 1], keys)


def test_state_map_and_detach_keep_the_start_columns():
    state = TransformerState(
        (torch.randn(2, 3, 2, 4, 5, requires_grad=True),) * 2, torch.tensor([0, 1, 3])
    )
    picked = state.map(lambda t, dim: t.index_select(dim, torch.tensor([2, 0])))
    assert picked.start.tolist() == [3, 0] and picked.cache.shape == (4, 2, 2, 4, 5)
    assert not state.detach().cache.requires_grad


@pytest.mark.parametrize(
    "args,message",
    [
        (["-coverage_attn"], "-coverage_attn is for RNN decoders"),
        (["-copy_attn", "-reuse_copy_attn"], "-reuse_copy_attn is for RNN decoders"),
        (["-copy_attn", "-copy_attn_type", "mlp"], "-copy_attn_type is for RNN decoders"),
        (["-bridge"], "-bridge maps an RNN encoder's final state"),
        (["-heads", 3], "-rnn_size 8 is not a multiple of -heads 3"),
        (
            ["-word_vec_size", 6],
            "a Transformer needs -src_word_vec_size (6) equal to -rnn_size (8)",
        ),
        (
            [
                "-decoder_type",
                "rnn",
                "-word_vec_size",
                -1,
                "-tgt_word_vec_size",
                8,
                "-src_word_vec_size",
                6,
            ],
            "a Transformer needs -src_word_vec_size (6) equal to -rnn_size (8)",
        ),
        (
            [
                "-encoder_type",
                "rnn",
                "-word_vec_size",
                -1,
                "-src_word_vec_size",
                3,
                "-tgt_word_vec_size",
                8,
            ],
            "needs even word vector sizes",
        ),
        (
            ["-decoder_type", "rnn", "-share_embeddings"],
            "-share_embeddings with -position_encoding needs a Transformer",
        ),
    ],
)
def test_combinations_without_a_meaning_are_refused_before_any_step(args, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_model(*TRANSFORMER, *args)


@pytest.mark.parametrize(
    "encoder,decoder", [("transformer", "rnn"), ("brnn", "transformer"), ("mean", "transformer")]
)
def test_mixed_encoders_and_decoders_build_and_decode(encoder, decoder):
    model, _ = make_model(
        *TRANSFORMER,
        "-encoder_type",
        encoder,
        "-decoder_type",
        decoder,
        "-enc_layers",
        1,
        "-dec_layers",
        3,
        "-layers",
        -1,
        "-rnn_size",
        8,
    )
    model.eval()
    batch = make_batch(random_pairs(3, seed=13))
    with torch.no_grad():
        full, _ = model(batch.src, batch.tgt, batch.src_lengths)
        stepped, _ = step_by_step(model, batch)
    torch.testing.assert_close(stepped, full, rtol=0, atol=1e-9)


def test_position_encodings_go_to_the_source_and_to_a_transformer_decoder_only():
    for decoder, expected in (("transformer", True), ("rnn", False)):
        model, _ = make_model(*TRANSFORMER, "-encoder_type", "brnn", "-decoder_type", decoder)
        assert model.encoder.embeddings.position_encoding
        assert model.decoder.embeddings.position_encoding is expected


def test_a_transformer_encoder_starts_an_rnn_decoder_from_the_mean_of_its_output():
    model, _ = make_model(*TRANSFORMER, "-decoder_type", "rnn", "-layers", -1, "-dec_layers", 3)
    model.eval()
    pairs = random_pairs(2, seed=14)
    batch = make_batch(pairs)
    with torch.no_grad():
        memory_bank, _, state = model.encode(batch.src, batch.src_lengths)
    assert len(state.hidden) == 2 and state.hidden[0].shape == (3, 2, 8)
    for b, (src, _) in enumerate(pairs):
        torch.testing.assert_close(state.hidden[0][1, b], memory_bank[: len(src), b].mean(0))


def test_the_1x_transformer_options_have_1x_defaults():
    opt = model_options()
    assert (
        opt.heads,
        opt.transformer_ff,
        opt.max_relative_positions,
        opt.self_attn_type,
        opt.attention_dropout,
        opt.position_encoding,
    ) == (8, 2048, 0, "scaled-dot", [0.1], False)


def _kernel_calls(monkeypatch):
    """The dropout_p of every F.scaled_dot_product_attention call, recorded."""
    calls = []
    fused = torch.nn.functional.scaled_dot_product_attention

    def recorded(*args, dropout_p=0.0, **kwargs):
        calls.append(dropout_p)
        return fused(*args, dropout_p=dropout_p, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recorded)
    return calls


@pytest.mark.parametrize("kernel_dropout", [False, True])
def test_attention_dropout_goes_to_the_fused_kernel_off_the_cpu_only_with_scaled_dot_flash(
    monkeypatch, kernel_dropout
):
    calls = _kernel_calls(monkeypatch)
    attention = MultiHeadAttention(8, 2, dropout=0.25).train()
    attention.kernel_dropout = kernel_dropout
    # the meta device stands in for a GPU: shapes without arithmetic
    query, keys, values = (torch.empty(3, 2, 5, 4, device="meta") for _ in range(3))
    mask = torch.ones(3, 1, 5, 5, dtype=torch.bool, device="meta")
    attention.to("meta")
    out, weights = attention(query, keys, values, mask)
    assert out.shape == (3, 5, 8) and (weights is None) == kernel_dropout
    assert calls == ([0.25] if kernel_dropout else [])
    calls.clear()
    cpu = MultiHeadAttention(8, 2, dropout=0.25).train()
    cpu.kernel_dropout = kernel_dropout
    real = [torch.randn(3, 2, 5, 4) for _ in range(3)]
    cpu(*real, torch.ones(3, 1, 5, 5, dtype=torch.bool))
    assert calls == []  # the CPU keeps the written-out form and its own masks
    attention.eval()
    attention(query, keys, values, mask)
    assert calls == [0.0]  # without dropout, the kernel either way


def test_scaled_dot_flash_marks_every_attention_and_trains_on_the_cpu_as_scaled_dot():
    plain, _ = make_model(*TRANSFORMER, seed=3)
    flash, _ = make_model(*TRANSFORMER, "-self_attn_type", "scaled-dot-flash", seed=3)
    marked = [m.kernel_dropout for m in flash.modules() if isinstance(m, MultiHeadAttention)]
    assert len(marked) >= 3 and all(marked)
    assert not any(m.kernel_dropout for m in plain.modules() if isinstance(m, MultiHeadAttention))
    batch = make_batch(random_pairs(4, seed=2))
    losses = []
    for model in (plain, flash):
        torch.manual_seed(9)
        model.train()
        dec_out, _ = model(batch.src, batch.tgt, batch.src_lengths)
        losses.append(dec_out.sum())
    assert torch.equal(losses[0], losses[1])


@pytest.mark.parametrize("layers", [1, 3])
def test_a_search_reorder_and_a_step_copy_the_cache_once_whatever_the_layers(layers):
    """Every layer's keys and values are one buffer: the search's reorder is one index_select of
    it (and one of ``start``), and a step that outgrows the buffer grows it with one copy; each
    layer writes its new keys and values with one copy. Before, each layer's keys and values were
    buffers of their own: 2 x layers index_selects a reorder, two copies a layer."""
    model = transformer("-layers", layers)
    batch = make_batch(random_pairs(3, seed=7, min_len=6, max_len=9))
    rows = torch.tensor([2, 0, 1])
    with torch.no_grad():
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        keys = model.decoder.memory_keys(memory_bank)
        _, _, state = model.decode(batch.tgt[:1], memory_bank, lengths, state, keys)
        with HostSyncCounter() as reorder:
            state = state.map(lambda t, dim: t.index_select(dim, rows))
        spare = state.cache.size(3) - state.cached
        for t in range(1, spare + 2):  # the last step outgrows the buffer
            with HostSyncCounter() as step:
                _, _, state = model.decode(batch.tgt[t : t + 1], memory_bank, lengths, state, keys)
            grown = t == spare + 1
            assert step.counts["copy_"] == layers + grown, (t, spare)
    assert reorder.counts["index_select"] == 2 and reorder.operations == 2
    assert state.cache.shape[:2] == (2 * layers, 3)


def test_teacher_forcing_keeps_the_layers_keys_and_values_apart_until_read():
    """Training's forward pass makes a state nobody reads: joining its layers' keys and values
    would copy them all at every batch (the trainer detaches it: apart still). The attention reads
    the keys and values the projection's split gives, so the backward pass has no gradient of a
    selection of them to fill in and add up. A state read (``-truncated_decoder``'s next window)
    joins them, gradients and all."""
    model = transformer("-layers", 2)
    model.train()
    batch = make_batch(random_pairs(3, seed=8, min_len=5, max_len=7))
    memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
    with HostSyncCounter() as counter:
        dec_out, _, state = model.decode(batch.tgt[:-1], memory_bank, lengths, state)
        state.detach()
        dec_out.sum().backward(retain_graph=True)  # (the join backward below)
    assert counter.counts["cat"] == 2 * 2  # the backward of each self-attention's split
    # nor of the context attention's, each layer's a view of all layers' (``memory_keys``): before
    # 2026-11-28, a gradient of the whole for each (4 here) and their sum
    assert counter.counts["select_backward"] == 0
    model.zero_grad()
    joined = state.cache  # [2*L x B x h x T x d]
    assert joined.shape[:2] == (4, 3) and joined.size(3) == batch.tgt.size(0) - 1
    joined.sum().backward()
    assert model.decoder.layers[1].self_attn.qkv.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_search_steps_masks_from_tables_are_those_computed(dtype):
    """``StepMasks`` (a decoding step's masks, gathered from tables) against the masks computed as
    the teacher-forced pass computes them: starts and lengths from 0 to past the first table's size
    (the tables grow)."""
    tables = StepMasks()
    for width in (5, 64, 65, 130):
        start = torch.randint(0, width, (7,))
        start[0] = width - 1
        state = TransformerState(torch.zeros(2, 7, 1, width - 1, 1), start)
        started, _ = state.self_masks(1)  # [B x 1 x 1 x width]
        expected = additive_mask(started, dtype)
        assert torch.equal(tables.from_start(start, width, dtype), expected)
        lengths = torch.randint(1, width + 1, (7,))
        lengths[0] = width
        real = torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)
        expected = additive_mask(real[:, None, None, :], dtype)
        assert torch.equal(tables.below(lengths, width, dtype), expected)


def test_a_search_step_gathers_its_masks_in_one_kernel_each():
    """A decoding step (one position, no gradient) reads its self-attention and source masks from
    tables: a gather each, where computing them took four kernels each (2026-11-28)."""
    model = transformer("-layers", 2)
    batch = make_batch(random_pairs(3, seed=9, min_len=4, max_len=7))
    with torch.no_grad():
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        keys = model.decoder.memory_keys(memory_bank)
        _, _, state = model.decode(batch.tgt[:1], memory_bank, lengths, state, keys)  # tables
        for t in (1, 2):
            with HostSyncCounter() as counter:
                _, _, state = model.decode(batch.tgt[t : t + 1], memory_bank, lengths, state, keys)
            assert counter.counts["arange"] == 0 and counter.counts["masked_fill_"] == 0
            assert counter.counts["index_select"] == 2, counter.counts


def test_every_mask_the_fused_attention_gets_is_aligned_as_cuda_wants_it(monkeypatch):
    """CUDA's memory-efficient attention, the fused kernel that takes a mask, copies a mask whose
    strides (but the last, 1) are not multiples of 8 into an aligned one at every call (PyTorch's
    ``preprocess_mask``): the stacks' masks and a search step's are made aligned once. Before
    2026-11-28 every mask was as wide as its keys, so most calls copied theirs: four a step for two
    layers."""
    fused = torch.nn.functional.scaled_dot_product_attention
    strides = []

    def recorded(query, key, value, attn_mask=None, **kwargs):
        strides.append(attn_mask.stride())
        return fused(query, key, value, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recorded)
    model = transformer("-layers", 2)
    batch = make_batch(random_pairs(3, seed=10, min_len=3, max_len=13))
    with torch.no_grad():
        model(batch.src, batch.tgt, batch.src_lengths)  # the teacher-forced pass
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        keys = model.decoder.memory_keys(memory_bank)
        for t in range(5):  # a search's steps
            _, _, state = model.decode(
                batch.tgt[t : t + 1], memory_bank, lengths, state, keys, need_attention=False
            )
    assert len(strides) > 10
    for stride in strides:
        assert stride[-1] == 1 and all(s % 8 == 0 for s in stride[:-1]), stride
