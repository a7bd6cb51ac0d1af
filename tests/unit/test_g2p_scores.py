import importlib.util
import math
import os

import pytest

from tests.helpers import REPO, write_lines

spec = importlib.util.spec_from_file_location(
    "g2p_scores", os.path.join(REPO, "tools", "g2p_scores.py")
)
g2p_scores = importlib.util.module_from_spec(spec)
spec.loader.exec_module(g2p_scores)


def test_edit_distance_by_hand():
    assert g2p_scores.edit_distance("K AE T".split(), "K AE T".split()) == 0
    assert g2p_scores.edit_distance("K AE T".split(), "K AH T S".split()) == 2
    assert g2p_scores.edit_distance([], "A B".split()) == 2


def test_scores_by_hand():
    accuracy, per = g2p_scores.scores(
        [["K", "AE", "T"], ["D", "AO"]], [["K", "AE", "T"], ["D", "AO", "G"]]
    )
    assert accuracy == 50.0 and per == pytest.approx(100 * 1 / 6)


def test_command_prints_scores_and_examples(tmp_path, capsys):
    hyp = write_lines(tmp_path / "h", ["K AE T", "D AO"])
    ref = write_lines(tmp_path / "r", ["K AE T", "D AO G"])
    src = write_lines(tmp_path / "s", ["c a t", "d o g"])
    g2p_scores.main(["-hyp", hyp, "-ref", ref, "-src", src])
    out = capsys.readouterr().out
    assert "word accuracy 50.00%, phone error rate 16.67%, BLEU" in out and "(2 words)" in out
    assert "ok  cat" in out and "ERR dog" in out
    with pytest.raises(SystemExit) as exc:
        g2p_scores.main(["-hyp", hyp, "-ref", write_lines(tmp_path / "one", ["X"])])
    assert exc.value.code == 2


def test_bleu_over_phones_by_hand():
    # Every n-gram of the hypothesis matches; only the brevity penalty exp(1 - 6/5) remains.
    bleu = g2p_scores.phone_bleu([["K", "AE", "T", "S", "IH"]], [["K", "AE", "T", "S", "IH", "Z"]])
    assert bleu == pytest.approx(100 * math.exp(1 - 6 / 5))


def test_empty_files_are_a_one_line_refusal(tmp_path, capsys):
    empty = write_lines(tmp_path / "e", [])
    with pytest.raises(SystemExit) as exc:
        g2p_scores.main(["-hyp", empty, "-ref", empty])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nothing to score" in err
