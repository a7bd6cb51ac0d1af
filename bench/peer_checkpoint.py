"""An onmt_lite Transformer checkpoint as an OpenNMT-py 3.5.1 checkpoint: the same weights, the
same vocabularies.

    .venv/bin/python bench/peer_checkpoint.py -model LITE.pt -template PEER.pt -output OUT.pt

So that both toolkits decode one model (bench/translate_speed.py
``-only transformer_same_weights``): two models trained apart write outputs of different lengths,
and their sentences/s compare nothing.

``-template`` is any checkpoint that OpenNMT-py 3.5.1 saved (its ``opt``, an argparse.Namespace of
all its options, is the base of the new one's); every option that shapes the model is then set from
the onmt_lite checkpoint's options (``PEER_MODEL_OPTIONS``), so the template's own sizes do not
matter. The vocabularies are onmt_lite's word lists in id order (its 4 specials,
``<unk> <blank> <s> </s>``, first, as OpenNMT-py's defaults), so that every id means the same word
in both toolkits.

Each parameter is mapped explicitly (``parameter_map``), onmt_lite's name, then OpenNMT-py's
(E: ``encoder.transformer.i``, D: ``decoder.transformer_layers.i``):

    {enc,dec}oder.embeddings.lut.weight
        {enc,dec}oder.embeddings.make_embedding.emb_luts.0.weight
    (sinusoids computed on the fly)
        {enc,dec}oder.embeddings.make_embedding.pe.pe: onmt_lite's sinusoids() of positions
        0..4999, [5000 x 1 x H]
    encoder.layers.i.norm                          E.layer_norm
    encoder.layers.i.self_attn.qkv [3H x H]        E.self_attn.linear_{query,keys,values}
                                                   (rows 0:H, H:2H, 2H:3H)
    encoder.layers.i.self_attn.attention.out       E.self_attn.final_linear
    {enc,dec}oder.layers.i.feed_forward.norm       ...feed_forward.layer_norm
    {enc,dec}oder.layers.i.feed_forward.inner      ...feed_forward.w_1
    {enc,dec}oder.layers.i.feed_forward.outer      ...feed_forward.w_2
    encoder.norm, decoder.norm                     encoder.layer_norm, decoder.layer_norm
    decoder.layers.i.self_attn_norm                D.layer_norm_1
    decoder.layers.i.self_attn.qkv                 D.self_attn.linear_{query,keys,values}
    decoder.layers.i.self_attn.attention.out       D.self_attn.final_linear
    decoder.layers.i.context_norm                  D.layer_norm_2
    decoder.layers.i.context_query                 D.context_attn.linear_query
    decoder.memory_projection [2LH x H]            D.context_attn.linear_keys (rows 2iH:(2i+1)H)
                                                   and .linear_values ((2i+1)H:(2i+2)H)
    decoder.layers.i.context_attn.out              D.context_attn.final_linear
    generator 0.weight, 0.bias                     generator weight, bias

A parameter of either side left unmapped, a shape that does not fit, or an option this mapping does
not cover (an RNN, copy attention, relative positions, no position encoding) stops the conversion.
Tied weights (-share_embeddings, -share_decoder_embeddings) are written as copies, untied: the
values, and so the translations, are the same.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from onmt_lite.models.checkpoint import load_checkpoint, model_options  # noqa: E402
from onmt_lite.models.embeddings import sinusoids  # noqa: E402

PEER_PE_LENGTH = (
    5000  # OpenNMT-py 3.5.1's PositionalEncoding max_len (its buffer is saved in the checkpoint)
)
# its DefaultTokens UNK, PAD, BOS, EOS; onmt_lite's SPECIALS
PEER_SPECIALS = (
    "<unk>",
    "<blank>",
    "<s>",
    "</s>",
)
LAYER_NORM_EPS = 1e-6  # onmt_lite.models.transformer.LAYER_NORM_EPS; OpenNMT-py's -norm_eps default


class ConversionError(SystemExit):
    def __init__(self, message):
        super().__init__(f"peer_checkpoint: {message}")


def lite_dims(opt):
    """Layers, model size, heads and feed-forward size of the onmt_lite options ``opt``; refuses the
    models this converter does not map."""
    refusals = {
        "encoder_type": (opt.encoder_type != "transformer", "an RNN or mean encoder"),
        "decoder_type": (opt.decoder_type != "transformer", "an RNN decoder"),
        "copy_attn": (opt.copy_attn, "copy attention"),
        "max_relative_positions": (opt.max_relative_positions != 0, "relative positions"),
        "position_encoding": (not opt.position_encoding, "a Transformer without position encoding"),
        "self_attn_type": (
            opt.self_attn_type != "scaled-dot",
            f"self_attn_type {opt.self_attn_type}",
        ),
        "generator_function": (
            opt.generator_function != "softmax",
            "a generator other than softmax",
        ),
    }
    for name, (refused, what) in refusals.items():
        if refused:
            raise ConversionError(
                f"-{name}: not handled ({what}); the converter maps onmt_lite's Transformer "
                "encoder and decoder with sinusoidal position encoding, without copy attention"
            )
    layers = (opt.layers, opt.layers) if opt.layers > 0 else (opt.enc_layers, opt.dec_layers)
    size = opt.rnn_size if opt.rnn_size > 0 else opt.dec_rnn_size
    emb = (
        (opt.word_vec_size,) * 2
        if opt.word_vec_size > 0
        else (opt.src_word_vec_size, opt.tgt_word_vec_size)
    )
    if (opt.rnn_size <= 0 and opt.enc_rnn_size != opt.dec_rnn_size) or emb != (size, size):
        raise ConversionError(
            f"sizes differ (embeddings {emb}, model {size}): onmt_lite builds no such Transformer"
        )
    return {
        "enc_layers": layers[0],
        "dec_layers": layers[1],
        "size": size,
        "heads": opt.heads,
        "ff": opt.transformer_ff,
    }


def peer_options(template_opt, dims, vocab_sizes):
    """The template's option Namespace with every option that shapes the model set as
    onmt_lite's."""
    opt = argparse.Namespace(**vars(template_opt))
    model = {
        "model_task": "seq2seq",
        "model_type": "text",
        "model_dtype": "fp32",
        "encoder_type": "transformer",
        "decoder_type": "transformer",
        "layers": -1,
        "enc_layers": dims["enc_layers"],
        "dec_layers": dims["dec_layers"],
        "hidden_size": dims["size"],
        "enc_hid_size": dims["size"],
        "dec_hid_size": dims["size"],
        "word_vec_size": dims["size"],
        "src_word_vec_size": dims["size"],
        "tgt_word_vec_size": dims["size"],
        "heads": dims["heads"],
        "transformer_ff": dims["ff"],
        "position_encoding": True,
        "position_encoding_type": "SinusoidalInterleaved",
        "max_relative_positions": 0,
        "relative_positions_buckets": 0,
        "self_attn_type": "scaled-dot",
        "layer_norm": "standard",
        "norm_eps": LAYER_NORM_EPS,
        "pos_ffn_activation_fn": "relu",
        # onmt_lite's (and OpenNMT-py 1.x's) linear layers all have biases
        "add_qkvbias": True,
        "add_ffnbias": True,
        "num_kv": 0,
        "multiquery": False,
        "parallel_residual": False,
        "shared_layer_norm": False,
        "num_experts": 0,
        "sliding_window": 0,
        "aan_useffn": False,
        "copy_attn": False,
        "generator_function": "softmax",
        "lambda_align": 0.0,
        "alignment_layer": -3,
        "alignment_heads": 0,
        "full_context_alignment": False,
        "share_embeddings": False,
        "share_decoder_embeddings": False,  # tied weights are written as copies
        "feat_merge": "concat",
        "feat_vec_size": -1,
        "n_src_feats": 0,
        "dropout": [0.0],
        "attention_dropout": [0.0],
        "quant_layers": [],
        "quant_type": "",
        "lora_layers": [],
        "lora_embedding": False,
        "use_ckpting": [],
        "world_size": 1,
        "parallel_mode": "data_parallel",
        "gpu_ranks": [],
        "update_vocab": False,
        "train_from": "",
        "freeze_encoder": False,
        "freeze_decoder": False,
        "brnn": False,
        "rotary_interleave": False,
        "rotary_theta": 10000,
        "rotary_dim": 0,
    }
    for name, value in model.items():
        setattr(opt, name, value)
    opt.src_vocab_size, opt.tgt_vocab_size = vocab_sizes
    return opt


