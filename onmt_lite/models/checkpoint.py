"""Checkpoints: plain data and CPU tensors, written atomically, opened with weights_only=True.

A checkpoint is a dict: ``model`` and ``generator`` state dicts, ``vocab`` (``{"src": [...], "tgt":
[...]}``), ``opt`` (the options as a plain dict), ``optim`` (Optimizer.state_dict), ``step``,
``rng`` (torch and Python generator states), ``data`` (the training iterator's position),
``trainer`` (early-stopping and best-score state) and ``preprocess`` (how the text was tokenized:
``lower``, ``src_spm``, ``tgt_spm``, ``dynamic_dict``, for translating new text the same way).
Trained with a moving average (``-average_decay``), ``model`` and ``generator`` hold the average and
``raw_weights`` (``{"model": ..., "generator": ...}``) the weights training goes on with.

Training and translation both read and write checkpoints here only, and both turn a checkpoint's
options into the options that rebuild its model with ``model_options``. The files' names and their
writer are ``models/checkpoint_files.py``'s.
"""

import argparse
import random

import torch

from onmt_lite.data.shards import load_plain
from onmt_lite.data.vocab import vocabs_to_plain
from onmt_lite.models.builder import build_model
from onmt_lite.opts import check_values, model_opts, option_defaults, option_values, train_opts
from onmt_lite.utils.errors import UserError

CHECKPOINT_FORMAT = "onmt_lite.checkpoint.v1"
GENERATOR_PREFIX = "generator."


def split_state(model, state=None):
    """``(model state without the generator, generator state)`` of ``model.state_dict()`` (or of
    ``state``, a dict like it), as CPU tensors."""
    model_state = {}
    generator_state = {}
    for key, value in (model.state_dict() if state is None else state).items():
        if key.startswith(GENERATOR_PREFIX):
            generator_state[key[len(GENERATOR_PREFIX) :]] = value.detach().cpu()
        else:
            model_state[key] = value.detach().cpu()
    return model_state, generator_state


def rng_state():
    """The random generators' states: torch's, Python's and, with CUDA, the current device's alone
    (the one this process trains on: a resume on a machine with fewer GPUs must find it)."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state(torch.cuda.current_device())
    return state


def set_rng_state(state):
    """Restore ``rng_state()``'s states; the CUDA one into the current device, when there is one (a
    list from an earlier version, one state per visible GPU: the current device's entry, or the
    first)."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    saved = state.get("cuda")
    if saved is None or not torch.cuda.is_available():
        return
    device = torch.cuda.current_device()
    if isinstance(saved, (list, tuple)):
        if not saved:
            return
        saved = saved[device] if device < len(saved) else saved[0]
    torch.cuda.set_rng_state(saved, device)


PREPROCESS_KEYS = ("lower", "src_spm", "tgt_spm", "dynamic_dict")


def build_checkpoint(
    model,
    vocabs,
    opt_dict,
    step,
    optim_state,
    data_state,
    trainer_state,
    preprocess=None,
    averaged=None,
):
    """The checkpoint of ``model`` with the training state given; ``opt_dict`` holds the run's
    options (``vars`` of its parsed namespace: what ``parse`` records beside them is left out). With
    ``averaged`` (a state dict like ``model.state_dict()``, a moving average's weights), those are
    its weights and ``model``'s own are kept beside them as ``raw_weights``."""
    model_state, generator_state = split_state(model, averaged)
    checkpoint = {
        "format": CHECKPOINT_FORMAT,
        "model": model_state,
        "generator": generator_state,
        "vocab": vocabs_to_plain(vocabs),
        "opt": option_values(opt_dict),
        "optim": optim_state,
        "step": step,
        "rng": rng_state(),
        "data": data_state,
        "trainer": trainer_state,
        "preprocess": {k: (preprocess or {}).get(k) for k in PREPROCESS_KEYS},
    }
    if averaged is not None:
        checkpoint["raw_weights"] = dict(zip(("model", "generator"), split_state(model)))
    return checkpoint


