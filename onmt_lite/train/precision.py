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
division by it). bf16 has float32's range and needs no scaling (``scale`` stays 1).
"""

import contextlib

import torch

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
INITIAL_SCALE = 2.0**16
GROWTH_INTERVAL = 2000
MIN_SCALE = 1.0


class Precision:
    """The autocast context and the loss scale of a training run on ``device``."""

    def __init__(self, name="fp32", device="cpu"):
        self.name, self.dtype, self.device_type = name, DTYPES[name], torch.device(device).type
        self.scale = INITIAL_SCALE if name == "fp16" else 1.0
        self.good_steps = 0

    @property
    def scaled(self):
        return self.name == "fp16"

    @property
    def can_skip_overflow(self):
        """Whether a non-finite step can be an overflow to skip: fp16 with a scale still above
        ``MIN_SCALE``."""
        return self.scaled and self.scale > MIN_SCALE

    def autocast(self):
        """The context to run forward passes and losses in."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def update(self, overflow):
        """After a step: halve the scale on an overflow, double it after GROWTH_INTERVAL good
        steps."""
        if not self.scaled:
            return
        if overflow:
            self.scale = max(self.scale / 2, MIN_SCALE)
            self.good_steps = 0
            return
        self.good_steps += 1
        if self.good_steps == GROWTH_INTERVAL:
            self.scale = self.scale * 2
            self.good_steps = 0

    def state_dict(self):
        return {"scale": self.scale, "good_steps": self.good_steps}

    def load_state_dict(self, state):
        if self.scaled and state:
            self.scale = state["scale"]
            self.good_steps = state["good_steps"]
