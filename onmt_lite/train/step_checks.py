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

With fp16 a step that is not finite is an overflow (``precision.py``): the optimizer skips that step
alone, the loss scale is halved on the device, and the read returns the overflows for the log. Only
a step not finite at the lowest scale stops training, as above.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from onmt_lite.train.optim import NonFiniteError
from onmt_lite.train.precision import overflow_at

MOST_UNREAD = 100  # steps: a GPU waits once in as many, and a diverged run stops soon enough


class DeferredChecks:
    """The unread steps' losses and gradient norms, and the flag that skips updates on the device.

    Args:
        device: where the parameters (and the optimizer's ``found_inf``) are.
    """

    def __init__(self, device: torch.device):
        # 1.0 from the first step that stops training on: every update from it is skipped
        self.stopped = torch.zeros((), dtype=torch.float32, device=device)
        # (loss, gradient norm, fp16's loss scale or None) of the unread steps
        self.pending: list[tuple[Tensor, Tensor, Tensor | None]] = []

    def add(
        self, loss: Tensor, total_norm: Tensor, scale: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Record a step's summed loss and gradient norm (0-dim tensors, not read), and with fp16
        the loss scale it ran at; returns ``(skip, finite)``: a 0-dim float32 flag, 1 to skip this
        step's update (what a fused optimizer reads as ``found_inf``), and whether the step was
        finite (0-dim bool)."""
        loss = loss.detach()
        total_norm = total_norm.detach()
        self.pending.append((loss, total_norm, scale))
        both = loss + total_norm  # finite where both are (float64: no sum of two overflows)
        finite = (both - both).eq(0)  # x - x is NaN for x NaN or infinite
        if scale is None:  # a step not finite stops training
            self.stopped = torch.where(finite, self.stopped, 1.0)
            return self.stopped, finite
        # fp16: an overflow skips its step alone; at the lowest scale it stops training
        self.stopped = torch.where(finite | overflow_at(scale), self.stopped, 1.0)
        return torch.where(finite, self.stopped, 1.0), finite

    @property
    def full(self) -> bool:
        """Whether ``MOST_UNREAD`` steps wait for ``read``."""
        return len(self.pending) >= MOST_UNREAD

    def read(self) -> list[float]:
        """Read the pending steps (one host read): ``NonFiniteError`` for the first that stopped
        training (``later``: the steps after it, all skipped); else the loss scale of each fp16
        step that overflowed, in order."""
        if not self.pending:
            return []
        pending = self.pending
        self.pending = []
        rows = [torch.stack([t.double() for t in entry if t is not None]) for entry in pending]
        values = iter(torch.cat(rows).tolist())  # one read
        overflows = []
        for index, (_, _, scale_tensor) in enumerate(pending):
            loss = next(values)
            norm = next(values)
            scale = None if scale_tensor is None else next(values)
            if math.isfinite(loss) and math.isfinite(norm):
                continue
            if scale is not None and overflow_at(scale):
                overflows.append(scale)
                continue
            later = len(pending) - 1 - index
            if not math.isfinite(loss):
                raise NonFiniteError(f"the loss is {loss}", later)
            raise NonFiniteError(f"the gradient norm is {norm}", later)
        return overflows
