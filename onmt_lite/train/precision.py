"""Mixed precision for training (``-model_dtype fp32|bf16|fp16``).

The weights, their gradients and the optimizer stay float32; the forward pass and the loss run under
``torch.autocast`` in bfloat16 or float16 (matrix products and recurrent layers in the low
precision, softmaxes and losses in float32, as autocast decides). Backward passes run with autocast
off. One
exception: with bf16, whole-sequence ``nn.LSTM``/``nn.GRU`` layers run in bfloat16 only where the
device has bfloat16 recurrent kernels, in float32 elsewhere (``models/recurrent.py``): cuDNN's
autocast would run them in float16 without a loss scale. The copy generator's copy branch runs in
float32 (``models/copy_generator.py``): float16 rounds its small probabilities to 0.

float16 gradients can overflow or vanish, so fp16 scales the loss by ``scale`` (dynamic loss
scaling): the trainer divides its normalisation by the scale, which multiplies every shard's loss by
it, so the sharded backward needs no change; the optimizer divides the gradients by it again. A step
whose scaled gradients overflow is skipped and halves the scale; ``GROWTH_INTERVAL`` good steps in a
row double it. The scale never goes below ``MIN_SCALE``: a step that is not finite even there is no
overflow but a model gone wrong, and stops training as in float32 (halving on would reach 0 and a
division by it). bf16 has float32's range and needs no scaling (``scale`` is None).

The scale and the count of good steps live on the device and change there after each step
(``update``), so that a step need not wait for the host to learn whether it overflowed: with a fused
Adam or AdamW the trainer reads overflows with the deferred checks (``step_checks.py``). A skipped
step counts in the learning-rate schedule (as in OpenNMT-py), not in Adam's moments.
"""

import contextlib

import torch
from torch import Tensor

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
INITIAL_SCALE = 2.0**16
GROWTH_INTERVAL = 2000
MIN_SCALE = 1.0


def overflow_at(scale: float | Tensor) -> bool | Tensor:
    """Whether a step not finite at the loss scale ``scale`` (a float, or a 0-dim tensor: the
    answer then a bool tensor) is an overflow to skip: above ``MIN_SCALE``. At it training stops.
    """
    return scale > MIN_SCALE


class Precision:
    """The autocast context and the fp16 loss scale of a training run on ``device``."""

    def __init__(self, name: str = "fp32", device="cpu"):
        self.name = name
        self.dtype = DTYPES[name]
        self.device = torch.device(device)
        self.device_type = self.device.type
        self.scale: Tensor | None = None  # fp16: 0-dim float32 on the device
        self.good_steps: Tensor | None = None  # fp16: finite steps in a row, 0-dim int64
        if self.scaled:
            self.load_state_dict({"scale": INITIAL_SCALE, "good_steps": 0})

    @property
    def scaled(self) -> bool:
        return self.name == "fp16"

    def normalization(self, norm: float) -> float | Tensor:
        """The loss's normaliser: ``norm``, divided by the scale with fp16 (a 0-dim tensor)."""
        return norm / self.scale if self.scaled else norm

    def autocast(self):
        """The context to run forward passes and losses in."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def update(self, finite: Tensor | bool) -> None:
        """After an fp16 step, ``finite`` whether its loss and gradients were (a 0-dim bool tensor
        on the device, or a bool): not finite halves the scale (down to ``MIN_SCALE``),
        ``GROWTH_INTERVAL`` finite steps in a row double it. On the device: nothing is read."""
        if not self.scaled:
            return
        if not isinstance(finite, Tensor):
            finite = torch.full((), finite, dtype=torch.bool, device=self.device)
        grown = self.good_steps + 1
        doubling = grown == GROWTH_INTERVAL
        kept = torch.where(doubling, self.scale * 2, self.scale)
        self.scale = torch.where(finite, kept, (self.scale / 2).clamp(min=MIN_SCALE))
        self.good_steps = torch.where(finite & ~doubling, grown, 0)

    def state_dict(self) -> dict:
        """Plain numbers (read from the device)."""
        if not self.scaled:
            return {"scale": 1.0, "good_steps": 0}
        return {"scale": float(self.scale), "good_steps": int(self.good_steps)}

    def load_state_dict(self, state: dict | None) -> None:
        if self.scaled and state:
            self.scale = torch.tensor(state["scale"], dtype=torch.float32, device=self.device)
            self.good_steps = torch.tensor(state["good_steps"], device=self.device)
