"""Options of the model (onmt_lite_train; a checkpoint carries them)."""

from onmt_lite.opts.parser import add, compatibility_group, opennmt_py_1x_command
from onmt_lite.opts.values import (
    FLOAT32_MAX,
    MAX_LAYERS,
    MAX_LENGTH,
    MAX_SIZE,
    choice,
    float_in,
    int_in,
)


def _model_embeddings_opts(parser):
    add(
        compatibility_group(parser),
        "model_type",
        default="text",
        type=choice(
            "model_type",
            ["text"],
            dict.fromkeys(["img", "audio", "vec"], "onmt_lite reads text only"),
        ),
        help="Type of the source input: text only",
    )
    group = parser.add_argument_group("Model: embeddings")
    add(
        group,
        "word_vec_size",
        type=int_in(-1, MAX_SIZE),
        default=-1,
        help="Word embedding size for both sides, if > 0",
    )
    add(
        group,
        "src_word_vec_size",
        type=int_in(1, MAX_SIZE),
        default=500,
        help="Source word embedding size",
    )
    add(
        group,
        "tgt_word_vec_size",
        type=int_in(1, MAX_SIZE),
        default=500,
        help="Target word embedding size",
    )
    add(
        group,
        "share_embeddings",
        action="store_true",
        help="One embedding table for source and target (needs -share_vocab data)",
    )
    add(
        group,
        "share_decoder_embeddings",
        action="store_true",
        help="Tie the generator's output weights to the decoder embeddings",
    )
    add(
        group,
        "pre_word_vecs_enc",
        default="",
        help="Pretrained source embeddings: a [vocab x dim] tensor file "
        "(tools/embeddings_to_torch.py)",
    )
    add(
        group,
        "pre_word_vecs_dec",
        default="",
        help="Pretrained target embeddings, as -pre_word_vecs_enc",
    )
    add(group, "fix_word_vecs_enc", action="store_true", help="Do not update the source embeddings")
    add(group, "fix_word_vecs_dec", action="store_true", help="Do not update the target embeddings")
    add(
        group,
        "feat_merge",
        default="concat",
        type=choice("feat_merge", ("concat", "sum", "mlp")),
        help="How the source word features' embeddings join the word's: concat [word; f1; f2 ..], "
        "sum (each feature of the word size, added), mlp (concatenated, then Linear + ReLU "
        "back to the word size)",
    )
    add(
        group,
        "feat_vec_size",
        type=int_in(-1, MAX_SIZE),
        default=-1,
        help="Embedding size of every source word feature, if > 0 (concat and mlp; else "
        "-feat_vec_exponent)",
    )
    # at most 1: N ** e stays finite and no larger than N, one dimension per value
    add(
        group,
        "feat_vec_exponent",
        type=float_in(0, 1),
        default=0.7,
        help="Without -feat_vec_size, a feature taking N values (its vocabulary size) gets int(N "
        "** this) dimensions (concat and mlp; 0 to 1: at most one dimension per value)",
    )


