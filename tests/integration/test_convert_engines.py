"""The other engines run what onmt_lite_convert wrote and translate as onmt_lite does: CTranslate2
(``ctranslate2.Translator``, float32 and int8) and OpenNMT-py 3.5.1 (its onmt_translate, run from
its own environment). Each skips, saying why, where its package is missing.

Models: tests/fixtures/convert's, trained on a reversal task (make_fixtures.sh): OpenNMT-py 3.5.1's
RNN and Transformer with relative positions, onmt_lite's Transformer with sinusoids. Trained models,
not random ones: a random Transformer writes one output for every input, which would compare
nothing. bench/convert_speed.py measures the same on 2,000 toy-ende lines."""

import os
import random
import subprocess

import pytest

from onmt_lite import Translator
from tests.helpers import REPO, invoke, translate_in_process
from tests.integration.test_convert import (
    PEER_SCORE_DIGITS,
    convert,
    fixture,
    read_lines,
    translate,
)

PEER_PYTHON = os.environ.get("OPENNMT_PY_PYTHON", "/tmp/peer-opennmt/bin/python")
# CTranslate2's CPU kernels round otherwise than torch's: sums of log-probabilities differ by up
# to 9e-4 on the fixtures' 200 lines
SCORE_TOLERANCE = 5e-3
INSTALL_CTRANSLATE2 = "pip install 'onmt_lite[ctranslate2]'"


def random_sources(n, seed=0):
    """``n`` lines of the fixtures' task: 2 to 8 of the words w0 .. w15."""
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(16)}" for _ in range(rng.randint(2, 8))) for _ in range(n)]


def lite_models(tmp_path, capsys):
    """``{name: onmt_lite checkpoint}`` of the fixtures (OpenNMT-py's converted)."""
    models = {
        "transformer-sinusoids": fixture("lite_transformer.pt"),
        "cnn-sinusoids": fixture("lite_cnn.pt"),
    }
    for name in ("rnn", "transformer", "transformer_aan"):
        path = tmp_path / f"{name}.pt"
        convert(capsys, "-model", fixture(f"{name}.pt"), "-from", "opennmt-py", "-output", path)
        models[f"opennmt-py-{name}"] = str(path)
    return models


def ctranslate2_outputs(directory, sources, beam):
    ctranslate2 = pytest.importorskip("ctranslate2", reason=INSTALL_CTRANSLATE2)
    translator = ctranslate2.Translator(str(directory), device="cpu")
    results = translator.translate_batch(
        [line.split() for line in sources],
        beam_size=beam,
        max_decoding_length=100,
        length_penalty=0,
        return_scores=True,
    )
    return [" ".join(r.hypotheses[0]) for r in results], [r.scores[0] for r in results]


def same_share(a, b):
    assert len(a) == len(b)
    return sum(x == y for x, y in zip(a, b)) / len(a)


@pytest.mark.parametrize("beam", [1, 5])
def test_ctranslate2_translates_a_converted_opennmt_py_transformer_as_onmt_lite(
    beam, tmp_path, capsys
):
    pytest.importorskip("ctranslate2", reason=INSTALL_CTRANSLATE2)
    lite = tmp_path / "lite.pt"
    convert(capsys, "-model", fixture("transformer.pt"), "-from", "opennmt-py", "-output", lite)
    convert(capsys, "-model", lite, "-to", "ctranslate2", "-output", tmp_path / "ct2")
    sources = read_lines(fixture("src-test.txt"))
    theirs, their_scores = ctranslate2_outputs(tmp_path / "ct2", sources, beam)
    ours, our_scores = translate(str(lite), sources, beam)
    assert theirs == ours
    # CTranslate2's score: the sum of the log-probabilities, as onmt_lite's without a penalty
    assert max(abs(a - b) for a, b in zip(their_scores, our_scores)) < SCORE_TOLERANCE


