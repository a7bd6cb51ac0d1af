"""OpenNMT-py checkpoints to onmt_lite's and back (``onmt_lite_convert -from/-to opennmt-py``).

Reading takes a 1.x (1.2.0) or 3.x (3.5.1) checkpoint through the restricted unpickler
(``safe_pickle``), turns its options into onmt_lite's (``peer_options``), builds that model and
fills every one of its parameters from the peer's (``names``): a peer parameter left over, or one
missing, stops the conversion by name. Vocabularies become onmt_lite's (its four specials first,
then the peer's words in their order), the embedding and output rows following the words.

Writing makes an OpenNMT-py 3.5.1 checkpoint from an onmt_lite one without a template: the model
options of ``peer_model_options``, the parameters by the same table, the word lists as they are
(onmt_lite's specials are OpenNMT-py's defaults, in the same order).
"""

from __future__ import annotations

import argparse

import torch
from torch import Tensor

from onmt_lite.convert.names import link
from onmt_lite.convert.peer_options import lite_model_options, peer_model_options, refuse
from onmt_lite.data.peer_vocab import peer_vocabularies
from onmt_lite.data.vocab import SPECIALS, Vocab, vocabs_from_plain
from onmt_lite.models.builder import build_model
from onmt_lite.models.checkpoint import (
    build_checkpoint,
    model_from_checkpoint,
    model_options,
)
from onmt_lite.models.embeddings import sinusoids
from onmt_lite.opts import model_opts, option_defaults, train_opts
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.safe_pickle import load_foreign

PEER_PE_LENGTH = 5000  # OpenNMT-py's PositionalEncoding keeps this many positions in its buffer
PE_SUFFIX = ".embeddings.make_embedding.pe.pe"
TRAINING_STATE = ("optim", "rng", "data", "trainer")


def row_sources(lite: Vocab, words: list[str]) -> list[int | None]:
    """For each onmt_lite id, the peer's id of the same word (None: a special the peer lacks)."""
    peer_ids: dict[str, int] = {}
    for index, word in enumerate(words):
        peer_ids.setdefault(word, index)
    return [peer_ids.get(word) for word in lite.itos]


def reorder_rows(tensor: Tensor, sources: list[int | None], fill: float) -> Tensor:
    """``tensor``'s rows in onmt_lite's word order; a row the peer lacks is ``fill``."""
    out = tensor.new_full((len(sources), *tensor.shape[1:]), fill)
    have = [i for i, source in enumerate(sources) if source is not None]
    out[have] = tensor[[sources[i] for i in have]]
    return out


def _peer_state(raw: dict, path: str) -> dict[str, Tensor]:
    state = dict(raw["model"])
    generator = raw.get("generator") or {}
    state.update({f"generator.{key}": value for key, value in generator.items()})
    wrong = [key for key, value in state.items() if not isinstance(value, Tensor)]
    if wrong:
        raise refuse(path, f"weights that are not tensors ({wrong[0]})")
    return state


def _check_position_encodings(state: dict[str, Tensor], path: str) -> None:
    """OpenNMT-py keeps its sinusoids in the checkpoint; onmt_lite computes its own: the same?"""
    for key in [key for key in state if key.endswith(PE_SUFFIX)]:
        table = state.pop(key)
        table = table.reshape(table.size(0), -1)  # [positions x 1 x H] -> [positions x H]
        ours = sinusoids(torch.arange(table.size(0)), table.size(1))
        if not torch.allclose(table.float(), ours, atol=1e-5):
            raise refuse(path, f"{key}: position encodings other than onmt_lite's sinusoids")


def decoder_layers(opt: argparse.Namespace) -> int:
    return opt.layers if opt.layers > 0 else opt.dec_layers


def from_opennmt_py(path: str) -> dict:
    """The onmt_lite checkpoint (a dict, without training state) of the OpenNMT-py checkpoint
    ``path``."""
    raw = load_foreign(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("opt"), argparse.Namespace):
        raise UserError(f"{path}: not an OpenNMT-py checkpoint (no opt Namespace)")
    if "model" not in raw:
        raise refuse(path, "a checkpoint whose weights are in a .safetensors file beside it")
    words = peer_vocabularies(raw["vocab"], path)
    vocabs = {side: Vocab(words[side]) for side in ("src", "tgt")}
    vocabs["src_feats"] = []
    saved = {
        **option_defaults([model_opts, train_opts]),
        **lite_model_options(vars(raw["opt"]), path),
    }
    opt = model_options(saved, path)
    try:
        model = build_model(opt, vocabs)
    except (TypeError, ValueError, KeyError, AttributeError, RuntimeError, UserError) as err:
        raise refuse(path, f"options onmt_lite builds no model of ({err})") from None
    state = _peer_state(raw, path)
    _check_position_encodings(state, path)
    _drop_convolution_copies(state, path)
    sources = {side: row_sources(vocabs[side], words[side]) for side in ("src", "tgt")}
    lite_state = _lite_state(model, state, sources, raw["opt"], decoder_layers(opt), path)
    model.load_state_dict(lite_state)
    step = raw.get("optim", {}).get("training_step", 0) if isinstance(raw.get("optim"), dict) else 0
    checkpoint = build_checkpoint(model, vocabs, saved, int(step or 0), None, None, None)
    for key in TRAINING_STATE:
        checkpoint.pop(key)
    return checkpoint


