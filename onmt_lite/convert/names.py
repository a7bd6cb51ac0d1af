"""Which OpenNMT-py parameters make each onmt_lite parameter: one table for both directions.

onmt_lite's parameters follow OpenNMT-py 1.x's names where the modules are alike; where they are
not, a ``Link`` says which peer tensors, stacked along their first dimension, make the onmt_lite
tensor (the Transformer's fused query/key/value product is three peer Linears; the decoder's one
product for every layer's context keys and values is two per layer). OpenNMT-py's generator
tensors are named here with a ``generator.`` prefix, as onmt_lite's.

    onmt_lite                                   OpenNMT-py (1.x and 3.x; E/D: a layer of the
                                                Transformer encoder/decoder)
    {side}.embeddings.lut.weight                {side}.embeddings.make_embedding.emb_luts.0.weight
    encoder.rnn.*                               encoder.rnn.*
    decoder.rnn.cells.i.*  (input feed)         decoder.rnn.layers.i.*
    decoder.attn.linear_memory.weight (mlp)     decoder.attn.linear_context.weight
    decoder.copy_attention.*                    decoder.copy_attn.*
    generator.0.*                               generator.* (3.x), generator.0.* (1.x)
    E/D.self_attn.qkv [3H x H]                  .self_attn.linear_{query,keys,values}
    E/D.self_attn.attention.out                 .self_attn.final_linear
    E/D.self_attn.attention.relative.weight     .self_attn.relative_positions_embeddings.weight
    E.norm; D.self_attn_norm, D.context_norm    .layer_norm; .layer_norm_1, .layer_norm_2
    D.context_query; D.context_attn.out         .context_attn.linear_query; .final_linear
    decoder.memory_projection [2LH x H]         D_i.context_attn.linear_{keys,values}, i = 0..L-1
    E/D.feed_forward.{norm,inner,outer}         .feed_forward.{layer_norm,w_1,w_2}
    D.self_attn.gate (-self_attn_type average)  .self_attn.gating_layer
    D.self_attn.feed_forward.{norm,inner,outer} .self_attn.average_layer.{layer_norm,w_1,w_2}
    {encoder,decoder}.norm                      {encoder,decoder}.layer_norm
    encoder.layers.i.{v,g,bias} (CNN)           encoder.cnn.layers.i.conv.{weight,g,bias}
    decoder.layers.i.{v,g,bias} (CNN)           decoder.conv_layers.i.conv.{weight,g,bias}
    decoder.attentions.i.linear_in (CNN)        decoder.attn_layers.i.linear_in

E is ``encoder.layers.i`` here and ``encoder.transformer.i`` there; D ``decoder.layers.i`` and
``decoder.transformer_layers.i``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    """onmt_lite's ``lite`` is the peer tensors ``peers`` stacked along dim 0; ``vocab`` names the
    vocabulary its rows follow (``src``, ``tgt``) or is None; ``kernel``: the peer's has a last
    dimension of 1 more."""

    lite: str
    peers: tuple[str, ...]
    vocab: str | None = None
    # the peer's tensor has a last dimension of 1: a Conv2d kernel of width (k, 1), onmt_lite's a
    # Conv1d's of width k
    kernel: bool = False


# (onmt_lite pattern, OpenNMT-py replacement), tried in order; the first that matches is used
RENAMES = (
    (
        r"^(encoder|decoder)\.layers\.(\d+)\.self_attn\.attention\.out\.",
        r"\1.L\2.self_attn.final_linear.",
    ),
    (
        r"^(encoder|decoder)\.layers\.(\d+)\.self_attn\.attention\.relative\.",
        r"\1.L\2.self_attn.relative_positions_embeddings.",
    ),
    (r"^encoder\.layers\.(\d+)\.norm\.", r"encoder.L\1.layer_norm."),
    (r"^decoder\.layers\.(\d+)\.self_attn_norm\.", r"decoder.L\1.layer_norm_1."),
    (r"^decoder\.layers\.(\d+)\.context_norm\.", r"decoder.L\1.layer_norm_2."),
    (r"^decoder\.layers\.(\d+)\.context_query\.", r"decoder.L\1.context_attn.linear_query."),
    (r"^decoder\.layers\.(\d+)\.context_attn\.out\.", r"decoder.L\1.context_attn.final_linear."),
    (
        r"^(encoder|decoder)\.layers\.(\d+)\.feed_forward\.norm\.",
        r"\1.L\2.feed_forward.layer_norm.",
    ),
    (r"^(encoder|decoder)\.layers\.(\d+)\.feed_forward\.inner\.", r"\1.L\2.feed_forward.w_1."),
    (r"^(encoder|decoder)\.layers\.(\d+)\.feed_forward\.outer\.", r"\1.L\2.feed_forward.w_2."),
    (r"^(encoder|decoder)\.norm\.", r"\1.layer_norm."),
    # the average attention network (1.x's and 3.x's AverageAttention)
    (r"^decoder\.layers\.(\d+)\.self_attn\.gate\.", r"decoder.L\1.self_attn.gating_layer."),
    (
        r"^decoder\.layers\.(\d+)\.self_attn\.feed_forward\.norm\.",
        r"decoder.L\1.self_attn.average_layer.layer_norm.",
    ),
    (
        r"^decoder\.layers\.(\d+)\.self_attn\.feed_forward\.inner\.",
        r"decoder.L\1.self_attn.average_layer.w_1.",
    ),
    (
        r"^decoder\.layers\.(\d+)\.self_attn\.feed_forward\.outer\.",
        r"decoder.L\1.self_attn.average_layer.w_2.",
    ),
    (r"^decoder\.rnn\.cells\.", "decoder.rnn.layers."),
    (r"^decoder\.copy_attention\.linear_memory\.", "decoder.copy_attn.linear_context."),
    (r"^decoder\.copy_attention\.", "decoder.copy_attn."),
    (r"^decoder\.attn\.linear_memory\.", "decoder.attn.linear_context."),
    (r"^decoder\.attentions\.(\d+)\.", r"decoder.attn_layers.\1."),
)
LAYER_PREFIX = {"encoder": "encoder.transformer.", "decoder": "decoder.transformer_layers."}
# the convolutional model's gated convolutions (1.x's GatedConv and its WeightNormConv2d)
CONVOLUTION = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(v|g|bias)$")
CONVOLUTION_PREFIX = {"encoder": "encoder.cnn.layers.", "decoder": "decoder.conv_layers."}
CONVOLUTION_NAMES = {"v": "weight", "g": "g", "bias": "bias"}
QKV = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.self_attn\.qkv\.(weight|bias)$")
MEMORY = re.compile(r"^decoder\.memory_projection\.(weight|bias)$")
EMBEDDING = re.compile(r"^(encoder|decoder)\.embeddings\.lut\.weight$")


def _with_layers(name: str) -> str:
    """``encoder.L3.x`` -> ``encoder.transformer.3.x`` (and the decoder's)."""
    side, rest = name.split(".", 1)
    if rest.startswith("L") and rest[1:2].isdigit():
        return LAYER_PREFIX[side] + rest[1:]
    return name


def link(lite: str, generator_prefix: str, decoder_layers: int) -> Link:
    """The ``Link`` of onmt_lite's parameter ``lite``. ``generator_prefix`` is where OpenNMT-py
    keeps the plain generator's Linear (``generator.`` in 3.x, ``generator.0.`` in 1.x);
    ``decoder_layers`` is L of ``decoder.memory_projection``."""
    match = QKV.match(lite)
    if match:
        side, layer, part = match.groups()
        base = f"{LAYER_PREFIX[side]}{layer}.self_attn.linear_"
        return Link(lite, tuple(f"{base}{name}.{part}" for name in ("query", "keys", "values")))
    match = MEMORY.match(lite)
    if match:
        part = match.group(1)
        peers = []
        for layer in range(decoder_layers):
            base = f"decoder.transformer_layers.{layer}.context_attn.linear_"
            peers += [f"{base}keys.{part}", f"{base}values.{part}"]
        return Link(lite, tuple(peers))
    match = CONVOLUTION.match(lite)
    if match:
        side, layer, name = match.groups()
        peer = f"{CONVOLUTION_PREFIX[side]}{layer}.conv.{CONVOLUTION_NAMES[name]}"
        return Link(lite, (peer,), kernel=name == "v")
    match = EMBEDDING.match(lite)
    if match:
        side = match.group(1)
        vocab = "src" if side == "encoder" else "tgt"
        return Link(lite, (f"{side}.embeddings.make_embedding.emb_luts.0.weight",), vocab)
    if lite.startswith("generator."):
        plain = lite.startswith("generator.0.")
        name = generator_prefix + lite.split(".")[-1] if plain else lite
        # the copy generator's switch (linear_copy) has one row, not one a word
        vocab = "tgt" if plain or lite.startswith("generator.linear.") else None
        return Link(lite, (name,), vocab)
    for pattern, replacement in RENAMES:
        if re.match(pattern, lite):
            return Link(lite, (_with_layers(re.sub(pattern, replacement, lite)),))
    return Link(lite, (lite,))
