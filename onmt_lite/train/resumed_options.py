"""The options of a training run: with ``-train_from``, which come from the checkpoint and which
from the command line, and a warning for each option the command line gives in vain.

A resumed run keeps the checkpoint's model (its architecture options), its seed and, unless
``-reset_optim`` is ``all`` or ``keep_states``, its optimizer options. An option of those that the
command line (or a -config file) gives with another value than the checkpoint's has no effect: as
in OpenNMT-py 1.x the checkpoint's value is used, and the run says so (at WARNING, one line for the
model, the optimizer and the seed each), so that a changed ``-rnn_size`` or ``-learning_rate`` is
never ignored in silence.
"""

import argparse
import random

from onmt_lite.loss.options import fill_loss_options
from onmt_lite.models.checkpoint import model_options
from onmt_lite.opts import model_opts
from onmt_lite.opts.parser import option_defaults
from onmt_lite.opts.values import shown
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.logging import logger

OPTIM_OPTIONS = (
    "optim",
    "learning_rate",
    "adam_beta1",
    "adam_beta2",
    "adagrad_accumulator_init",
    "weight_decay",
    "max_grad_norm",
    "decay_method",
    "warmup_steps",
    "learning_rate_decay",
    "start_decay_steps",
    "decay_steps",
)

# model options that a run resumed with -train_from takes from its command line, not the checkpoint
RESUME_FROM_COMMAND_LINE = ("lambda_align", "attention_dropout")


def resolve_options(
    opt: argparse.Namespace, checkpoint: dict | None, record: dict, warn: bool = True
) -> argparse.Namespace:
    """Options for this run: model (and, per -reset_optim, optimizer) options from the checkpoint,
    but ``RESUME_FROM_COMMAND_LINE`` from the command line (as 1.x: guided alignment can start at
    -train_from, and the attention dropout schedule goes with -dropout's); with ``warn``, a warning
    names each option given (``opt.given_options``) that the checkpoint's value replaces."""
    command = opt
    opt = argparse.Namespace(**vars(opt))
    if checkpoint is not None:
        optim_options = OPTIM_OPTIONS if opt.reset_optim in ("none", "states") else ()
        given = {name: getattr(opt, name) for name in RESUME_FROM_COMMAND_LINE}
        opt = model_options(checkpoint["opt"], opt.train_from, onto=opt, also=optim_options)
        opt.seed = checkpoint["opt"]["seed"]
        vars(opt).update(given)
        if warn:
            warn_unused_options(command, opt, optim_options)
    elif opt.seed <= 0:
        opt.seed = random.SystemRandom().randint(1, 2**31 - 1)
    # -loss_class's options not given now: the checkpoint's, else the class's defaults
    fill_loss_options(opt, checkpoint["opt"] if checkpoint is not None else None)
    if opt.copy_attn and not record.get("dynamic_dict"):
        raise UserError(
            f"-copy_attn needs data preprocessed with -dynamic_dict ({opt.data} was not)"
        )
    if opt.lambda_align > 0 and not record.get("train_align"):
        raise UserError(
            f"-lambda_align needs data preprocessed with -train_align alignments ({opt.data} has "
            "none)"
        )
    return opt


def checkpoint_options(opt: argparse.Namespace) -> frozenset[str]:
    """The options of ``opt`` (a run's, resolved) whose values its checkpoint gave: none without
    -train_from; the model's and, with -reset_optim none or states, the optimizer's."""
    if not opt.train_from:
        return frozenset()
    optim = OPTIM_OPTIONS if opt.reset_optim in ("none", "states") else ()
    return frozenset(_model_names() | set(optim) | {"seed"})


def _model_names() -> set[str]:
    """The model options a resumed run takes from its checkpoint."""
    return set(option_defaults([model_opts])) - set(RESUME_FROM_COMMAND_LINE) - {"debug"}


def warn_unused_options(
    command: argparse.Namespace, resumed: argparse.Namespace, optim_options: tuple[str, ...]
) -> None:
    """Warn of each option ``command`` was given whose value ``resumed`` (the run resumed from
    ``command.train_from``) replaced with the checkpoint's."""
    model = replaced_options(command, resumed, sorted(_model_names()))
    if model:
        logger.warning(
            f"-train_from {command.train_from}: the model is the checkpoint's; not used: {model}"
        )
    optim = replaced_options(command, resumed, optim_options)
    if optim:
        logger.warning(
            f"-reset_optim {command.reset_optim}: the optimizer's options are the checkpoint's "
            f"(-reset_optim keep_states or all takes this command line's); not used: {optim}"
        )
    seed = replaced_options(command, resumed, ["seed"])
    if seed:
        logger.warning(
            "-train_from: the run goes on with the checkpoint's seed and random generators; not "
            f"used: {seed}"
        )


def replaced_options(
    command: argparse.Namespace, resumed: argparse.Namespace, names: list[str] | tuple[str, ...]
) -> str:
    """``-name value (the checkpoint's: saved)`` for each of ``names`` that ``command`` was given
    with a value other than ``resumed``'s, joined with commas ('' for none)."""
    given = getattr(command, "given_options", frozenset())
    replaced = []
    for name in names:
        value = getattr(command, name)
        saved = getattr(resumed, name)
        if name in given and shown(value) != shown(saved):
            replaced.append(f"-{name} {shown(value)} (the checkpoint's: {shown(saved)})")
    return ", ".join(replaced)
