"""Which loss compute trains a model: ``-loss_class`` (a researcher's ``LossComputeBase``
subclass, from a module or a file, with the options it declares) or the standard one for the
model (the copy loss, the sparsemax loss or the NLL)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os

import torch.nn as nn

from onmt_lite.data.vocab import Vocab
from onmt_lite.loss.copy_compute import CopyGeneratorLossCompute
from onmt_lite.loss.compute import (
    LossComputeBase,
    NMTLossCompute,
    SparsemaxLossCompute,
)
from onmt_lite.utils.errors import UserError


def load_loss_class(spec):
    """The class named by ``-loss_class``: ``package.module:Class`` or ``path/to/file.py:Class``."""
    location, sep, name = spec.rpartition(":")
    if not sep or not location or not name:
        raise UserError(f"-loss_class {spec}: expected MODULE:CLASS or FILE.py:CLASS")
    try:
        if location.endswith(".py"):
            if not os.path.isfile(location):
                raise UserError(f"-loss_class {spec}: {location} not found")
            module_spec = importlib.util.spec_from_file_location(
                f"onmt_lite_user_loss_{abs(hash(location))}", location
            )
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(location)
    except ImportError as err:
        raise UserError(f"-loss_class {spec}: cannot import {location} ({err})") from None
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and issubclass(cls, LossComputeBase)):
        raise UserError(
            f"-loss_class {spec}: {location} has no LossComputeBase subclass named {name}"
        )
    return cls


def loss_option_defaults(cls: type[LossComputeBase]) -> dict:
    """``{name: default}`` of the options ``cls`` declares (``add_options``; most declare none)."""
    parser = argparse.ArgumentParser(add_help=False)
    cls.add_options(parser)
    return {action.dest: action.default for action in parser._actions}


def build_loss_compute(
    model: nn.Module, tgt_vocab: Vocab, opt: argparse.Namespace, train: bool = True
) -> LossComputeBase:
    """The loss compute for ``model`` from the options: ``-loss_class`` if given, else the copy loss
    for copy models and the NLL otherwise (label smoothing only when ``train``)."""
    if getattr(opt, "loss_class", ""):
        cls = load_loss_class(opt.loss_class)
        # the class's own options that ``opt`` lacks (a library caller's) at their defaults
        opt = argparse.Namespace(**{**loss_option_defaults(cls), **vars(opt)})
    else:
        # refused with -copy_attn
        sparse = getattr(opt, "generator_function", "softmax") == "sparsemax"
        cls = (
            CopyGeneratorLossCompute
            if opt.copy_attn
            else SparsemaxLossCompute
            if sparse
            else NMTLossCompute
        )
    compute = cls.from_options(model, tgt_vocab, opt, train)
    if train and getattr(opt, "lambda_align", 0.0) > 0 and not compute.needs_alignment:
        raise UserError(
            f"-lambda_align {opt.lambda_align}: -loss_class {opt.loss_class} computes no alignment "
            "loss (give it a lambda_align, see LossComputeBase._alignment_state)"
        )
    return compute
