"""onmt_lite_convert: OpenNMT-py checkpoints (3.5.1's, written by it; 1.x's, built here from 1.x's
layout) translate in onmt_lite as in OpenNMT-py; onmt_lite models written for OpenNMT-py come back
the same; a pickle that would run code is refused without running it. The OpenNMT-py and
CTranslate2 sides of the round trips are in test_convert_engines.py."""

import argparse
import collections
import functools
import os
import sys
import types

import pytest
import torch

from onmt_lite import Translator
from onmt_lite.models.checkpoint import build_checkpoint, load_checkpoint
from onmt_lite.utils.files import save_tensors
from tests.helpers import REPO, PickledCall, invoke
from tests.model_helpers import SRC_VOCAB, VOCABS, make_model

FIXTURES = os.path.join(REPO, "tests", "fixtures", "convert")
PEER_SCORE_DIGITS = 1e-3  # OpenNMT-py's -verbose logs a sentence's score with 4 decimals


def fixture(name):
    return os.path.join(FIXTURES, name)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def translate(model, sources, beam):
    """``(best hypotheses, their scores)`` of onmt_lite's search (no length penalty)."""
    results = Translator.load([model], beam_size=beam).translate(sources)
    return [r.hypotheses[0] for r in results], [r.scores[0] for r in results]


def convert(capsys, *args):
    code, lines = invoke("convert", [str(a) for a in args], capsys)
    assert code == 0, lines
    return lines


@pytest.mark.parametrize("name", ["rnn", "transformer", "transformer_aan"])
def test_opennmt_py_3x_checkpoints_translate_in_onmt_lite_as_in_opennmt_py(name, tmp_path, capsys):
    """rnn: brnn encoder, 2 layers, input feed, general attention; transformer: 2 layers with
    relative positions; transformer_aan: its decoder's the average attention network with its
    feed-forward block (make_fixtures.sh): the outputs and scores OpenNMT-py 3.5.1 wrote."""
    lite = tmp_path / "lite.pt"
    convert(capsys, "-model", fixture(f"{name}.pt"), "-from", "opennmt-py", "-output", lite)
    assert torch.load(lite, weights_only=True)["vocab"]["src"][:4] == [
        "<unk>",
        "<blank>",
        "<s>",
        "</s>",
    ]
    sources = read_lines(fixture("src-test.txt"))
    for search, beam in (("greedy", 1), ("beam5", 5)):
        hypotheses, scores = translate(str(lite), sources, beam)
        assert hypotheses == read_lines(fixture(f"{name}.{search}.txt")), search
        expected = [float(x) for x in read_lines(fixture(f"{name}.{search}.scores"))]
        assert len(expected) == len(scores)
        worst = max(abs(a - b) for a, b in zip(scores, expected))
        assert worst < PEER_SCORE_DIGITS, (search, worst)


def _one_x_classes():
    """Classes and functions named as torchtext 0.4 and OpenNMT-py 1.2.0 named theirs, in modules
    registered under those names only while a checkpoint is written (the reader never imports)."""
    names = {
        "torchtext": None,
        "torchtext.vocab": ["Vocab"],
        "torchtext.data": None,
        "torchtext.data.field": ["RawField", "Field"],
        "onmt": None,
        "onmt.inputters": None,
        "onmt.inputters.text_dataset": ["TextMultiField", "_feature_tokenize"],
    }
    modules = {}
    made = {}
    for module_name, members in names.items():
        module = types.ModuleType(module_name)
        modules[module_name] = module
        for member in members or []:
            if member.startswith("_"):
                thing = lambda *a, **k: None  # noqa: E731
            else:
                thing = type(member, (), {})
            thing.__module__ = module_name
            thing.__qualname__ = member
            thing.__name__ = member
            setattr(module, member, thing)
            made[member] = thing
    return modules, made


def _with_state(cls, **state):
    obj = cls()
    obj.__dict__.update(state)
    return obj