@pytest.mark.parametrize("beam", [1, 5])
def test_ctranslate2_translates_an_onmt_lite_transformer_with_sinusoids_as_onmt_lite(
    beam, tmp_path, capsys
):
    pytest.importorskip("ctranslate2", reason=INSTALL_CTRANSLATE2)
    lite = fixture("lite_transformer.pt")
    convert(capsys, "-model", lite, "-to", "ctranslate2", "-output", tmp_path / "ct2")
    sources = random_sources(200)
    theirs, their_scores = ctranslate2_outputs(tmp_path / "ct2", sources, beam)
    ours, our_scores = translate(lite, sources, beam)
    assert same_share(theirs, ours) >= 0.99
    assert max(abs(a - b) for a, b in zip(their_scores, our_scores)) < SCORE_TOLERANCE
    assert (
        len(set(ours)) > 50
    )  # the outputs differ from line to line: the comparison means something


@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_our_ctranslate2_model_is_ctranslate2s_own_conversion_of_the_same_weights(
    quantization, tmp_path, capsys
):
    """An independent reference: CTranslate2's own OpenNMT-py converter, given the same weights as
    an OpenNMT-py checkpoint, makes a model that translates exactly as ours, float32 and int8 (so
    what int8 costs is CTranslate2's quantization, not this conversion; bench/README.md has the
    BLEU it costs on toy-ende)."""
    converters = pytest.importorskip("ctranslate2.converters", reason=INSTALL_CTRANSLATE2)
    lite = fixture("lite_transformer.pt")
    ours = tmp_path / "ours"
    convert(capsys, "-model", lite, "-to", "ctranslate2", "-output", ours, "-quantization",
            quantization)  # fmt: skip
    convert(capsys, "-model", lite, "-to", "opennmt-py", "-output", tmp_path / "peer.pt")
    theirs = tmp_path / "theirs"
    reader = converters.OpenNMTPyConverter(str(tmp_path / "peer.pt"), unsafe_deserialization=True)
    reader.convert(str(theirs), quantization=None if quantization == "none" else quantization)
    sources = random_sources(200, seed=2)
    for beam in (1, 5):
        # the same lines; not the same scores: CTranslate2's converter leaves the layer norm's
        # epsilon at its default, where OpenNMT-py and onmt_lite use 1e-6 (ours says so)
        assert (
            ctranslate2_outputs(ours, sources, beam)[0]
            == ctranslate2_outputs(theirs, sources, beam)[0]
        )


def test_an_rnn_is_refused_for_ctranslate2_with_the_reason(tmp_path, capsys):
    lite = lite_models(tmp_path, capsys)["opennmt-py-rnn"]
    code, lines = invoke(
        "convert", ["-model", lite, "-to", "ctranslate2", "-output", tmp_path / "ct2"], capsys
    )
    assert code == 2 and "CTranslate2 runs Transformer models only" in lines[-1]
    assert not (tmp_path / "ct2").exists()


def peer_translate(model, sources, beam, tmp_path, self_attn_type="scaled-dot-flash", *options):
    """OpenNMT-py 3.5.1's onmt_translate on ``sources`` (no length penalty, as onmt_lite), with
    ``options`` (a later value of an option replaces an earlier one); it sets the model's
    ``-self_attn_type`` to its own option's. Its output lines."""
    return run_peer(model, sources, beam, tmp_path, self_attn_type, *options)[0]