def split_rows(tensor, parts, size, what):
    """``tensor`` ``[parts*size x ...]`` (or ``[parts*size]``) as ``parts`` tensors of ``size``
    rows."""
    if tensor.size(0) != parts * size:
        raise ConversionError(f"{what} has {tensor.size(0)} rows, expected {parts} x {size}")
    return [t.clone() for t in tensor.split(size, 0)]


def parameter_map(lite, dims):
    """The peer's model and generator state dicts made of ``lite`` (onmt_lite's parameters by name,
    generator's prefixed ``generator.``). Every onmt_lite parameter must be used once."""
    used = set()
    model = {}
    size = dims["size"]

    def take(name):
        if name not in lite:
            raise ConversionError(f"the onmt_lite checkpoint lacks {name}")
        used.add(name)
        return lite[name].float().clone()

    def linear(src, dst):
        for part in ("weight", "bias"):
            model[f"{dst}.{part}"] = take(f"{src}.{part}")

    def qkv(src, dst):
        """The fused query, key and value Linear ``src`` [3H x H] as the three Linears of
        ``dst``."""
        for part in ("weight", "bias"):
            chunks = split_rows(take(f"{src}.{part}"), 3, size, f"{src}.{part}")
            for name, chunk in zip(("query", "keys", "values"), chunks):
                model[f"{dst}.linear_{name}.{part}"] = chunk

    # [5000 x 1 x H], as the peer keeps it
    pe = sinusoids(torch.arange(PEER_PE_LENGTH), size).unsqueeze(1)
    for side in ("encoder", "decoder"):
        model[f"{side}.embeddings.make_embedding.emb_luts.0.weight"] = take(
            f"{side}.embeddings.lut.weight"
        )
        model[f"{side}.embeddings.make_embedding.pe.pe"] = pe.clone()
    for i in range(dims["enc_layers"]):
        lite_layer = f"encoder.layers.{i}"
        peer_layer = f"encoder.transformer.{i}"
        linear(f"{lite_layer}.norm", f"{peer_layer}.layer_norm")
        qkv(f"{lite_layer}.self_attn.qkv", f"{peer_layer}.self_attn")
        linear(f"{lite_layer}.self_attn.attention.out", f"{peer_layer}.self_attn.final_linear")
        feed_forward(linear, f"{lite_layer}.feed_forward", f"{peer_layer}.feed_forward")
    linear("encoder.norm", "encoder.layer_norm")
    for part in ("weight", "bias"):  # every decoder layer's context keys and values in one product
        chunks = split_rows(
            take(f"decoder.memory_projection.{part}"),
            2 * dims["dec_layers"],
            size,
            f"decoder.memory_projection.{part}",
        )
        for i in range(dims["dec_layers"]):
            model[f"decoder.transformer_layers.{i}.context_attn.linear_keys.{part}"] = chunks[2 * i]
            model[f"decoder.transformer_layers.{i}.context_attn.linear_values.{part}"] = chunks[
                2 * i + 1
            ]
    for i in range(dims["dec_layers"]):
        lite_layer = f"decoder.layers.{i}"
        peer_layer = f"decoder.transformer_layers.{i}"
        linear(f"{lite_layer}.self_attn_norm", f"{peer_layer}.layer_norm_1")
        qkv(f"{lite_layer}.self_attn.qkv", f"{peer_layer}.self_attn")
        linear(f"{lite_layer}.self_attn.attention.out", f"{peer_layer}.self_attn.final_linear")
        linear(f"{lite_layer}.context_norm", f"{peer_layer}.layer_norm_2")
        linear(f"{lite_layer}.context_query", f"{peer_layer}.context_attn.linear_query")
        linear(f"{lite_layer}.context_attn.out", f"{peer_layer}.context_attn.final_linear")
        feed_forward(linear, f"{lite_layer}.feed_forward", f"{peer_layer}.feed_forward")
    linear("decoder.norm", "decoder.layer_norm")
    generator = {"weight": take("generator.0.weight"), "bias": take("generator.0.bias")}
    leftover = sorted(set(lite) - used)
    if leftover:
        raise ConversionError(f"onmt_lite parameters left unmapped: {leftover}")
    return model, generator