def load_checkpoint(path):
    """Open a checkpoint with ``weights_only=True``; clear errors for missing, corrupt or foreign
    files."""
    checkpoint = load_plain(path, CHECKPOINT_FORMAT, "checkpoint")
    missing = [k for k in ("model", "generator", "vocab", "opt", "step") if k not in checkpoint]
    if missing:
        raise UserError(f"{path}: checkpoint lacks {', '.join(missing)}")
    _check_tensors(checkpoint, "", path)
    if "raw_weights" in checkpoint:
        if not isinstance(checkpoint["raw_weights"], dict):
            raise UserError(
                f"{path}: checkpoint's raw_weights is not a dict of model and generator weights"
            )
        _check_tensors(checkpoint["raw_weights"], "raw_weights ", path)
    vocab = checkpoint["vocab"]
    if not (
        isinstance(vocab, dict)
        and all(
            isinstance(vocab.get(side), list) and all(isinstance(w, str) for w in vocab[side])
            for side in ("src", "tgt")
        )
    ):
        raise UserError(f"{path}: checkpoint's vocab is not a src and a tgt list of words")
    feats = vocab.get("src_feats", [])
    if not (
        isinstance(feats, list)
        and all(
            isinstance(words, list) and all(isinstance(w, str) for w in words) for words in feats
        )
    ):
        raise UserError(f"{path}: checkpoint's src_feats vocabularies are not lists of words")
    if not isinstance(checkpoint["opt"], dict):
        raise UserError(f"{path}: checkpoint's opt is not a dict of options")
    if isinstance(checkpoint["step"], bool) or not isinstance(checkpoint["step"], int):
        raise UserError(f"{path}: checkpoint's step is not a whole number")
    return checkpoint


def _check_tensors(weights, what, path):
    """A UserError unless ``weights["model"]`` and ``weights["generator"]`` are dicts of tensors."""
    for key in ("model", "generator"):
        state = weights.get(key)
        wrong = (
            [name for name, value in state.items() if not isinstance(value, torch.Tensor)]
            if isinstance(state, dict)
            else [key]
        )
        if wrong:
            raise UserError(
                f"{path}: checkpoint's {what}{key} weights hold entries that are not tensors "
                f"({wrong[0]})"
            )


REQUIRED_OPTIONS = ("rnn_size", "encoder_type", "copy_attn")


def model_options(saved, path, onto=None, also=()):
    """The options that rebuild the model a checkpoint holds, from its options ``saved``
    (``checkpoint["opt"]``), as a Namespace for ``model_from_checkpoint``.

    Without ``onto`` (translation): every saved option over the defaults of the model and training
    options (a checkpoint of an earlier version may lack later options), with dropout off. With
    ``onto`` (training with ``-train_from``): the command's options ``onto``, but the model options
    and those named in ``also`` (the optimizer's, per ``-reset_optim``) as saved."""
    if onto is None:
        missing = [k for k in REQUIRED_OPTIONS if k not in saved]
        if missing:
            raise UserError(f"{path}: checkpoint options lack {', '.join(missing)}")
        return _dropout_lists(
            argparse.Namespace(
                **{**option_defaults([model_opts, train_opts]), **saved, "dropout": [0.0]}
            )
        )
    opt = argparse.Namespace(**vars(onto))
    for name in [*option_defaults([model_opts]), *also]:
        if name in saved:
            setattr(opt, name, saved[name])
    return _dropout_lists(opt)


def _dropout_lists(opt):
    """``opt`` with -dropout and -attention_dropout as lists (schedules): checkpoints written before
    the dropout schedule hold one number."""
    for name in ("dropout", "attention_dropout"):
        value = getattr(opt, name)
        if not isinstance(value, list):
            setattr(opt, name, [value])
    return opt


def restore_model(model, checkpoint, path):
    """Load the checkpoint's weights into ``model``; a mismatch of names or shapes is a
    UserError."""
    state = dict(checkpoint["model"])
    state.update({GENERATOR_PREFIX + k: v for k, v in checkpoint["generator"].items()})
    expected = model.state_dict()
    unknown = sorted(set(state) - set(expected))
    absent = sorted(set(expected) - set(state))
    if unknown or absent:
        raise UserError(
            f"{path}: weights do not match the model its options describe "
            f"(unexpected: {unknown[:3]}, missing: {absent[:3]})"
        )
    for key, value in state.items():
        if value.shape != expected[key].shape:
            raise UserError(
                f"{path}: {key} has shape {tuple(value.shape)}, the model's options give "
                f"{tuple(expected[key].shape)}"
            )
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise UserError(
                f"{path}: {key} holds NaN or infinite values (a diverged training run?)"
            )
    model.load_state_dict(state)


def model_from_checkpoint(opt, vocabs, checkpoint, path):
    """The model that options ``opt`` describe, with ``checkpoint``'s weights. Pretrained embedding
    files are not read again (the weights hold them). Options that cannot build a model, and weights
    that do not fit it, are a UserError naming the checkpoint and the mismatch."""
    check_values([model_opts], vars(opt), path)
    opt = argparse.Namespace(**{**vars(opt), "pre_word_vecs_enc": "", "pre_word_vecs_dec": ""})
    try:
        model = build_model(opt, vocabs)
    except (TypeError, ValueError, KeyError, AttributeError, RuntimeError) as err:
        raise UserError(
            f"{path}: its options do not describe a model ({type(err).__name__}: {err})"
        ) from None
    restore_model(model, checkpoint, path)
    return model
