"""tools/options_table.py and docs/opennmt_py_1x_options.txt: every OpenNMT-py 1.x option is
accepted or refused by name, as docs/options.md says, and docs/options.md is the tool's output."""

import os
import re
import subprocess
import sys

import pytest

from onmt_lite.opts import UNSUPPORTED_OPTIONS, parse
from tests.helpers import REPO, tool

REFERENCE = os.path.join(REPO, "onmt_lite", "opts", "opennmt_py_1x_options.txt")
OPTIONS_PAGE = os.path.join(REPO, "docs", "options.md")
REGENERATE = "python tools/options_table.py -output docs/options.md"
COUNTS = {"preprocess": 44, "train": 125, "translate": 48}  # OpenNMT-py 1.2.0's onmt/opts.py

# Values for options whose default is not a valid value on a command line.
SAMPLES = {
    "batch_size": "30",  # (translate: no default, one per device)
    "train_src": "src.txt",
    "train_tgt": "tgt.txt",
    "save_data": "out/demo",
    "data": "out/demo",
    "model": "model.pt",
    "src": "src.txt",
    "gpu_ranks": "0",
    "early_stopping_criteria": "accuracy",
    "copy_attn_type": "mlp",
    "src_noise": "infilling",
    "src_noise_prob": "0.1",
    "context_gate": "both",
}


@pytest.fixture(scope="module")
def table():
    return tool("options_table")


@pytest.fixture(scope="module")
def reference(table):
    return table.read_reference(REFERENCE)


def test_the_parser_abbreviates_the_listed_1x_names(reference):
    """The names the parser abbreviates are the reference list's, which is installed with the
    package."""
    from onmt_lite.opts.opennmt_py_1x import OPENNMT_PY_1X_OPTIONS

    assert {command: list(names) for command, names in OPENNMT_PY_1X_OPTIONS.items()} == reference
    assert {command: len(names) for command, names in OPENNMT_PY_1X_OPTIONS.items()} == COUNTS


def rows_with(table, reference, command, statuses):
    rows, _, _ = table.command_rows(command, reference[command])
    return [(option[1:], note) for option, status, note in rows if status in statuses]


def sample_values(action):
    """Command-line values for ``action``: its default where that is a valid value, else a
    sample."""
    if action.nargs == 0:
        return []
    default = action.default
    if action.dest in SAMPLES:
        return [SAMPLES[action.dest]]
    if isinstance(default, list):
        return [str(v) for v in default] or ([] if action.nargs == "*" else ["x"])
    return [str(default)] if default not in (None, "") else ["x"]


def required_args(parser):
    """A minimal valid command line: each required option with a sample value."""
    args = []
    for action in parser._actions:
        if action.required and action.option_strings:
            args += [action.option_strings[0]] + sample_values(action)
    return args


# --- (c) the data file ----------------------------------------------------------------------------


def test_the_reference_lists_every_1x_option_of_each_command(reference):
    assert {command: len(names) for command, names in reference.items()} == COUNTS
    for command in COUNTS:
        assert reference[command][:2] == ["config", "save_config"]
    assert {"train_src", "save_data", "shard_size", "src_vocab", "dynamic_dict"} <= set(
        reference["preprocess"]
    )
    assert {
        "data",
        "encoder_type",
        "rnn_size",
        "optim",
        "gpu_ranks",
        "average_decay",
        "lambda_align",
        "src_noise",
    } <= set(reference["train"])
    assert {"model", "src", "beam_size", "replace_unk", "tgt_prefix", "fp32"} <= set(
        reference["translate"]
    )
    with open(REFERENCE, encoding="utf-8") as f:
        header = f.read().split("\npreprocess ", 1)[0]
    assert "OpenNMT-py 1.2.0" in header and "onmt/opts.py" in header and "sha256" in header


def test_the_groups_are_those_of_the_commands(table):
    for command, (prog, groups, _) in table.COMMANDS.items():
        with open(os.path.join(REPO, "onmt_lite", "bin", f"{command}.py"), encoding="utf-8") as f:
            source = f.read()
        assert f'PROG = "{prog}"' in source
        assert f"build_parser(PROG, [{', '.join(g.__name__ for g in groups)}]" in source


def test_every_1x_option_is_accepted_or_refused_by_name(table, reference):
    unknown = {
        command: table.command_rows(command, names)[1] for command, names in reference.items()
    }
    assert unknown == {command: [] for command in reference}, (
        "OpenNMT-py 1.x options that onmt_lite neither accepts nor lists in UNSUPPORTED_OPTIONS "
        "(onmt_lite/opts/parser.py); add each with the reason it is refused"
    )


# --- (a) same and changed options are accepted ----------------------------------------------------


