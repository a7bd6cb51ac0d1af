"""-optim sparseadam: the lookup tables' rows of a step's tokens move by lazy Adam's formulas, the
other rows (weights and moments) stay; the rest is Adam with 1.x's epsilon; norms and clipping see
the sparse gradients' row sums; refusals."""

import math

import pytest
import torch

from onmt_lite.models.embeddings import Embeddings, FeatureSpec
from onmt_lite.train.graphed import graphing_problem
from onmt_lite.train.optim import Optimizer
from onmt_lite.train.sparse_adam import check_options, lookup_tables
from onmt_lite.utils.errors import UserError
from tests.model_helpers import TRANSFORMER, make_batch, make_model, random_pairs
from tests.unit.test_trainer import optim_options

BETAS = (0.9, 0.98)


def loss_of(model, batch):
    dec_out, _ = model(batch.src, batch.tgt, batch.src_lengths)
    target = batch.tgt[1:].reshape(-1)
    log_probs = model.generator(dec_out.reshape(target.numel(), -1))
    return -log_probs.gather(1, target.unsqueeze(1)).sum()


def used_rows(ids, pad=1):
    return sorted(set(ids.flatten().tolist()) - {pad})


class ReferenceLazyAdam:
    """Adam, written out row by row: a lookup table's rows of the step's tokens move (the step
    count is the table's), the others keep weights and moments; ``eps`` is added to the
    uncorrected root of the second moments, as torch's SparseAdam (and so 1.x) does."""

    def __init__(self, weight):
        self.m = torch.zeros_like(weight)
        self.v = torch.zeros_like(weight)
        self.t = 0

    def step(self, weight, grad, rows, lr):
        self.t += 1
        b1, b2 = BETAS
        step_size = lr * math.sqrt(1 - b2**self.t) / (1 - b1**self.t)
        for r in rows:
            self.m[r] = b1 * self.m[r] + (1 - b1) * grad[r]
            self.v[r] = b2 * self.v[r] + (1 - b2) * grad[r] * grad[r]
            weight[r] -= step_size * self.m[r] / (self.v[r].sqrt() + 1e-8)


def test_a_step_moves_the_rows_of_its_tokens_by_lazy_adam_and_the_rest_by_adam():
    model, _ = make_model()
    reference_model, _ = make_model()  # the same weights, dense gradients
    lr = 0.05
    options = optim_options(
        optim="sparseadam", learning_rate=lr, adam_beta2=BETAS[1], max_grad_norm=5.0
    )
    optim = Optimizer(model, options, 8)
    lookups = lookup_tables(model)
    tables = {name: table for name, table in model.named_modules() if table in lookups}
    assert sorted(tables) == ["decoder.embeddings.lut", "encoder.embeddings.lut"]
    assert all(table.sparse for table in tables.values())
    named = dict(reference_model.named_parameters())
    lazy = {name: ReferenceLazyAdam(named[f"{name}.weight"]) for name in tables}
    dense = [p for name, p in named.items() if name.removesuffix(".weight") not in tables]
    adam = torch.optim.Adam(dense, lr=lr, betas=BETAS, eps=1e-8, foreach=False)
    # step 2's batch leaves out source words of step 1's: their rows must not move
    batches = [make_batch(random_pairs(3, seed=1)), make_batch([(["s0"], ["t1", "t2"])])]
    batches.append(make_batch(random_pairs(2, seed=5)))
    clipped = []
    for batch in batches:
        optim.zero_grad()
        loss_of(model, batch).backward()
        assert model.encoder.embeddings.lut.weight.grad.is_sparse
        norm = optim.step()
        reference_model.zero_grad()
        loss_of(reference_model, batch).backward()
        reference_norm = torch.nn.utils.clip_grad_norm_(reference_model.parameters(), 5.0)
        clipped.append(float(reference_norm) > 5.0)
        assert norm == pytest.approx(float(reference_norm), rel=1e-12)
        adam.step()
        with torch.no_grad():
            # the decoder reads the target but its last token
            for name, ids in (("encoder.embeddings.lut", batch.src), ("decoder.embeddings.lut",
                              batch.tgt[:-1])):  # fmt: skip
                weight = named[f"{name}.weight"]
                lazy[name].step(weight, weight.grad, used_rows(ids), lr)
    assert any(clipped) and not all(clipped)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param, named[name], rtol=1e-9, atol=1e-12, msg=name)
    source_rows = used_rows(batches[0].src)
    assert set(source_rows) - set(used_rows(batches[1].src))  # rows idle at step 2 ...
    moved = model.encoder.embeddings.lut.weight
    start, _ = make_model()
    unused = sorted(set(range(moved.shape[0])) - set(source_rows) - set(used_rows(batches[2].src)))
    assert unused and torch.equal(moved[unused], start.encoder.embeddings.lut.weight[unused])