def _lite_state(
    model, state: dict[str, Tensor], sources: dict, peer_opt, dec_layers: int, path: str
):
    """onmt_lite's state dict from the peer's ``state`` (emptied as it is used)."""
    plain_generator = "generator.weight" in state
    prefix = "generator." if plain_generator else "generator.0."
    lite = {}
    for key, target in model.state_dict().items():
        entry = link(key, prefix, dec_layers)
        parts = []
        for name in entry.peers:
            if name in state:
                parts.append(state.pop(name))
            elif name.endswith(".bias") and _bias_left_out(name, peer_opt):
                parts.append(torch.zeros(target.size(0) // len(entry.peers)))
            else:
                raise refuse(path, f"a checkpoint that lacks {name} (onmt_lite's {key})")
        tensor = torch.cat(parts) if len(parts) > 1 else parts[0]
        if entry.kernel and tensor.dim() == target.dim() + 1 and tensor.size(-1) == 1:
            tensor = tensor.squeeze(-1)  # [2H x H x k x 1] -> [2H x H x k]
        if entry.vocab is not None:
            fill = -1e4 if key.endswith("bias") else 0.0  # a word the peer cannot write
            tensor = reorder_rows(tensor, sources[entry.vocab], fill)
        if tensor.shape != target.shape:
            raise refuse(
                path,
                f"{entry.peers[0]} of shape {tuple(tensor.shape)} into {key} {tuple(target.shape)}",
            )
        lite[key] = tensor.to(target.dtype)
    if state:
        raise refuse(path, f"parameters onmt_lite's model has no place for: {sorted(state)[:4]}")
    return lite


def _convolutions(state: dict[str, Tensor]) -> list[str]:
    """The prefixes (``decoder.conv_layers.0.conv.``) of OpenNMT-py's weight-normalised
    convolutions in ``state``, known by their ``g``."""
    return [key[: -len("g")] for key in state if key.endswith(".conv.g")]


def _drop_convolution_copies(state: dict[str, Tensor], path: str) -> None:
    """Remove what OpenNMT-py's weight-normalised convolutions (``WeightNormConv2d``) keep beside
    their ``weight``, ``g`` and ``bias``: the same tensors again as ``V`` and ``b``, and the Polyak
    averages ``V_avg``, ``g_avg``, ``b_avg`` (which its translation read and updated; onmt_lite
    translates with the weights, so converting takes the weights)."""
    for prefix in _convolutions(state):
        for copy, name in (("V", "weight"), ("b", "bias")):
            if prefix + copy not in state:
                continue
            tensor = state.pop(prefix + copy)
            kept = state.setdefault(prefix + name, tensor)
            if not torch.equal(kept, tensor):
                raise refuse(path, f"{prefix}{copy}, which differs from {prefix}{name}")
        for name in ("V_avg", "g_avg", "b_avg"):
            state.pop(prefix + name, None)


def _bias_left_out(name: str, peer_opt) -> bool:
    """3.x builds its attention (and, optionally, feed-forward) Linears without biases: zeros."""
    attention = ".linear_" in name or ".final_linear." in name
    if attention and not getattr(peer_opt, "add_qkvbias", True):
        return True
    return ".feed_forward.w_" in name and not getattr(peer_opt, "add_ffnbias", True)


def to_opennmt_py(checkpoint: dict, path: str) -> dict:
    """The OpenNMT-py 3.5.1 checkpoint (a dict) of the onmt_lite ``checkpoint`` (read from
    ``path``, named in errors)."""
    if checkpoint["vocab"].get("src_feats"):
        raise refuse(path, "a model with source word features to OpenNMT-py")
    opt = model_options(checkpoint["opt"], path)
    vocabs = vocabs_from_plain(checkpoint["vocab"])
    model = model_from_checkpoint(opt, vocabs, checkpoint, path)
    sizes = (len(vocabs["src"]), len(vocabs["tgt"]))
    options = peer_model_options(vars(opt), sizes)
    if options["enc_hid_size"] != options["dec_hid_size"]:
        raise refuse(path, "encoder and decoder sizes that differ (OpenNMT-py 3.5.1 refuses them)")
    state = _peer_tensors(model, decoder_layers(opt))
    if opt.position_encoding:
        sizes = {"encoder": options["src_word_vec_size"], "decoder": options["tgt_word_vec_size"]}
        for side, size in sizes.items():
            state[side + PE_SUFFIX] = sinusoids(torch.arange(PEER_PE_LENGTH), size).unsqueeze(1)
    generator = {k[len("generator.") :]: v for k, v in state.items() if k.startswith("generator.")}
    weights = {k: v for k, v in state.items() if not k.startswith("generator.")}
    if opt.copy_attn:  # 3.5.1 loads a copy generator from the model's own weights
        weights.update({f"generator.{k}": v for k, v in generator.items()})
        generator = None
    vocab = {
        "src": vocabs["src"].to_plain(),
        "tgt": vocabs["tgt"].to_plain(),
        "data_task": "seq2seq",
        "decoder_start_token": SPECIALS[2],
    }
    return {
        "model": weights,
        "generator": generator,
        "vocab": vocab,
        "opt": argparse.Namespace(**options),
        "optim": None,
    }


def _peer_tensors(model, dec_layers: int) -> dict[str, Tensor]:
    """The peer's parameters (its generator's prefixed ``generator.``) made of ``model``'s."""
    state = {}
    for key, tensor in model.state_dict().items():
        entry = link(key, "generator.", dec_layers)
        rows = tensor.size(0) // len(entry.peers)
        for name, part in zip(entry.peers, tensor.split(rows)):
            state[name] = part.detach().float().clone()
            if entry.kernel:
                state[name] = state[name].unsqueeze(-1)  # a Conv2d kernel of width (k, 1)
    for prefix in _convolutions(state):
        # its Polyak averages, read in evaluation: the weights, which the update then keeps
        for name, average in (("weight", "V_avg"), ("g", "g_avg"), ("bias", "b_avg")):
            state[prefix + average] = state[prefix + name].clone()
    return state
