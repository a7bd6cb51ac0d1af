"""The optimizer: parameter groups (-lr_mult, -freeze), learning-rate schedules, clipping.

The optimizer state is saved by parameter name, so a checkpoint restores into a model whose groups
were cut differently (fine-tuning with another -freeze or -lr_mult).
"""

import fnmatch
import math

import torch

from onmt_lite.train.adafactor import Adafactor
from onmt_lite.train.sparse_adam import set_sparse_gradients, sparse_adam
from onmt_lite.utils.errors import UserError


class NonFiniteError(ArithmeticError):
    """A NaN or infinite loss or gradient: the step is not applied. ``later``: the steps taken
    after it before it was read, all skipped too (``step_checks.DeferredChecks``); 0 for the step
    just taken."""

    def __init__(self, message: str, later: int = 0):
        super().__init__(message)
        self.later = later


FLOAT32_MAX = float(torch.finfo(torch.float32).max)
# optimizers whose moments are another's: all three are torch's Adam or AdamW
MOMENTS_OF = {"adamw": "adam", "fusedadam": "adam"}


def parse_lr_mult(specs):
    """``["encoder.*=0.1", ...]`` -> ``[("encoder.*", 0.1), ...]``."""
    parsed = []
    for spec in specs:
        pattern, sep, factor = spec.rpartition("=")
        try:
            value = float(factor)
        except ValueError:
            value = None
        if not sep or not pattern or value is None or not 0 <= value < math.inf:
            raise UserError(f"-lr_mult {spec}: expected PATTERN=FACTOR with a finite factor >= 0")
        parsed.append((pattern, value))
    return parsed


def parameter_groups(model, lr_mult=(), freeze=()):
    """Trainable parameters grouped by learning-rate factor; ``freeze`` patterns stop updates.

    A parameter takes the factor of the first ``lr_mult`` pattern its name matches (1.0 if none).
    Every pattern must match at least one parameter. Returns a list of
    ``{"names": [...], "params": [...], "lr_mult": f}`` in order of first appearance.
    """
    named = list(model.named_parameters())
    for option, patterns in (("-freeze", list(freeze)), ("-lr_mult", [p for p, _ in lr_mult])):
        for pattern in patterns:
            if not any(fnmatch.fnmatchcase(name, pattern) for name, _ in named):
                raise UserError(
                    f"{option} {pattern}: no parameter name matches (names look like "
                    f"{named[0][0]}, {named[-1][0]})"
                )
    groups = {}
    for name, param in named:
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in freeze):
            param.requires_grad_(False)
        if not param.requires_grad:
            continue
        factor = next((f for pattern, f in lr_mult if fnmatch.fnmatchcase(name, pattern)), 1.0)
        group = groups.setdefault(factor, {"names": [], "params": [], "lr_mult": factor})
        group["names"].append(name)
        group["params"].append(param)
    if not groups:
        raise UserError("-freeze leaves no parameter to train")
    return list(groups.values())


