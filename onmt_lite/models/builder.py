"""build_model: options and vocabularies -> NMTModel (with its generator), initialised."""

from __future__ import annotations

import argparse
import types

import torch
import torch.nn as nn

from onmt_lite.data.vocab import PAD_ID, Vocab
from onmt_lite.models.copy_generator import CopyGenerator, NMTGenerator, SparsemaxGenerator
from onmt_lite.models.embeddings import Embeddings, FeatureSpec
from onmt_lite.models.cnn import CNNDecoder, CNNEncoder, check_cnn_options
from onmt_lite.models.mean_encoder import MeanEncoder
from onmt_lite.models.model import NMTModel
from onmt_lite.models.rnn_decoder import InputFeedRNNDecoder, StdRNNDecoder
from onmt_lite.models.rnn_encoder import RNNEncoder
from onmt_lite.models.dropout import Dropout
from onmt_lite.models.alignment_head import AlignmentHead
from onmt_lite.models.multihead import MultiHeadAttention
from onmt_lite.models.average_attention import AverageSelfAttention
from onmt_lite.models.transformer import TransformerDecoder, TransformerEncoder
from onmt_lite.utils.errors import UserError

COPY_ONLY_OPTIONS = (
    "reuse_copy_attn",
    "copy_attn_force",
    "copy_loss_by_seqlength",
    "copy_attn_type",
)
# the options that need the decoder's attention, refused with -global_attention none (-copy_attn
# alone does not: its attention is a layer of its own, of -copy_attn_type, as in 1.x)
ATTENTION_OPTIONS = ("reuse_copy_attn", "coverage_attn", "lambda_coverage")
OWN_ATTENTION = {
    "transformer": "Transformer decoder attends with its own multi-head softmax attention",
    "cnn": "CNN decoder attends with its own dot-product softmax attention in every layer",
}


def check_attention_variants(opt):
    """Refuse -global_attention none with what needs attention, the RNN-only variants with a
    Transformer or CNN decoder, and -generator_function sparsemax with copy attention."""
    if opt.decoder_type != "rnn":
        rnn_only = {
            "global_attention": opt.global_attention == "none",
            "global_attention_function": opt.global_attention_function != "softmax",
            "context_gate": opt.context_gate is not None,
        }
        for name in (name for name, asked in rnn_only.items() if asked):
            raise UserError(
                f"-{name} {getattr(opt, name)} is for RNN decoders (-decoder_type rnn): a "
                f"{OWN_ATTENTION[opt.decoder_type]}"
            )
    if opt.global_attention == "none":
        for name in (name for name in ATTENTION_OPTIONS if getattr(opt, name)):
            raise UserError(f"-{name} needs attention: not with -global_attention none")
        if opt.copy_attn and not opt.copy_attn_type:
            raise UserError(
                "-copy_attn with -global_attention none needs -copy_attn_type dot, "
                "general or mlp: the copy attention is then a layer of its own, of "
                "that type"
            )
    if opt.generator_function == "sparsemax" and opt.copy_attn:
        raise UserError(
            "-generator_function sparsemax cannot be used with -copy_attn: the copy generator "
            "mixes softmax probabilities of the vocabulary with the copy attention"
        )


def check_options(opt):
    """Refuse options that would have no effect in this combination, or no meaning."""
    check_attention_variants(opt)
    check_cnn_options(opt)
    if opt.lambda_coverage and not opt.coverage_attn:
        raise UserError("-lambda_coverage needs -coverage_attn")
    if not opt.copy_attn:
        for name in COPY_ONLY_OPTIONS:
            if getattr(opt, name):
                raise UserError(f"-{name} needs -copy_attn")
    if opt.decoder_type == "transformer":
        if opt.coverage_attn:
            raise UserError(
                "-coverage_attn is for RNN decoders (-decoder_type rnn): a Transformer decoder's "
                "attention has no coverage input"
            )
        for name in ("reuse_copy_attn", "copy_attn_type"):
            if getattr(opt, name):
                raise UserError(
                    f"-{name} is for RNN decoders: a Transformer decoder copies with the top "
                    "layer's attention over the source"
                )
    if opt.bridge and "transformer" in (opt.encoder_type, opt.decoder_type):
        raise UserError(
            "-bridge maps an RNN encoder's final state to an RNN decoder's first state; a "
            "Transformer encoder's final state is the mean of its output, and a Transformer "
            "decoder starts from none"
        )