def _model_encoder_and_decoder_opts(parser):
    group = parser.add_argument_group("Model: encoder and decoder")
    add(
        group,
        "encoder_type",
        default="rnn",
        type=choice(
            "encoder_type",
            ["rnn", "brnn", "mean", "transformer", "cnn"],
            {
                "ggnn": "the GGNN (graph) encoder is not implemented",
                **dict.fromkeys(
                    ["img", "audio"], "image and audio encoders are not supported: text only"
                ),
            },
        ),
        help="rnn (unidirectional), brnn (bidirectional: -rnn_size is split over the directions), "
        "mean (no recurrence: the memory bank is the source embeddings and the decoder "
        "starts from their mean; needs -src_word_vec_size equal to -rnn_size), transformer "
        "(an RNN decoder then starts from the mean of its output) or cnn (gated convolutions, "
        "with -decoder_type cnn)",
    )
    group.add_argument(
        "-brnn",
        "--brnn",
        dest="encoder_type",
        action="store_const",
        const="brnn",
        default="rnn",
        help="The same as -encoder_type brnn (deprecated in OpenNMT-py 1.x)",
    )
    add(
        group,
        "decoder_type",
        default="rnn",
        type=choice("decoder_type", ["rnn", "transformer", "cnn"]),
        help="rnn (with -global_attention, -input_feed, -rnn_type), transformer or cnn (causal "
        "gated convolutions, each layer attending over the source; with -encoder_type cnn)",
    )
    add(
        group,
        "layers",
        type=int_in(-1, MAX_LAYERS),
        default=-1,
        help=f"Layers of encoder and decoder, if > 0 (at most {MAX_LAYERS})",
    )
    add(
        group,
        "enc_layers",
        type=int_in(1, MAX_LAYERS),
        default=2,
        help=f"Encoder layers (at most {MAX_LAYERS})",
    )
    add(
        group,
        "dec_layers",
        type=int_in(1, MAX_LAYERS),
        default=2,
        help=f"Decoder layers (at most {MAX_LAYERS})",
    )
    add(
        group,
        "rnn_size",
        type=int_in(-1, MAX_SIZE),
        default=-1,
        help="Hidden size of encoder and decoder, if > 0",
    )
    add(group, "enc_rnn_size", type=int_in(1, MAX_SIZE), default=500, help="Encoder hidden size")
    add(group, "dec_rnn_size", type=int_in(1, MAX_SIZE), default=500, help="Decoder hidden size")
    add(
        group,
        "rnn_type",
        default="LSTM",
        type=choice("rnn_type", ["LSTM", "GRU"], {"SRU": "SRU cells are not supported"}),
        help="LSTM or GRU",
    )
    add(
        group,
        "input_feed",
        type=int,
        choices=[0, 1],
        default=1,
        help="Feed the previous attentional output into the next decoder step (1) or not (0)",
    )
    add(
        group,
        "bridge",
        action="store_true",
        help="A learned layer between the encoder's final state and the decoder's first state",
    )


def _model_cnn_opts(parser):
    add(
        parser.add_argument_group("Model: convolutional (CNN)"),
        "cnn_kernel_width",
        type=int_in(1, MAX_LENGTH),
        default=3,
        help="The positions each convolution of -encoder_type/-decoder_type cnn reads (odd: "
        "the encoder's are centred on their position)",
    )


def _model_transformer_opts(parser):
    group = parser.add_argument_group("Model: Transformer")
    add(
        group,
        "heads",
        type=int_in(1, MAX_SIZE),
        default=8,
        help="Attention heads (they divide -rnn_size)",
    )
    add(
        group,
        "transformer_ff",
        type=int_in(1, MAX_SIZE),
        default=2048,
        help="Size of the feed-forward layers",
    )
    add(
        group,
        "position_encoding",
        action="store_true",
        help="Add sinusoidal position encodings to the source embeddings and a Transformer "
        "decoder's (scaled by the square root of their size); a Transformer without them or "
        "-max_relative_positions sees no word order",
    )
    # a distance in a sequence is less than its length: a larger clip would clip nothing
    add(
        group,
        "max_relative_positions",
        type=int_in(0, MAX_LENGTH),
        default=0,
        help="Relative positions in self-attention (Shaw et al. 2018), clipped to this distance "
        f"(0: none; at most {MAX_LENGTH}, the longest sequence; the table of 2k + 1 vectors "
        "and each attention step's memory grow with it)",
    )
    add(
        group,
        "self_attn_type",
        default="scaled-dot",
        type=choice(
            "self_attn_type",
            ["scaled-dot", "scaled-dot-flash", "average"],
        ),
        help="Scaled dot-product attention, on PyTorch's fused kernel wherever it computes what "
        "the written-out form does; scaled-dot-flash (OpenNMT-py 3.x's name): on a GPU also "
        "with attention dropout, the kernel drawing its own masks (the same distribution, other "
        "random numbers). Both decode alike. average: a Transformer decoder's layers average "
        "their inputs so far instead, gated (the average attention network, Zhang et al. 2018; "
        "the encoder's self-attention stays scaled-dot)",
    )
    add(
        group,
        "aan_useffn",
        action="store_true",
        help="-self_attn_type average: feed the average forward (a feed-forward block of "
        "-rnn_size, with the attention dropout) before the gate",
    )
    add(
        group,
        "attention_dropout",
        type=float_in(0, 1),
        nargs="+",
        default=[0.1],
        help="Dropout of the Transformer's attention weights; several values: a schedule, with "
        "-dropout_steps",
    )


