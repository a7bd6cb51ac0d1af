"""Attention variants: sparsemax (attention and generator) and its loss, context gates, no
attention, against references written out here (a bisection projection onto the simplex, the 1.x
formulas)."""

import copy
import math

import pytest
import torch

from onmt_lite.loss import SparsemaxCriterion, build_loss_compute
from onmt_lite.models.checkpoint import build_checkpoint, model_from_checkpoint, model_options
from onmt_lite.models.attention import GlobalAttention
from onmt_lite.models.copy_generator import NMTGenerator, SparsemaxGenerator
from onmt_lite.models.sparsemax import sparsemax, sparsemax_loss
from onmt_lite.translate.packed import pack_for_cpu, packing_available, quantize_int8
from onmt_lite.translate.search import Search, SearchOptions
from onmt_lite.utils.errors import UserError
from tests.model_helpers import TGT_VOCAB, VOCABS, make_batch, make_model, random_pairs

NEG_INF = float("-inf")


def projection(z):
    """The Euclidean projection of the 1-D ``z`` (``-inf`` allowed) onto the simplex, by bisection
    on the threshold tau of ``p = max(z - tau, 0)``: ``sum p`` falls from >= 1 at ``max z - 1`` to 0
    at ``max z``."""
    values = [float(v) for v in z.detach().tolist()]
    top = max(v for v in values if v != NEG_INF)
    low = top - 1.0
    high = top
    for _ in range(200):
        tau = (low + high) / 2
        if sum(max(v - tau, 0.0) for v in values) > 1:
            low = tau
        else:
            high = tau
    return torch.tensor([max(v - (low + high) / 2, 0.0) for v in values], dtype=torch.float64), (
        low + high
    ) / 2


def random_scores(seed, rows=20, width=9):
    """Scores with ties (halves of small integers) and with spread-out values, some rows masked at
    the end."""
    g = torch.Generator().manual_seed(seed)
    ties = torch.randint(-4, 4, (rows, width), generator=g).double() / 2
    spread = torch.randn(rows, width, generator=g, dtype=torch.float64) * 2
    scores = torch.cat([ties, spread])
    lengths = torch.randint(1, width + 1, (scores.size(0),), generator=g)
    masked = torch.arange(width).unsqueeze(0) >= lengths.unsqueeze(1)
    return scores.masked_fill(masked, NEG_INF), masked


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sparsemax_is_the_projection_onto_the_simplex(seed):
    scores, masked = random_scores(seed)
    probs = sparsemax(scores, dim=-1)
    for row, p in zip(scores, probs):
        expected, tau = projection(row)
        torch.testing.assert_close(p, expected, atol=1e-9, rtol=0)
        assert torch.equal(p > 0, row > tau + 1e-9)  # zero outside the support
    torch.testing.assert_close(probs.sum(-1), torch.ones(scores.size(0), dtype=torch.float64))
    assert torch.all(probs[masked] == 0)  # masked positions: exactly 0
    assert (probs == 0).any() and (probs > 0).sum(
        -1
    ).max() > 1  # sparse, and not one-hot everywhere


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sparsemax_of_half_precision_scores_is_the_float32_projection_rounded(dtype):
    """bfloat16's 8-bit mantissa would put the threshold off by more than the weights' rounding."""
    scores, masked = random_scores(4)
    low = scores.to(dtype)
    probs = sparsemax(low, dim=-1)
    assert probs.dtype == dtype
    assert torch.equal(probs, sparsemax(low.double(), dim=-1).to(dtype))
    assert torch.all(probs[masked] == 0)


