"""Sentencepiece end to end: train a model with tools/spm_train.py, preprocess, train, translate."""

import os
import sys

import torch

from tests.helpers import REPO, reversal_corpus, run_in_process


def test_subword_pipeline_detokenizes_its_output(tmp_path):
    import subprocess

    paths = reversal_corpus(str(tmp_path), n_train=200, n_valid=10)
    spm = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "tools", "spm_train.py"),
            "-input",
            paths["src_train"],
            paths["tgt_train"],
            "-model_prefix",
            str(tmp_path / "sp"),
            "-vocab_size",
            "24",
            "-model_type",
            "bpe",
        ],
        capture_output=True,
        text=True,
    )
    assert spm.returncode == 0, spm.stderr
    model = str(tmp_path / "sp.model")
    pre = run_in_process(
        "preprocess",
        "-train_src",
        paths["src_train"],
        "-train_tgt",
        paths["tgt_train"],
        "-valid_src",
        paths["src_valid"],
        "-valid_tgt",
        paths["tgt_valid"],
        "-save_data",
        tmp_path / "d",
        "-src_spm",
        model,
        "-tgt_spm",
        model,
    )
    assert pre.returncode == 0, pre.stderr
    vocab = torch.load(tmp_path / "d.vocab.pt", weights_only=True)
    assert any(word.startswith("\u2581") for word in vocab["src"])  # pieces, not words
    train = run_in_process(
        "train",
        "-data",
        tmp_path / "d",
        "-save_model",
        tmp_path / "m",
        "-rnn_size",
        16,
        "-word_vec_size",
        8,
        "-layers",
        1,
        "-train_steps",
        3,
    )
    assert train.returncode == 0, train.stderr
    assert torch.load(tmp_path / "m_step_3.pt", weights_only=True)["preprocess"]["tgt_spm"] == model
    out = tmp_path / "out.txt"
    result = run_in_process(
        "translate",
        "-model",
        tmp_path / "m_step_3.pt",
        "-src",
        paths["src_valid"],
        "-tgt",
        paths["tgt_valid"],
        "-output",
        out,
        "-min_length",
        2,
        "-max_length",
        8,
    )
    assert result.returncode == 0, result.stderr
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 10 and all(line and "\u2581" not in line for line in lines)
    assert "BLEU = " in result.stderr
