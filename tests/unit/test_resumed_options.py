"""train/resumed_options.py: a run resumed with -train_from takes its model options, its seed and
(with -reset_optim none or states) its optimizer options from the checkpoint; each of those that
its command line gives with another value is named in a warning, never dropped in silence."""

import argparse

import pytest

from onmt_lite.opts import build_parser, config_opts, model_opts, parse, train_opts
from onmt_lite.train.resumed_options import resolve_options
from tests.model_helpers import model_options as command_options


def saved_options(*args):
    return vars(command_options(*args))


def resumed(command):
    """``command`` resumed from a checkpoint of a brnn model of size 16 trained with seed 5."""
    saved = saved_options("-encoder_type", "brnn", "-rnn_size", "16", "-seed", "5")
    return resolve_options(command, {"opt": saved}, {})


def warnings(logged):
    return [message for message in logged if "not used" in message]


def test_a_model_option_given_with_another_value_is_named_with_the_checkpoints(logged):
    # -layers is given with the checkpoint's value; -encoder_type is left at its default (rnn)
    opt = resumed(command_options("-train_from", "c.pt", "-rnn_size", "32", "-layers", "2"))
    assert (opt.rnn_size, opt.encoder_type, opt.layers) == (16, "brnn", 2)
    assert warnings(logged) == [
        "-train_from c.pt: the model is the checkpoint's; not used: -rnn_size 32 (the "
        "checkpoint's: 16)"
    ]


def test_a_switch_is_named_by_the_option_it_sets(logged):
    resumed(command_options("-train_from", "c.pt", "-rnn_size", "16", "-rnn_type", "GRU"))
    assert warnings(logged) == [
        "-train_from c.pt: the model is the checkpoint's; not used: -rnn_type GRU (the "
        "checkpoint's: LSTM)"
    ]
    logged.clear()
    resumed(command_options("-train_from", "c.pt", "-rnn_size", "16", "-brnn"))
    assert warnings(logged) == []  # -brnn is the checkpoint's -encoder_type brnn


def test_options_left_at_their_defaults_or_given_as_saved_are_not_named(logged):
    opt = resumed(command_options("-train_from", "c.pt", "-rnn_size", "16", "-seed", "5"))
    assert opt.seed == 5
    assert warnings(logged) == []


@pytest.mark.parametrize(
    "reset_optim,used", [("none", 1.0), ("states", 1.0), ("keep_states", 0.5), ("all", 0.5)]
)
def test_the_optimizer_options_are_named_where_reset_optim_keeps_the_checkpoints(
    logged, reset_optim, used
):
    args = ["-train_from", "c.pt", "-rnn_size", "16", "-learning_rate", "0.5"]
    opt = resumed(command_options(*args, "-reset_optim", reset_optim))
    assert opt.learning_rate == used
    expected = [
        f"-reset_optim {reset_optim}: the optimizer's options are the checkpoint's (-reset_optim "
        "keep_states or all takes this command line's); not used: -learning_rate 0.5 (the "
        "checkpoint's: 1.0)"
    ]
    assert warnings(logged) == (expected if used == 1.0 else [])


def test_a_seed_given_is_named(logged):
    opt = resumed(command_options("-train_from", "c.pt", "-rnn_size", "16", "-seed", "7"))
    assert opt.seed == 5
    assert warnings(logged) == [
        "-train_from: the run goes on with the checkpoint's seed and random generators; not "
        "used: -seed 7 (the checkpoint's: 5)"
    ]


def test_options_of_a_config_file_count_as_given(logged, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("rnn_size: 8\nmax_grad_norm: 1\ndropout: [0.2]\n")
    parser = build_parser("test", [config_opts, model_opts, train_opts])
    args = ["-data", "d", "-train_from", "c.pt", "-config", str(config)]
    opt = resumed(parse(parser, args))
    assert (opt.rnn_size, opt.max_grad_norm, opt.dropout) == (16, 5.0, [0.2])
    assert warnings(logged) == [
        "-train_from c.pt: the model is the checkpoint's; not used: -rnn_size 8 (the "
        "checkpoint's: 16)",
        "-reset_optim none: the optimizer's options are the checkpoint's (-reset_optim "
        "keep_states or all takes this command line's); not used: -max_grad_norm 1.0 (the "
        "checkpoint's: 5.0)",
    ]


def test_a_namespace_built_without_parse_resumes_without_warnings(logged):
    """The Python API: a Namespace that does not say which options were given (no
    ``given_options``) takes the checkpoint's as before, naming none."""
    command = argparse.Namespace(**{**saved_options("-rnn_size", "32"), "train_from": "c.pt"})
    del command.given_options
    assert resumed(command).rnn_size == 16
    assert warnings(logged) == []


def test_a_resumed_run_takes_both_dropout_schedules_and_lambda_align_from_its_command_line():
    saved = saved_options(
        "-encoder_type",
        "transformer",
        "-decoder_type",
        "transformer",
        "-heads",
        2,
        "-attention_dropout",
        "0.1",
        "-seed",
        "5",
    )
    command = argparse.Namespace(
        **{
            **saved_options(
                "-attention_dropout",
                "0.3",
                "0.0",
                "-dropout",
                "0.3",
                "0.1",
                "-dropout_steps",
                "0",
                "10",
                "-lambda_align",
                "0.05",
            ),
            "train_from": "ckpt.pt",
            "reset_optim": "none",
            "data": "d",
        }
    )
    opt = resolve_options(command, {"opt": saved}, {"train_align": True})
    assert (opt.attention_dropout, opt.dropout, opt.lambda_align) == ([0.3, 0.0], [0.3, 0.1], 0.05)
    assert (opt.encoder_type, opt.heads, opt.seed) == ("transformer", 2, 5)  # the model's, as saved