def one_x_field(made, words, side):
    """A 1.x ``TextMultiField`` whose ``Field`` has a torchtext ``Vocab`` of ``words``."""
    vocab = _with_state(
        made["Vocab"],
        freqs=collections.Counter({w: 1 for w in words[2:]}),
        itos=list(words),
        unk_index=0,
        stoi={w: i for i, w in enumerate(words)},
        vectors=None,
    )
    tokenize = functools.partial(made["_feature_tokenize"], layer=0, feat_delim=None)
    field = _with_state(
        made["Field"],
        sequential=True,
        use_vocab=True,
        init_token="<s>" if side == "tgt" else None,
        eos_token="</s>" if side == "tgt" else None,
        pad_token="<blank>",
        unk_token="<unk>",
        tokenize=tokenize,
        dtype="torch.int64",
        vocab=vocab,
    )
    return _with_state(made["TextMultiField"], fields=[(side, field)], is_target=side == "tgt")


ONE_X_OPTIONS = {  # make_model's model, in 1.x's option names
    "model_type": "text",
    "encoder_type": "brnn",
    "decoder_type": "rnn",
    "layers": -1,
    "enc_layers": 2,
    "dec_layers": 2,
    "rnn_size": 8,
    "enc_rnn_size": 8,
    "dec_rnn_size": 8,
    "word_vec_size": 6,
    "src_word_vec_size": 6,
    "tgt_word_vec_size": 6,
    "rnn_type": "LSTM",
    "global_attention": "mlp",
    "global_attention_function": "softmax",
    "input_feed": 1,
    "copy_attn": True,
    "copy_attn_type": "mlp",
    "coverage_attn": True,
    "lambda_coverage": 0.0,
    "context_gate": None,
    "bridge": False,
    "position_encoding": False,
    "share_embeddings": False,
    "share_decoder_embeddings": False,
    "param_init": 0.1,
    "optim": "adam",
}


def one_x_weights(model):
    """``(model, generator)`` state dicts in 1.x's names (its src vocabulary lacks <s> and </s>:
    rows 2 and 3 of the source embeddings are left out)."""
    renamed = {}
    for key, value in model.state_dict().items():
        name = key.replace("embeddings.lut.", "embeddings.make_embedding.emb_luts.0.")
        name = name.replace("decoder.rnn.cells.", "decoder.rnn.layers.")
        name = name.replace(".linear_memory.", ".linear_context.")
        name = name.replace("decoder.copy_attention.", "decoder.copy_attn.")
        if name.startswith("encoder.embeddings."):
            value = torch.cat([value[:2], value[4:]])
        renamed[name] = value.clone()
    generator = {
        k[len("generator.") :]: v for k, v in renamed.items() if k.startswith("generator.")
    }
    weights = {k: v for k, v in renamed.items() if not k.startswith("generator.")}
    return weights, generator


def one_x_fields(made, src_words, tgt_words):
    """1.x's vocabulary fields (what its vocab.pt holds, and its checkpoints' ``vocab``)."""
    return {
        "src": one_x_field(made, src_words, "src"),
        "tgt": one_x_field(made, tgt_words, "tgt"),
        "indices": _with_state(made["Field"], use_vocab=False, sequential=False),
    }


def save_as_1x(obj, path, modules):
    """``torch.save`` of ``obj``, whose classes are named as 1.x's (``modules``, registered only
    while it is written)."""
    sys.modules.update(modules)
    try:
        torch.save(obj, path)
    finally:
        for name in modules:
            sys.modules.pop(name, None)


def write_one_x_checkpoint(model, path):
    modules, made = _one_x_classes()
    src_words = ["<unk>", "<blank>"] + SRC_VOCAB.itos[4:]
    weights, generator = one_x_weights(model)
    checkpoint = {
        "model": weights,
        "generator": generator,
        "vocab": one_x_fields(made, src_words, VOCABS["tgt"].itos),
        "opt": argparse.Namespace(**ONE_X_OPTIONS),
        "optim": {"training_step": 7, "decay_step": 7},
    }
    save_as_1x(checkpoint, path, modules)


def write_one_x_vocab(path, src_words, tgt_words):
    """The PREFIX.vocab.pt of a 1.x preprocessing run: its fields, torchtext vocabularies with
    1.x's specials (the source's without <s> and </s>)."""
    modules, made = _one_x_classes()
    fields = one_x_fields(
        made, ["<unk>", "<blank>", *src_words], ["<unk>", "<blank>", "<s>", "</s>", *tgt_words]
    )
    save_as_1x(fields, path, modules)