def feature_spec(opt, vocabs):
    """The source word features' ``FeatureSpec`` (-feat_merge, -feat_vec_size, -feat_vec_exponent
    and the sizes of the feature vocabularies; none without them). Options of checkpoints from
    before features
    lack these: 1.x's defaults."""
    sizes = tuple(len(vocab) for vocab in vocabs.get("src_feats") or ())
    return FeatureSpec(
        sizes,
        getattr(opt, "feat_merge", "concat"),
        getattr(opt, "feat_vec_size", -1),
        getattr(opt, "feat_vec_exponent", 0.7),
    )


def _concat_hint(side, dims):
    if side == "src" and dims.src_input != dims.src_emb:
        return (
            f"; the source size {dims.src_input} includes the word features concatenated to the "
            f"{dims.src_emb} of the words (-feat_merge sum or mlp keeps the word size)"
        )
    return ""


def _check_source_input(opt, dims):
    """The mean encoder's memory bank is its input: of -rnn_size; a position encoding needs an even
    size."""
    if opt.encoder_type == "mean" and dims.src_input != dims.dec_rnn:
        raise UserError(
            f"-encoder_type mean needs -src_word_vec_size ({dims.src_input}) equal to -rnn_size "
            f"({dims.dec_rnn}): its memory bank and final state are the source embeddings "
            "(set -word_vec_size and -rnn_size to one value)" + _concat_hint("src", dims)
        )
    if opt.position_encoding and dims.src_input % 2 and dims.src_input != dims.src_emb:
        raise UserError(
            f"-position_encoding needs an even source embedding size (got {dims.src_input} with "
            f"the word features concatenated; change -feat_vec_size)"
        )


def model_dims(opt, vocabs=None):
    """Resolve -word_vec_size, -layers and -rnn_size (when > 0) into per-side sizes; check them.
    ``src_input`` is the size of the source embeddings' output: the word size, or with word features
    of ``vocabs`` and -feat_merge concat, the word and feature sizes together."""
    src_emb = opt.word_vec_size if opt.word_vec_size > 0 else opt.src_word_vec_size
    dims = types.SimpleNamespace(
        src_emb=src_emb,
        src_input=feature_spec(opt, vocabs or {}).output_size(src_emb),
        tgt_emb=opt.word_vec_size if opt.word_vec_size > 0 else opt.tgt_word_vec_size,
        enc_layers=opt.layers if opt.layers > 0 else opt.enc_layers,
        dec_layers=opt.layers if opt.layers > 0 else opt.dec_layers,
        enc_rnn=opt.rnn_size if opt.rnn_size > 0 else opt.enc_rnn_size,
        dec_rnn=opt.rnn_size if opt.rnn_size > 0 else opt.dec_rnn_size,
    )
    if dims.enc_rnn != dims.dec_rnn:
        raise UserError(
            f"-enc_rnn_size {dims.enc_rnn} and -dec_rnn_size {dims.dec_rnn} differ: "
            "attention needs one hidden size (use -rnn_size)"
        )
    starts_from_encoder_state = opt.decoder_type == "rnn" and opt.encoder_type != "transformer"
    if dims.enc_layers != dims.dec_layers and starts_from_encoder_state and not opt.bridge:
        raise UserError(
            f"-enc_layers {dims.enc_layers} and -dec_layers {dims.dec_layers} differ: "
            "the decoder starts from the encoder's final state (add -bridge)"
        )
    if opt.encoder_type == "brnn" and dims.enc_rnn % 2:
        raise UserError(f"-encoder_type brnn needs an even -rnn_size (got {dims.enc_rnn})")
    _check_source_input(opt, dims)
    for side, kind, emb, size in (
        ("src", opt.encoder_type, dims.src_input, dims.enc_rnn),
        ("tgt", opt.decoder_type, dims.tgt_emb, dims.dec_rnn),
    ):
        if kind == "transformer" and emb != size:
            raise UserError(
                f"a Transformer needs -{side}_word_vec_size ({emb}) equal to -rnn_size ({size}): "
                "its layers add to the embeddings (set -word_vec_size and -rnn_size to one value)"
                + _concat_hint(side, dims)
            )
    if "transformer" in (opt.encoder_type, opt.decoder_type) and dims.dec_rnn % opt.heads:
        raise UserError(f"-rnn_size {dims.dec_rnn} is not a multiple of -heads {opt.heads}")
    if opt.position_encoding and (dims.src_emb % 2 or dims.tgt_emb % 2):
        raise UserError(
            f"-position_encoding needs even word vector sizes (got {dims.src_emb} and "
            f"{dims.tgt_emb})"
        )
    if opt.share_decoder_embeddings and dims.tgt_emb != dims.dec_rnn:
        raise UserError(
            f"-share_decoder_embeddings needs -tgt_word_vec_size ({dims.tgt_emb}) "
            f"equal to -rnn_size ({dims.dec_rnn})"
        )
    return dims


