"""The loss API: sharding is exact, truncation is exact in value, coverage, and a researcher's
subclass."""

import pytest
import torch

from onmt_lite.loss import (
    LossComputeBase,
    build_loss_compute,
    coverage_loss,
    filter_shard_state,
    shards,
)
from tests.model_helpers import (
    TGT_VOCAB,
    TRANSFORMER,
    assert_grads_equal,
    grads,
    make_batch,
    make_model,
    random_pairs,
)

CASES = {
    "nmt": [],
    "nmt-smoothing": ["-label_smoothing", 0.1],
    "nmt-coverage": ["-coverage_attn", "-lambda_coverage", 0.7],
    "nmt-coverage-smoothing-std-decoder": [
        "-coverage_attn",
        "-lambda_coverage",
        0.7,
        "-label_smoothing",
        0.2,
        "-input_feed",
        0,
    ],
    "copy": ["-copy_attn"],
    "copy-smoothing": ["-copy_attn", "-label_smoothing", 0.1],
    "copy-coverage": ["-copy_attn", "-coverage_attn", "-lambda_coverage", 0.5],
    "copy-coverage-smoothing-std-decoder": [
        "-copy_attn",
        "-coverage_attn",
        "-lambda_coverage",
        0.5,
        "-label_smoothing",
        0.1,
        "-input_feed",
        0,
    ],
    "copy-reuse-force-coverage": [
        "-copy_attn",
        "-reuse_copy_attn",
        "-copy_attn_force",
        "-coverage_attn",
        "-lambda_coverage",
        1.0,
    ],
    "copy-by-seqlength": ["-copy_attn", "-copy_loss_by_seqlength", "-copy_attn_type", "dot"],
    "transformer-smoothing": [*TRANSFORMER, "-label_smoothing", 0.1],
    "transformer-copy-relative": [*TRANSFORMER, "-copy_attn", "-max_relative_positions", 2],
    "transformer-encoder-rnn-decoder": [*TRANSFORMER, "-decoder_type", "rnn", "-copy_attn"],
    "rnn-encoder-transformer-decoder": [*TRANSFORMER, "-encoder_type", "brnn", "-copy_attn"],
    "sparsemax-generator": ["-generator_function", "sparsemax"],
    "sparsemax-generator-and-attention-coverage-gate-std-decoder": [
        "-generator_function",
        "sparsemax",
        "-global_attention_function",
        "sparsemax",
        "-coverage_attn",
        "-lambda_coverage",
        0.5,
        "-context_gate",
        "both",
        "-input_feed",
        0,
    ],
    "no-attention-gate": ["-global_attention", "none", "-context_gate", "source"],
}


def forward_and_loss(model, opt, batch, shard_size):
    model.zero_grad()
    loss_compute = build_loss_compute(model, TGT_VOCAB, opt)
    dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
    loss, stats = loss_compute(
        batch, dec_out, attns, normalization=batch.batch_size, shard_size=shard_size
    )
    if shard_size == 0:
        loss.backward()
    else:
        assert loss is None
    return grads(model), stats


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("shard_size", [1, 3, 100])
def test_sharded_gradients_and_statistics_equal_the_unsharded_ones(case, shard_size):
    model, opt = make_model(*CASES[case])
    batch = make_batch(random_pairs(4, seed=2))
    expected_grads, expected_stats = forward_and_loss(model, opt, batch, 0)
    actual_grads, actual_stats = forward_and_loss(model, opt, batch, shard_size)
    assert all(g.abs().sum() > 0 for g in expected_grads.values() if g.numel() > 1 and g.dim() > 1)
    assert_grads_equal(expected_grads, actual_grads)
    assert actual_stats == expected_stats
    assert expected_stats.n_words == sum(len(t) + 1 for _, t in random_pairs(4, seed=2))