def feed_forward(linear, src, dst):
    linear(f"{src}.norm", f"{dst}.layer_norm")
    linear(f"{src}.inner", f"{dst}.w_1")
    linear(f"{src}.outer", f"{dst}.w_2")


def expected_shapes(dims, vocab_sizes):
    """The shape of every parameter and buffer of OpenNMT-py 3.5.1's model for ``dims`` (its
    TransformerEncoder/Decoder with add_qkvbias and add_ffnbias), by name, model then generator."""
    h = dims["size"]
    ff = dims["ff"]
    shapes = {}

    def lin(name, out, inp):
        shapes[f"{name}.weight"] = (out, inp)
        shapes[f"{name}.bias"] = (out,)

    def norm(name):
        shapes[f"{name}.weight"] = (h,)
        shapes[f"{name}.bias"] = (h,)

    def attn(name):
        for part in ("linear_keys", "linear_values", "linear_query", "final_linear"):
            lin(f"{name}.{part}", h, h)

    def ffn(name):
        lin(f"{name}.w_1", ff, h)
        lin(f"{name}.w_2", h, ff)
        norm(f"{name}.layer_norm")

    for side, vocab in zip(("encoder", "decoder"), vocab_sizes):
        shapes[f"{side}.embeddings.make_embedding.emb_luts.0.weight"] = (vocab, h)
        shapes[f"{side}.embeddings.make_embedding.pe.pe"] = (PEER_PE_LENGTH, 1, h)
    for i in range(dims["enc_layers"]):
        attn(f"encoder.transformer.{i}.self_attn")
        ffn(f"encoder.transformer.{i}.feed_forward")
        norm(f"encoder.transformer.{i}.layer_norm")
    norm("encoder.layer_norm")
    norm("decoder.layer_norm")
    for i in range(dims["dec_layers"]):
        layer = f"decoder.transformer_layers.{i}"
        attn(f"{layer}.self_attn")
        attn(f"{layer}.context_attn")
        ffn(f"{layer}.feed_forward")
        norm(f"{layer}.layer_norm_1")
        norm(f"{layer}.layer_norm_2")
    return shapes, {"weight": (vocab_sizes[1], h), "bias": (vocab_sizes[1],)}