def alignment_head(opt):
    """The ``AlignmentHead`` of -alignment_layer, -alignment_heads, -full_context_alignment."""
    return AlignmentHead(opt.alignment_layer, opt.alignment_heads, opt.full_context_alignment)


def check_alignment(opt, dims):
    """-lambda_align needs a Transformer decoder that has the alignment head the options name."""
    if opt.lambda_align <= 0:
        return
    if opt.decoder_type != "transformer":
        raise UserError(
            "-lambda_align (guided alignment) needs -decoder_type transformer: the alignment "
            "is a Transformer decoder layer's attention over the source"
        )
    problem = alignment_head(opt).problem(dims.dec_layers, opt.heads)
    if problem:
        raise UserError(f"-lambda_align: {problem}")


def build_embeddings(opt, dims, vocabs):
    """The source and target ``Embeddings`` (one object for both with -share_embeddings). Position
    encodings go to the source and to a Transformer or CNN decoder: an RNN decoder reads one word
    a step and knows no positions (1.x gave every step of its translation position 0, unlike its
    training)."""
    src = Embeddings(
        len(vocabs["src"]),
        dims.src_emb,
        opt.dropout[0],
        position_encoding=opt.position_encoding,
        features=feature_spec(opt, vocabs),
    )
    tgt_positions = opt.position_encoding and opt.decoder_type != "rnn"
    if opt.share_embeddings:
        if opt.position_encoding and not tgt_positions:
            raise UserError(
                "-share_embeddings with -position_encoding needs a Transformer or CNN decoder: "
                "an RNN decoder's embeddings take no position encodings"
            )
        if vocabs["src"] != vocabs["tgt"]:
            raise UserError(
                "-share_embeddings needs one vocabulary for both sides "
                "(preprocess with -share_vocab)"
            )
        if dims.src_emb != dims.tgt_emb:
            raise UserError("-share_embeddings needs equal source and target word vector sizes")
        if vocabs.get("src_feats"):
            raise UserError(
                "-share_embeddings with source word features: the target side has no features "
                "(train without -share_embeddings)"
            )
        return src, src
    return src, Embeddings(
        len(vocabs["tgt"]), dims.tgt_emb, opt.dropout[0], position_encoding=tgt_positions
    )


def build_encoder(opt, dims, embeddings):
    """RNNEncoder for -encoder_type rnn and brnn, MeanEncoder for mean, TransformerEncoder for
    transformer, CNNEncoder for cnn."""
    if opt.encoder_type == "transformer":
        n_states = 2 if opt.rnn_type == "LSTM" else 1
        return TransformerEncoder(
            dims.enc_layers,
            dims.enc_rnn,
            opt.heads,
            opt.transformer_ff,
            opt.dropout[0],
            opt.attention_dropout[0],
            embeddings,
            opt.max_relative_positions,
            final_layers=(n_states, dims.dec_layers) if opt.decoder_type == "rnn" else None,
        )
    if opt.encoder_type == "cnn":
        return CNNEncoder(
            dims.enc_layers, dims.enc_rnn, opt.cnn_kernel_width, opt.dropout[0], embeddings
        )
    bridge_layers = dims.dec_layers if opt.bridge else None
    if opt.encoder_type == "mean":
        return MeanEncoder(opt.rnn_type, dims.enc_layers, embeddings, bridge_layers=bridge_layers)
    return RNNEncoder(
        opt.rnn_type,
        opt.encoder_type == "brnn",
        dims.enc_layers,
        dims.enc_rnn,
        opt.dropout[0],
        embeddings,
        bridge_layers=bridge_layers,
    )


