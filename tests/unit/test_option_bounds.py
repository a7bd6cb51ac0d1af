"""Every numeric option of onmt_lite_preprocess, onmt_lite_train and onmt_lite_translate has an
upper and a lower bound that the code can represent and run with, checked when the option is read:
a value beyond it is argparse's one-line error naming the option (exit status 2), never a
traceback, an internal error or a huge allocation later."""

import json

import pytest

from onmt_lite.opts import (
    build_parser,
    config_opts,
    model_opts,
    parse,
    preprocess_opts,
    train_opts,
    translate_opts,
)
from onmt_lite.opts.values import MAX_BEAM, MAX_LENGTH, MAX_SIZE

# as onmt_lite/bin/*.py build them, with the options each command requires
COMMANDS = {
    "preprocess": (
        "onmt_lite_preprocess",
        [config_opts, preprocess_opts],
        ["-train_src", "a", "-train_tgt", "b", "-save_data", "out"],
    ),
    "train": ("onmt_lite_train", [config_opts, model_opts, train_opts], ["-data", "d"]),
    "translate": (
        "onmt_lite_translate",
        [config_opts, translate_opts],
        ["-model", "m.pt", "-src", "s"],
    ),
}
INFINITY_HAS_A_MEANING = {"max_length_ratio"}  # -max_length_ratio inf: only -max_length cuts


def command_parser(command: str):
    prog, groups, _ = COMMANDS[command]
    return build_parser(prog, groups)


def numeric_options(command: str) -> list:
    """``(option string, action)`` of every option whose value is a number (by its type's name)."""
    options = []
    for action in command_parser(command)._actions:
        name = getattr(action.type, "__name__", "")
        if action.option_strings and name.startswith(("int", "float")):
            options.append((action.option_strings[0], action))
    return options


NUMERIC = [(command, option) for command in COMMANDS for option, _ in numeric_options(command)]


def is_float(action) -> bool:
    return action.type.__name__.startswith("float")


# -OPTION=VALUE: argparse reads "-1e308" after an option as an option of its own, not a number
def refused(command: str, option: str, value: str, capsys) -> str:
    """The one line of the parser's error for ``option value``; fails unless it exits with 2."""
    parser = command_parser(command)
    with pytest.raises(SystemExit) as exc:
        parse(parser, COMMANDS[command][2] + [f"{option}={value}"])
    err = capsys.readouterr().err
    assert exc.value.code == 2, (option, value, err)
    assert len(err.strip().splitlines()) == 1, err
    assert f"argument {option}/-{option}:" in err, err  # argparse names the option
    return err


def accepted(command: str, option: str, value: str):
    parser = command_parser(command)
    opt = parse(parser, COMMANDS[command][2] + [f"{option}={value}"])
    action = parser._option_string_actions[option]
    parsed = getattr(opt, action.dest)
    return parsed[0] if action.nargs in ("+", "*") else parsed


def test_the_walk_finds_the_numeric_options_of_every_command():
    names = {command: {option for option, _ in numeric_options(command)} for command in COMMANDS}
    assert {"-shard_size", "-vocab_size_multiple", "-src_seq_length", "-seed"} <= names[
        "preprocess"
    ]
    assert {
        "-max_relative_positions",
        "-accum_count",
        "-feat_vec_exponent",
        "-data_weights",
        "-learning_rate",
        "-layers",
        "-gpu_ranks",
        "-master_port",
    } <= names["train"]
    assert {
        "-beam_size",
        "-n_best",
        "-max_length",
        "-max_sent_length",
        "-alpha",
        "-max_length_ratio",
        "-random_sampling_topk",
        "-gpu",
    } <= names["translate"]
    assert len(NUMERIC) >= 80


@pytest.mark.parametrize("command,option", NUMERIC)
def test_a_huge_or_non_finite_value_of_every_numeric_option_is_one_line_and_exit_2(
    command, option, capsys
):
    action = dict(numeric_options(command))[option]
    if not is_float(action):
        for value in (10**20, -(10**20)):
            refused(command, option, str(value), capsys)
        return
    for value in ("nan", "-1e308", "-inf"):
        refused(command, option, value, capsys)
    if action.dest in INFINITY_HAS_A_MEANING:
        assert accepted(command, option, "inf") == float("inf")
        return
    for value in ("1e308", "inf"):
        refused(command, option, value, capsys)


