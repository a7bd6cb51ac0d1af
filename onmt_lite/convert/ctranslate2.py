"""An onmt_lite Transformer as a CTranslate2 model directory (``onmt_lite_convert -to
ctranslate2``), built with CTranslate2's own spec API (``ctranslate2.specs``) by a ``Converter``
subclass, so that CTranslate2 checks and writes the model as it does its own converters'.

onmt_lite's Transformer is the pre-norm one CTranslate2 describes with
``TransformerSpec.from_config``: the fused query/key/value product of a self-attention is
CTranslate2's ``linear[0]`` as it is (rows: query, keys, values), and each decoder layer's rows of
onmt_lite's one memory product (keys, values) are its context attention's ``linear[1]``. With
sinusoidal position encoding the table is written out (onmt_lite's ``sinusoids``, as many
positions as OpenNMT-py keeps: ``PEER_PE_LENGTH``) and the embeddings are scaled by the square root
of their size, as onmt_lite does; with relative positions (Shaw et al.) there is no table and no
scaling, and the relative embeddings serve keys and values, as in onmt_lite.

CTranslate2 runs Transformers only: an RNN encoder or decoder is refused with that reason, as are
copy attention and source word features (CTranslate2 has neither for these models). CTranslate2 is
an optional dependency: ``pip install 'onmt_lite[ctranslate2]'``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import torch

from onmt_lite.convert.opennmt_py import PEER_PE_LENGTH
from onmt_lite.models.checkpoint import model_options
from onmt_lite.models.embeddings import sinusoids
from onmt_lite.utils.errors import UserError

INSTALL = "pip install 'onmt_lite[ctranslate2]' (or pip install ctranslate2)"


def import_ctranslate2() -> Any:
    try:
        import ctranslate2
    except ImportError:
        raise UserError(f"-to ctranslate2 needs the ctranslate2 package: {INSTALL}") from None
    return ctranslate2


def check_convertible(opt: Any, vocab: dict, path: str) -> None:
    """A UserError naming what CTranslate2 cannot run."""
    if opt.encoder_type != "transformer" or opt.decoder_type != "transformer":
        raise UserError(
            f"{path}: -encoder_type {opt.encoder_type} -decoder_type {opt.decoder_type}: "
            "CTranslate2 runs Transformer models only (an encoder and a decoder of "
            "-encoder_type/-decoder_type transformer)"
        )
    if opt.copy_attn:
        raise UserError(f"{path}: -copy_attn: CTranslate2's Transformer has no copy attention")
    if opt.self_attn_type == "average":
        raise UserError(
            f"{path}: -self_attn_type average: CTranslate2's Transformer has no average attention"
        )
    if opt.generator_function != "softmax":
        raise UserError(
            f"{path}: -generator_function {opt.generator_function}: CTranslate2's Transformer "
            "has a softmax generator only"
        )
    if vocab.get("src_feats"):
        raise UserError(
            f"{path}: a model with source word features (onmt_lite_convert does not "
            "write them for CTranslate2)"
        )


def transformer_spec(ctranslate2: Any, state: dict, opt: Any) -> Any:
    """The ``TransformerSpec`` of onmt_lite's weights ``state`` (model and ``generator.*``)."""
    specs = ctranslate2.specs
    layers = (opt.layers, opt.layers) if opt.layers > 0 else (opt.enc_layers, opt.dec_layers)
    relative = opt.max_relative_positions > 0
    alignment = (
        (opt.alignment_layer, max(opt.alignment_heads, 1)) if opt.lambda_align > 0 else (-1, 1)
    )
    spec = specs.TransformerSpec.from_config(
        layers,
        opt.heads,
        with_relative_position=relative,
        alignment_layer=alignment[0],
        alignment_heads=alignment[1],
    )
    spec.config.layer_norm_epsilon = 1e-6
    for side, stack in (("encoder", spec.encoder), ("decoder", spec.decoder)):
        embeddings = state[f"{side}.embeddings.lut.weight"]
        # the encoder's is a list (one per source feature), the decoder's one spec
        table = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
        table.weight = embeddings
        if opt.position_encoding:
            stack.position_encodings.encodings = sinusoids(
                torch.arange(PEER_PE_LENGTH), embeddings.size(1)
            )
        else:
            stack.scale_embeddings = False
        _norm(stack.layer_norm, state, f"{side}.norm")
    for i, layer in enumerate(spec.encoder.layer):
        prefix = f"encoder.layers.{i}"
        _self_attention(layer.self_attention, state, prefix, relative)
        _norm(layer.self_attention.layer_norm, state, f"{prefix}.norm")
        _feed_forward(layer.ffn, state, f"{prefix}.feed_forward")
    memory_weight = state["decoder.memory_projection.weight"]  # [2LH x H]: keys, values a layer
    memory_bias = state["decoder.memory_projection.bias"]
    rows = 2 * memory_weight.size(1)
    for i, layer in enumerate(spec.decoder.layer):
        prefix = f"decoder.layers.{i}"
        _self_attention(layer.self_attention, state, prefix, relative)
        _norm(layer.self_attention.layer_norm, state, f"{prefix}.self_attn_norm")
        _linear(layer.attention.linear[0], state, f"{prefix}.context_query")
        layer.attention.linear[1].weight = memory_weight[i * rows : (i + 1) * rows]
        layer.attention.linear[1].bias = memory_bias[i * rows : (i + 1) * rows]
        _linear(layer.attention.linear[2], state, f"{prefix}.context_attn.out")
        _norm(layer.attention.layer_norm, state, f"{prefix}.context_norm")
        _feed_forward(layer.ffn, state, f"{prefix}.feed_forward")
    _linear(spec.decoder.projection, state, "generator.0")
    return spec