def build_decoder(opt, dims, embeddings):
    if opt.decoder_type == "transformer":
        return TransformerDecoder(
            dims.dec_layers,
            dims.dec_rnn,
            opt.heads,
            opt.transformer_ff,
            opt.dropout[0],
            opt.attention_dropout[0],
            embeddings,
            opt.max_relative_positions,
            copy_attn=opt.copy_attn,
            alignment=alignment_head(opt),
            average=opt.self_attn_type == "average",
            average_ffn=opt.aan_useffn,
        )
    if opt.decoder_type == "cnn":
        return CNNDecoder(
            dims.dec_layers, dims.dec_rnn, opt.cnn_kernel_width, opt.dropout[0], embeddings
        )
    decoder_class = InputFeedRNNDecoder if opt.input_feed else StdRNNDecoder
    return decoder_class(
        opt.rnn_type,
        dims.dec_layers,
        dims.dec_rnn,
        opt.global_attention,
        opt.dropout[0],
        embeddings,
        coverage_attn=opt.coverage_attn,
        copy_attn=opt.copy_attn,
        reuse_copy_attn=opt.reuse_copy_attn,
        copy_attn_type=opt.copy_attn_type,
        attn_func=opt.global_attention_function,
        context_gate=opt.context_gate,
    )


def initialise(model, opt, src_emb, tgt_emb):
    """-param_init uniform (and/or -param_init_glorot), zero padding rows, pretrained, frozen."""
    with torch.no_grad():
        for param in model.parameters():
            if opt.param_init != 0:
                param.uniform_(-opt.param_init, opt.param_init)
            if opt.param_init_glorot and param.dim() > 1:
                nn.init.xavier_uniform_(param)
        for lut in (src_emb.lut, tgt_emb.lut, *src_emb.feat_luts):
            lut.weight[PAD_ID].zero_()
    for emb, path, fix in (
        (src_emb, opt.pre_word_vecs_enc, opt.fix_word_vecs_enc),
        (tgt_emb, opt.pre_word_vecs_dec, opt.fix_word_vecs_dec),
    ):
        if path:
            emb.load_pretrained(path)
        if fix:
            emb.freeze()


def build_model(opt: argparse.Namespace, vocabs: dict[str, Vocab]) -> NMTModel:
    """An initialised NMTModel for options ``opt`` and ``vocabs``
    (``{"src": Vocab, "tgt": Vocab}``)."""
    check_options(opt)
    dims = model_dims(opt, vocabs)
    check_alignment(opt, dims)
    src_emb, tgt_emb = build_embeddings(opt, dims, vocabs)
    encoder = build_encoder(opt, dims, src_emb)
    decoder = build_decoder(opt, dims, tgt_emb)
    if opt.copy_attn:
        generator = CopyGenerator(dims.dec_rnn, len(vocabs["tgt"]))
    elif opt.generator_function == "sparsemax":
        generator = SparsemaxGenerator(dims.dec_rnn, len(vocabs["tgt"]))
    else:
        generator = NMTGenerator(dims.dec_rnn, len(vocabs["tgt"]))
    model = NMTModel(encoder, decoder, generator)
    initialise(model, opt, src_emb, tgt_emb)
    if opt.share_decoder_embeddings:
        output_layer = generator.linear if opt.copy_attn else generator[0]
        output_layer.weight = tgt_emb.weight
    if opt.self_attn_type == "scaled-dot-flash":
        use_kernel_dropout(model)
    return model


def use_kernel_dropout(model: nn.Module) -> int:
    """``-self_attn_type scaled-dot-flash``: every multi-head attention of ``model`` leaves its
    dropout in training to the fused kernel off the CPU (``MultiHeadAttention``); returns how many
    there are."""
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    for attention in attentions:
        attention.kernel_dropout = True
    return len(attentions)


def set_dropout(model, p, attention_p):
    """Set every dropout of ``model`` to ``p`` (-dropout) and the Transformer's attention dropout to
    ``attention_p`` (-attention_dropout), as the model would have been built with them."""
    for module in model.modules():
        if isinstance(module, (nn.Dropout, Dropout)):
            module.p = p
        elif isinstance(module, nn.RNNBase) and module.num_layers > 1:
            module.dropout = p  # between the layers
        elif isinstance(module, MultiHeadAttention):
            module.dropout_p = attention_p
    for module in model.modules():  # after the loop above, which set its dropout to p
        if isinstance(module, AverageSelfAttention) and module.feed_forward is not None:
            module.feed_forward.dropout.p = attention_p  # 1.x's: the attention dropout
