"""The copy generator, its loss and the collapse of copy scores, against hand-built
distributions."""

import math

import pytest
import torch

from onmt_lite.loss import CopyGeneratorLoss, NMTCriterion, build_loss_compute
from onmt_lite.models.copy_generator import (
    CopyGenerator,
    NMTGenerator,
    collapse_copy_log_probs,
    collapse_copy_scores,
    collapsed_argmax,
)
from tests.model_helpers import TGT_VOCAB, make_batch, make_model, random_pairs

V = 6  # ids: 0 <unk>, 1 <blank>, 2 <s>, 3 </s>, 4 "a", 5 "b"; copy entries V + 0 .. V + 2


def hand_distribution():
    probs = torch.tensor([[0.05, 0.0, 0.05, 0.1, 0.2, 0.1, 0.0, 0.0, 0.5]] * 4, dtype=torch.float64)
    return probs, probs.log()


def test_copy_distribution_sums_to_one_and_gives_padding_nothing():
    torch.manual_seed(0)
    generator = CopyGenerator(5, 9).double()
    batch = make_batch(random_pairs(3))
    src_map = batch.src_map  # [S x 3 x n]
    # rows: t * 3 + b
    padded = torch.arange(src_map.size(0)) >= batch.src_lengths.repeat(4).unsqueeze(1)
    scores = torch.randn(4 * 3, src_map.size(0), dtype=torch.float64).masked_fill(
        padded, float("-inf")
    )
    attn = torch.softmax(scores, -1)
    probs = generator(torch.randn(4 * 3, 5, dtype=torch.float64), attn, src_map).exp()
    torch.testing.assert_close(probs.sum(1), torch.ones(12, dtype=torch.float64))
    assert (probs[:, 1] == 0).all()


def test_copy_generator_gives_the_same_scores_with_and_without_gradients():
    """Inference writes the two halves in place, training concatenates them: the same numbers."""
    torch.manual_seed(3)
    generator = CopyGenerator(5, 9).double()
    batch = make_batch(random_pairs(3))
    hidden = torch.randn(2 * 3, 5, dtype=torch.float64)
    attn = torch.softmax(torch.randn(2 * 3, batch.src_map.size(0), dtype=torch.float64), -1)
    with torch.no_grad():
        inferred = generator(hidden, attn, batch.src_map)
    trained = generator(hidden, attn, batch.src_map)
    assert trained.requires_grad and not inferred.requires_grad
    assert torch.equal(inferred, trained.detach())


def test_the_generator_gives_the_same_log_probs_in_place_without_gradients():
    """Inference writes log_softmax over the logits: the values of the autograd path, bit for
    bit."""
    torch.manual_seed(4)
    generator = NMTGenerator(8, 300)
    hidden = torch.randn(7, 8) * 4
    with torch.no_grad():
        inferred = generator(hidden)
    trained = generator(hidden)
    assert trained.requires_grad and not inferred.requires_grad
    assert torch.equal(inferred, trained.detach())
    torch.testing.assert_close(inferred.exp().sum(1), torch.ones(7))


def test_copy_loss_cases_by_hand():
    probs, log_probs = hand_distribution()
    # in vocab and source; unknown but copyable; not in source; padding
    target = torch.tensor([4, 0, 5, 1])
    align = torch.tensor([2, 2, 0, 0])
    _, nll = CopyGeneratorLoss(V)(log_probs, align, target)
    expected = [-math.log(0.2 + 0.5), -math.log(0.5), -math.log(0.1), 0.0]
    torch.testing.assert_close(nll, torch.tensor(expected, dtype=torch.float64))
    _, forced = CopyGeneratorLoss(V, force_copy=True)(log_probs, align, target)
    torch.testing.assert_close(forced[0], torch.tensor(-math.log(0.5), dtype=torch.float64))


def test_label_smoothing_is_applied_to_the_copy_loss():
    probs, log_probs = hand_distribution()
    target = torch.tensor([4, 0, 5, 1])
    align = torch.tensor([2, 2, 0, 0])
    loss, nll = CopyGeneratorLoss(V, label_smoothing=0.1)(log_probs, align, target)
    fixed = [0, 2, 3, 4, 5]  # the fixed vocabulary but padding (probability 0 at <blank>)
    spread = -sum(math.log(probs[0, j].item()) if probs[0, j] > 0 else 0 for j in fixed) / (V - 1)
    torch.testing.assert_close(loss[:3], 0.9 * nll[:3] + 0.1 * spread)
    assert loss[3] == 0
    nmt_loss, nmt_nll = NMTCriterion(label_smoothing=0.1)(log_probs[:, :V], target)
    torch.testing.assert_close(nmt_loss[:3], 0.9 * nmt_nll[:3] + 0.1 * spread)


def test_collapse_moves_copy_mass_onto_vocabulary_words_and_keeps_the_total():
    probs, _ = hand_distribution()
    probs[:, V + 1] = 0.0
    probs[:, V + 2] = 0.3
    probs[:, V] = 0.2
    ids = torch.tensor([[0, 0, 4]])  # example word 2 is "a" (id 4); words 0, 1 are specials
    collapsed = collapse_copy_scores(probs, ids, V)
    assert collapsed[0, 4].item() == pytest.approx(0.2 + 0.3)
    assert collapsed[0, V + 2].item() == 0 and collapsed[0, V].item() == pytest.approx(0.2)
    torch.testing.assert_close(collapsed.sum(1), probs.sum(1))


