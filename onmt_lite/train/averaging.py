"""An exponential moving average of a model's parameters (``-average_decay``, ``-average_every``).

OpenNMT-py 1.x's rule: after the optimizer step of step number ``step`` (from 1), when
``(step - 1)`` is a multiple of ``every``, the average is updated. The first update copies the
parameters (as float32, whatever the precision of the forward pass); each later one mixes the
parameters in with the weight ``w = max(decay, 1 - (step + 1) / (step + 10))``:
``average = (1 - w) * average + w * parameter``. ``w`` is large early on, so the average follows the
fast-changing first weights, and settles at ``decay``.

Validation and checkpoints use the average (``averaged``); training goes on with the raw parameters.
The steps are counted globally (not from the start of each run, as 1.x did), so a resumed run
averages at the steps the uninterrupted run does. With several processes the parameters are the same
in every process after each step, so only the process that validates and saves keeps an average.
"""

import contextlib

import torch


def mixing_weight(step, decay):
    """The weight of the parameters at update step ``step``:
    ``max(decay, 1 - (step + 1) / (step + 10))``."""
    return max(decay, 1 - (step + 1) / (step + 10))


class MovingAverage:
    """The moving average of ``model``'s parameters (its ``named_parameters``, the generator's
    included).

    ``average`` is None until the first update (or ``start``), then one float32 tensor per
    parameter, on the parameter's device.
    """

    def __init__(self, model, decay, every=1):
        self.params = [p for _, p in model.named_parameters()]
        self.decay = decay
        self.every = every
        self.average = None

    def is_update_step(self, step):
        """Whether step number ``step`` (from 1) updates the average."""
        return (step - 1) % self.every == 0

    @torch.no_grad()
    def start(self):
        """Make the average a float32 copy of the parameters as they are now."""
        self.average = [p.detach().float().clone() for p in self.params]

    @torch.no_grad()
    def update(self, step):
        """After the optimizer step of step number ``step``: update the average if it is an update
        step."""
        if not self.is_update_step(step):
            return
        if self.average is None:
            self.start()
            return
        weight = mixing_weight(step, self.decay)
        for average, param in zip(self.average, self.params):
            average.mul_(1 - weight).add_(param.detach().float() * weight)

    def state_dict(self, model):
        """``model.state_dict()`` with each parameter replaced by its average (in the parameter's
        dtype): the weights that ``applied`` puts into the model, without touching it."""
        averages = {id(param): average for param, average in zip(self.params, self.average or [])}
        return {
            name: averages[id(value)].to(value.dtype) if id(value) in averages else value.detach()
            for name, value in model.state_dict(keep_vars=True).items()
        }

    @contextlib.contextmanager
    def applied(self):
        """Inside the block the parameters hold the average (cast to their dtype); after it, the raw
        parameters again, bit for bit. Without an average yet, the parameters stay as they are."""
        if self.average is None:
            yield
            return
        with torch.no_grad():
            raw = [p.detach().clone() for p in self.params]
            for param, average in zip(self.params, self.average):
                param.copy_(average)
        try:
            yield
        finally:
            with torch.no_grad():
                for param, saved in zip(self.params, raw):
                    param.copy_(saved)


def averaged(average):
    """A context in which the model holds ``average``'s weights (a MovingAverage), or, with None,
    its own."""
    return average.applied() if average is not None else contextlib.nullcontext()
