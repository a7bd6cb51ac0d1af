"""Focal loss (Lin et al. 2017) for onmt_lite: -(1 - p)^gamma * log p of each target word.

    onmt_lite_train -data data/demo -save_model runs/focal \
        -loss_class examples/focal_loss.py:FocalLossCompute -focal_gamma 2
"""

from onmt_lite.loss import LossComputeBase
from onmt_lite.opts import add, float_in


class FocalLossCompute(LossComputeBase):
    """Down-weights the words the model already predicts well; ``-focal_gamma 0`` is the NLL."""

    @classmethod
    def add_options(cls, parser):
        group = parser.add_argument_group("Focal loss (examples/focal_loss.py)")
        gamma_help = "gamma: how much less the words the model gets right count (0: the NLL)"
        add(group, "focal_gamma", type=float_in(0, 100), default=2.0, help=gamma_help)

    @classmethod
    def from_options(cls, model, tgt_vocab, opt, train=True):
        compute = super().from_options(model, tgt_vocab, opt, train)
        compute.gamma = opt.focal_gamma
        return compute

    def _make_shard_state(self, batch, output, range_, attns=None):
        # Every tensor here is [positions x batch (x ...)]; onmt_lite cuts them into shards.
        return {"output": output, "target": self._target(batch, range_)}

    def _compute_loss(self, batch, output, target):
        # output: [shard_len x batch x hidden]; target: [shard_len x batch] word ids.
        log_probs = self.generator(output.reshape(-1, output.size(2)))  # [N x vocab]
        gold = target.reshape(-1)  # [N]
        gold_log_prob = log_probs.gather(1, gold.unsqueeze(1)).squeeze(1)  # [N]
        not_pad = gold != self.padding_idx
        weight = (1 - gold_log_prob.exp()) ** self.gamma
        loss = -(weight * gold_log_prob)[not_pad].sum()
        nll = -gold_log_prob[not_pad].sum().detach()  # reported as xent/ppl
        return loss, self._stats(nll, log_probs.detach().argmax(1), gold)
