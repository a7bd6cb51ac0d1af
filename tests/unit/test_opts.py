import pytest
import yaml

from onmt_lite.opts import (
    build_parser,
    config_opts,
    model_opts,
    parse,
    preprocess_opts,
    train_opts,
    translate_opts,
)
from onmt_lite.opts.convert import convert_opts

REQUIRED = ["-train_src", "a", "-train_tgt", "b", "-save_data", "out"]


def parser():
    return build_parser("prog", [config_opts, preprocess_opts])


def option_values(opt):
    """The options of parsed ``opt``: not -config, nor the record of which options were given."""
    return {k: v for k, v in vars(opt).items() if k not in ("config", "given_options")}


def test_single_and_double_dash_spellings_are_the_same_option():
    one = parse(parser(), REQUIRED + ["-src_vocab_size", "7", "-lower"])
    two = parse(
        parser(),
        [
            "--train_src",
            "a",
            "--train_tgt",
            "b",
            "--save_data",
            "out",
            "--src_vocab_size",
            "7",
            "--lower",
        ],
    )
    assert vars(one) == vars(two)
    assert one.src_vocab_size == 7 and one.lower is True


def test_defaults_follow_opennmt_py_1x():
    opt = parse(parser(), REQUIRED)
    assert (
        opt.src_vocab_size,
        opt.tgt_vocab_size,
        opt.src_seq_length,
        opt.tgt_seq_length,
        opt.shard_size,
        opt.seed,
        opt.shuffle,
    ) == (50000, 50000, 50, 50, 1000000, 3435, 0)


def expect_exit_2(args, capsys, match):
    with pytest.raises(SystemExit) as exc:
        parse(parser(), args)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert match in err
    return err


def test_unambiguous_1x_abbreviations_are_read_as_the_full_name_and_logged(capsys):
    """As OpenNMT-py 1.x's argparse: a prefix of one 1.x option name is that option."""
    from onmt_lite.utils.logging import init_logger

    init_logger()
    opt = parse(
        parser(),
        REQUIRED
        + [
            "-src_vocab",
            "v",
            "-src_vocab_s",
            "5",
            "--tgt_seq_length_t",
            "3",
            "-src_vocab_s",
            "6",
            "--tgt_vocab_s=7",
        ],
    )
    assert (opt.src_vocab, opt.src_vocab_size, opt.tgt_seq_length_trunc, opt.tgt_vocab_size) == (
        "v",
        6,
        3,
        7,
    )
    err = capsys.readouterr().err
    assert err.count("-src_vocab_s read as -src_vocab_size") == 1, err
    assert "--tgt_seq_length_t read as --tgt_seq_length_trunc" in err
    assert "INFO" in err


def test_abbreviation_notes_wait_for_the_logger():
    """The commands set up logging after parsing: the note is logged when init_logger runs."""
    from onmt_lite.utils import logging as onmt_logging

    for handler in list(onmt_logging.logger.handlers):
        onmt_logging.logger.removeHandler(handler)
    parse(parser(), REQUIRED + ["-src_vocab_s", "5"])
    assert onmt_logging._waiting == ["-src_vocab_s read as -src_vocab_size"]
    onmt_logging.init_logger()
    assert onmt_logging._waiting == []


def test_translate_accepts_beam_as_in_the_1x_test_script():
    from onmt_lite.opts import translate_opts

    opt = parse(
        build_parser("prog", [config_opts, translate_opts]),
        ["-model", "m", "-src", "s", "-beam", "3"],
    )
    assert opt.beam_size == 3


def test_ambiguous_abbreviation_is_refused_naming_the_candidates(capsys):
    err = expect_exit_2(
        REQUIRED + ["-src_seq", "5"], capsys, "ambiguous option: -src_seq could match"
    )
    assert "-src_seq_length, -src_seq_length_trunc" in err


def test_abbreviation_of_an_unsupported_1x_option_is_refused_with_the_reason(capsys):
    expect_exit_2(
        REQUIRED + ["-image_ch", "4"],
        capsys,
        "option -image_ch (read as -image_channel_size) is not supported by onmt_lite: ",
    )


