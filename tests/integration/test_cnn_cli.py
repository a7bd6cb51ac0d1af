"""The convolutional model end to end: 1.x's command line trains it on a reversal task, which it
learns; a resumed run gives the uninterrupted run's losses; every line translates alike whatever
its batch (rows joining a running search included); onmt_lite_convert takes it to OpenNMT-py and
back, and refuses it for CTranslate2 by name."""

import pytest

from tests.helpers import (
    assert_resumes_exactly,
    exact_match,
    lines,
    run_in_process,
    translate_in_process,
    trained_reversal_model,
)

CNN = [
    "-encoder_type",
    "cnn",
    "-decoder_type",
    "cnn",
    "-cnn_kernel_width",
    3,
    "-position_encoding",
    "-layers",
    2,
    "-rnn_size",
    64,
    "-word_vec_size",
    64,
    "-batch_size",
    32,
    "-optim",
    "adam",
    "-learning_rate",
    0.003,
    "-seed",
    1,
]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """Trained 400 steps on 3,000 reversal pairs, no dropout (measured: 90% exact match on 100
    held-out lines, beam 5)."""
    corpus = {"n_train": 3000, "n_valid": 100}
    return trained_reversal_model(tmp_path_factory, "cnn", [], [*CNN, "-dropout", 0], 400, **corpus)


def translate(checkpoint, src, out, *args):
    translate_in_process("-model", checkpoint, "-src", src, "-output", out, *args)
    return lines(out)


def test_a_cnn_learns_the_reversal_task(model, tmp_path):
    out = translate(model["model"], model["src"], tmp_path / "out.txt", "-beam_size", 5)
    assert exact_match(out, lines(model["tgt"])) >= 0.75


@pytest.mark.kernels
def test_every_line_translates_alike_whatever_its_batch(model, tmp_path):
    search = ["-beam_size", 3, "-n_best", 2, "-max_length", 12]
    runs = [
        translate(model["model"], model["src"], tmp_path / f"b{size}.txt", *search, *batch)
        for size, batch in (
            (1, ["-batch_size", 1]),
            (7, ["-batch_size", 7]),
            (40, ["-batch_size", 40, "-batch_type", "tokens"]),
        )
    ]
    assert runs[1] == runs[0] and runs[2] == runs[0] and len(runs[0]) == 200


def test_a_resumed_run_gives_the_losses_of_an_uninterrupted_one(model, tmp_path):
    assert_resumes_exactly(model["data"], tmp_path, *CNN, "-dropout", 0.3, "-report_every", 1)


def test_opennmt_py_and_back_translates_alike_and_ctranslate2_is_refused(model, tmp_path):
    peer = tmp_path / "peer.pt"
    back = tmp_path / "back.pt"
    for args in (["-to", "opennmt-py", "-output", peer], ["-from", "opennmt-py", "-output", back]):
        source = model["model"] if args[0] == "-to" else peer
        assert run_in_process("convert", "-model", source, *args).returncode == 0
    ours = translate(model["model"], model["src"], tmp_path / "ours.txt")
    assert translate(str(back), model["src"], tmp_path / "back.txt") == ours
    out = tmp_path / "ct2"
    result = run_in_process(
        "convert", "-model", model["model"], "-to", "ctranslate2", "-output", out
    )
    assert result.returncode == 2
    assert "-encoder_type cnn -decoder_type cnn" in result.stderr.splitlines()[-1]
    assert not out.exists()
