"""convert(opt): what ``onmt_lite_convert`` does. Every conversion goes through an onmt_lite
checkpoint in memory: read (onmt_lite's own, or ``opennmt_py.from_opennmt_py``), then written
(as it is, ``opennmt_py.to_opennmt_py`` or ``ctranslate2.write_ctranslate2``). Nothing is left at
``-output`` by a conversion that fails."""

from __future__ import annotations

import argparse
import os

from onmt_lite.convert.ctranslate2 import write_ctranslate2
from onmt_lite.convert.opennmt_py import from_opennmt_py, to_opennmt_py
from onmt_lite.models.checkpoint import load_checkpoint
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import save_tensors
from onmt_lite.utils.logging import logger


def read(opt: argparse.Namespace) -> dict:
    if opt.from_format == "opennmt-py":
        return from_opennmt_py(opt.model)
    return load_checkpoint(opt.model)


def convert(opt: argparse.Namespace) -> str:
    """Convert ``-model`` as ``-from``/``-to`` say; returns what was written."""
    if opt.from_format == opt.to_format:
        raise UserError(f"-from {opt.from_format} -to {opt.to_format}: nothing to convert")
    if opt.quantization != "none" and opt.to_format != "ctranslate2":
        raise UserError(f"-quantization {opt.quantization} is for -to ctranslate2")
    if os.path.lexists(opt.output) and not opt.overwrite:
        raise UserError(f"-output {opt.output} exists; give -overwrite to replace it")
    checkpoint = read(opt)
    if opt.to_format == "ctranslate2":
        write_ctranslate2(checkpoint, opt.model, opt.output, opt.quantization)
    elif opt.to_format == "opennmt-py":
        save_tensors(to_opennmt_py(checkpoint, opt.model), opt.output)
    else:
        save_tensors(checkpoint, opt.output)
    logger.info(f"{opt.model} ({opt.from_format}) -> {opt.output} ({opt.to_format})")
    return opt.output