@pytest.mark.parametrize(
    "case",
    [
        "nmt-coverage-smoothing-std-decoder",
        "copy-coverage",
        "copy-by-seqlength",
        "transformer-copy-relative",
    ],
)
@pytest.mark.parametrize("trunc_size", [1, 2, 5])
def test_truncated_windows_sum_to_the_full_loss(case, trunc_size):
    model, opt = make_model(*CASES[case])
    batch = make_batch(random_pairs(4, seed=3))
    loss_compute = build_loss_compute(model, TGT_VOCAB, opt)
    with torch.no_grad():
        dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
        full, full_stats = loss_compute(batch, dec_out, attns)
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        total = 0.0
        n_words = 0
        n_positions = batch.tgt.size(0) - 1
        for start in range(0, n_positions, trunc_size):
            window = batch.tgt[start : min(start + trunc_size, n_positions)]
            dec_out, attns, state = model.decode(window, memory_bank, lengths, state)
            loss, stats = loss_compute(
                batch, dec_out, attns, trunc_start=start, trunc_size=window.size(0)
            )
            state = state.detach()
            total = total + loss
            n_words = n_words + stats.n_words
    torch.testing.assert_close(total, full)
    assert n_words == full_stats.n_words


def test_truncation_with_sharding_gives_the_same_gradients_as_truncation_alone():
    model, opt = make_model(*CASES["copy-coverage"])
    batch = make_batch(random_pairs(3, seed=4))
    loss_compute = build_loss_compute(model, TGT_VOCAB, opt)
    results = []
    for shard_size in (0, 2):
        model.zero_grad()
        state = None
        for start in range(0, batch.tgt.size(0) - 1, 4):
            # as the trainer does: encode again for each window, carry the detached decoder state
            memory_bank, lengths, first_state = model.encode(batch.src, batch.src_lengths)
            window = batch.tgt[start : min(start + 4, batch.tgt.size(0) - 1)]
            dec_out, attns, state = model.decode(window, memory_bank, lengths, state or first_state)
            loss, _ = loss_compute(batch, dec_out, attns, 3.0, shard_size, start, window.size(0))
            if loss is not None:
                loss.backward()
            state = state.detach()
        results.append(grads(model))
    assert_grads_equal(results[0], results[1])


def test_coverage_is_the_attention_of_earlier_steps_and_its_loss_has_a_gradient():
    model, opt = make_model("-coverage_attn", "-lambda_coverage", 1.0)
    batch = make_batch(random_pairs(3, seed=5))
    _, attns = model(batch.src, batch.tgt, batch.src_lengths)
    earlier = torch.cumsum(attns["std"], 0) - attns["std"]
    torch.testing.assert_close(attns["coverage"], earlier)
    penalty = coverage_loss(attns["std"], attns["coverage"], batch.tgt[1:] != 1).sum()
    penalty.backward()
    assert penalty.item() > 0
    assert model.decoder.attn.linear_in.weight.grad.abs().sum() > 0
    # the 1.x definition (coverage including the current step) makes the loss a constant
    included = torch.cumsum(attns["std"], 0)
    constant = coverage_loss(attns["std"], included, batch.tgt[1:] != 1).sum()
    assert constant.item() == pytest.approx((batch.tgt[1:] != 1).sum().item())


def test_coverage_loss_is_zero_when_attention_never_overlaps():
    std = torch.eye(4).unsqueeze(1)  # step t attends position t only: [4 x 1 x 4]
    coverage = torch.cumsum(std, 0) - std
    assert coverage_loss(std, coverage, torch.ones(4, 1, dtype=torch.bool)).sum().item() == 0


def test_filter_shard_state_without_shard_size_yields_values_unsplit():
    value = torch.zeros(5, 2, requires_grad=True)
    assert list(filter_shard_state({"a": value, "b": None})) == [("a", value)]
    ((key, (original, chunks)),) = filter_shard_state({"a": value}, 2)
    assert key == "a" and original is value and [c.shape[0] for c in chunks] == [2, 2, 1]
    assert all(c.requires_grad and c.grad_fn is None for c in chunks)