def test_a_1x_checkpoint_with_torchtext_fields_becomes_the_same_model(tmp_path, capsys):
    """brnn, input feed, mlp attention, copy attention and coverage: the weights land where they
    belong (the source embeddings' rows follow the words) and the translations are the model's."""
    model, opt = make_model(
        "-encoder_type", "brnn", "-copy_attn", "-coverage_attn", "-global_attention", "mlp", seed=3
    )
    original = tmp_path / "original.pt"
    checkpoint = build_checkpoint(model, VOCABS, vars(opt), 7, None, None, None)
    save_tensors(checkpoint, str(original))
    write_one_x_checkpoint(model, tmp_path / "one_x.pt")
    assert "torchtext" not in sys.modules and "onmt" not in sys.modules
    lite = tmp_path / "lite.pt"
    convert(capsys, "-model", tmp_path / "one_x.pt", "-from", "opennmt-py", "-output", lite)
    assert "torchtext" not in sys.modules and "onmt" not in sys.modules  # nothing was imported
    converted = load_checkpoint(str(lite))
    assert converted["step"] == 7 and converted["vocab"] == checkpoint["vocab"]
    for part in ("model", "generator"):
        for key, value in checkpoint[part].items():
            got = converted[part][key]
            if key == "encoder.embeddings.lut.weight":  # <s> and </s>: no row in 1.x's source
                assert not got[2:4].any()
                got = torch.cat([got[:2], got[4:]])
                value = torch.cat([value[:2], value[4:]])
            assert torch.equal(got, value), key
    sources = ["w1 w2 w3", "w4 w4 w5 w6", "w7"]
    assert translate(str(lite), sources, 5) == translate(str(original), sources, 5)


CALLS = [
    ((os.mkdir, "ran"), "posix.mkdir"),
    ((eval, "__import__('os').mkdir('ran')"), "builtins.eval"),
]


@pytest.mark.parametrize("call,named", CALLS, ids=["mkdir", "eval"])
def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(
    call, named, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # where the call would make its folder
    crafted = tmp_path / "model.pt"
    torch.save({"model": {}, "opt": argparse.Namespace(), "x": PickledCall(*call)}, crafted)
    code, lines = invoke(
        "convert", ["-model", crafted, "-from", "opennmt-py", "-output", tmp_path / "o.pt"], capsys
    )
    assert code == 2 and lines[-1].endswith(
        f"model.pt: refused, not loaded: it names {named}, which a checkpoint never holds"
    )
    assert not (tmp_path / "ran").exists()
    assert not (tmp_path / "o.pt").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("-encoder_type", "brnn", "-copy_attn", "-coverage_attn", "-global_attention", "mlp"),
        ("-rnn_type", "GRU", "-input_feed", "0", "-global_attention", "dot"),
        (
            "-encoder_type",
            "transformer",
            "-decoder_type",
            "transformer",
            "-position_encoding",
            "-rnn_size",
            "16",
            "-word_vec_size",
            "16",
            "-heads",
            "2",
            "-transformer_ff",
            "24",
        ),
        (
            "-encoder_type",
            "transformer",
            "-decoder_type",
            "transformer",
            "-max_relative_positions",
            "4",
            "-rnn_size",
            "16",
            "-word_vec_size",
            "16",
            "-heads",
            "4",
            "-transformer_ff",
            "24",
            "-layers",
            "3",
        ),
        (
            "-encoder_type",
            "cnn",
            "-decoder_type",
            "cnn",
            "-cnn_kernel_width",
            "5",
            "-position_encoding",
            "-layers",
            "3",
        ),
    ],
    ids=[
        "brnn-copy-coverage",
        "gru-no-input-feed",
        "transformer-sinusoids",
        "transformer-relative",
        "cnn",
    ],
)
def test_onmt_lite_to_opennmt_py_and_back_is_the_same_model(args, tmp_path, capsys):
    model, opt = make_model(*args, seed=5)
    original = tmp_path / "original.pt"
    checkpoint = build_checkpoint(model, VOCABS, vars(opt), 3, None, None, None)
    save_tensors(checkpoint, str(original))
    peer = tmp_path / "peer.pt"
    back = tmp_path / "back.pt"
    convert(capsys, "-model", original, "-to", "opennmt-py", "-output", peer)
    convert(capsys, "-model", peer, "-from", "opennmt-py", "-output", back)
    returned = load_checkpoint(str(back))
    assert returned["vocab"] == checkpoint["vocab"]
    for part in ("model", "generator"):
        assert set(returned[part]) == set(checkpoint[part])
        for key, value in checkpoint[part].items():
            assert torch.equal(returned[part][key], value), key
    for name in (
        "encoder_type",
        "decoder_type",
        "copy_attn",
        "max_relative_positions",
        "heads",
        "cnn_kernel_width",
    ):
        assert returned["opt"][name] == checkpoint["opt"][name], name


