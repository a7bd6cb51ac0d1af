"""The finiteness check of training steps, read from the device every few steps instead of each.

Reading a step's loss and gradient norm before its update makes the host wait for the device at
every step: on a GPU it then builds and launches the next step while the device idles. With an
optimizer that can skip an update on the device (a fused Adam or AdamW: its ``found_inf``), the
check stays there: each step adds its loss and gradient norm to the pending ones and sets a flag,
which stays set, when either is NaN or infinite; the optimizer skips every update from that step
on. ``DeferredChecks.read`` brings the pending values to the host in one read and raises
``NonFiniteError`` for the first step that was not finite, saying how many steps after it were
skipped too: the weights, moments and step counts are those before it. The trainer reads them where
the host needs the truth: a report, a validation, a checkpoint, the end of training, and after
``MOST_UNREAD`` steps at the latest.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from onmt_lite.train.optim import NonFiniteError

MOST_UNREAD = 100  # steps: a GPU waits once in as many, and a diverged run stops soon enough


class DeferredChecks:
    """The unread steps' losses and gradient norms, and the flag that skips updates on the device.

    Args:
        device: where the parameters (and the optimizer's ``found_inf``) are.
    """

    def __init__(self, device: torch.device):
        # 1.0 from the first step that was not finite on: what a fused optimizer's found_inf reads
        self.skip = torch.zeros((), dtype=torch.float32, device=device)
        self.pending: list[tuple[Tensor, Tensor]] = []  # (loss, gradient norm) of unread steps

    def add(self, loss: Tensor, total_norm: Tensor) -> Tensor:
        """Record a step's summed loss and gradient norm (0-dim tensors, not read); returns
        ``skip``, set if this step or an earlier unread one was not finite."""
        loss = loss.detach()
        total_norm = total_norm.detach()
        self.pending.append((loss, total_norm))
        both = loss + total_norm  # finite where both are (float64: no sum of two overflows)
        finite = (both - both).eq(0)  # x - x is NaN for x NaN or infinite
        self.skip = torch.where(finite, self.skip, 1.0)
        return self.skip

    @property
    def full(self) -> bool:
        """Whether ``MOST_UNREAD`` steps wait for ``read``."""
        return len(self.pending) >= MOST_UNREAD

    def read(self) -> None:
        """Read the pending steps (one host read): ``NonFiniteError`` for the first that was not
        finite (``later``: the steps after it, all skipped)."""
        if not self.pending:
            return
        rows = [torch.stack([loss.double(), norm.double()]) for loss, norm in self.pending]
        values = torch.stack(rows).tolist()  # [steps x 2] float64, one read
        self.pending = []
        for index, (loss, norm) in enumerate(values):
            later = len(values) - 1 - index
            if not math.isfinite(loss):
                raise NonFiniteError(f"the loss is {loss}", later)
            if not math.isfinite(norm):
                raise NonFiniteError(f"the gradient norm is {norm}", later)