def test_shards_skip_tensors_no_gradient_reached_and_eval_only_yields_everything_once():
    x = torch.randn(5, 3, requires_grad=True)
    used = x * 2
    unused = x * 3
    first_only = x * 5
    target = torch.arange(5)
    weights = torch.full((5,), 2.0)  # a float state tensor that needs no gradient
    state = {
        "used": used,
        "unused": unused,
        "first_only": first_only,
        "target": target,
        "weights": weights,
        "none": None,
    }
    for i, shard in enumerate(shards(state, 2)):
        assert set(shard) == {"used", "unused", "first_only", "target", "weights"}
        assert not shard["weights"].requires_grad
        loss = (shard["used"].sum(1) * shard["target"] * shard["weights"] / 2).sum()
        if i == 0:  # later chunks of "first_only" get no gradient at all
            loss = loss + shard["first_only"].sum()
        loss.backward()
    expected = 2 * torch.arange(5.0).unsqueeze(1).expand(5, 3).clone()
    expected[:2] += 5
    torch.testing.assert_close(x.grad, expected)
    whole = list(shards(state, 2, eval_only=True))
    assert len(whole) == 1 and whole[0]["used"] is used and "none" not in whole[0]
    with pytest.raises(ValueError, match="differ in length"):
        list(shards({"a": torch.zeros(4), "b": torch.zeros(3)}, 2))


class TokenWeightedNLL(LossComputeBase):
    """A researcher's loss: NLL where each target word has its own weight."""

    def __init__(self, generator, weights):
        super().__init__(criterion=None, generator=generator)
        self.weights = weights

    def _make_shard_state(self, batch, output, range_, attns=None):
        return {"output": output, "target": self._target(batch, range_)}

    def _compute_loss(self, batch, output, target):
        log_probs = self.generator(output.reshape(-1, output.size(2)))
        gold = target.reshape(-1)
        nll = (
            -log_probs.gather(1, gold.unsqueeze(1))
            .squeeze(1)
            .masked_fill(gold == self.padding_idx, 0)
        )
        return (nll * self.weights[gold]).sum(), self._stats(nll.sum(), log_probs.argmax(1), gold)


def test_a_researchers_subclass_trains_a_step_with_sharding_exactly_as_without():
    weights = torch.linspace(0.5, 2.0, len(TGT_VOCAB), dtype=torch.float64)
    batch = make_batch(random_pairs(4, seed=6))
    params_after = []
    for shard_size in (0, 2):
        model, _ = make_model(seed=1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        loss_compute = TokenWeightedNLL(model.generator, weights)
        dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
        loss, stats = loss_compute(batch, dec_out, attns, normalization=4, shard_size=shard_size)
        if loss is not None:
            loss.backward()
        optimizer.step()
        params_after.append({name: p.detach().clone() for name, p in model.named_parameters()})
        assert stats.n_words == (batch.tgt[1:] != 1).sum().item()
    assert_grads_equal(params_after[0], params_after[1], rtol=1e-9)
    before, _ = make_model(seed=1)
    assert not torch.equal(
        dict(before.named_parameters())["generator.0.weight"], params_after[0]["generator.0.weight"]
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["-lambda_coverage", 1.0], "-lambda_coverage needs -coverage_attn"),
        (["-reuse_copy_attn"], "-reuse_copy_attn needs -copy_attn"),
        (["-copy_loss_by_seqlength"], "-copy_loss_by_seqlength needs -copy_attn"),
    ],
)
def test_loss_options_without_their_feature_are_refused(args, message):
    from onmt_lite.utils.errors import UserError

    with pytest.raises(UserError, match=message):
        make_model(*args)