def test_a_convolution_is_written_as_opennmt_py_keeps_it_and_its_copies_are_read_back(
    tmp_path, capsys
):
    """OpenNMT-py's weight-normalised Conv2d: its kernel ``[2H x H x k x 1]`` (with ``g`` and
    ``bias``), and Polyak averages of the three that it translates with, written equal to them.
    Read back, a 1.x checkpoint's copies ``V`` and ``b`` (the same tensors) are dropped, and the
    averages are not the weights taken."""
    model, opt = make_model("-encoder_type", "cnn", "-decoder_type", "cnn", seed=2)
    original = tmp_path / "original.pt"
    save_tensors(build_checkpoint(model, VOCABS, vars(opt), 3, None, None, None), str(original))
    peer = tmp_path / "peer.pt"
    convert(capsys, "-model", original, "-to", "opennmt-py", "-output", peer)
    raw = torch.load(peer, weights_only=False)
    conv = "decoder.conv_layers.1.conv."
    ours = model.decoder.layers[1]
    assert torch.equal(raw["model"][conv + "weight"], ours.v.detach().float().unsqueeze(-1))
    for name, average in (("weight", "V_avg"), ("g", "g_avg"), ("bias", "b_avg")):
        assert torch.equal(raw["model"][conv + average], raw["model"][conv + name])
    assert raw["opt"].cnn_kernel_width == 3 and raw["opt"].encoder_type == "cnn"
    # as 1.x saved it: the copies, and averages that are not the weights
    raw["model"][conv + "V"] = raw["model"][conv + "weight"]
    raw["model"][conv + "b"] = raw["model"][conv + "bias"]
    raw["model"][conv + "g_avg"] = raw["model"][conv + "g"] / 2
    torch.save(raw, tmp_path / "1x.pt")
    back = tmp_path / "back.pt"
    convert(capsys, "-model", tmp_path / "1x.pt", "-from", "opennmt-py", "-output", back)
    returned = load_checkpoint(str(back))["model"]
    assert torch.equal(returned["decoder.layers.1.g"], ours.g.detach())
    assert torch.equal(returned["decoder.layers.1.v"], ours.v.detach())
    raw["model"][conv + "b"] = raw["model"][conv + "bias"] + 1
    torch.save(raw, tmp_path / "differ.pt")
    code, lines = invoke(
        "convert",
        ["-model", tmp_path / "differ.pt", "-from", "opennmt-py", "-output", tmp_path / "x.pt"],
        capsys,
    )
    assert code == 2 and f"{conv}b, which differs from {conv}bias" in lines[-1]


def test_an_existing_output_is_kept_without_overwrite(tmp_path, capsys):
    model, opt = make_model()
    original = tmp_path / "original.pt"
    save_tensors(build_checkpoint(model, VOCABS, vars(opt), 3, None, None, None), str(original))
    out = tmp_path / "peer.pt"
    out.write_text("keep me")
    code, lines = invoke(
        "convert", ["-model", original, "-to", "opennmt-py", "-output", out], capsys
    )
    assert code == 2 and "exists; give -overwrite" in lines[-1]
    assert out.read_text() == "keep me"
    convert(capsys, "-model", original, "-to", "opennmt-py", "-output", out, "-overwrite")
    assert out.read_bytes()[:2] == b"PK"  # a torch zip archive now