class Schedule:
    """The learning-rate factor at each optimizer step (steps count from 1).

    ``none``: 1.x step decay, ``decay ** ((step - start_decay_steps) // decay_steps + 1)`` from
    ``start_decay_steps`` on; ``noam``: ``model_size^-0.5 * min(step^-0.5, step * warmup^-1.5)``;
    ``noamwd``: noam times the step decay (1.x's, for huge batches); ``rsqrt``:
    ``1 / sqrt(max(step, warmup))``; ``plateau``: multiplied by ``decay`` after every validation
    that did not improve.
    """

    def __init__(self, method, decay, start_decay_steps, decay_steps, warmup_steps, model_size):
        self.method = method
        self.decay = decay
        self.start = start_decay_steps
        self.every = decay_steps
        self.warmup = max(warmup_steps, 1)
        self.model_size = model_size
        self.plateau_scale = 1.0

    def __call__(self, step):
        if self.method in ("noam", "noamwd"):
            noam = self.model_size**-0.5 * min(step**-0.5, step * self.warmup**-1.5)
            return noam * self.step_decay(step) if self.method == "noamwd" else noam
        if self.method == "rsqrt":
            return 1.0 / math.sqrt(max(step, self.warmup))
        if self.method == "plateau":
            return self.plateau_scale
        return self.step_decay(step)

    def step_decay(self, step):
        """``decay`` once at ``start_decay_steps`` and again every ``decay_steps`` after."""
        return self.decay ** (max(step - self.start + self.every, 0) // self.every)

    def validated(self, improved):
        if self.method == "plateau" and not improved:
            self.plateau_scale *= self.decay


def make_torch_optimizers(name, param_groups, lr, opt, sparse):
    """The torch optimizers of ``-optim name``: one, or with sparseadam one for the lookup tables
    whose ids are in ``sparse`` and one for the rest."""
    if name == "sparseadam":
        return sparse_adam(param_groups, sparse, (opt.adam_beta1, opt.adam_beta2))
    return [make_torch_optimizer(name, param_groups, lr, opt)]


def make_torch_optimizer(name, param_groups, lr, opt):
    if name == "adafactor":  # 1.x's: its own betas, no weight decay
        return Adafactor(param_groups, lr=lr)
    kwargs = {"weight_decay": opt.weight_decay}
    if name == "sgd":
        return torch.optim.SGD(param_groups, lr=lr, **kwargs)
    if name == "adagrad":
        return torch.optim.Adagrad(
            param_groups, lr=lr, initial_accumulator_value=opt.adagrad_accumulator_init, **kwargs
        )
    if name == "adadelta":
        return torch.optim.Adadelta(param_groups, lr=lr, **kwargs)
    # fused: one kernel, CPU or GPU
    optimizer_class = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    eps = 1e-8 if name == "fusedadam" else 1e-9  # 1.x's: apex's FusedAdam kept its default
    return optimizer_class(
        param_groups, lr=lr, betas=(opt.adam_beta1, opt.adam_beta2), eps=eps, fused=True, **kwargs
    )


class Optimizer:
    """A torch optimizer with schedule, clipping and per-group learning-rate factors.

    Args:
        model: the model (its trainable parameters are grouped by ``parameter_groups``).
        opt: options with ``optim``, ``learning_rate``, schedule, clipping, ``lr_mult``, ``freeze``.
        model_size: the hidden size (for the noam schedule).
    """

    def __init__(self, model, opt, model_size):
        self.groups = parameter_groups(model, parse_lr_mult(opt.lr_mult), opt.freeze)
        for group in self.groups:  # checked before step 1: the optimizer holds its rates as float32
            if not opt.learning_rate * group["lr_mult"] <= FLOAT32_MAX:
                raise UserError(
                    f"-learning_rate {opt.learning_rate:g} times -lr_mult {group['lr_mult']:g} "
                    f"({group['names'][0]}, ...) is beyond float32's range"
                )
        self.base_lr = opt.learning_rate
        self.max_grad_norm = opt.max_grad_norm
        self.schedule = Schedule(
            opt.decay_method,
            opt.learning_rate_decay,
            opt.start_decay_steps,
            opt.decay_steps,
            opt.warmup_steps,
            model_size,
        )
        self.decay_step = 0
        torch_groups = [
            {"params": g["params"], "lr": self.base_lr * g["lr_mult"], "lr_mult": g["lr_mult"]}
            for g in self.groups
        ]
        # the lookup tables' gradients are sparse for SparseAdam, dense for every other optimizer
        sparse = opt.optim == "sparseadam"
        tables = set_sparse_gradients(model, sparse)
        self.sparse_params = [table.weight for table in tables] if sparse else []
        sparse_ids = {id(p) for p in self.sparse_params}
        self.optimizers = make_torch_optimizers(
            opt.optim, torch_groups, self.base_lr, opt, sparse_ids
        )
        self.optimizer_of = {
            id(p): optimizer
            for optimizer in self.optimizers
            for group in optimizer.param_groups
            for p in group["params"]
        }
        self.kind = opt.optim
        self.names = {id(p): n for g in self.groups for n, p in zip(g["names"], g["params"])}
        self.params = [p for g in self.groups for p in g["params"]]

    def learning_rate(self):
        """The base learning rate of the next step (before per-group factors)."""
        return self.base_lr * self.schedule(self.decay_step + 1)

    def zero_grad(self):
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)

    def gradient_norm(self) -> torch.Tensor:
        """The norm of all the gradients, a 0-dim tensor (on the device: not read here). A sparse
        gradient is summed over its tokens first (``coalesce``): the norm is of each row's sum."""
        for p in self.sparse_params:
            if p.grad is not None:
                p.grad = p.grad.coalesce()
        grads = [p.grad for p in self.params if p.grad is not None]
        values = [g.values() if g.is_sparse else g for g in grads]
        return torch.nn.utils.get_total_norm(values) if values else torch.zeros(())

    @property
    def can_skip_on_device(self) -> bool:
        """Whether the torch optimizer skips an update by a flag on the device (``found_inf``, a
        fused Adam's or AdamW's): what ``step(skip=...)`` needs."""
        return len(self.optimizers) == 1 and bool(self.optimizers[0].defaults.get("fused"))

    def step(self, grad_scale: float | torch.Tensor = 1.0, total_norm=None, norm=None, skip=None):
        """Check, unscale (by ``grad_scale``, the fp16 loss scale: a float, or a 0-dim tensor with
        ``skip``) and clip the gradients, set the scheduled learning rates, update; returns the
        gradient norm before clipping. A NaN or infinite gradient raises NonFiniteError before any
        parameter or schedule changes. ``total_norm`` and ``norm``: ``gradient_norm()`` and its
        value, when the caller has read them already (the trainer reads the norm with the step's
        statistics: one host sync for both). ``skip`` instead of ``norm``
        (``can_skip_on_device``): a 0-dim float32 flag on the device, 1 to leave parameters and
        moments as they are; nothing is read, None returned, and the schedule moves on
        (``undo_steps`` takes it back)."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if total_norm is None:
            total_norm = self.gradient_norm()
        if skip is not None:
            self.optimizers[0].found_inf = skip
        else:
            if norm is None:
                norm = float(total_norm)
            norm = norm / grad_scale
            if not math.isfinite(norm):
                raise NonFiniteError(f"the gradient norm is {norm}")
        if torch.is_tensor(grad_scale) or grad_scale != 1.0:
            # the scale is a power of 2: its reciprocal and the products are exact
            torch._foreach_mul_(grads, 1.0 / grad_scale)
            total_norm = total_norm / grad_scale
        if self.max_grad_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(self.params, self.max_grad_norm, total_norm)
        lr = self.learning_rate()
        self.decay_step += 1
        for optimizer in self.optimizers:
            for torch_group in optimizer.param_groups:
                torch_group["lr"] = lr * torch_group["lr_mult"]
            optimizer.step()
        return norm

    def skip_step(self) -> None:
        """An fp16 step skipped for an overflow, read on the host: the schedule moves on, as with
        ``step(skip=...)`` (and in OpenNMT-py); the parameters and moments stay."""
        self.decay_step += 1

    def undo_steps(self, count: int) -> None:
        """Take the schedule back ``count`` steps that the device skipped (``step(skip=...)``)."""
        self.decay_step -= count

    def state_dict(self):
        """Plain data: the schedule position and each parameter's optimizer state by name, as CPU
        tensors (a checkpoint holds CPU tensors; loading moves them to each parameter's device)."""
        state = {
            self.names[id(p)]: {
                k: v.detach().cpu() if torch.is_tensor(v) else v for k, v in s.items()
            }
            for optimizer in self.optimizers
            for p, s in optimizer.state.items()
        }
        return {
            "optim": self.kind,
            "decay_step": self.decay_step,
            "plateau_scale": self.schedule.plateau_scale,
            "state": state,
        }

    def load_state_dict(self, saved, moments=True, schedule=True):
        """Restore the schedule position and/or the per-parameter moments."""
        if schedule:
            self.decay_step = saved["decay_step"]
            self.schedule.plateau_scale = saved["plateau_scale"]
        if not moments:
            return
        saved_kind = saved.get("optim", self.kind)  # older checkpoints do not say
        if MOMENTS_OF.get(saved_kind, saved_kind) != MOMENTS_OF.get(self.kind, self.kind):
            raise UserError(
                f"the checkpoint's optimizer moments are -optim {saved_kind}'s, not "
                f"{self.kind}'s: -reset_optim all starts -optim {self.kind} afresh"
            )
        by_name = {self.names[id(p)]: p for p in self.params}
        for name, state in saved["state"].items():
            param = by_name.get(name)
            if param is None:
                continue  # frozen now, or not in this model
            optimizer = self.optimizer_of[id(param)]
            self._check_saved_state(name, param, state, optimizer)
            # moments go to the parameter's device; Adam's scalar step count too when it is fused,
            # else it stays a CPU tensor
            scalar_device = param.device if optimizer.defaults.get("fused") else torch.device("cpu")
            optimizer.state[param] = {
                k: v.to(param.device if v.dim() > 0 else scalar_device, copy=True)
                if torch.is_tensor(v)
                else v
                for k, v in state.items()
            }

    def _check_saved_state(self, name: str, param: torch.Tensor, state: dict, optimizer) -> None:
        """A UserError unless the checkpoint's optimizer ``state`` of parameter ``name`` fits
        ``param`` and its torch ``optimizer``: Adafactor's tensors are its own keys and shapes, the
        other optimizers' moments have the parameter's shape."""
        own = optimizer.state_shapes(param) if isinstance(optimizer, Adafactor) else None
        for key, value in state.items():
            if not torch.is_tensor(value) or value.dim() == 0:
                continue  # a step count
            if own is not None and key not in own:
                raise UserError(
                    f"optimizer state {name}.{key} is not -optim {self.kind}'s (the checkpoint's "
                    f"optimizer was another): -reset_optim all starts -optim {self.kind} afresh"
                )
            expected = param.shape if own is None else torch.Size(own[key])
            if value.shape != expected:
                raise UserError(
                    f"optimizer state {name}.{key} has shape {tuple(value.shape)}, "
                    f"the parameter {tuple(param.shape)}"
                )

    def log_groups(self, log):
        for group in self.groups:
            n_values = sum(p.numel() for p in group["params"])
            log(
                f"parameter group: lr x {group['lr_mult']:g}, {len(group['params'])} tensors, "
                f"{n_values} values"
            )
