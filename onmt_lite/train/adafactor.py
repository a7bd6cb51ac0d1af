"""Adafactor (Shazeer and Stern, 2018) as OpenNMT-py 1.x trained with it (``-optim adafactor``).

Adafactor keeps a matrix's second moments factored: a column of row sums and a row of column sums
of the squared gradients instead of one value per weight, so that the optimizer holds about one
copy of the weights (the momentum) where Adam holds two. The variant is 1.x's, for its results:

- the decay rates grow with the step ``t``: ``beta_t = beta * (1 - beta**(t-1)) / (1 - beta**t)``,
  0 at step 1, for the momentum (``beta1`` 0.9) and the second moments (``beta2`` 0.999);
- the momentum is divided by ``1 - beta1_t**t`` before use (1.x's correction, with the step's rate);
- ``eps1`` (1e-30) is added to each squared gradient; a tensor of more than two dimensions is
  factored as ``[size(0) x the rest]``; vectors keep one second moment per value;
- the update ``u = m / sqrt(v)`` is divided by ``max(1, rms(u) / clip_threshold)`` (1);
- the step is relative to the weights' size: the learning rate times ``max(eps2, rms(w))`` (eps2
  1e-3), ``w`` before the update.

Unlike 1.x, nothing is read on the host: its two norms per tensor and step stay on the device.
"""

import torch
from torch import Tensor


def growing_decay(beta: float, step: int) -> float:
    """1.x's decay rate at ``step`` (from 1): 0 at step 1, towards ``beta`` later."""
    return beta * (1 - beta ** (step - 1)) / (1 - beta**step)


def root_mean_square(values: Tensor) -> Tensor:
    """A 0-dim tensor: ``sqrt(mean(values ** 2))``."""
    return values.pow(2).mean().sqrt()


def factored_shape(param: Tensor) -> tuple[int, int] | None:
    """``(rows, columns)`` that the second moments of ``param`` are factored over; None for a
    vector (and a scalar), whose second moments are not factored."""
    if param.dim() < 2:
        return None
    return param.shape[0], param[0].numel()


class Adafactor(torch.optim.Optimizer):
    """1.x's Adafactor (see the module's docstring); ``lr`` is set before each step by the
    schedule. The state of a parameter: ``step`` (an int), ``momentum`` (the parameter's shape) and
    ``row_moments`` ``[rows x 1]`` and ``column_moments`` ``[1 x columns]`` where it is factored,
    ``second_moments`` (its shape) where not."""

    def __init__(
        self,
        params,
        lr: float = 1.0,
        beta1: float = 0.9,
        beta2: float = 0.999,
        eps1: float = 1e-30,
        eps2: float = 1e-3,
        clip_threshold: float = 1.0,
    ):
        defaults = {
            "lr": lr,
            "beta1": beta1,
            "beta2": beta2,
            "eps1": eps1,
            "eps2": eps2,
            "clip_threshold": clip_threshold,
        }
        super().__init__(params, defaults)

    @staticmethod
    def state_shapes(param: Tensor) -> dict[str, tuple[int, ...]]:
        """The shape of each tensor of ``param``'s state."""
        shapes = {"momentum": tuple(param.shape)}
        matrix = factored_shape(param)
        if matrix is None:
            shapes["second_moments"] = tuple(param.shape)
        else:
            shapes["row_moments"] = (matrix[0], 1)
            shapes["column_moments"] = (1, matrix[1])
        return shapes

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise RuntimeError("Adafactor does not take sparse gradients")
                self._update(param, group)
        return loss

    def _update(self, param: Tensor, group: dict) -> None:
        state = self.state[param]
        if not state:
            state["step"] = 0
            for key, shape in self.state_shapes(param).items():
                state[key] = param.new_zeros(shape)
        state["step"] += 1
        step = state["step"]
        beta1 = growing_decay(group["beta1"], step)
        beta2 = growing_decay(group["beta2"], step)
        grad = param.grad
        relative_lr = root_mean_square(param).clamp(min=group["eps2"]) * group["lr"]
        momentum = state["momentum"]
        momentum.mul_(beta1).add_(grad, alpha=1 - beta1)
        second_moments = self._second_moments(state, grad, beta2, group["eps1"])
        update = momentum.div(1 - beta1**step).div_(second_moments.sqrt())
        update.div_((root_mean_square(update) / group["clip_threshold"]).clamp_(min=1.0))
        param.sub_(update.mul_(relative_lr))

    @staticmethod
    def _second_moments(state: dict, grad: Tensor, beta2: float, eps1: float) -> Tensor:
        """The second moments' estimate, moved on by ``grad``: ``grad``'s shape."""
        if "second_moments" in state:
            second_moments = state["second_moments"]
            second_moments.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            return second_moments.add_((1 - beta2) * eps1)
        rows = state["row_moments"]  # [rows x 1]
        columns = state["column_moments"]  # [1 x columns]
        squares = (grad * grad).add_(eps1).view(rows.shape[0], columns.shape[1])
        columns.mul_(beta2).add_(squares.sum(dim=0, keepdim=True), alpha=1 - beta2)
        rows.mul_(beta2).add_(squares.sum(dim=1, keepdim=True), alpha=1 - beta2)
        # [rows x columns]: the rank-1 estimate whose row and column sums are the moments'
        return (rows * columns).div_(columns.sum()).view_as(grad)