def test_onmt_lite_options_and_tools_take_full_names_only(capsys):
    """Only 1.x names are abbreviated: -src_sp would be -src_spm, an onmt_lite option, and is
    refused."""
    expect_exit_2(REQUIRED + ["-src_sp", "m.model"], capsys, "unrecognized arguments: -src_sp")
    from onmt_lite.opts import OptionParser, add

    tool = OptionParser("tool")
    add(tool, "src_vocab_size", type=int, default=1, help="x")
    with pytest.raises(SystemExit):
        parse(tool, ["-src_vocab_s", "5"])
    assert "unrecognized arguments" in capsys.readouterr().err


def test_values_are_not_read_as_abbreviations():
    opt = parse(
        parser(), ["-train_src", "-1", "-train_tgt", "b", "-save_data", "out", "-seed", "-3"]
    )
    assert (opt.train_src, opt.seed) == (["-1"], -3)


def test_config_keys_must_be_full_names(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("train_src: a\ntrain_tgt: b\nsave_data: out\nsrc_vocab_s: 3\n")
    expect_exit_2(
        ["-config", str(config)], capsys, "keys must be full option names (-src_vocab_size?)"
    )


def test_unsupported_opennmt_option_is_refused_by_name(capsys):
    expect_exit_2(REQUIRED + ["-sample_rate", "4"], capsys, "option -sample_rate is not supported")
    expect_exit_2(
        REQUIRED + ["--src_dir", "imgs"], capsys, "image and audio input are not supported"
    )


def test_unsupported_value_is_refused_with_reason(capsys):
    expect_exit_2(
        REQUIRED + ["-data_type", "img"],
        capsys,
        "does not support -data_type img (onmt_lite reads text only)",
    )


def test_out_of_range_value_is_refused(capsys):
    expect_exit_2(REQUIRED + ["-shard_size", "-1"], capsys, "below the minimum 0")


def test_help_gives_defaults(capsys):
    with pytest.raises(SystemExit):
        parse(parser(), ["-h"])
    out = capsys.readouterr().out
    assert "-src_vocab_size SRC_VOCAB_SIZE, --src_vocab_size SRC_VOCAB_SIZE" in out
    assert "(default: 50000)" in out


def test_yaml_config_equals_command_line(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        "train_src: a\ntrain_tgt: b\nsave_data: out\nsrc_vocab_size: 9\nlower: true\n"
        "dynamic_dict: false\n"
    )
    from_file = parse(parser(), ["-config", str(config)])
    from_line = parse(parser(), REQUIRED + ["-src_vocab_size", "9", "-lower"])
    assert option_values(from_file) == option_values(from_line)


def test_command_line_overrides_config(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("train_src: a\ntrain_tgt: b\nsave_data: out\nsrc_vocab_size: 9\n")
    assert parse(parser(), ["-config", str(config), "-src_vocab_size", "3"]).src_vocab_size == 3


def test_unknown_key_in_config_is_refused(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("train_src: a\ntrain_tgt: b\nsave_data: out\nimage_channel_size: 3\n")
    expect_exit_2(["-config", str(config)], capsys, "-image_channel_size is not supported")


def test_save_config_writes_a_config_that_reproduces_the_options(tmp_path, capsys):
    saved = tmp_path / "saved.yaml"
    args = REQUIRED + ["-src_vocab_size", "11", "-share_vocab", "-tgt_seq_length", "7"]
    with pytest.raises(SystemExit) as exc:
        parse(parser(), args + ["-save_config", str(saved)])
    assert exc.value.code == 0
    assert yaml.safe_load(saved.read_text())["src_vocab_size"] == 11
    reloaded = parse(parser(), ["-config", str(saved)])
    original = parse(parser(), args)
    assert option_values(reloaded) == option_values(original)


COMMAND_LINES = {
    "preprocess": ([config_opts, preprocess_opts], REQUIRED),
    "train": ([config_opts, model_opts, train_opts], ["-data", "d"]),
    "translate": ([config_opts, translate_opts], ["-model", "m.pt", "-src", "s.txt"]),
    "convert": ([config_opts, convert_opts], ["-model", "m.pt", "-output", "o.pt"]),
}


@pytest.mark.parametrize(
    "command,extra",
    [
        ("preprocess", []),
        ("train", []),  # empty lists of options taking one value or more: -data_to_noise ...
        ("train", ["-dropout", "0.3", "0.1", "-dropout_steps", "0", "100", "-lr_mult", "*=2"]),
        ("train", ["-src_noise", "infilling", "-src_noise_prob", "0.1", "-data_to_noise", "a"]),
        ("translate", []),  # -ignore_when_blocking's empty list
        ("translate", ["-ignore_when_blocking", ".", ",", "-beta", "-1"]),
        ("train", ["-brnn"]),  # a switch setting another option (-encoder_type brnn)
        ("convert", ["-from", "opennmt-py", "-to", "ctranslate2"]),  # dests from_format, to_format
    ],
)
def test_every_commands_saved_config_reloads_as_the_same_options(tmp_path, command, extra):
    """What -save_config writes, -config reads back: the same options, for each command (the
    train and translate configs were refused: "-data_to_noise: expected at least one argument";
    convert's: "unrecognized arguments: --from_format=onmt_lite")."""
    groups, required = COMMAND_LINES[command]
    saved = tmp_path / "saved.yaml"
    with pytest.raises(SystemExit) as exc:
        parse(build_parser("prog", groups), required + extra + ["-save_config", str(saved)])
    assert exc.value.code == 0
    reloaded = parse(build_parser("prog", groups), ["-config", str(saved)])
    original = parse(build_parser("prog", groups), required + extra)
    assert reloaded.config == str(saved)
    assert option_values(reloaded) == option_values(original)


def test_an_empty_list_in_a_config_file_is_the_options_default(tmp_path):
    """A config written by OpenNMT-py 1.x's -save_config holds ``ignore_when_blocking: []``: an
    option of one value or more left at its default, read as that default (it was refused:
    "expected at least one argument")."""
    groups, required = COMMAND_LINES["translate"]
    config = tmp_path / "1x.yaml"
    config.write_text("model: m.pt\nsrc: s.txt\nignore_when_blocking: []\nbeam_size: 3\n")
    opt = parse(build_parser("prog", groups), ["-config", str(config)])
    assert (opt.ignore_when_blocking, opt.beam_size) == ([], 3)


@pytest.mark.parametrize(
    "corpora", [[], ["-train_src", "a", "c", "-train_tgt", "b", "d", "-train_ids", "x", "y"]]
)
def test_saved_corpus_lists_and_ids_come_back_from_the_config(tmp_path, corpora):
    """Several -train_src files and their ids, or no ids (1.x's [None]), survive -save_config and
    -config."""
    saved = tmp_path / "saved.yaml"
    with pytest.raises(SystemExit):
        parse(parser(), REQUIRED + corpora + ["-save_config", str(saved)])
    reloaded = parse(parser(), ["-config", str(saved)])
    expected = (["a", "c"], ["x", "y"]) if corpora else (["a"], [None])
    assert (reloaded.train_src, reloaded.train_ids) == expected


@pytest.mark.parametrize(
    "groups,expected",
    [
        ("preprocess", {"data_type", "max_shard_size"}),
        ("train", {"model_type", "queue_size", "gpuid", "apex_opt_level", "loss_scale"}),
        ("translate", {"data_type", "dynamic_dict", "share_vocab", "fp32"}),
    ],
)
def test_options_kept_for_1x_command_lines_have_their_own_help_group(groups, expected):
    """-h shows the options that only let 1.x command lines parse in one group that says so."""
    from onmt_lite.opts import COMPATIBILITY_GROUP, model_opts, train_opts, translate_opts

    option_groups = {
        "preprocess": [preprocess_opts],
        "train": [model_opts, train_opts],
        "translate": [translate_opts],
    }[groups]
    command = build_parser("prog", [config_opts, *option_groups])
    (group,) = [g for g in command._action_groups if g.title == COMPATIBILITY_GROUP]
    assert {action.dest for action in group._group_actions} == expected
    assert "no effect" in group.description
    assert "OpenNMT-py 1.x compatibility:" in command.format_help()


def unsupported_sharing_the_reason_of(name):
    from onmt_lite.opts import UNSUPPORTED_OPTIONS

    return {
        other
        for other, reason in UNSUPPORTED_OPTIONS.items()
        if reason == UNSUPPORTED_OPTIONS[name]
    }


@pytest.mark.parametrize(
    "name,family,words",
    [
        ("exp_host", {"exp_host"}, "Crayon"),
        (
            "window_size",
            {
                "src_dir",
                "image_channel_size",
                "sample_rate",
                "window_size",
                "window_stride",
                "window",
                "n_stft",
                "audio_enc_pooling",
            },
            "image and audio",
        ),
        (
            "n_steps",
            {"bridge_extra_node", "bidir_edges", "state_dim", "n_edge_types", "n_node", "n_steps"},
            "GGNN",
        ),
    ],
)
def test_unsupported_options_share_a_reason_only_with_related_options(name, family, words):
    """Each reason is the option's own: context gates are an RNN decoder feature, not a Transformer
    one; the GGNN's options are not image input."""
    from onmt_lite.opts import UNSUPPORTED_OPTIONS

    assert unsupported_sharing_the_reason_of(name) == family
    assert words in UNSUPPORTED_OPTIONS[name]


def test_no_reason_says_rnn_only():
    """'RNN encoders and decoders only' was the reason given for an RNN decoder option (and is no
    longer true of the encoders)."""
    from onmt_lite.opts import UNSUPPORTED_OPTIONS

    assert not [name for name, reason in UNSUPPORTED_OPTIONS.items() if "RNN encoders" in reason]


@pytest.mark.parametrize(
    "option,value,reason",
    [
        ("encoder_type", "ggnn", "the GGNN (graph) encoder is not implemented"),
        ("encoder_type", "audio", "image and audio encoders are not supported: text only"),
        ("rnn_type", "SRU", "SRU cells are not supported"),
        ("model_type", "vec", "onmt_lite reads text only"),
    ],
)
def test_unsupported_model_types_are_refused_with_their_reason(option, value, reason, capsys):
    from onmt_lite.opts import model_opts, train_opts

    with pytest.raises(SystemExit) as exc:
        parse(
            build_parser("prog", [config_opts, model_opts, train_opts]),
            ["-data", "d", f"-{option}", value],
        )
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"does not support -{option} {value} ({reason})" in err


@pytest.mark.parametrize(
    "args,match",
    [
        (["-learning_rate", "inf"], "-learning_rate: inf is not a finite number"),
        (["-param_init", "inf"], "-param_init: inf is not a finite number"),
        (["-max_grad_norm", "nan"], "-max_grad_norm: nan is outside"),
        (["-seed", str(2**70)], f"-seed: {2**70} is above the maximum"),
        (["-seed", "1.5"], "-seed: '1.5' is not a whole number"),
    ],
)
def test_training_numbers_out_of_range_are_refused_in_one_line(args, match, capsys):
    from onmt_lite.opts import model_opts, train_opts

    with pytest.raises(SystemExit) as exc:
        parse(build_parser("prog", [config_opts, model_opts, train_opts]), ["-data", "d"] + args)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and match in err and len(err.strip().splitlines()) == 1


def test_translation_takes_an_infinite_ratio_but_no_infinite_penalty_weight(capsys):
    from onmt_lite.opts import translate_opts

    command = build_parser("prog", [config_opts, translate_opts])
    args = ["-model", "m.pt", "-src", "s", "-max_length_ratio", "inf"]
    assert parse(command, args).max_length_ratio == float("inf")
    for option in ("-alpha", "-beta"):
        with pytest.raises(SystemExit):
            parse(command, ["-model", "m.pt", "-src", "s", option, "inf"])
        assert "is not a finite number" in capsys.readouterr().err


def test_a_malformed_config_file_and_a_directory_for_save_config_are_one_line_errors(
    tmp_path, capsys
):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train_src: [a\nb: : c\n", encoding="utf-8")
    expect_exit_2(["-config", str(bad)] + REQUIRED, capsys, "bad.yaml")
    (tmp_path / "dir").mkdir()
    from tests.helpers import run_in_process

    result = run_in_process("preprocess", *REQUIRED, "-save_config", tmp_path / "dir")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"onmt_lite_preprocess: error: -save_config {tmp_path / 'dir'}: is a directory; give the "
        "path of a file"
    ]
    assert list((tmp_path / "dir").iterdir()) == [] and list(tmp_path.glob(".*.tmp")) == []


@pytest.mark.parametrize(
    "value", ["CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG", "NOTSET", "50", "30", "0"]
)
def test_log_file_level_takes_1x_names_and_numbers(value):
    """The level is logging's number for the name (1.x's StoreLoggingLevelAction), the number
    itself."""
    import logging

    opt = parse(
        build_parser("p", [config_opts, preprocess_opts]),
        ["-train_src", "s", "-train_tgt", "t", "-save_data", "d", "-log_file_level", value],
    )
    expected = int(value) if value.isdigit() else getattr(logging, value)
    assert opt.log_file_level == expected


@pytest.mark.parametrize("value", ["verbose", "25", "info"])
def test_log_file_level_refuses_other_values(value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse(
            build_parser("p", [config_opts, preprocess_opts]),
            ["-train_src", "s", "-train_tgt", "t", "-save_data", "d", "-log_file_level", value],
        )
    assert exit_info.value.code == 2
    assert f"invalid level '{value}'" in capsys.readouterr().err


def test_brnn_is_encoder_type_brnn_and_builds_a_bidirectional_encoder():
    from onmt_lite.models.builder import build_model
    from tests.model_helpers import VOCABS, model_options

    assert model_options("-brnn").encoder_type == "brnn"
    assert model_options().encoder_type == "rnn"
    # the last wins
    assert model_options("-brnn", "-encoder_type", "transformer").encoder_type == "transformer"
    assert build_model(model_options("-brnn"), VOCABS).encoder.rnn.bidirectional
    assert not build_model(model_options(), VOCABS).encoder.rnn.bidirectional


def test_deprecated_1x_options_take_the_one_value_1x_accepted(capsys):
    """1.x refused -max_shard_size other than 0 and -gpuid with any value; both parse as 1.x parsed
    them."""
    from onmt_lite.opts import model_opts, train_opts

    pre = ["-train_src", "a", "-train_tgt", "b", "-save_data", "x"]
    preprocess = [config_opts, preprocess_opts]
    train = [config_opts, model_opts, train_opts]
    assert (
        parse(build_parser("p", preprocess), [*pre, "-max_shard_size", "0"]).max_shard_size == "0"
    )
    assert parse(build_parser("t", train), ["-data", "d", "-gpuid"]).gpuid == []
    for groups, args, advice in (
        (preprocess, [*pre, "-max_shard_size", "5"], "-shard_size"),
        (train, ["-data", "d", "-gpuid", "0"], "-gpu_ranks"),
    ):
        with pytest.raises(SystemExit):
            parse(build_parser("prog", groups), args)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is refused: deprecated in 1.x" in err and advice in err


def test_queue_size_and_gpu_verbose_level_take_1x_values(capsys):
    from onmt_lite.opts import model_opts, train_opts

    opt = parse(
        build_parser("t", [config_opts, model_opts, train_opts]),
        ["-data", "d", "-queue_size", "8", "-gpu_verbose_level", "1"],
    )
    assert (opt.queue_size, opt.gpu_verbose_level) == (8, 1)
    with pytest.raises(SystemExit):
        parse(
            build_parser("t", [config_opts, model_opts, train_opts]),
            ["-data", "d", "-queue_size", "0"],
        )
    assert "-queue_size" in capsys.readouterr().err


def test_max_sent_length_is_max_length():
    from onmt_lite.opts import translate_opts

    def max_length(*args):
        opt = parse(
            build_parser("t", [config_opts, translate_opts]), ["-model", "m.pt", "-src", "s", *args]
        )
        return opt.max_length

    assert (
        max_length("-max_sent_length", "7") == 7
        and max_length("-max_length", "9") == 9
        and max_length() == 100
    )


def test_parse_records_the_options_given_on_the_command_line_or_in_a_config(tmp_path):
    """``given_options``: what a resumed run tells apart from its defaults (a switch under the
    option it sets, a 1.x abbreviation under the full name), and no option left at its default."""
    config = tmp_path / "c.yaml"
    config.write_text("rnn_size: 32\nshare_embeddings: true\n")
    groups = [config_opts, model_opts, train_opts]
    args = ["-data", "d", "-brnn", "-train_st", "9", "-rnn_type", "LSTM", "-config", str(config)]
    opt = parse(build_parser("prog", groups), args)
    expected = {"data", "encoder_type", "train_steps", "rnn_type", "rnn_size", "share_embeddings"}
    assert opt.given_options == expected | {"config"}
    assert opt.rnn_type == build_parser("prog", groups).get_default("rnn_type")  # at its default
    assert parse(build_parser("prog", groups), ["-data", "d"]).given_options == {"data"}


def test_1x_ratio_is_1x_early_stop_and_refused_below_0(capsys):
    """1.x's -ratio stops a beam by a score heuristic (``Penalties.ratio_stop``); onmt_lite's -ratio
    was a length bound under its name until 2026-11-29 (a 1.x command line got other outputs,
    silently), which is now -max_length_ratio: the two are apart in the search's options."""
    from onmt_lite.opts import translate_opts
    from onmt_lite.translate.loading import search_options
    from onmt_lite.data.vocab import Vocab

    command = build_parser("prog", [config_opts, translate_opts])
    opt = parse(command, ["-model", "m.pt", "-src", "s", "-ratio", "1.5"])
    assert (opt.ratio, opt.max_length_ratio) == (1.5, 0.0)
    searched = search_options(opt, Vocab(["a"]))
    assert (searched.ratio, searched.max_length_ratio) == (1.5, 0.0)
    assert parse(command, ["-model", "m.pt", "-src", "s"]).ratio == 0.0  # off, as in 1.x
    with pytest.raises(SystemExit) as exc:
        parse(command, ["-model", "m.pt", "-src", "s", "-ratio", "-1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.strip().startswith(
        "prog: error: argument -ratio/--ratio: -1.0 is outside [0, "
    )


@pytest.mark.parametrize(
    "args,refused",
    [
        (["-apex_opt_level", "O1", "-loss_scale", "0"], None),
        (["-loss_scale", "-0.0"], None),
        (["-loss_scale", "128"], "'128' is refused: a fixed loss scale is not supported"),
        (["-apex_opt_level", "O2"], "O2 (float16 weights are not supported"),
        (["-apex_opt_level", "O0"], "O0 (it is float32 training: use -model_dtype fp32)"),
    ],
)
def test_1x_apex_options_run_at_their_defaults_which_fp16_does(args, refused, capsys):
    """1.x's -model_dtype fp16 went through apex: its defaults, O1 and a dynamic loss scale (0),
    are what -model_dtype fp16 does, so a 1.x command line with them runs; other values are
    refused with the reason."""
    from onmt_lite.opts import model_opts, train_opts

    command = build_parser("prog", [config_opts, model_opts, train_opts])
    line = ["-data", "d", "-model_dtype", "fp16", *args]
    if refused is None:
        opt = parse(command, line)
        assert (opt.apex_opt_level, opt.loss_scale) == ("O1", 0.0)
        return
    with pytest.raises(SystemExit) as exc:
        parse(command, line)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and refused in err and len(err.splitlines()) == 1
