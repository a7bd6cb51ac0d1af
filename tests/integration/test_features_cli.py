"""Source word features end to end from the command line: a task whose target words are decided by a
feature is learnt with the features and not without them; translation maps the features with the
checkpoint's vocabularies and refuses lines with another number of features."""

import json
import random

import pytest

from onmt_lite.models.checkpoint import load_checkpoint
from tests.helpers import (
    exact_match,
    lines,
    run_in_process,
    step_losses,
    train_in_process,
    write_lines,
)
from tests.server_helpers import Server

# the tests marked kernels hold a trained model to a quality or compare translations: make
# test-kernels runs them again under other kernels

S = "\uffe8"
WORDS = [f"w{i}" for i in range(6)]
TRAIN = [
    "-rnn_size",
    32,
    "-word_vec_size",
    16,
    "-layers",
    1,
    "-batch_size",
    16,
    "-optim",
    "adam",
    "-learning_rate",
    0.02,
    "-dropout",
    0,
    "-train_steps",
    250,
    "-valid_steps",
    250,
    "-seed",
    1,
]


def feature_task(rng, n):
    """Sources of 1-3 words, each with a feature ``a`` or ``b``; the target word is
    ``WORD_FEATURE``: without the feature a model can only guess it."""
    sources = []
    targets = []
    for _ in range(n):
        tokens = [(rng.choice(WORDS), rng.choice("ab")) for _ in range(rng.randint(1, 3))]
        sources.append(" ".join(f"{w}{S}{f}" for w, f in tokens))
        targets.append(" ".join(f"{w}_{f}" for w, f in tokens))
    return sources, targets


def strip_features(text):
    return " ".join(token.split(S)[0] for token in text.split())


def trained(directory, sources, targets, valid, merge):
    """Preprocess and train from the command line; returns the checkpoint path."""
    paths = {
        name: write_lines(directory / f"{name}.txt", text)
        for name, text in (
            ("src", sources),
            ("tgt", targets),
            ("vsrc", valid[0]),
            ("vtgt", valid[1]),
        )
    }
    result = run_in_process(
        "preprocess",
        "-train_src",
        paths["src"],
        "-train_tgt",
        paths["tgt"],
        "-valid_src",
        paths["vsrc"],
        "-valid_tgt",
        paths["vtgt"],
        "-save_data",
        directory / "data",
    )
    assert result.returncode == 0, result.stderr
    result = run_in_process(
        "train",
        "-data",
        directory / "data",
        "-save_model",
        directory / "m",
        "-feat_merge",
        merge,
        *TRAIN,
    )
    assert result.returncode == 0, result.stderr
    return directory / "m_step_250.pt"


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    rng = random.Random(0)
    (src, tgt), valid = feature_task(rng, 600), feature_task(rng, 60)
    root = tmp_path_factory.mktemp("features")
    for name in ("feats", "plain"):
        (root / name).mkdir()
    return {
        "with": trained(root / "feats", src, tgt, valid, "concat"),
        "without": trained(
            root / "plain",
            [strip_features(s) for s in src],
            tgt,
            ([strip_features(s) for s in valid[0]], valid[1]),
            "concat",
        ),
        "valid": valid,
        "root": root,
    }


def translate(model, sources, directory, *extra):
    src = write_lines(directory / "in.txt", sources)
    result = run_in_process(
        "translate", "-model", model, "-src", src, "-output", directory / "out.txt", *extra
    )
    return result, (lines(directory / "out.txt") if result.returncode == 0 else None)


@pytest.mark.kernels
def test_a_model_with_the_features_learns_what_only_the_features_tell(task, tmp_path):
    sources, targets = task["valid"]
    result, with_features = translate(task["with"], sources, tmp_path)
    assert result.returncode == 0, result.stderr
    result, without = translate(task["without"], [strip_features(s) for s in sources], tmp_path)
    assert result.returncode == 0, result.stderr
    accuracy = exact_match(with_features, targets)
    baseline = exact_match(without, targets)
    assert accuracy >= 0.9 and accuracy >= baseline + 0.3, (accuracy, baseline)


def test_the_checkpoint_holds_the_feature_vocabulary_and_the_merge(task):
    checkpoint = load_checkpoint(task["with"])
    assert checkpoint["vocab"]["src_feats"] == [
        ["<unk>", "<blank>", "<s>", "</s>", "a", "b"]
    ] or checkpoint["vocab"]["src_feats"] == [["<unk>", "<blank>", "<s>", "</s>", "b", "a"]]
    assert checkpoint["opt"]["feat_merge"] == "concat"
    feat_table = checkpoint["model"]["encoder.embeddings.feat_luts.0.weight"]
    assert tuple(feat_table.shape) == (6, int(6**0.7))  # 1.x's size rule, default exponent 0.7
    assert "src_feats" not in load_checkpoint(task["without"])["vocab"]


def test_translation_refuses_a_line_with_another_number_of_features(task, tmp_path):
    result, _ = translate(task["with"], [f"w1{S}a", f"w2{S}a w3"], tmp_path)
    assert result.returncode == 2
    assert (
        f"{tmp_path / 'in.txt'}:2: token 2 ('w3') has 0 word feature(s) where the model's source "
        "tokens have 1" in result.stderr
    )
    result, _ = translate(task["without"], [f"w1{S}a"], tmp_path)
    assert result.returncode == 2 and "in.txt:1: token 1" in result.stderr


