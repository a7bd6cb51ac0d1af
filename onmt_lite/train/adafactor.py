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

Unlike 1.x, nothing is read on the host (its two norms per tensor and step stay on the device),
and a step makes about ten passes over a matrix where 1.x's made about thirty
(``bench/optimizer_cost.py``).
"""

import math

import torch
from torch import Tensor


def growing_decay(beta: float, step: int) -> float:
    """1.x's decay rate at ``step`` (from 1): 0 at step 1, towards ``beta`` later."""
    return beta * (1 - beta ** (step - 1)) / (1 - beta**step)


def root_mean_square(values: Tensor) -> Tensor:
    """A 0-dim tensor: ``sqrt(mean(values ** 2))`` (one pass, no squared copy)."""
    return torch.linalg.vector_norm(values) / math.sqrt(values.numel())


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
        relative_lr = root_mean_square(param).clamp_(min=group["eps2"]).mul_(group["lr"])
        momentum = state["momentum"]
        momentum.lerp_(grad, 1 - beta1)  # beta1 * m + (1 - beta1) * g
        # m / sqrt(v), 1.x's correction of the momentum folded into the factor
        row_factor, column_factor = self._inverse_roots(state, grad, beta2, group["eps1"])
        update = (momentum * row_factor).mul_(column_factor / (1 - beta1**step))
        clip = (root_mean_square(update) / group["clip_threshold"]).clamp_(min=1.0)
        # one pass over the weights: w - relative_lr * u / clip
        param.addcmul_(update, relative_lr / clip, value=-1)

    @staticmethod
    def _inverse_roots(state: dict, grad: Tensor, beta2: float, eps1: float):
        """The second moments moved on by ``grad``, as two factors whose product is
        ``1 / sqrt(v)``: ``[rows x 1]`` and ``[1 x columns]`` seen as ``grad``'s shape where they
        are factored (``1 / sqrt(r_i c_j / sum(c)) = rsqrt(r_i) * rsqrt(c_j) * sqrt(sum(c))``),
        else ``1 / sqrt(v)`` and 1."""
        if "second_moments" in state:
            second_moments = state["second_moments"]
            second_moments.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            return second_moments.add_((1 - beta2) * eps1).rsqrt(), 1.0
        rows = state["row_moments"]  # [rows x 1]
        columns = state["column_moments"]  # [1 x columns]
        matrix = grad.view(rows.shape[0], columns.shape[1])
        squares = matrix.square()  # each + eps1 in 1.x's: added to the sums below
        row_sums = squares.sum(dim=1, keepdim=True)
        column_sums = squares.sum(dim=0, keepdim=True)
        rows.mul_(beta2).add_(row_sums.add_(eps1 * columns.shape[1]), alpha=1 - beta2)
        columns.mul_(beta2).add_(column_sums.add_(eps1 * rows.shape[0]), alpha=1 - beta2)
        shape = (-1,) + (1,) * (grad.dim() - 1)  # [rows x 1 x ...]: broadcast over the rest
        row_factor = rows.rsqrt().view(shape)
        column_factor = (columns.rsqrt() * columns.sum().sqrt()).view(grad.shape[1:])
        return row_factor, column_factor