def _model_attention_and_generator_opts(parser):
    group = parser.add_argument_group("Model: attention and generator")
    add(
        group,
        "global_attention",
        default="general",
        type=choice("global_attention", ["dot", "general", "mlp", "none"]),
        help="dot, general (Luong), mlp (Bahdanau) or none (an RNN decoder without attention: its "
        "output is the RNN's)",
    )
    add(
        group,
        "global_attention_function",
        default="softmax",
        type=choice("global_attention_function", ["softmax", "sparsemax"]),
        help="What turns an RNN decoder's attention scores into weights: softmax or sparsemax "
        "(Martins and Astudillo 2016: sparse weights)",
    )
    add(
        group,
        "generator_function",
        default="softmax",
        type=choice("generator_function", ["softmax", "sparsemax"]),
        help="What turns the generator's scores into word probabilities: softmax or sparsemax "
        "(trained with the sparsemax loss; not with -copy_attn or -label_smoothing)",
    )
    add(
        group,
        "context_gate",
        default=None,
        type=choice("context_gate", ["source", "target", "both"]),
        help="A context gate (Tu et al. 2017) in the RNN decoder, after the attention: scale the "
        "source context, the target context or both",
    )
    add(
        group,
        "copy_attn",
        action="store_true",
        help="Copy attention (pointer-generator); needs -dynamic_dict data",
    )
    add(
        group,
        "copy_attn_type",
        default=None,
        type=choice("copy_attn_type", ["dot", "general", "mlp"]),
        help="Copy attention type (default: as -global_attention; with -global_attention none "
        "the copy attention is a layer of its own, and this is needed)",
    )
    add(
        group,
        "reuse_copy_attn",
        action="store_true",
        help="Use the standard attention as copy attention",
    )
    add(
        group,
        "copy_attn_force",
        action="store_true",
        help="A target word found in the source is always scored through copying",
    )
    add(
        group,
        "copy_loss_by_seqlength",
        action="store_true",
        help="Divide the copy loss by sentence length",
    )
    add(group, "coverage_attn", action="store_true", help="Coverage attention (See et al. 2017)")
    add(
        group,
        "lambda_coverage",
        type=float_in(0, FLOAT32_MAX),
        default=0.0,
        help="Weight of the coverage loss (needs -coverage_attn)",
    )
    # uniform_(-x, x) needs the width 2x within float32
    add(
        group,
        "param_init",
        type=float_in(0, FLOAT32_MAX / 2),
        default=0.1,
        help="Initialise parameters uniformly in [-x, x] (0: keep PyTorch's initialisation)",
    )
    add(
        group,
        "param_init_glorot",
        action="store_true",
        help="Glorot (Xavier) initialisation of matrices",
    )


def _model_alignment_opts(parser):
    group = parser.add_argument_group("Model: guided alignment")
    add(
        group,
        "lambda_align",
        type=float_in(0, FLOAT32_MAX),
        default=0.0,
        help="Weight of the alignment loss of Garg et al. (2019): the cross-entropy between the "
        "alignment head's attention and the -train_align alignments (0: off; needs a "
        "Transformer decoder)",
    )
    add(
        group,
        "alignment_layer",
        type=int_in(-MAX_LAYERS, MAX_LAYERS - 1),
        default=-3,
        help="The decoder layer whose attention over the source is the alignment (negative: from "
        "the last)",
    )
    add(
        group,
        "alignment_heads",
        type=int_in(0, MAX_SIZE),
        default=0,
        help="Average the first N heads of that attention into the alignment (0: all heads)",
    )
    add(
        group,
        "full_context_alignment",
        action="store_true",
        help="Take the alignment from a second pass of that layer without the future mask (the "
        "whole target as context)",
    )


@opennmt_py_1x_command("train")
def model_opts(parser):
    """Embeddings, encoder and decoder (the CNN's and the Transformer's layers), attention and
    generator, guided alignment."""
    _model_embeddings_opts(parser)
    _model_encoder_and_decoder_opts(parser)
    _model_cnn_opts(parser)
    _model_transformer_opts(parser)
    _model_attention_and_generator_opts(parser)
    _model_alignment_opts(parser)