def test_collapse_over_a_real_batch_keeps_totals_per_row():
    model, opt = make_model("-copy_attn")
    batch = make_batch(random_pairs(4, seed=3))
    dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
    rows = dec_out.size(0) * dec_out.size(1)
    probs = model.generator(
        dec_out.reshape(rows, -1), attns["copy"].reshape(rows, -1), batch.src_map
    ).exp()
    collapsed = collapse_copy_scores(
        probs.view(dec_out.size(0), 4, -1), batch.src_ex_tgt_ids, len(TGT_VOCAB)
    )
    torch.testing.assert_close(collapsed.sum(-1), probs.view(dec_out.size(0), 4, -1).sum(-1))
    in_vocab = batch.src_ex_tgt_ids != 0
    assert (collapsed[..., len(TGT_VOCAB) :][in_vocab.expand(dec_out.size(0), -1, -1)] == 0).all()


def test_collapsed_argmax_equals_the_argmax_of_the_collapsed_matrix():
    draw = torch.Generator().manual_seed(0)
    vocab_size = 50
    n_words = 6
    rows = 4000
    log_probs = torch.log_softmax(3 * torch.randn(rows, vocab_size + n_words, generator=draw), 1)
    # an example's words differ
    ids = torch.rand(rows, vocab_size, generator=draw).argsort(1)[:, :n_words]
    ids[torch.rand(rows, n_words, generator=draw) < 0.4] = 0  # words not in the vocabulary
    expected = collapse_copy_scores(log_probs.exp(), ids, vocab_size).argmax(1)
    got = collapsed_argmax(log_probs, ids, vocab_size)
    assert torch.equal(got, expected)
    assert (expected >= vocab_size).any() and (
        expected < vocab_size
    ).any()  # both kinds of winner occur
    boosted = torch.zeros_like(expected, dtype=torch.bool)
    for j in range(n_words):
        boosted |= (
            (expected == ids[:, j])
            & (ids[:, j] != 0)
            & (log_probs[:, :vocab_size].argmax(1) != expected)
        )
    assert boosted.any()  # and copy mass changed the winner among vocabulary words


def test_collapse_in_log_space_equals_the_log_of_the_collapsed_probabilities():
    draw = torch.Generator().manual_seed(1)
    vocab_size = 40
    n_words = 5
    rows = 300
    log_probs = torch.log_softmax(
        2 * torch.randn(rows, vocab_size + n_words, generator=draw, dtype=torch.float64), 1
    )
    log_probs[:, 1] = float("-inf")  # the padding word, as the generator gives it
    ids = torch.rand(rows, vocab_size, generator=draw).argsort(1)[:, :n_words]
    ids[torch.rand(rows, n_words, generator=draw) < 0.4] = 0
    expected = collapse_copy_scores(log_probs.exp(), ids, vocab_size).log()
    got = collapse_copy_log_probs(log_probs.clone(), ids, vocab_size)
    assert torch.equal(torch.isinf(got), torch.isinf(expected))
    torch.testing.assert_close(got[~torch.isinf(got)], expected[~torch.isinf(expected)])


def test_an_unknown_target_word_found_in_the_source_gets_a_finite_loss_and_gradient():
    pairs = [(["oov1", "s1", "oov2"], ["oov2", "t0", "oov1"]), (["s2"], ["oov9"])]
    model, opt = make_model("-copy_attn", "-copy_attn_force")
    batch = make_batch(pairs)
    assert batch.alignment[1:4, 0].tolist() == [4, 0, 2] and (batch.tgt[1:4, 0] != 0).tolist() == [
        False,
        True,
        False,
    ]
    dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
    loss, stats = build_loss_compute(model, TGT_VOCAB, opt)(batch, dec_out, attns)
    loss.backward()
    assert math.isfinite(loss.item()) and stats.n_words == 6
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("shard", [0, 2])
def test_a_copy_model_under_float16_autocast_has_finite_gradients_near_float32s(shard):
    """fp16 training (CUDA's ``-model_dtype fp16``; CPU autocast has the same float16 arithmetic):
    copy entries of probability 0 (words of other examples, padding) had ``log(0)``, whose infinite
    gradient times 0 made every gradient NaN, so every step overflowed. The copy branch now runs in
    float32: the loss is float32 and the gradients are float32's to float16's precision."""
    model, opt = make_model("-copy_attn")
    model = model.float()
    batch = make_batch(random_pairs(16, seed=5))
    batch.src_map = batch.src_map.float()
    loss_compute = build_loss_compute(model, TGT_VOCAB, opt)
    results = []
    for dtype in (torch.float32, torch.float16):
        model.zero_grad()
        with torch.autocast("cpu", dtype=dtype, enabled=dtype == torch.float16):
            dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
            loss, stats = loss_compute(batch, dec_out, attns, normalization=16.0, shard_size=shard)
        if loss is not None:
            assert loss.dtype == torch.float32
            loss.backward()
        results.append((stats.loss, {name: p.grad.clone() for name, p in model.named_parameters()}))
    (loss32, grads32), (loss16, grads16) = results
    assert all(torch.isfinite(g).all() for g in grads16.values())
    assert loss16 == pytest.approx(loss32, rel=2e-2)
    for name, grad in grads16.items():
        scale = max(float(grads32[name].abs().max()), 1e-3)
        assert float((grad - grads32[name]).abs().max()) <= 0.05 * scale, name