@pytest.mark.parametrize("command,option", NUMERIC)
def test_every_default_and_both_bounds_are_accepted_and_one_past_them_is_refused(
    command, option, capsys
):
    action = dict(numeric_options(command))[option]
    defaults = action.default if isinstance(action.default, list) else [action.default]
    # (None: the command picks it when run, as translate's -batch_size by device)
    for default in [d for d in defaults if d is not None]:
        action.type(str(default))
    bounds = getattr(action.type, "bounds", None)
    if bounds is None:  # a plain int with choices (-shuffle, -input_feed): the choices bound it
        assert action.choices is not None, option
        return
    low, high = bounds
    if action.dest in INFINITY_HAS_A_MEANING:
        high = 1e300
    assert accepted(command, option, str(low)) == low
    assert accepted(command, option, repr(high) if is_float(action) else str(high)) == high
    if not is_float(action):
        assert "is below the minimum" in refused(command, option, str(low - 1), capsys)
        assert "is above the maximum" in refused(command, option, str(high + 1), capsys)


# --- the reported cases, through the commands' own entry points ---------------------------------


def run_main(main, args: list, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and "internal error" not in err
    return err


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["-max_relative_positions", 10**9],
            f"-max_relative_positions: 1000000000 is above the maximum {MAX_LENGTH}",
        ),
        (
            ["-accum_count", 99999999999999999999],
            f"-accum_count: 99999999999999999999 is above the maximum {MAX_SIZE}",
        ),
        (["-feat_vec_exponent", 50], "-feat_vec_exponent: 50.0 is outside [0, 1]"),
        (
            ["-data_weights", 99999999999999999999, 1],
            f"-data_weights: 99999999999999999999 is above the maximum {MAX_SIZE}",
        ),
    ],
)
def test_the_reported_training_values_are_refused_by_onmt_lite_train(args, message, capsys):
    from onmt_lite.bin import train

    err = run_main(train.main, ["-data", "d", *args], capsys)
    assert err.startswith("onmt_lite_train: error: argument ") and message in err, err


def test_a_beam_of_a_billion_is_refused_by_onmt_lite_translate(capsys):
    from onmt_lite.bin import translate

    err = run_main(translate.main, ["-model", "m.pt", "-src", "s", "-beam_size", 10**9], capsys)
    assert f"-beam_size: 1000000000 is above the maximum {MAX_BEAM}" in err, err


def test_a_beam_of_a_billion_in_the_server_configuration_is_refused_before_it_listens(tmp_path):
    """Before, the server accepted it and answered the first translation with a 500."""
    from onmt_lite.serve.config import read_config
    from onmt_lite.utils.errors import UserError

    (tmp_path / "m.pt").write_bytes(b"")  # the configuration is checked before any model is read
    conf = tmp_path / "conf.json"
    conf.write_text(
        json.dumps(
            {
                "models_root": str(tmp_path),
                "models": [{"id": 1, "model": "m.pt", "opt": {"beam_size": 10**9}}],
            }
        )
    )
    with pytest.raises(UserError) as error:
        read_config(str(conf))
    assert "beam_size" in str(error.value) and f"above the maximum {MAX_BEAM}" in str(error.value)


def test_the_beam_bound_is_the_documented_one_and_n_best_is_held_to_it_too(capsys):
    assert accepted("translate", "-beam_size", str(MAX_BEAM)) == MAX_BEAM
    refused("translate", "-beam_size", str(MAX_BEAM + 1), capsys)
    refused("translate", "-n_best", str(MAX_BEAM + 1), capsys)
    help_text = " ".join(command_parser("translate").format_help().split())  # unwrapped
    assert f"at most {MAX_BEAM}" in help_text and "(at most -beam_size)" in help_text


def test_a_config_file_value_is_held_to_the_same_bounds(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("data: d\naccum_count: [1, 99999999999999999999]\naccum_steps: [0, 10]\n")
    parser = command_parser("train")
    with pytest.raises(SystemExit) as exc:
        parse(parser, ["-config", str(config)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "-accum_count" in err and "above the maximum" in err, err