def _linear(spec: Any, state: dict, name: str) -> None:
    spec.weight = state[f"{name}.weight"]
    spec.bias = state[f"{name}.bias"]


def _norm(spec: Any, state: dict, name: str) -> None:
    spec.gamma = state[f"{name}.weight"]
    spec.beta = state[f"{name}.bias"]


def _self_attention(spec: Any, state: dict, prefix: str, relative: bool) -> None:
    _linear(spec.linear[0], state, f"{prefix}.self_attn.qkv")
    _linear(spec.linear[1], state, f"{prefix}.self_attn.attention.out")
    if relative:
        table = state[f"{prefix}.self_attn.attention.relative.weight"]
        spec.relative_position_keys = table
        spec.relative_position_values = table


def _feed_forward(spec: Any, state: dict, prefix: str) -> None:
    _norm(spec.layer_norm, state, f"{prefix}.norm")
    _linear(spec.linear_0, state, f"{prefix}.inner")
    _linear(spec.linear_1, state, f"{prefix}.outer")


def write_ctranslate2(checkpoint: dict, path: str, output: str, quantization: str) -> None:
    """Write the onmt_lite ``checkpoint`` (read from ``path``) as a CTranslate2 model directory
    ``output`` (replaced if it exists), weights as ``quantization`` says."""
    opt = model_options(checkpoint["opt"], path)
    check_convertible(opt, checkpoint["vocab"], path)
    ctranslate2 = import_ctranslate2()
    state = {k: v.float() for k, v in checkpoint["model"].items()}
    state.update({f"generator.{k}": v.float() for k, v in checkpoint["generator"].items()})

    class LiteConverter(ctranslate2.converters.Converter):
        def _load(self):
            spec = transformer_spec(ctranslate2, state, opt)
            spec.register_source_vocabulary(list(checkpoint["vocab"]["src"]))
            spec.register_target_vocabulary(list(checkpoint["vocab"]["tgt"]))
            return spec

    parent = os.path.dirname(os.path.abspath(output))
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(output)}.", dir=parent)
    try:
        written = os.path.join(staging, "model")
        LiteConverter().convert(
            written, quantization=None if quantization == "none" else quantization
        )
        if os.path.lexists(output):  # the old model goes into the staging folder, removed below
            os.replace(output, os.path.join(staging, "old"))
        os.replace(written, output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