@pytest.mark.parametrize("command", COUNTS)
def test_same_and_changed_options_are_accepted(table, reference, command, tmp_path, capsys):
    accepted = rows_with(table, reference, command, ("same", "changed"))
    assert len(accepted) > 10
    config = tmp_path / "run.yaml"
    config.write_text("log_file: ''\n", encoding="utf-8")
    failures = []
    for name, _ in accepted:
        parser = table.command_parser(command)
        action = parser._option_string_actions[f"-{name}"]
        assert f"--{name}" in parser._option_string_actions
        if name == "save_config":
            saved = tmp_path / f"{command}.yaml"
            with pytest.raises(SystemExit) as exc:
                parse(parser, required_args(parser) + ["-save_config", str(saved)])
            assert exc.value.code == 0 and saved.exists()
            continue
        values = [str(config)] if name == "config" else sample_values(action)
        try:
            opt = parse(parser, required_args(parser) + [f"-{name}"] + values)
        except SystemExit:
            failures.append((name, values, capsys.readouterr().err.strip()))
            continue
        if action.nargs == 0:  # a switch: True, or its constant (-brnn: encoder_type brnn)
            assert getattr(opt, action.dest) == action.const and action.const is not None, name
        elif name != "config":
            assert getattr(opt, action.dest) is not None, name
    assert not failures


def test_changed_options_say_how(table, reference):
    for command in COUNTS:
        for name, note in rows_with(table, reference, command, ("changed",)):
            assert len(note) > 10, (command, name)


# --- (b) not supported options are refused with their reason --------------------------------------


@pytest.mark.parametrize("command", COUNTS)
def test_unsupported_options_are_refused_with_the_reason(table, reference, command, capsys):
    refused = rows_with(table, reference, command, ("not supported",))
    assert len(refused) >= 5  # translate: 8 (image and audio, alignment heads)
    for name, reason in refused:
        assert reason == UNSUPPORTED_OPTIONS[name]
        for spelling in ([f"-{name}", "1"], [f"--{name}=1"], [f"-{name}"]):
            parser = table.command_parser(command)
            with pytest.raises(SystemExit) as exc:
                parse(parser, required_args(parser) + spelling)
            assert exc.value.code == 2, spelling
            err = capsys.readouterr().err
            assert err.count("\n") == 1, err
            assert f"option -{name} is not supported by onmt_lite: {reason}" in err, err


def test_new_options_are_those_1x_lacks(table, reference):
    rows, _, _ = table.command_rows("train", reference["train"])
    new = {option[1:]: note for option, status, note in rows if status == "new"}
    assert {"debug", "lr_mult", "freeze", "loss_class", "valid_metrics", "weight_decay"} <= set(new)
    assert not set(new) & set(reference["train"])
    assert "glob" in new["lr_mult"]
    rows, _, _ = table.command_rows("translate", reference["translate"])
    assert ("-out", "new", "another spelling of -output") in rows


# --- (d) docs/options.md is the tool's output -----------------------------------------------------


def test_docs_options_md_is_up_to_date(table, reference):
    assert table.PAGE == OPTIONS_PAGE
    assert os.path.isfile(OPTIONS_PAGE), f"docs/options.md is missing: run {REGENERATE}"
    with open(OPTIONS_PAGE, encoding="utf-8") as f:
        text = f.read()
    expected = table.page(reference)
    assert text == expected, (
        f"docs/options.md differs from what tools/options_table.py generates now: run {REGENERATE}"
    )
    assert text.startswith(table.TITLE + "\n") and "| `-copy_attn_force` | same |" in text
    assert table.BEGIN not in text and table.END not in text


# --- the tool -------------------------------------------------------------------------------------


def run(table, *args):
    return table.main([str(a) for a in args])


