"""The options that shape a model, between OpenNMT-py's names (1.x's and 3.x's) and onmt_lite's.

onmt_lite's model options are 1.x's; 3.x renamed the sizes (``hidden_size``, ``enc_hid_size``,
``dec_hid_size``) and added options that change the model, which onmt_lite has only at one value
(``REFUSED_UNLESS``). An option of that list at another value, an image or audio model, or an
encoder or decoder onmt_lite does not have is refused by name.
"""

from __future__ import annotations

import copy

from typing import Any

from onmt_lite.utils.errors import UserError

# model options with the same name and meaning in 1.x, 3.x and onmt_lite
SAME = (
    "encoder_type",
    "decoder_type",
    "enc_layers",
    "dec_layers",
    "src_word_vec_size",
    "tgt_word_vec_size",
    "rnn_type",
    "bridge",
    "context_gate",
    "global_attention",
    "global_attention_function",
    "input_feed",
    "copy_attn",
    "copy_attn_type",
    "copy_attn_force",
    "reuse_copy_attn",
    "copy_loss_by_seqlength",
    "coverage_attn",
    "lambda_coverage",
    "heads",
    "transformer_ff",
    "position_encoding",
    "max_relative_positions",
    "share_embeddings",
    "share_decoder_embeddings",
    "self_attn_type",
    "aan_useffn",
    "generator_function",
    "lambda_align",
    "alignment_layer",
    "alignment_heads",
    "full_context_alignment",
    "cnn_kernel_width",
)
ENCODERS = ("rnn", "brnn", "mean", "transformer", "cnn")
DECODERS = ("rnn", "transformer", "cnn")
# 3.x options that change the model: what onmt_lite builds (a missing option: 1.x, the same)
REFUSED_UNLESS = {
    "layer_norm": "standard",
    "pos_ffn_activation_fn": "relu",
    "parallel_residual": False,
    "shared_layer_norm": False,
    "num_experts": 0,
    "relative_positions_buckets": 0,
    "sliding_window": 0,
    "position_encoding_type": "SinusoidalInterleaved",
    "norm_eps": 1e-6,
    "n_src_feats": 0,
}


def refuse(path: str, what: str) -> UserError:
    return UserError(f"{path}: cannot convert {what}")


def _check_peer(opt: dict[str, Any], path: str) -> None:
    if opt.get("model_type", "text") != "text":
        raise refuse(path, f"a -model_type {opt['model_type']} model (onmt_lite has text only)")
    if opt.get("encoder_type") not in ENCODERS:
        raise refuse(path, f"-encoder_type {opt.get('encoder_type')} (onmt_lite: {ENCODERS})")
    if opt.get("decoder_type") not in DECODERS:
        raise refuse(path, f"-decoder_type {opt.get('decoder_type')} (onmt_lite: {DECODERS})")
    for name, value in REFUSED_UNLESS.items():
        if name == "position_encoding_type" and not opt.get("position_encoding"):
            continue
        if name in opt and opt[name] != value:
            raise refuse(path, f"-{name} {opt[name]} (onmt_lite's models have {value} only)")
    if opt.get("max_relative_positions", 0) < 0:
        kind = {-1: "rotary", -2: "ALiBi"}.get(opt["max_relative_positions"], "")
        raise refuse(path, f"-max_relative_positions {opt['max_relative_positions']} ({kind})")
    heads = opt.get("heads", 8)
    if opt.get("num_kv", 0) not in (0, heads):
        raise refuse(path, f"-num_kv {opt['num_kv']} (grouped keys and values)")


def lite_model_options(opt: dict[str, Any], path: str) -> dict[str, Any]:
    """onmt_lite's model options for the OpenNMT-py options ``opt`` (1.x's or 3.x's, as a dict)."""
    _check_peer(opt, path)
    lite = {name: opt[name] for name in SAME if name in opt}
    # 1.x: rnn_size, enc_rnn_size, dec_rnn_size; 3.x: hidden_size, enc_hid_size, dec_hid_size
    enc = opt.get("enc_hid_size", opt.get("enc_rnn_size"))
    dec = opt.get("dec_hid_size", opt.get("dec_rnn_size"))
    size = opt.get("hidden_size", opt.get("rnn_size", -1))
    if size and size > 0:
        enc = size
        dec = size
    layers = opt.get("layers", -1)
    if layers and layers > 0:
        lite["enc_layers"] = layers
        lite["dec_layers"] = layers
    word_vec = opt.get("word_vec_size", -1)
    if word_vec and word_vec > 0:
        lite["src_word_vec_size"] = word_vec
        lite["tgt_word_vec_size"] = word_vec
    lite.update(enc_rnn_size=enc, dec_rnn_size=dec, rnn_size=-1, layers=-1, word_vec_size=-1)
    if lite.get("self_attn_type") == "scaled-dot-flash":  # 3.x's kernel for the same product
        lite["self_attn_type"] = "scaled-dot"
    if not opt.get("copy_attn"):  # 3.x fills in copy options whether or not copy is on
        for name in (
            "copy_attn_type",
            "copy_attn_force",
            "reuse_copy_attn",
            "copy_loss_by_seqlength",
        ):
            lite.pop(name, None)
    if lite.get("alignment_layer") is None:
        lite.pop("alignment_layer", None)
    return lite


