"""Training options that other options make idle: given a value other than their default, they
change nothing in the run (an Adam beta with -optim sgd, -heads for a model without Transformer
layers, -warmup_steps without a schedule that warms up). The run goes on as asked and says so, one
warning line each, as a user of OpenNMT-py 1.x (which took them in silence) would want to know.

Options that contradict each other, or that no model could build, are refused elsewhere
(``models.builder.check_options``, ``train.main.check_options``).
"""

import argparse

from onmt_lite.models.builder import OWN_ATTENTION
from onmt_lite.opts import model_opts, option_defaults, train_opts
from onmt_lite.opts.values import shown


def _model_rules(
    opt: argparse.Namespace, features: bool
) -> list[tuple[tuple[str, ...], bool, str]]:
    """``(names, idle, why)`` of the options that describe the model's layers (and, without source
    word ``features`` in the data, their embeddings)."""
    recurrent = opt.encoder_type in ("rnn", "brnn") or opt.decoder_type == "rnn"
    transformer = "transformer" in (opt.encoder_type, opt.decoder_type)
    average = opt.self_attn_type == "average"
    averaging_decoder = average and opt.decoder_type == "transformer"
    no_transformer = "the model has no Transformer layers"
    # the layers that have scaled dot-product self-attention, where relative positions go
    scaled_dot = opt.encoder_type == "transformer" or (
        opt.decoder_type == "transformer" and not average
    )
    return [
        (
            ("feat_merge", "feat_vec_size", "feat_vec_exponent"),
            not features,
            f"{opt.data} has no source word features (word\uffe8feat tokens)",
        ),
        (("rnn_type",), not recurrent, "the model has no recurrent layers"),
        (
            ("input_feed", "global_attention"),
            opt.decoder_type != "rnn",
            f"it is an RNN decoder's, and a {OWN_ATTENTION.get(opt.decoder_type)}",
        ),
        (
            ("cnn_kernel_width",),
            "cnn" not in (opt.encoder_type, opt.decoder_type),
            "the model has no convolutional layers (-encoder_type/-decoder_type cnn)",
        ),
        (("heads", "transformer_ff"), not transformer, no_transformer),
        (
            ("max_relative_positions",),
            not scaled_dot,
            "no layer has scaled dot-product self-attention (-self_attn_type average has no "
            "positions)"
            if transformer
            else no_transformer,
        ),
        (
            ("self_attn_type",),
            not averaging_decoder if average else not transformer,
            "it is a Transformer decoder's (a Transformer encoder's self-attention is scaled-dot)"
            if average
            else no_transformer,
        ),
        (
            ("aan_useffn",),
            not averaging_decoder,
            "it is -self_attn_type average's, in a Transformer decoder",
        ),
        (("attention_dropout",), not transformer, no_transformer),
    ]


def _training_rules(opt: argparse.Namespace) -> list[tuple[tuple[str, ...], bool, str]]:
    """``(names, idle, why)`` of the optimizer's, the schedules' and the logs' options."""
    return [
        (
            ("adam_beta1", "adam_beta2"),
            opt.optim not in ("adam", "adamw", "fusedadam", "sparseadam"),
            "-optim adafactor keeps 1.x's betas, 0.9 and 0.999"
            if opt.optim == "adafactor"
            else f"-optim {opt.optim} has no betas (adam, adamw, fusedadam and sparseadam have)",
        ),
        (
            ("weight_decay",),
            opt.optim in ("adafactor", "sparseadam"),
            f"-optim {opt.optim} has no weight decay (1.x's had none)",
        ),
        (
            ("adagrad_accumulator_init",),
            opt.optim != "adagrad",
            f"it is -optim adagrad's, not {opt.optim}'s",
        ),
        (
            ("warmup_steps",),
            opt.decay_method not in ("noam", "noamwd", "rsqrt"),
            f"-decay_method {opt.decay_method} does not warm up (noam, noamwd and rsqrt do)",
        ),
        (
            ("learning_rate_decay",),
            opt.decay_method not in ("none", "noamwd", "plateau"),
            f"-decay_method {opt.decay_method} has no decay factor",
        ),
        (
            ("start_decay_steps", "decay_steps"),
            opt.decay_method not in ("none", "noamwd"),
            f"it times the step decay of -decay_method none and noamwd, not {opt.decay_method}'s",
        ),
        (
            ("dropout_steps",),
            len(opt.dropout) == 1 and len(opt.attention_dropout) == 1,
            "-dropout and -attention_dropout have one value each, no schedule",
        ),
        (
            ("tensorboard_log_dir", "exp"),
            not opt.tensorboard,
            "without -tensorboard nothing is written",
        ),
        (
            ("average_every",),
            opt.average_decay == 0,
            "there is no average without -average_decay above 0",
        ),
    ]


def _validation_rules(opt: argparse.Namespace, validation: bool):
    """``(names, idle, why)`` of the options of validation, idle without validation data."""
    return [
        (
            (
                "valid_steps",
                "valid_batch_size",
                "valid_metrics",
                "early_stopping",
                "early_stopping_criteria",
            ),
            not validation,
            f"{opt.data} has no validation data (preprocess with -valid_src and -valid_tgt)",
        )
    ]


def idle_options(
    opt: argparse.Namespace,
    from_checkpoint: frozenset[str] = frozenset(),
    validation: bool = True,
    features: bool = True,
) -> list[str]:
    """A line for each option of ``opt`` that is not at its default and that the others make
    idle, but those named in ``from_checkpoint`` (a run resumed with -train_from takes them from
    the checkpoint, whose run named them); those of validation as idle without ``validation``
    data, and those of word features without ``features`` in the data."""
    defaults = option_defaults([model_opts, train_opts])
    rules = _model_rules(opt, features) + _training_rules(opt) + _validation_rules(opt, validation)
    notes = []
    for names, idle, why in rules:
        for name in names:
            value = getattr(opt, name)
            if idle and value != defaults[name] and name not in from_checkpoint:
                given = f"-{name}" if value is True else f"-{name} {shown(value)}"  # a switch
                notes.append(f"{given} has no effect: {why}")
    return notes
