"""-loss_class: loading a researcher's LossComputeBase subclass; the example in examples/ and
docs/research.md (focal loss) against independent references, sharded and unsharded."""
import os
import re

import pytest
import torch

from onmt_lite.loss import NMTCriterion, NMTLossCompute, build_loss_compute, load_loss_class
from onmt_lite.utils.errors import UserError
from tests.helpers import REPO, TINY_MODEL, preprocess_in_process, train_in_process
from tests.model_helpers import TGT_VOCAB, assert_grads_equal, grads, make_batch, make_model, random_pairs

EXAMPLE = os.path.join(REPO, "examples", "focal_loss.py")
SPEC = f"{EXAMPLE}:FocalLossCompute"


def loss_and_grads(loss_compute, model, batch, shard_size):
    model.zero_grad()
    dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
    loss, stats = loss_compute(batch, dec_out, attns, normalization=4, shard_size=shard_size)
    if loss is not None:
        loss.backward()
    return stats, grads(model)


def focal(model, gamma, opt):
    loss_compute = load_loss_class(SPEC).from_options(model, TGT_VOCAB, opt)
    loss_compute.gamma = gamma
    return loss_compute


@pytest.mark.parametrize("shard_size", [1, 3])
def test_the_example_focal_loss_gives_the_same_gradients_sharded_as_unsharded(shard_size):
    model, opt = make_model(seed=2)
    batch = make_batch(random_pairs(5, seed=3))
    stats_full, grads_full = loss_and_grads(focal(model, 2.0, opt), model, batch, 0)
    stats_sharded, grads_sharded = loss_and_grads(focal(model, 2.0, opt), model, batch, shard_size)
    assert stats_full == stats_sharded
    assert_grads_equal(grads_full, grads_sharded, rtol=1e-9)


def test_focal_loss_by_hand_and_with_gamma_0_it_is_the_nll():
    model, opt = make_model(seed=4)
    batch = make_batch(random_pairs(3, seed=5))
    dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
    nll, nll_stats = NMTLossCompute(NMTCriterion(0.0), model.generator)(batch, dec_out, attns)
    loss0, stats0 = focal(model, 0.0, opt)(batch, dec_out, attns)
    torch.testing.assert_close(loss0, nll)
    assert stats0 == nll_stats
    log_probs = model.generator(dec_out.reshape(-1, dec_out.size(2)))
    gold = batch.tgt[1:].reshape(-1)
    p = log_probs.gather(1, gold[:, None]).squeeze(1).exp()[gold != 1]
    loss2, _ = focal(model, 2.0, opt)(batch, dec_out, attns)
    torch.testing.assert_close(loss2, -((1 - p) ** 2 * p.log()).sum())


def test_the_example_trains_one_step_from_the_command_line_options(tmp_path):
    data = preprocess_in_process(str(tmp_path))
    weights = {}
    for name, extra in (("focal", ["-loss_class", SPEC]), ("nll", [])):
        _, lines = train_in_process(data, str(tmp_path / name), *TINY_MODEL, "-train_steps", 1, "-seed", 3,
                                    "-report_every", 1, "-valid_steps", 1, *extra)
        assert any("Step 1/1" in line for line in lines) and any("Validation at step 1" in line for line in lines)
        weights[name] = torch.load(tmp_path / f"{name}_step_1.pt", weights_only=True)["generator"]["0.weight"]
    assert not torch.equal(weights["focal"], weights["nll"])  # the plug-in, not the default, was trained


def test_the_walkthrough_shows_exactly_the_example_file():
    with open(os.path.join(REPO, "docs", "research.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    with open(EXAMPLE, encoding="utf-8") as f:
        assert f.read() in blocks
    assert len(open(EXAMPLE).read().splitlines()) < 40


@pytest.mark.parametrize("spec,message", [
    ("focal", "expected MODULE:CLASS or FILE.py:CLASS"),
    ("missing/file.py:Loss", "missing/file.py not found"),
    ("no_such_module_xyz:Loss", "cannot import no_such_module_xyz"),
    ("onmt_lite.loss:shards", "has no LossComputeBase subclass named shards"),
    (f"{EXAMPLE}:Nothing", "has no LossComputeBase subclass named Nothing"),
])
def test_bad_loss_class_specs_are_refused(spec, message):
    with pytest.raises(UserError, match=re.escape(message)):
        load_loss_class(spec)


def test_a_copy_model_needs_a_copy_aware_loss_class():
    model, opt = make_model("-copy_attn", "-loss_class", SPEC)
    with pytest.raises(UserError, match="copy-attention model needs a loss built on CopyGeneratorLossCompute"):
        build_loss_compute(model, TGT_VOCAB, opt)
    model, opt = make_model("-copy_attn", "-loss_class", "onmt_lite.loss:CopyGeneratorLossCompute")
    assert type(build_loss_compute(model, TGT_VOCAB, opt)).__name__ == "CopyGeneratorLossCompute"