# what every onmt_lite model is, in OpenNMT-py 3.5.1's options (and the training options its
# model builder reads too); tied embeddings are written as copies, untied
PEER_FIXED = {
    "model_task": "seq2seq",
    "model_type": "text",
    "model_dtype": "fp32",
    "layers": -1,
    "hidden_size": -1,
    "word_vec_size": -1,
    "share_embeddings": False,
    "share_decoder_embeddings": False,
    "position_encoding_type": "SinusoidalInterleaved",
    "relative_positions_buckets": 0,
    "layer_norm": "standard",
    "norm_eps": 1e-6,
    "pos_ffn_activation_fn": "relu",
    # onmt_lite's (and 1.x's) linear layers all have biases
    "add_qkvbias": True,
    "add_ffnbias": True,
    "num_kv": 0,
    "multiquery": False,
    "parallel_residual": False,
    "shared_layer_norm": False,
    "num_experts": 0,
    "sliding_window": 0,
    "feat_merge": "concat",
    "feat_vec_size": -1,
    "n_src_feats": 0,
    "dropout": [0.0],
    "attention_dropout": [0.0],
    "dropout_steps": [0],
    "quant_layers": [],
    "quant_type": "",
    "lora_layers": [],
    "lora_embedding": False,
    "use_ckpting": [],
    "update_vocab": False,
    "train_from": "",
    "freeze_encoder": False,
    "freeze_decoder": False,
    "rotary_interleave": False,
    "rotary_theta": 10000,
    "rotary_dim": 0,
    "vocab_size_multiple": 1,
    # training options 3.5.1's model builder reads too
    "freeze_word_vecs_enc": False,
    "freeze_word_vecs_dec": False,
    "pre_word_vecs_enc": None,
    "pre_word_vecs_dec": None,
    "both_embeddings": None,
    "src_embeddings": None,
    "tgt_embeddings": None,
    "embeddings_type": None,
    "optim": "adam",
    "world_size": 1,
    "gpu_ranks": [],
    "parallel_mode": "data_parallel",
}


def peer_model_options(lite: dict[str, Any], vocab_sizes: tuple[int, int]) -> dict[str, Any]:
    """OpenNMT-py 3.5.1's model options for onmt_lite's options ``lite`` (after ``model_options``:
    sizes resolved). Tied embeddings are written as copies, untied."""
    enc_size = lite["enc_rnn_size"] if lite["rnn_size"] <= 0 else lite["rnn_size"]
    dec_size = lite["dec_rnn_size"] if lite["rnn_size"] <= 0 else lite["rnn_size"]
    layers = (lite["enc_layers"], lite["dec_layers"])
    if lite["layers"] > 0:
        layers = (lite["layers"], lite["layers"])
    emb = (lite["src_word_vec_size"], lite["tgt_word_vec_size"])
    if lite["word_vec_size"] > 0:
        emb = (lite["word_vec_size"], lite["word_vec_size"])
    peer = {name: lite[name] for name in SAME if name in lite}
    peer.update(copy.deepcopy(PEER_FIXED))  # its lists are not shared between checkpoints
    peer.update(
        enc_layers=layers[0],
        dec_layers=layers[1],
        enc_hid_size=enc_size,
        dec_hid_size=dec_size,
        src_word_vec_size=emb[0],
        tgt_word_vec_size=emb[1],
        brnn=lite["encoder_type"] == "brnn",
        src_vocab_size=vocab_sizes[0],
        tgt_vocab_size=vocab_sizes[1],
    )
    if peer.get("alignment_layer") is None:
        peer["alignment_layer"] = -3
    return peer