def fails(table, capsys, *args):
    with pytest.raises(SystemExit) as exc:
        run(table, *args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.fixture
def small(table, tmp_path, monkeypatch):
    """A reference of a few options, with CHANGED and NOTES reduced to match it."""
    monkeypatch.setattr(table, "CHANGED", {"shuffle": "shuffles"})
    monkeypatch.setattr(table, "NOTES", {"translate:model": "ensembles | several"})
    path = tmp_path / "opts.txt"
    path.write_text(
        "# a comment\n\npreprocess train_src\npreprocess shuffle\npreprocess src_dir\n"
        "train data\ntranslate model\n",
        encoding="utf-8",
    )
    return path


def test_help_runs_as_a_script():
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", "options_table.py"), "-h"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: options_table.py" in result.stdout and "-readme" in result.stdout


def test_output_writes_the_page(table, small, tmp_path, capsys):
    out = tmp_path / "options.md"
    run(table, "-reference", small, "-output", out)
    assert "wrote the options page" in capsys.readouterr().out
    text = out.read_text(encoding="utf-8")
    assert text == table.page(table.read_reference(str(small)))
    assert (
        text.startswith(f"{table.TITLE}\n\n") and "-output docs/options.md" in text.split("\n")[2]
    )
    assert text.endswith(table.render(table.read_reference(str(small))))
    assert re.search(r"\| `-train_src` \| same \| +\|", text)
    assert "| `-shuffle` | changed | shuffles |" in text
    assert f"| `-src_dir` | not supported | {UNSUPPORTED_OPTIONS['src_dir']} |" in text
    assert "| `-model` | same | ensembles \\| several |" in text  # a | in a note is escaped
    assert "| `-debug` | new |" in text and "| `-lr_mult` | new |" in text
    assert "| `onmt_lite_preprocess` (1.x `preprocess.py`) | 3 | 1 | 1 | 1 |" in text
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    mtime = out.stat().st_mtime_ns
    run(table, "-reference", small, "-output", out)
    assert "up to date" in capsys.readouterr().out
    assert out.stat().st_mtime_ns == mtime and out.read_text(encoding="utf-8") == text
    out.write_text(text.replace("shuffles", "stale"), encoding="utf-8")
    run(table, "-reference", small, "-output", out)
    assert "wrote the options page" in capsys.readouterr().out
    assert out.read_text(encoding="utf-8") == text


def test_without_a_file_the_page_is_printed(table, small, capsys):
    run(table, "-reference", small)
    assert capsys.readouterr().out == table.page(table.read_reference(str(small)))


def test_output_and_readme_together_are_refused(table, small, tmp_path, capsys):
    err = fails(
        table,
        capsys,
        "-reference",
        small,
        "-output",
        tmp_path / "o.md",
        "-readme",
        tmp_path / "R.md",
    )
    assert "-output or -readme" in err
    assert not (tmp_path / "o.md").exists()


def test_readme_replaces_only_the_marked_section(table, small, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# Title\n\nbefore\n{table.BEGIN}\nold table\n{table.END}\nafter\n", encoding="utf-8"
    )
    run(table, "-reference", small, "-readme", readme)
    assert "updated" in capsys.readouterr().out
    text = readme.read_text(encoding="utf-8")
    assert text.startswith(f"# Title\n\nbefore\n{table.BEGIN}\n\n") and text.endswith(
        f"\n\n{table.END}\nafter\n"
    )
    assert "old table" not in text
    assert (
        table.readme_section(text).strip() == table.render(table.read_reference(str(small))).strip()
    )
    run(table, "-reference", small, "-readme", readme)
    assert "up to date" in capsys.readouterr().out
    assert readme.read_text(encoding="utf-8") == text


@pytest.mark.parametrize(
    "content",
    [
        "no markers\n",
        "<!-- options-table:begin -->\nno end\n",
        "<!-- options-table:end -->\n<!-- options-table:begin -->\n",
    ],
)
def test_readme_without_the_markers_is_refused(table, small, tmp_path, capsys, content):
    readme = tmp_path / "README.md"
    readme.write_text(content, encoding="utf-8")
    err = fails(table, capsys, "-reference", small, "-readme", readme)
    assert "README.md" in err and "options-table:" in err
    assert readme.read_text(encoding="utf-8") == content


def test_an_option_neither_accepted_nor_refused_is_an_error(table, small, tmp_path, capsys):
    with open(small, "a", encoding="utf-8") as f:
        f.write("train no_such_option\ntranslate other_missing_option\n")
    err = fails(table, capsys, "-reference", small, "-output", tmp_path / "o.md")
    assert "train -no_such_option" in err and "translate -other_missing_option" in err
    assert "UNSUPPORTED_OPTIONS" in err
    assert not (tmp_path / "o.md").exists()


def test_stale_changed_entries_are_an_error(table, small, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(table, "CHANGED", {"shuffle": "shuffles", "no_such_option": "differs"})
    err = fails(table, capsys, "-reference", small, "-output", tmp_path / "o.md")
    assert "CHANGED['no_such_option']" in err


@pytest.mark.parametrize(
    "content, message",
    [
        ("train\n", "expected 'COMMAND NAME'"),
        ("build_vocab src\n", "expected 'COMMAND NAME'"),
        ("train data\ntrain data\n", "listed twice"),
    ],
)
def test_a_bad_reference_is_refused_with_its_line(table, tmp_path, capsys, content, message):
    path = tmp_path / "opts.txt"
    path.write_text(content, encoding="utf-8")
    err = fails(table, capsys, "-reference", path)
    assert message in err and "opts.txt:" in err
    assert "missing.txt" in fails(table, capsys, "-reference", tmp_path / "missing.txt")