@pytest.mark.parametrize("pad_log_prob", [None, float("-inf")])
def test_the_smoothing_term_and_its_gradient_equal_autograds_masked_mean(pad_log_prob):
    """UniformNLL (written out for speed) against the plain masked mean, also with a padding column
    of -inf (the copy generator's)."""
    from onmt_lite.loss.criteria import UniformNLL

    torch.manual_seed(0)
    logits = torch.randn(7, 11, dtype=torch.float64, requires_grad=True)
    log_probs = torch.log_softmax(logits, -1)
    if pad_log_prob is not None:
        log_probs = log_probs.index_fill(1, torch.tensor([1]), pad_log_prob)
    weights = torch.randn(7, dtype=torch.float64)
    keep = torch.ones(11, dtype=torch.bool)
    keep[1] = False
    expected = -log_probs.masked_fill(~keep, 0).sum(1) / 10
    (expected_grad,) = torch.autograd.grad((expected * weights).sum(), logits, retain_graph=True)
    actual = UniformNLL.apply(log_probs, 1)
    (actual_grad,) = torch.autograd.grad((actual * weights).sum(), logits)
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(actual_grad, expected_grad, rtol=0, atol=1e-12)
    assert torch.isfinite(actual).all()


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize(
    "chunk_scores", [13 * 4, 1 << 22]
)  # 4 rows a chunk, the last partial; all in one
def test_the_fused_projection_and_loss_equal_autograds_chain_in_value_and_gradient(
    label_smoothing, chunk_scores, monkeypatch
):
    """LinearLogSoftmaxNLL (chunks of rows, gradients made in the forward pass) against the Linear,
    log_softmax and NMTCriterion of autograd, in float64, padding rows included."""
    from onmt_lite.data.vocab import PAD_ID
    from onmt_lite.loss import NMTCriterion, criteria

    monkeypatch.setattr(criteria, "CHUNK_SCORES", chunk_scores)
    torch.manual_seed(1)
    hidden = torch.randn(9, 6, dtype=torch.float64, requires_grad=True)
    linear = torch.nn.Linear(6, 13).double()
    gold = torch.randint(2, 13, (9,))
    gold[[2, 7]] = PAD_ID
    criterion = NMTCriterion(label_smoothing)
    inputs = (hidden, linear.weight, linear.bias)

    log_probs = torch.log_softmax(linear(hidden), -1)
    expected_loss, expected_nll = criterion(log_probs, gold)
    expected_grads = torch.autograd.grad(expected_loss.sum() * 3.5, inputs)
    loss, nll, best = criterion.from_hidden(hidden, linear, gold)
    grads = torch.autograd.grad(loss * 3.5, inputs)
    torch.testing.assert_close(loss, expected_loss.sum(), rtol=0, atol=1e-12)
    torch.testing.assert_close(nll, expected_nll, rtol=0, atol=1e-12)
    assert nll[[2, 7]].eq(0).all() and not nll.requires_grad and not best.requires_grad
    assert torch.equal(best, log_probs.argmax(1))
    for actual, expected in zip(grads, expected_grads):
        torch.testing.assert_close(actual, expected, rtol=0, atol=1e-12)
    assert grads[0][[2, 7]].eq(0).all()  # no gradient from padding rows


def test_the_fused_loss_leaves_a_frozen_projection_without_gradient_but_gives_the_hidden_ones():
    from onmt_lite.loss import NMTCriterion

    torch.manual_seed(3)
    hidden = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    linear = torch.nn.Linear(4, 7).double().requires_grad_(False)
    gold = torch.randint(2, 7, (5,))
    loss, _, _ = NMTCriterion(0.1).from_hidden(hidden, linear, gold)
    loss.backward()
    reference = hidden.detach().requires_grad_()
    NMTCriterion(0.1)(torch.log_softmax(linear(reference), -1), gold)[0].sum().backward()
    assert linear.weight.grad is None and linear.bias.grad is None
    torch.testing.assert_close(hidden.grad, reference.grad, rtol=0, atol=1e-12)