def check_shapes(model, generator, dims, vocab_sizes, template):
    """Every name and shape as OpenNMT-py's model has them (``expected_shapes``); and, where the
    template holds a model of the same sizes, as its checkpoint has them."""
    want_model, want_generator = expected_shapes(dims, vocab_sizes)
    for what, got, want in (("model", model, want_model), ("generator", generator, want_generator)):
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        if missing or extra:
            raise ConversionError(
                f"{what}: parameters missing {missing[:5]}, unexpected {extra[:5]}"
            )
        wrong = [(k, tuple(got[k].shape), want[k]) for k in want if tuple(got[k].shape) != want[k]]
        if wrong:
            raise ConversionError(
                f"{what}: shapes differ from OpenNMT-py's (name, got, expected): {wrong[:5]}"
            )
    same = (
        set(template["model"]) == set(model)
        and all(template["model"][k].shape == model[k].shape for k in model)
        and template.get("generator")
        and all(template["generator"][k].shape == generator[k].shape for k in generator)
    )
    return bool(same)


def peer_vocab(vocab):
    for side in ("src", "tgt"):
        if tuple(vocab[side][: len(PEER_SPECIALS)]) != PEER_SPECIALS:
            raise ConversionError(f"the {side} vocabulary does not start with {PEER_SPECIALS}")
        if len(set(vocab[side])) != len(vocab[side]):
            raise ConversionError(
                f"the {side} vocabulary repeats words: ids would not map one to one"
            )
    return {
        "src": list(vocab["src"]),
        "tgt": list(vocab["tgt"]),
        "data_task": "seq2seq",
        "decoder_start_token": "<s>",
    }


def convert(lite_path, template_path):
    """The OpenNMT-py checkpoint (a dict) of the onmt_lite checkpoint ``lite_path``; and whether the
    template's weights had the same names and shapes."""
    checkpoint = load_checkpoint(lite_path)
    opt = model_options(checkpoint["opt"], lite_path)
    dims = lite_dims(opt)
    lite = dict(checkpoint["model"])
    lite.update({"generator." + k: v for k, v in checkpoint["generator"].items()})
    template = torch.load(template_path, map_location="cpu", weights_only=False)
    if not isinstance(template, dict) or not isinstance(template.get("opt"), argparse.Namespace):
        raise ConversionError(
            f"{template_path}: not an OpenNMT-py 3.x checkpoint (no opt Namespace)"
        )
    model, generator = parameter_map(lite, dims)
    vocab = peer_vocab(checkpoint["vocab"])
    vocab_sizes = (len(vocab["src"]), len(vocab["tgt"]))
    same_as_template = check_shapes(model, generator, dims, vocab_sizes, template)
    peer = {
        "model": model,
        "generator": generator,
        "vocab": vocab,
        "opt": peer_options(template["opt"], dims, vocab_sizes),
        "optim": None,
    }
    return peer, dims, same_as_template


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-model", required=True, help="onmt_lite Transformer checkpoint")
    parser.add_argument(
        "-template", required=True, help="a checkpoint OpenNMT-py 3.5.1 saved (for its options)"
    )
    parser.add_argument("-output", required=True, help="the OpenNMT-py checkpoint to write")
    opt = parser.parse_args()
    peer, dims, same_as_template = convert(opt.model, opt.template)
    torch.save(peer, opt.output)
    params = sum(t.numel() for k, t in peer["model"].items() if not k.endswith(".pe.pe")) + sum(
        t.numel() for t in peer["generator"].values()
    )
    layout = (
        "as in the template"
        if same_as_template
        else "as OpenNMT-py 3.5.1 builds them (the template has other sizes or vocabularies)"
    )
    print(
        f"{opt.output}: {dims['enc_layers']}+{dims['dec_layers']} layers, size {dims['size']}, "
        f"{dims['heads']} heads, feed-forward {dims['ff']}, vocabularies "
        f"{len(peer['vocab']['src'])}/{len(peer['vocab']['tgt'])}, {params} parameters; names and "
        f"shapes {layout}"
    )


if __name__ == "__main__":
    main()