def test_sparsemax_along_another_dimension_and_its_jacobian():
    scores = torch.randn(4, 6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(
        sparsemax(scores, dim=1), sparsemax(scores.transpose(1, 2), -1).transpose(1, 2)
    )
    assert torch.autograd.gradcheck(lambda x: sparsemax(x, 1), (scores.clone().requires_grad_(),))


def test_sparsemax_loss_value_follows_the_formula_and_its_gradient_is_sparsemax_minus_onehot():
    scores, _ = random_scores(4, rows=6, width=7)
    # finite (a gold word could be masked otherwise)
    scores = scores.masked_fill(scores == NEG_INF, -3.0)
    gold = torch.randint(0, 7, (scores.size(0),), generator=torch.Generator().manual_seed(5))
    for row, y, loss in zip(scores, gold, sparsemax_loss(scores, gold)):
        _, tau = projection(row)
        support = [v for v in row.tolist() if v > tau + 1e-9]
        expected = -row[y].item() + 0.5 * sum(v * v - tau * tau for v in support) + 0.5
        assert loss.item() == pytest.approx(expected, abs=1e-9)
        assert loss.item() >= -1e-12
    x = scores.clone().requires_grad_()
    sparsemax_loss(x, gold).sum().backward()
    expected_grad = torch.stack(
        [projection(row)[0] for row in scores]
    ) - torch.nn.functional.one_hot(gold, 7)
    torch.testing.assert_close(x.grad, expected_grad.double(), atol=1e-9, rtol=0)
    smooth = torch.randn(
        5, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(6)
    ).requires_grad_()
    assert torch.autograd.gradcheck(lambda z: sparsemax_loss(z, gold[:5]), (smooth,))


def test_sparsemax_loss_is_zero_for_a_margin_of_one_and_the_criterion_skips_padding():
    scores = torch.tensor([[3.0, 1.5, 0.0], [3.0, 2.5, 0.0], [0.0, 5.0, 0.0]], dtype=torch.float64)
    loss, reported = SparsemaxCriterion(pad_idx=1)(scores.requires_grad_(), torch.tensor([0, 0, 1]))
    # row 0: margin 1.5, loss 0; row 1: support {3, 2.5}, tau 2.25: -3 + (9 + 6.25 - 2 * 2.25^2) / 2
    # + 1/2
    torch.testing.assert_close(loss, torch.tensor([0.0, 0.0625, 0.0], dtype=torch.float64))
    assert torch.equal(reported, loss.detach())
    loss.sum().backward()
    assert torch.all(scores.grad[2] == 0)  # the padding row


def test_sparsemax_attention_weights_are_the_projection_of_the_masked_scores():
    torch.manual_seed(7)
    attention = GlobalAttention(5, "general", attn_func="sparsemax").double()
    query = torch.randn(3, 2, 5, dtype=torch.float64) * 3
    memory = torch.randn(3, 6, 5, dtype=torch.float64)
    lengths = torch.tensor([6, 2, 4])
    _, align = attention(query, memory, lengths)
    scores = attention.score(query, memory)
    for b in range(3):
        for t in range(2):
            expected = torch.zeros(6, dtype=torch.float64)
            expected[: lengths[b]] = projection(scores[b, t, : lengths[b]])[0]
            torch.testing.assert_close(align[b, t], expected, atol=1e-9, rtol=0)
    assert (align == 0).sum() > (
        lengths.numel() * 6 - lengths.sum()
    ) * 2  # zeros inside the source too


def gate_by_hand(gate, x, h, a, kind):
    """1.x's context gates written out from the module's weights."""

    def linear(layer, v):
        return v @ layer.weight.t() + layer.bias

    z = 1 / (1 + torch.exp(-linear(gate.gate, torch.cat([x, h, a], -1))))
    source = linear(gate.source_proj, a)
    target = linear(gate.target_proj, torch.cat([x, h], -1))
    return torch.tanh(
        {
            "source": target + z * source,
            "target": z * target + source,
            "both": (1 - z) * target + z * source,
        }[kind]
    )


def decoded(model, batch, steps):
    """The decoder's output ``[steps x B x H]`` and attns for the first ``steps`` target inputs."""
    memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
    dec_out, attns, _ = model.decode(batch.tgt[:steps], memory_bank, lengths, state)
    return dec_out, attns, memory_bank, lengths, state


def input_feed_by_hand(decoder, tgt, memory_bank, lengths, state, kind):
    """The input-feed decoder stepped by hand: the RNN on ``[embedding; previous output]``, then the
    attention (or none), then the gate (or none); the output is fed to the next step."""
    hidden = state.hidden
    feed = state.input_feed
    outs = []
    for t in range(tgt.size(0)):
        x = torch.cat([decoder.embeddings(tgt[t : t + 1])[0], feed], 1)
        rnn_out, hidden = decoder.rnn(x, hidden)
        out = (
            rnn_out
            if decoder.attn is None
            else decoder.attn(rnn_out.unsqueeze(1), memory_bank.transpose(0, 1), lengths)[
                0
            ].squeeze(1)
        )
        feed = out if kind is None else gate_by_hand(decoder.context_gate, x, rnn_out, out, kind)
        outs.append(feed)
    return torch.stack(outs)


@pytest.mark.parametrize("kind", ["source", "target", "both"])
@pytest.mark.parametrize("input_feed", [1, 0])
def test_context_gates_follow_the_formulas(kind, input_feed):
    model, _ = make_model("-context_gate", kind, "-input_feed", input_feed, "-layers", 1)
    model.eval()
    batch = make_batch(random_pairs(3, seed=8))
    dec_out, _, memory_bank, lengths, state = decoded(model, batch, 3)
    decoder = model.decoder
    with torch.no_grad():
        if input_feed:
            expected = input_feed_by_hand(decoder, batch.tgt[:3], memory_bank, lengths, state, kind)
        else:
            emb = decoder.embeddings(batch.tgt[:3])
            rnn_out, _ = decoder.rnn(emb, state.hidden)
            attn_h, _ = decoder.attn(rnn_out.transpose(0, 1), memory_bank.transpose(0, 1), lengths)
            expected = gate_by_hand(
                decoder.context_gate, emb, rnn_out, attn_h.transpose(0, 1), kind
            )
    torch.testing.assert_close(dec_out.detach(), expected, atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("input_feed", [1, 0])
def test_without_attention_the_decoder_output_is_the_rnns(input_feed):
    model, _ = make_model("-global_attention", "none", "-input_feed", input_feed)
    model.eval()
    assert not model.decoder.attentional and not any(
        ".attn." in n for n, _ in model.named_parameters()
    )
    batch = make_batch(random_pairs(3, seed=9))
    dec_out, attns, memory_bank, lengths, state = decoded(model, batch, 4)
    assert attns == {}
    with torch.no_grad():
        if input_feed:
            expected = input_feed_by_hand(
                model.decoder, batch.tgt[:4], memory_bank, lengths, state, None
            )
        else:
            expected, _ = model.decoder.rnn(model.decoder.embeddings(batch.tgt[:4]), state.hidden)
    torch.testing.assert_close(dec_out.detach(), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("input_feed", [1, 0])
def test_without_attention_a_copy_attention_of_its_own_type_is_the_only_one(input_feed):
    """1.x's -global_attention none -copy_attn -copy_attn_type general: the output is the RNN's (no
    attention feeds it), and the copy attention, a layer of its own, weighs the source (masked); the
    copy loss trains it."""
    model, opt = make_model(
        "-global_attention",
        "none",
        "-copy_attn",
        "-copy_attn_type",
        "general",
        "-input_feed",
        input_feed,
    )
    decoder = model.decoder
    assert decoder.attn is None and decoder.copy_attention.attn_type == "general"
    batch = make_batch(random_pairs(3, seed=9))
    dec_out, attns, memory_bank, lengths, state = decoded(model, batch, 4)
    assert set(attns) == {"copy"}
    copy_attention = attns["copy"]  # [T x B x S]
    tgt = batch.tgt[:4]
    with torch.no_grad():
        if input_feed:
            expected_out = input_feed_by_hand(decoder, tgt, memory_bank, lengths, state, None)
        else:
            expected_out, _ = decoder.rnn(decoder.embeddings(tgt), state.hidden)
        _, expected = decoder.copy_attention(
            expected_out.transpose(0, 1), memory_bank.transpose(0, 1), lengths
        )
    torch.testing.assert_close(dec_out.detach(), expected_out, atol=1e-12, rtol=0)
    torch.testing.assert_close(
        copy_attention.detach(), expected.transpose(0, 1), atol=1e-12, rtol=0
    )
    positions = torch.arange(copy_attention.size(2)).unsqueeze(0)  # [1 x S]
    padded = positions >= batch.src_lengths.unsqueeze(1)  # [B x S]
    assert torch.all(copy_attention[:, padded] == 0)
    torch.testing.assert_close(copy_attention.sum(2), torch.ones(4, 3, dtype=torch.float64))
    full_dec_out, full_attns = model(batch.src, batch.tgt, batch.src_lengths)
    loss, _ = build_loss_compute(model, TGT_VOCAB, opt)(batch, full_dec_out, full_attns)
    loss.backward()
    assert decoder.copy_attention.linear_in.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "args,words",
    [
        (
            ["-global_attention", "none", "-copy_attn"],
            ["-copy_attn", "-global_attention none", "-copy_attn_type"],
        ),
        (
            ["-global_attention", "none", "-coverage_attn"],
            ["-coverage_attn", "-global_attention none"],
        ),
        (
            [
                "-global_attention",
                "none",
                "-copy_attn",
                "-reuse_copy_attn",
                "-copy_attn_type",
                "general",
            ],
            ["-reuse_copy_attn", "-global_attention none"],
        ),
        (
            ["-global_attention", "none", "-lambda_coverage", 1],
            ["-lambda_coverage", "-global_attention none"],
        ),
        (
            ["-generator_function", "sparsemax", "-copy_attn"],
            ["-generator_function sparsemax", "-copy_attn"],
        ),
        (
            ["-decoder_type", "transformer", "-context_gate", "both"],
            ["-context_gate", "-decoder_type rnn"],
        ),
        (
            ["-decoder_type", "transformer", "-global_attention_function", "sparsemax"],
            ["-global_attention_function", "RNN decoders"],
        ),
    ],
)
def test_options_that_need_what_the_model_lacks_are_refused(args, words):
    base = ["-word_vec_size", 8] if "transformer" in args else []
    with pytest.raises(UserError) as err:
        make_model(*base, *args)
    assert all(word in str(err.value) for word in words), str(err.value)


def test_sparsemax_generator_refuses_label_smoothing_and_a_softmax_loss_class():
    model, opt = make_model("-generator_function", "sparsemax", "-label_smoothing", 0.1)
    with pytest.raises(UserError, match="-label_smoothing 0.1 .*-generator_function sparsemax"):
        build_loss_compute(model, TGT_VOCAB, opt)
    opt.label_smoothing = 0.0
    opt.loss_class = "onmt_lite.loss:NMTLossCompute"
    with pytest.raises(UserError, match="NMTLossCompute: a -generator_function sparsemax model"):
        build_loss_compute(model, TGT_VOCAB, opt)


def test_sparsemax_generator_statistics_report_the_sparsemax_loss_without_nan():
    model, opt = make_model("-generator_function", "sparsemax")
    assert isinstance(model.generator, SparsemaxGenerator) and not isinstance(
        model.generator, NMTGenerator
    )
    with torch.no_grad():
        # confident: most words get probability 0, gold words too
        model.generator[0].weight.mul_(40)
    batch = make_batch(random_pairs(4, seed=10))
    dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
    _, stats = build_loss_compute(model, TGT_VOCAB, opt)(batch, dec_out, attns)
    target = batch.tgt[1:].reshape(-1)
    real = target != 1
    scores = model.generator.scores(dec_out.reshape(target.numel(), -1))[real].detach()
    assert (
        model.generator(dec_out.reshape(target.numel(), -1))[real].gather(
            1, target[real].unsqueeze(1)
        )
        == NEG_INF
    ).any()  # some gold words are outside the support: their NLL would be infinite
    expected = sum(
        -row[y].item() + 0.5 * sum(v * v - tau * tau for v in row.tolist() if v > tau + 1e-9) + 0.5
        for row, y, tau in ((r, y, projection(r)[1]) for r, y in zip(scores, target[real]))
    )
    assert stats.loss == pytest.approx(expected, rel=1e-9)
    assert math.isfinite(stats.ppl()) and stats.n_words == int(real.sum())
    assert stats.n_correct == int((scores.argmax(1) == target[real]).sum())


class OneWordStepper:
    """A stepper over 6 tokens whose log-probabilities are a sparsemax's: word 4 (probability 0.75)
    or 5 (0.25) first, then </s> alone: two hypotheses of nonzero probability."""

    def step(self, tokens):
        first = tokens == 2
        probs = torch.zeros(tokens.numel(), 6)
        probs[first, 4] = 0.75
        probs[first, 5] = 0.25
        probs[~first, 3] = 1.0
        return torch.log(probs), {}

    def reorder(self, rows, memory_rows=None, unused_columns=0):
        pass


@pytest.mark.parametrize("beam", [1, 5])
def test_a_search_with_zero_probability_words_fills_the_n_best_with_impossible_hypotheses(beam):
    search = Search(SearchOptions(beam_size=beam, n_best=beam, attention=False), 2, 3)
    (nbest,) = search.run(OneWordStepper(), 1, torch.tensor([3]))
    assert len(nbest) == beam
    assert nbest[0].tokens == [4] and nbest[0].score == pytest.approx(math.log(0.75))
    if beam > 1:
        assert nbest[1].tokens == [5] and nbest[1].score == pytest.approx(math.log(0.25))
        assert all(h.tokens == [] and h.score == NEG_INF == h.log_prob for h in nbest[2:])
    assert not any(math.isnan(h.score) for h in nbest)


@pytest.mark.skipif(not packing_available(), reason="this PyTorch has no oneDNN")
@pytest.mark.parametrize(
    "args",
    [
        ["-global_attention", "none", "-context_gate", "source"],
        [
            "-global_attention_function",
            "sparsemax",
            "-global_attention",
            "mlp",
            "-context_gate",
            "both",
            "-copy_attn",
        ],
        [
            "-generator_function",
            "sparsemax",
            "-context_gate",
            "target",
            "-input_feed",
            0,
            "-rnn_type",
            "GRU",
        ],
    ],
)
def test_the_cpu_fast_paths_decode_every_variant_like_the_general_path(args):
    """Packed (float32) within float rounding, int8 within its rounding: the gate's and the
    generators' layers are linear layers like the others, the sparsemax runs as it is."""
    model, _ = make_model(*args)
    model = model.float().eval()
    batch = make_batch(random_pairs(4, seed=11))
    batch.src_map = batch.src_map.float()
    outputs = []
    with torch.no_grad():
        for prepared in (
            model,
            pack_for_cpu(copy.deepcopy(model), rows=4),
            quantize_int8(copy.deepcopy(model)),
        ):
            dec_out, attns = prepared(batch.src, batch.tgt, batch.src_lengths)
            hidden = dec_out.reshape(-1, dec_out.size(2))
            probs = (
                prepared.generator(hidden, attns["copy"].reshape(hidden.size(0), -1), batch.src_map)
                if "copy" in attns
                else prepared.generator(hidden)
            ).exp()
            outputs.append((dec_out, attns, probs))
    (expected, expected_attns, expected_probs), packed, int8 = outputs
    torch.testing.assert_close(packed[0], expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(packed[2], expected_probs, atol=1e-5, rtol=1e-4)
    assert packed[1].keys() == expected_attns.keys()
    for name in expected_attns:
        torch.testing.assert_close(packed[1][name], expected_attns[name], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(int8[0], expected, atol=0.05, rtol=0.05)


@pytest.mark.parametrize(
    "args",
    [
        [
            "-generator_function",
            "sparsemax",
            "-global_attention_function",
            "sparsemax",
            "-context_gate",
            "both",
        ],
        ["-global_attention", "none"],
    ],
)
def test_the_variants_are_saved_in_checkpoints_and_older_ones_load_with_the_defaults(args):
    model, opt = make_model(*args)
    checkpoint = build_checkpoint(model, VOCABS, vars(opt), 1, None, None, None)
    rebuilt = model_from_checkpoint(
        model_options(checkpoint["opt"], "new.pt"), VOCABS, checkpoint, "new.pt"
    )
    assert type(rebuilt.generator) is type(model.generator)
    assert rebuilt.decoder.attentional == model.decoder.attentional
    assert type(rebuilt.decoder.context_gate) is type(model.decoder.context_gate)
    plain, plain_opt = make_model()
    old = build_checkpoint(plain, VOCABS, vars(plain_opt), 1, None, None, None)
    for name in ("global_attention_function", "generator_function", "context_gate"):
        del old["opt"][name]
    opt = model_options(old["opt"], "old.pt")
    assert (opt.global_attention_function, opt.generator_function, opt.context_gate) == (
        "softmax",
        "softmax",
        None,
    )
    loaded = model_from_checkpoint(opt, VOCABS, old, "old.pt")
    assert type(loaded.generator) is NMTGenerator and loaded.decoder.context_gate is None
    assert loaded.decoder.attn.attn_func == "softmax"