def test_the_fused_loss_reuses_its_weight_gradient_buffer_once_the_last_backward_took_it():
    """One loss, then backward, then another: the second call gets the same [V x H] buffer. Two
    losses before one backward (summed): the second gets a fresh one, and the gradients are those of
    autograd."""
    from onmt_lite.loss import NMTCriterion

    torch.manual_seed(4)
    linear = torch.nn.Linear(4, 7).double()
    criterion = NMTCriterion(0.1)
    hidden = [torch.randn(5, 4, dtype=torch.float64) for _ in range(3)]
    gold = [torch.randint(2, 7, (5,)) for _ in range(3)]

    criterion.from_hidden(hidden[0], linear, gold[0])[0].backward()
    first = criterion.weight_grad_buffer.tensor
    losses = [criterion.from_hidden(h, linear, g)[0] for h, g in zip(hidden[1:], gold[1:])]
    assert criterion.weight_grad_buffer.tensor is first  # the second of the two got a fresh one
    (losses[0] * 2 + losses[1] * 3).backward()
    expected = torch.nn.Linear(4, 7).double()
    expected.load_state_dict(linear.state_dict())
    total = 0
    for h, g, weight in zip(hidden, gold, (1, 2, 3)):
        total = total + weight * NMTCriterion(0.1)(torch.log_softmax(expected(h), -1), g)[0].sum()
    total.backward()
    torch.testing.assert_close(linear.weight.grad, expected.weight.grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(linear.bias.grad, expected.bias.grad, rtol=0, atol=1e-12)
    assert not criterion.weight_grad_buffer.lent


def test_the_fused_loss_refuses_a_second_backward_through_its_graph():
    from onmt_lite.loss import NMTCriterion

    linear = torch.nn.Linear(4, 7)
    loss = NMTCriterion().from_hidden(
        torch.randn(3, 4, requires_grad=True), linear, torch.tensor([2, 3, 4])
    )[0]
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backpropagated once"):
        loss.backward()


def test_the_fused_loss_under_bf16_autocast_pads_its_chunks_and_matches_float32(monkeypatch):
    """Under CPU autocast the products run in bfloat16 on chunks padded to ``row_bucket`` rows (a
    bounded set of kernel shapes); the loss and gradients stay close to float32's, in the dtypes of
    the inputs."""
    from onmt_lite.loss import NMTCriterion, criteria
    from onmt_lite.models.projection import row_bucket

    # chunks of 48 rows (a bucket), the last of 5
    monkeypatch.setattr(criteria, "CHUNK_SCORES", 50 * 17)
    shapes = []
    original_linear = criteria.F.linear
    monkeypatch.setattr(
        criteria.F, "linear", lambda x, *a: shapes.append(x.size(0)) or original_linear(x, *a)
    )
    torch.manual_seed(2)
    hidden = torch.randn(101, 8, requires_grad=True)
    linear = torch.nn.Linear(8, 17)
    gold = torch.randint(1, 17, (101,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, nll, _ = NMTCriterion(0.1).from_hidden(hidden, linear, gold)
    loss.backward()
    assert shapes == [48, 48, row_bucket(5)]
    assert hidden.grad.dtype == linear.weight.grad.dtype == torch.float32
    reference = hidden.detach().requires_grad_()
    reference_linear = torch.nn.Linear(8, 17)
    reference_linear.load_state_dict(linear.state_dict())
    expected_loss, expected_nll = NMTCriterion(0.1)(
        torch.log_softmax(reference_linear(reference), -1), gold
    )
    expected_loss.sum().backward()
    torch.testing.assert_close(loss, expected_loss.sum(), rtol=2e-2, atol=0)
    torch.testing.assert_close(nll, expected_nll, rtol=0, atol=5e-2)
    torch.testing.assert_close(hidden.grad, reference.grad, rtol=0, atol=2e-2)
    torch.testing.assert_close(linear.weight.grad, reference_linear.weight.grad, rtol=0, atol=5e-2)


def test_the_fused_loss_takes_bfloat16_hidden_states_as_a_decoder_under_autocast_gives_them():
    """A decoder under autocast hands the loss bfloat16 states: the weight gradient's products then
    run in bfloat16 (float32 products add into the float32 gradient in place, which cannot mix
    dtypes), close to autograd's chain under the same autocast."""
    from onmt_lite.loss import NMTCriterion

    torch.manual_seed(3)
    states = torch.randn(300, 8, requires_grad=True)
    linear = torch.nn.Linear(8, 17)
    gold = torch.randint(1, 17, (300,))
    reference_linear = torch.nn.Linear(8, 17)
    reference_linear.load_state_dict(linear.state_dict())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _, _ = NMTCriterion(0.1).from_hidden(states.bfloat16(), linear, gold)
        log_probs = torch.log_softmax(reference_linear(states.bfloat16()), -1)
        expected_loss, _ = NMTCriterion(0.1)(log_probs, gold)
    loss.backward()
    expected_loss.sum().backward()
    assert linear.weight.grad.dtype == torch.float32
    torch.testing.assert_close(loss, expected_loss.sum().float(), rtol=2e-2, atol=0)
    torch.testing.assert_close(linear.weight.grad, reference_linear.weight.grad, rtol=0, atol=0.5)
    assert linear.weight.grad.abs().max() > 5  # the tolerance is a fraction of the gradient


def test_training_with_the_plain_generator_takes_the_fused_path_and_a_subclass_generator_does_not(
    monkeypatch,
):
    """The default NMT loss fuses the plain generator and criterion; a subclass of the generator (a
    researcher's) gets the generator then the criterion. Both give the same gradients and
    statistics."""
    from onmt_lite.loss import criteria
    from onmt_lite.models.copy_generator import NMTGenerator

    model, opt = make_model("-label_smoothing", 0.1)
    batch = make_batch(random_pairs(4, seed=5))
    fused_calls = []
    original = criteria.LinearLogSoftmaxNLL.forward
    monkeypatch.setattr(
        criteria.LinearLogSoftmaxNLL,
        "forward",
        staticmethod(lambda *a: fused_calls.append(1) or original(*a)),
    )
    fused_grads, fused_stats = forward_and_loss(model, opt, batch, 0)
    assert len(fused_calls) == 1

    class ResearchersGenerator(NMTGenerator):
        pass

    model.generator.__class__ = ResearchersGenerator
    plain_grads, plain_stats = forward_and_loss(model, opt, batch, 0)
    assert len(fused_calls) == 1
    assert_grads_equal(plain_grads, fused_grads)
    assert plain_stats.n_correct == fused_stats.n_correct
    assert plain_stats.loss == pytest.approx(fused_stats.loss, rel=1e-12)


def test_a_criterion_forward_edited_in_place_is_what_trains(monkeypatch):
    """Editing ``NMTCriterion.forward`` itself (a monkeypatch of the class, not a subclass) reaches
    training: the fused loss stands in for the stock forward only (before, it ran all the same and
    the edit changed validation alone)."""
    from onmt_lite.loss.criteria import NMTCriterion

    model, opt = make_model("-label_smoothing", 0.1)
    batch = make_batch(random_pairs(4, seed=5))
    stock_grads, stock_stats = forward_and_loss(model, opt, batch, 0)
    stock = NMTCriterion.forward

    # a researcher's edit: three times the loss and its report
    def tripled(self, log_probs, target):
        loss, nll = stock(self, log_probs, target)
        return 3 * loss, 3 * nll

    monkeypatch.setattr(NMTCriterion, "forward", tripled)
    edited_grads, edited_stats = forward_and_loss(model, opt, batch, 0)
    assert_grads_equal({name: 3 * grad for name, grad in stock_grads.items()}, edited_grads)
    assert edited_stats.loss == pytest.approx(3 * stock_stats.loss, rel=1e-9)


def test_a_generator_forward_set_on_the_instance_trains_as_a_subclass_with_the_same_edit():
    """A researcher's generator (a temperature, set on the instance): training gets it through the
    generator then the criterion, the same gradients as a subclass that edits ``forward``."""
    from onmt_lite.models.copy_generator import NMTGenerator

    model, opt = make_model()
    batch = make_batch(random_pairs(4, seed=6))
    stock_grads, _ = forward_and_loss(model, opt, batch, 0)

    class Cooled(NMTGenerator):
        def forward(self, hidden):
            return super().forward(hidden / 2)

    generator = model.generator
    model.generator.__class__ = Cooled
    subclass_grads, _ = forward_and_loss(model, opt, batch, 0)
    model.generator.__class__ = NMTGenerator
    generator.forward = lambda hidden: NMTGenerator.forward(generator, hidden / 2)
    instance_grads, _ = forward_and_loss(model, opt, batch, 0)
    assert_grads_equal(subclass_grads, instance_grads)
    name = "generator.0.weight"
    assert not torch.allclose(stock_grads[name], instance_grads[name])