def test_clipping_scales_the_sparse_gradients_by_their_row_sums_norm():
    model, _ = make_model()
    optim = Optimizer(model, optim_options(optim="sparseadam", max_grad_norm=0.01), 8)
    batch = make_batch(random_pairs(4, seed=2))
    loss_of(model, batch).backward()
    dense = {n: p.grad.to_dense() for n, p in model.named_parameters()}
    expected = torch.linalg.vector_norm(torch.stack([g.norm() for g in dense.values()]))
    table = model.encoder.embeddings.lut.weight
    assert not table.grad.is_coalesced()  # one row per token: the norm needs each row's sum
    norm = optim.gradient_norm()
    assert float(norm) == pytest.approx(float(expected), rel=1e-12)
    torch.nn.utils.clip_grads_with_norm_(optim.params, 0.01, norm)
    torch.testing.assert_close(table.grad.to_dense(), dense["encoder.embeddings.lut.weight"]
                               * (0.01 / (float(expected) + 1e-6)))  # fmt: skip


def test_lookup_tables_of_source_features_get_sparse_gradients_too():
    embeddings = Embeddings(10, 4, features=FeatureSpec((7, 12), "concat", -1, 0.7))
    model = torch.nn.Sequential(embeddings)
    optim = Optimizer(model, optim_options(optim="sparseadam"), 8)
    assert lookup_tables(model) == [embeddings.lut, *embeddings.feat_luts]
    assert [type(o).__name__ for o in optim.optimizers] == ["SparseAdam"]
    words = torch.tensor([[4, 5], [6, 1]])  # [len 2 x batch 2]
    features = torch.tensor([[[4, 5], [5, 6]], [[6, 4], [1, 1]]])  # [len x batch x 2 features]
    embeddings(words, feats=features).sum().backward()
    assert all(table.weight.grad.is_sparse for table in lookup_tables(model))


def test_sparseadam_is_refused_where_a_gradient_would_not_be_sparse_or_summed():
    shared = optim_options(optim="sparseadam", share_decoder_embeddings=True, world_size=1)
    with pytest.raises(UserError, match="-share_decoder_embeddings gives the decoder's"):
        check_options(shared)
    processes = optim_options(optim="sparseadam", share_decoder_embeddings=False, world_size=2)
    with pytest.raises(UserError, match="trains in one process"):
        check_options(processes)
    check_options(optim_options(optim="adam", world_size=2, share_decoder_embeddings=True))
    model, opt = make_model(*TRANSFORMER)
    opt.optim = "sparseadam"
    assert graphing_problem(model, opt) == "sparse embedding gradients (-optim sparseadam)"


def test_another_optimizer_gives_the_tables_dense_gradients_again():
    """The optimizer owns the form of the lookup tables' gradients: a model that trained with
    sparseadam and goes on with Adam (fine-tuning in one process) gets dense ones."""
    model, _ = make_model()
    Optimizer(model, optim_options(optim="sparseadam"), 8)
    assert all(table.sparse for table in lookup_tables(model))
    adam = Optimizer(model, optim_options(optim="adam"), 8)
    assert not any(table.sparse for table in lookup_tables(model))
    loss_of(model, make_batch(random_pairs(2, seed=3))).backward()
    adam.step()
    assert not model.encoder.embeddings.lut.weight.grad.is_sparse