def test_target_features_are_refused_by_preprocess(tmp_path):
    src = write_lines(tmp_path / "s.txt", [f"w1{S}a"])
    tgt = write_lines(tmp_path / "t.txt", [f"w1{S}a"])
    result = run_in_process(
        "preprocess", "-train_src", src, "-train_tgt", tgt, "-save_data", tmp_path / "d"
    )
    assert result.returncode == 2
    assert "t.txt:1: target token 1" in result.stderr and "only the source side" in result.stderr
    assert not list(tmp_path.glob("d.*"))


def test_a_resumed_run_with_features_gives_the_losses_of_the_uninterrupted_run(task, tmp_path):
    data = str(task["root"] / "feats" / "data")
    args = [
        "-rnn_size",
        16,
        "-word_vec_size",
        8,
        "-feat_merge",
        "mlp",
        "-batch_size",
        8,
        "-dropout",
        0.3,
        "-optim",
        "adam",
        "-learning_rate",
        0.01,
        "-report_every",
        1,
        "-save_checkpoint_steps",
        3,
        "-seed",
        3,
    ]
    _, full = train_in_process(data, str(tmp_path / "full"), *args, "-train_steps", 6)
    _, first = train_in_process(data, str(tmp_path / "part"), *args, "-train_steps", 3)
    _, second = train_in_process(
        data,
        str(tmp_path / "part"),
        *args,
        "-train_steps",
        6,
        "-train_from",
        tmp_path / "part_step_3.pt",
    )
    full_losses = step_losses(full)
    assert sorted(full_losses) == list(range(1, 7)) and len(set(full_losses.values())) == 6
    assert {**step_losses(first), **step_losses(second)} == full_losses
    assert (
        load_checkpoint(str(tmp_path / "part_step_6.pt"))["model"].keys()
        == load_checkpoint(str(tmp_path / "full_step_6.pt"))["model"].keys()
    )


def test_feature_options_on_data_without_features_are_reported_as_doing_nothing(task, tmp_path):
    result = run_in_process(
        "train",
        "-data",
        task["root"] / "plain" / "data",
        "-save_model",
        tmp_path / "m",
        *TRAIN,
        "-feat_merge",
        "sum",
        "-feat_vec_size",
        5,
        "-train_steps",
        1,
    )
    assert result.returncode == 0, result.stderr
    for name in ("-feat_merge sum", "-feat_vec_size 5"):
        assert f"{name} has no effect: {task['root'] / 'plain' / 'data'} has no source word " in (
            result.stderr
        )


def test_replace_unk_copies_the_bare_source_word_not_its_features(task, tmp_path):
    """Target vocabulary of 2 words: most outputs are <unk>, each replaced by the attended source
    word (w0..w5, words no target has), never by the token with its feature."""
    root = task["root"] / "feats"
    result = run_in_process(
        "preprocess",
        "-train_src",
        root / "src.txt",
        "-train_tgt",
        root / "tgt.txt",
        "-valid_src",
        root / "vsrc.txt",
        "-valid_tgt",
        root / "vtgt.txt",
        "-save_data",
        tmp_path / "d",
        "-tgt_vocab_size",
        2,
    )
    assert result.returncode == 0, result.stderr
    result = run_in_process(
        "train", "-data", tmp_path / "d", "-save_model", tmp_path / "m", *TRAIN, "-train_steps", 60
    )
    assert result.returncode == 0, result.stderr
    sources = task["valid"][0][:20]
    result, replaced = translate(tmp_path / "m_step_60.pt", sources, tmp_path, "-replace_unk")
    assert result.returncode == 0, result.stderr
    _, plain = translate(tmp_path / "m_step_60.pt", sources, tmp_path)
    n_unk = 0
    for source, with_unk, without in zip(sources, plain, replaced):
        words = strip_features(source).split()
        assert len(with_unk.split()) == len(without.split())
        for token, out in zip(with_unk.split(), without.split()):
            n_unk += token == "<unk>"
            assert out in words if token == "<unk>" else out == token
    assert n_unk >= 10


def test_the_server_translates_feature_lines_as_the_command_line(task, tmp_path):
    conf = tmp_path / "conf.json"
    conf.write_text(
        json.dumps(
            {
                "models_root": str(task["with"].parent),
                "models": [{"id": 1, "model": task["with"].name, "opt": {"beam_size": 3}}],
            }
        )
    )
    sources = task["valid"][0][:6]
    _, expected = translate(task["with"], sources, tmp_path, "-beam_size", 3)
    server = Server(str(conf))
    try:
        status, answer = server.call("POST", "/translate", [{"src": s, "id": 1} for s in sources])
        assert status == 200 and [item["tgt"] for item in answer[0]] == expected
        status, answer = server.call("POST", "/translate", [{"src": f"w1{S}a w2", "id": 1}])
        assert status == 400 and "token 2 ('w2') has 0 word feature(s)" in json.dumps(answer)
    finally:
        assert server.stop() == 0, "".join(server.log)