def run_peer(model, sources, beam, tmp_path, self_attn_type, *options):
    """``peer_translate``'s run: the output lines and the lines of its -log_file."""
    if not os.path.exists(PEER_PYTHON):
        pytest.skip(
            f"needs OpenNMT-py 3.5.1 at {PEER_PYTHON} (../shared/bench/install_opennmt_py.sh; or "
            "set OPENNMT_PY_PYTHON)"
        )
    src = tmp_path / "src.txt"
    src.write_text("\n".join(sources) + "\n", encoding="utf-8")
    out = tmp_path / f"peer_{beam}.txt"
    log = tmp_path / f"peer_{beam}.log"
    log.unlink(missing_ok=True)  # the peer appends to its log
    command = [PEER_PYTHON, "-c", "from onmt.bin.translate import main; main()"]
    command += ["-model", str(model), "-src", str(src), "-output", str(out), "-log_file", str(log)]
    command += ["-beam_size", str(beam), "-length_penalty", "none", "-max_length", "100"]
    command += ["-batch_size", "30", "-self_attn_type", self_attn_type, *map(str, options)]
    # 3.5.1 pickles argparse.Namespace, which torch >= 2.6 refuses by default
    env = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    return read_lines(out), read_lines(log)


@pytest.mark.parametrize("name", ["rnn", "transformer", "transformer_aan"])
def test_opennmt_py_scores_references_as_onmt_lite(name, tmp_path, capsys):
    """Gold scores (the teacher-forced pass: for the average attention network its average over
    every position at once, not step by step) of OpenNMT-py 3.5.1's fixtures and of their
    conversions: the same to 3.5.1's logged precision, on 100 references of which a third are
    not the model's task (the source itself)."""
    lite = lite_models(tmp_path, capsys)[f"opennmt-py-{name}"]
    sources = random_sources(100, seed=5)
    targets = [s if i % 3 == 0 else " ".join(reversed(s.split())) for i, s in enumerate(sources)]
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(targets) + "\n", encoding="utf-8")
    attention = "average" if name.endswith("aan") else "scaled-dot-flash"
    options = ["-tgt", ref, "-verbose"]
    _, log = run_peer(fixture(f"{name}.pt"), sources, 1, tmp_path, attention, *options)
    theirs = [float(line.split()[2]) for line in log if line.startswith("GOLD SCORE: ")]
    ours = [r.gold_score for r in Translator.load([lite], beam_size=1).translate(sources, targets)]
    assert len(theirs) == len(ours) == 100 and min(theirs) < -10  # some references score badly
    assert max(abs(a - b) for a, b in zip(ours, theirs)) < PEER_SCORE_DIGITS


@pytest.mark.parametrize(
    "name", ["transformer-sinusoids", "opennmt-py-rnn", "opennmt-py-transformer_aan"]
)
def test_opennmt_py_translates_what_onmt_lite_wrote_for_it_as_onmt_lite(name, tmp_path, capsys):
    lite = lite_models(tmp_path, capsys)[name]
    peer = tmp_path / "peer.pt"
    convert(capsys, "-model", lite, "-to", "opennmt-py", "-output", peer)
    sources = random_sources(200, seed=1)
    attention = "average" if name.endswith("aan") else "scaled-dot-flash"
    for beam in (1, 5):
        theirs = peer_translate(peer, sources, beam, tmp_path, attention)
        ours, _ = translate(lite, sources, beam)
        assert theirs == ours, beam


def test_opennmt_py_scores_and_translates_what_onmt_lite_wrote_of_a_cnn_as_onmt_lite(
    tmp_path, capsys
):
    """The convolutional model (onmt_lite's fixture, converted): 3.5.1's gold scores are
    onmt_lite's to its logged precision, and its outputs onmt_lite's, greedy and beam 5. One line
    a batch: 3.5.1's CNN convolves the padding of a batch's shorter sources and attends to it."""
    lite = lite_models(tmp_path, capsys)["cnn-sinusoids"]
    peer = tmp_path / "peer.pt"
    convert(capsys, "-model", lite, "-to", "opennmt-py", "-output", peer)
    sources = random_sources(100, seed=6)
    targets = [s if i % 3 == 0 else " ".join(reversed(s.split())) for i, s in enumerate(sources)]
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(targets) + "\n", encoding="utf-8")
    options = ["-batch_size", 1]
    _, log = run_peer(peer, sources, 1, tmp_path, "scaled-dot", "-tgt", ref, "-verbose", *options)
    theirs = [float(line.split()[2]) for line in log if line.startswith("GOLD SCORE: ")]
    ours = [r.gold_score for r in Translator.load([lite], beam_size=1).translate(sources, targets)]
    assert len(theirs) == len(ours) == 100 and min(theirs) < -10  # some references score badly
    assert max(abs(a - b) for a, b in zip(ours, theirs)) < PEER_SCORE_DIGITS
    for beam in (1, 5):
        ours, _ = translate(lite, sources, beam)
        assert peer_translate(peer, sources, beam, tmp_path, "scaled-dot", *options) == ours, beam
    assert sum(line == " ".join(reversed(s.split())) for line, s in zip(ours, sources)) > 50


@pytest.mark.parametrize("ratio", [0.3, 1.0])
def test_opennmt_py_stops_a_beam_by_ratio_as_onmt_lite(ratio, tmp_path, capsys):
    """-ratio, 1.x's and 3.x's early stop of a beam, on the converted Transformer fixture: 3.5.1,
    given one line a batch (where it reads the line's own source length), writes onmt_lite's
    n-best lists; the stop changes some of them (n-best 2: the second best of a search stopped
    early is not always the exact one)."""
    lite = lite_models(tmp_path, capsys)["opennmt-py-transformer"]
    sources = random_sources(200, seed=3)
    options = ["-n_best", 2, "-ratio", ratio, "-batch_size", 1]
    theirs = peer_translate(
        fixture("transformer.pt"), sources, 5, tmp_path, "scaled-dot-flash", *options
    )
    search = dict(beam_size=5, n_best=2, batch_size=30)
    ours = Translator.load([lite], ratio=ratio, **search).translate(sources)
    exact = Translator.load([lite], **search).translate(sources)
    assert theirs == [hypothesis for result in ours for hypothesis in result.hypotheses]
    assert any(a.hypotheses != b.hypotheses for a, b in zip(ours, exact))


# 1.x's search options on which 3.5.1, given one line a batch, and onmt_lite agree line for line
# (measured, 200 lines). In batches of 30, 3.5.1's outputs change with -block_ngram_repeat 2 and
# the wu coverage penalty (which counts the padding). Apart: -n_best 3, on 15 of 600 lines
# (onmt_lite's n-best lists are exact, 3.5.1 stops when its top beam ends); a -min_length past
# 1.25 x the source + 5 (3.5.1's default -max_length_ratio caps the output there);
# -block_ngram_repeat 1 (3.5.1 takes the last 0 tokens as the whole sequence: it blocks nothing)
AGREED = [
    ["-block_ngram_repeat", 2],
    ["-min_length", 5],
    ["-max_length", 4],
    ["-coverage_penalty", "wu", "-beta", 0.3],
    ["-coverage_penalty", "summary", "-beta", 0.3, "-stepwise_penalty"],
    ["-length_penalty", "wu", "-alpha", 0.6],
    ["-length_penalty", "avg"],
]


@pytest.mark.parametrize("options", AGREED, ids=lambda options: "".join(map(str, options)))
def test_opennmt_py_searches_with_1x_options_as_onmt_lite(options, tmp_path, capsys):
    lite = lite_models(tmp_path, capsys)["opennmt-py-transformer"]
    sources = random_sources(200, seed=3)
    model = fixture("transformer.pt")
    one_a_batch = ["-batch_size", 1, *options]
    theirs = peer_translate(model, sources, 5, tmp_path, "scaled-dot-flash", *one_a_batch)
    src = tmp_path / "src.txt"
    out = tmp_path / "ours.txt"
    search = ["-beam_size", 5, "-max_length", 100, "-batch_size", 30]
    translate_in_process("-model", lite, "-src", src, "-output", out, *search, *options)
    assert read_lines(out) == theirs
