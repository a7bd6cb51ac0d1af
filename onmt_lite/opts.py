"""Every command-line option of onmt_lite, in groups, with OpenNMT-py 1.x names and defaults.

Each group is a function that adds its options to a parser, so the commands and the tests build
parsers the same way::

    parser = build_parser("onmt_lite_preprocess", [config_opts, preprocess_opts])
    opt = parse(parser, ["-train_src", "a.txt", ...])

Every option is spelled ``-name`` and ``--name``. Abbreviations are not accepted (``-train`` is not
``-train_src``). A YAML file given with ``-config`` sets the same keys (``train_src: a.txt``) and gives
the same result as the command line; ``-save_config FILE`` writes such a file for the current
options and exits, as in OpenNMT-py 1.x. OpenNMT-py 1.x options that onmt_lite does not have are
refused by name, with the reason.
"""
import argparse
import sys

import configargparse
import yaml

from onmt_lite.utils.files import write_text

# OpenNMT-py 1.x options that onmt_lite does not implement, with the reason given to the user.
UNSUPPORTED_OPTIONS = {
    **dict.fromkeys(
        ["src_dir", "image_channel_size", "sample_rate", "window_size", "window_stride", "window",
         "n_stft", "audio_enc_pooling"],
        "image and audio input are not supported (text only)"),
    **dict.fromkeys(
        ["train_ids", "train_align", "valid_align", "data_ids", "data_weights"],
        "one training corpus per run; several weighted corpora are not supported"),
    **dict.fromkeys(
        ["features_vocabs_prefix", "feat_merge", "feat_vec_size", "feat_vec_exponent"],
        "source word features are not supported"),
    **dict.fromkeys(
        ["position_encoding", "heads", "transformer_ff", "max_relative_positions", "self_attn_type",
         "aan_useffn", "lambda_align", "alignment_layer", "alignment_heads",
         "full_context_alignment", "cnn_kernel_width", "context_gate"],
        "onmt_lite has RNN encoders and decoders only"),
    "vocab_size_multiple": "vocabulary padding to a multiple is not supported",
    "num_threads": "preprocessing runs in one process; the option has no effect here",
    "subword_prefix": "subword joiner handling is not supported; use -src_spm/-tgt_spm",
    "subword_prefix_is_joiner": "subword joiner handling is not supported; use -src_spm/-tgt_spm",
    "log_file_level": "the log file records INFO and above",
    "brnn": "use -encoder_type brnn",
    "epochs": "use -train_steps",
    "single_pass": "training runs for -train_steps steps",
    "queue_size": "batches are produced in the training process",
    "gpu_verbose_level": "not needed",
    "average_decay": "exponential moving averages of weights are not supported",
    "average_every": "exponential moving averages of weights are not supported",
    "exp_host": "Crayon logging is not supported (use -tensorboard)",
    "exp": "Crayon logging is not supported (use -tensorboard)",
    "dropout_steps": "dropout is fixed during training",
    "attention_dropout": "onmt_lite has RNN encoders and decoders only",
    "dump_beam": "beam dumps are not supported",
    "stepwise_penalty": "penalties are applied to finished hypotheses only",
    "fp32": "translation runs in the model's precision",
    "max_sent_length": "use -max_length",
}


def _plain_help(text, default):
    if default in (None, "", [], False):
        return text
    return f"{text} (default: {default})"


def add(group, name, *aliases, help, **kwargs):  # noqa: A002  (argparse's own keyword)
    """Add option ``-name``/``--name`` (plus ``aliases``) with its default in the help text."""
    flags = [f"-{name}", f"--{name}"] + list(aliases)
    default = kwargs.get("default")
    if kwargs.get("action") == "store_true":
        default = None
    group.add_argument(*flags, help=_plain_help(help, default), **kwargs)


def choice(option, allowed, unsupported=None):
    """A ``type=`` that accepts one of ``allowed``; a known-but-unsupported value gets its reason."""
    unsupported = unsupported or {}

    def parse(value):
        if value in allowed:
            return value
        if value in unsupported:
            raise argparse.ArgumentTypeError(
                f"onmt_lite does not support -{option} {value} ({unsupported[value]}); "
                f"choose from {', '.join(allowed)}")
        raise argparse.ArgumentTypeError(f"invalid value {value!r}; choose from {', '.join(allowed)}")

    parse.__name__ = option
    return parse


def int_at_least(minimum):
    def parse(value):
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"{number} is below the minimum {minimum}")
        return number

    parse.__name__ = f"int>={minimum}"
    return parse


def float_in(low, high):
    def parse(value):
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{number} is outside [{low}, {high}]")
        return number

    parse.__name__ = f"float in [{low}, {high}]"
    return parse


class OptionParser(configargparse.ArgumentParser):
    """configargparse with YAML configs, one-line errors (exit 2) and no abbreviations."""

    def __init__(self, prog, description=None):
        super().__init__(
            prog=prog,
            description=description,
            config_file_parser_class=configargparse.YAMLConfigFileParser,
            formatter_class=argparse.HelpFormatter,
            allow_abbrev=False,
        )

    def _get_option_tuples(self, option_string):
        # argparse (3.11) matches single-dash abbreviations even with allow_abbrev=False:
        # "-src_vocab_s 5" would set -src_vocab_size. Only exact option names are accepted.
        return []

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def config_opts(parser):
    group = parser.add_argument_group("Config")
    group.add_argument("-config", "--config", is_config_file_arg=True,
                       help="Read options from this YAML file (keys are option names)")
    add(group, "save_config", default=None,
        help="Write the options as a YAML config to this file and exit")


def preprocess_opts(parser):
    group = parser.add_argument_group("Data")
    add(group, "data_type", default="text", type=choice(
        "data_type", ["text"], {"img": "image input", "audio": "audio input", "vec": "vector input"}),
        help="Type of the source input")
    add(group, "train_src", required=True, help="Training source text, one sentence a line")
    add(group, "train_tgt", required=True, help="Training target text, one sentence a line")
    add(group, "valid_src", default="", help="Validation source text")
    add(group, "valid_tgt", default="", help="Validation target text")
    add(group, "save_data", required=True,
        help="Output prefix: writes PREFIX.vocab.pt, PREFIX.train.N.pt, PREFIX.valid.N.pt")
    add(group, "shard_size", type=int_at_least(1), default=1000000,
        help="Examples per shard file")
    add(group, "overwrite", action="store_true", help="Replace existing files of -save_data")
    add(group, "shuffle", type=int, choices=[0, 1], default=0,
        help="Shuffle the training examples (with -seed) before writing them")

    group = parser.add_argument_group("Vocab")
    add(group, "src_vocab", default="",
        help="Source vocabulary file, one word a line (a count may follow the word)")
    add(group, "tgt_vocab", default="", help="Target vocabulary file, as -src_vocab")
    add(group, "src_vocab_size", type=int_at_least(0), default=50000,
        help="Maximum source vocabulary size, not counting the special tokens")
    add(group, "tgt_vocab_size", type=int_at_least(0), default=50000,
        help="Maximum target vocabulary size, not counting the special tokens")
    add(group, "src_words_min_frequency", type=int_at_least(0), default=0,
        help="Keep source words seen at least this often")
    add(group, "tgt_words_min_frequency", type=int_at_least(0), default=0,
        help="Keep target words seen at least this often")
    add(group, "share_vocab", action="store_true", help="One vocabulary for source and target")
    add(group, "dynamic_dict", action="store_true",
        help="Store the per-example source vocabulary and alignment that copy attention needs")

    group = parser.add_argument_group("Pruning and tokenization")
    add(group, "src_seq_length", type=int_at_least(1), default=50,
        help="Drop training pairs whose source is longer")
    add(group, "tgt_seq_length", type=int_at_least(1), default=50,
        help="Drop training pairs whose target is longer")
    add(group, "src_seq_length_trunc", type=int_at_least(0), default=0,
        help="Truncate sources to this many tokens (0: no truncation)")
    add(group, "tgt_seq_length_trunc", type=int_at_least(0), default=0,
        help="Truncate targets to this many tokens (0: no truncation)")
    add(group, "filter_valid", action="store_true",
        help="Apply the length filter to the validation data too")
    add(group, "lower", action="store_true", help="Lowercase the text")
    add(group, "src_spm", default="", help="Sentencepiece model applied to the source text")
    add(group, "tgt_spm", default="", help="Sentencepiece model applied to the target text")

    group = parser.add_argument_group("Logging and randomness")
    add(group, "seed", type=int, default=3435, help="Random seed (for -shuffle)")
    add(group, "report_every", type=int_at_least(1), default=100000,
        help="Log progress every this many lines read")
    add(group, "log_file", default="", help="Also write the log to this file")


def model_opts(parser):
    group = parser.add_argument_group("Model: embeddings")
    add(group, "model_type", default="text", type=choice(
        "model_type", ["text"], {"img": "image input", "audio": "audio input", "vec": "vector input"}),
        help="Type of the source input")
    add(group, "word_vec_size", type=int, default=-1, help="Word embedding size for both sides, if > 0")
    add(group, "src_word_vec_size", type=int_at_least(1), default=500, help="Source word embedding size")
    add(group, "tgt_word_vec_size", type=int_at_least(1), default=500, help="Target word embedding size")
    add(group, "share_embeddings", action="store_true",
        help="One embedding table for source and target (needs -share_vocab data)")
    add(group, "share_decoder_embeddings", action="store_true",
        help="Tie the generator's output weights to the decoder embeddings")
    add(group, "pre_word_vecs_enc", default="",
        help="Pretrained source embeddings: a [vocab x dim] tensor file (tools/embeddings_to_torch.py)")
    add(group, "pre_word_vecs_dec", default="", help="Pretrained target embeddings, as -pre_word_vecs_enc")
    add(group, "fix_word_vecs_enc", action="store_true", help="Do not update the source embeddings")
    add(group, "fix_word_vecs_dec", action="store_true", help="Do not update the target embeddings")

    group = parser.add_argument_group("Model: encoder and decoder")
    add(group, "encoder_type", default="rnn", type=choice(
        "encoder_type", ["rnn", "brnn"], dict.fromkeys(
            ["transformer", "cnn", "mean", "img", "audio"], "onmt_lite has RNN encoders only")),
        help="rnn (unidirectional) or brnn (bidirectional: -rnn_size is split over the directions)")
    add(group, "decoder_type", default="rnn", type=choice(
        "decoder_type", ["rnn"], dict.fromkeys(["transformer", "cnn"], "onmt_lite has RNN decoders only")),
        help="Decoder type")
    add(group, "layers", type=int, default=-1, help="Layers of encoder and decoder, if > 0")
    add(group, "enc_layers", type=int_at_least(1), default=2, help="Encoder layers")
    add(group, "dec_layers", type=int_at_least(1), default=2, help="Decoder layers")
    add(group, "rnn_size", type=int, default=-1, help="Hidden size of encoder and decoder, if > 0")
    add(group, "enc_rnn_size", type=int_at_least(1), default=500, help="Encoder hidden size")
    add(group, "dec_rnn_size", type=int_at_least(1), default=500, help="Decoder hidden size")
    add(group, "rnn_type", default="LSTM", type=choice(
        "rnn_type", ["LSTM", "GRU"], {"SRU": "SRU cells are not supported"}), help="LSTM or GRU")
    add(group, "input_feed", type=int, choices=[0, 1], default=1,
        help="Feed the previous attentional output into the next decoder step (1) or not (0)")
    add(group, "bridge", action="store_true",
        help="A learned layer between the encoder's final state and the decoder's first state")

    group = parser.add_argument_group("Model: attention and generator")
    add(group, "global_attention", default="general", type=choice(
        "global_attention", ["dot", "general", "mlp"], {"none": "attention cannot be switched off"}),
        help="dot, general (Luong) or mlp (Bahdanau)")
    add(group, "global_attention_function", default="softmax", type=choice(
        "global_attention_function", ["softmax"], {"sparsemax": "sparsemax is not supported"}),
        help="Attention normalisation")
    add(group, "generator_function", default="softmax", type=choice(
        "generator_function", ["softmax"], {"sparsemax": "sparsemax is not supported"}),
        help="Output normalisation")
    add(group, "copy_attn", action="store_true",
        help="Copy attention (pointer-generator); needs -dynamic_dict data")
    add(group, "copy_attn_type", default=None, type=choice("copy_attn_type", ["dot", "general", "mlp"]),
        help="Copy attention type (default: as -global_attention)")
    add(group, "reuse_copy_attn", action="store_true", help="Use the standard attention as copy attention")
    add(group, "copy_attn_force", action="store_true",
        help="A target word found in the source is always scored through copying")
    add(group, "copy_loss_by_seqlength", action="store_true", help="Divide the copy loss by sentence length")
    add(group, "coverage_attn", action="store_true", help="Coverage attention (See et al. 2017)")
    add(group, "lambda_coverage", type=float_in(0, float("inf")), default=0.0,
        help="Weight of the coverage loss (needs -coverage_attn)")
    add(group, "param_init", type=float_in(0, float("inf")), default=0.1,
        help="Initialise parameters uniformly in [-x, x] (0: keep PyTorch's initialisation)")
    add(group, "param_init_glorot", action="store_true", help="Glorot (Xavier) initialisation of matrices")


def train_opts(parser):
    group = parser.add_argument_group("General")
    add(group, "data", required=True, help="Prefix of the preprocessed data (PREFIX.vocab.pt, PREFIX.train.N.pt)")
    add(group, "save_model", default="model", help="Checkpoints are written to SAVE_MODEL_step_N.pt")
    add(group, "save_checkpoint_steps", type=int_at_least(1), default=5000, help="Save a checkpoint every N steps")
    add(group, "keep_checkpoint", type=int, default=-1, help="Keep only the last N checkpoints (-1: all)")
    add(group, "train_from", default="", help="Continue training from this checkpoint")
    add(group, "reset_optim", default="none", type=choice("reset_optim", ["none", "all", "states", "keep_states"]),
        help="With -train_from: none (resume everything), all (new optimizer and schedule), states (new "
             "optimizer moments, checkpoint settings), keep_states (checkpoint moments, new settings)")
    add(group, "seed", type=int, default=-1, help="Random seed (-1: draw one and log it)")
    add(group, "gpu_ranks", type=int, nargs="*", default=[], help="Train on this CUDA device (one rank)")
    add(group, "gpu", type=int, default=-1, help="Train on this CUDA device (-1: CPU)")
    add(group, "world_size", type=int_at_least(1), default=1, help="Number of processes")
    add(group, "log_file", default="", help="Also write the log to this file")
    add(group, "report_every", type=int_at_least(1), default=50, help="Log statistics every N steps")
    add(group, "tensorboard", action="store_true", help="Write scalars for TensorBoard (needs tensorboard)")
    add(group, "tensorboard_log_dir", default="runs/onmt", help="TensorBoard log directory")

    group = parser.add_argument_group("Batches and steps")
    add(group, "train_steps", type=int_at_least(1), default=100000, help="Total training steps (absolute)")
    add(group, "batch_size", type=int_at_least(1), default=64, help="Sentences or tokens (-batch_type) a batch")
    add(group, "batch_type", default="sents", type=choice("batch_type", ["sents", "tokens"]),
        help="Count -batch_size in sentences or padded tokens")
    add(group, "normalization", default="sents", type=choice("normalization", ["sents", "tokens"]),
        help="Divide the loss by the number of sentences or target tokens of the step")
    add(group, "pool_factor", type=int_at_least(1), default=8192,
        help="Sort this many batches' worth of examples by length before cutting batches")
    add(group, "accum_count", type=int_at_least(1), default=1,
        help="Accumulate gradients over N batches before an optimizer step")
    add(group, "max_generator_batches", type=int_at_least(0), default=32,
        help="Run generator and loss this many target positions at a time (0: all at once)")
    add(group, "truncated_decoder", type=int_at_least(0), default=0,
        help="Truncated BPTT: backpropagate through windows of N target positions (0: off)")
    add(group, "valid_steps", type=int_at_least(1), default=10000, help="Validate every N steps")
    add(group, "valid_batch_size", type=int_at_least(1), default=32, help="Validation batch size")
    add(group, "early_stopping", type=int_at_least(0), default=0,
        help="Stop after N validations without improvement (0: never)")
    add(group, "early_stopping_criteria", nargs="*", default=None,
        type=choice("early_stopping_criteria", ["ppl", "accuracy", "BLEU", "chrF"]),
        help="Validation scores to watch (default: ppl); the first also picks SAVE_MODEL_best.pt")
    add(group, "valid_metrics", nargs="*", default=[], type=choice("valid_metrics", ["BLEU", "chrF"]),
        help="Also decode the validation set greedily at each validation and log these sacrebleu scores")

    group = parser.add_argument_group("Optimization")
    add(group, "optim", default="sgd", type=choice("optim", ["sgd", "adagrad", "adadelta", "adam", "adamw"],
                                                   {"sparseadam": "sparse updates are not supported",
                                                    "adafactor": "adafactor is not supported",
                                                    "fusedadam": "fused Adam is GPU/apex only"}),
        help="Optimizer")
    add(group, "learning_rate", type=float_in(0, float("inf")), default=1.0, help="Base learning rate")
    add(group, "adam_beta1", type=float_in(0, 1), default=0.9, help="Adam beta1")
    add(group, "adam_beta2", type=float_in(0, 1), default=0.999, help="Adam beta2")
    add(group, "adagrad_accumulator_init", type=float_in(0, float("inf")), default=0.0,
        help="Initial Adagrad accumulator value")
    add(group, "weight_decay", type=float_in(0, float("inf")), default=0.0, help="Weight decay (L2; decoupled for adamw)")
    add(group, "max_grad_norm", type=float_in(0, float("inf")), default=5.0,
        help="Clip the gradient norm to this (0: no clipping)")
    add(group, "decay_method", default="none", type=choice("decay_method", ["none", "noam", "rsqrt", "plateau"],
                                                           {"noamwd": "use noam"}),
        help="Learning rate schedule: none (step decay below), noam, rsqrt, plateau (decay on no improvement)")
    add(group, "warmup_steps", type=int_at_least(0), default=4000, help="Warm-up steps for noam and rsqrt")
    add(group, "learning_rate_decay", type=float_in(0, 1), default=0.5,
        help="Decay factor of the step decay and of plateau")
    add(group, "start_decay_steps", type=int_at_least(0), default=50000, help="Step decay: start at this step")
    add(group, "decay_steps", type=int_at_least(1), default=10000, help="Step decay: decay every N steps")
    add(group, "lr_mult", nargs="*", default=[],
        help="PATTERN=FACTOR ...: scale the learning rate of parameters whose names match the glob")
    add(group, "freeze", nargs="*", default=[], help="PATTERN ...: do not update parameters whose names match")
    add(group, "dropout", type=float_in(0, 1), default=0.3, help="Dropout probability")
    add(group, "label_smoothing", type=float_in(0, 1), default=0.0,
        help="Label smoothing: this much probability mass spread over the vocabulary")


def translate_opts(parser):
    group = parser.add_argument_group("Model and data")
    add(group, "model", nargs="+", required=True, help="Checkpoint(s); several make an ensemble")
    add(group, "src", required=True, help="Source text to translate, one sentence a line")
    add(group, "tgt", default="", help="Reference translations: gold scores, BLEU and chrF")
    add(group, "output", "-out", default="pred.txt", help="Where to write the translations")
    add(group, "src_spm", default="", help="Sentencepiece model for the source (default: as in training)")
    add(group, "tgt_spm", default="", help="Sentencepiece model to decode the output (default: as in training)")
    add(group, "avg_raw_probs", action="store_true",
        help="Average an ensemble's probabilities instead of its log-probabilities")
    add(group, "data_type", default="text", type=choice(
        "data_type", ["text"], {"img": "image input", "audio": "audio input", "vec": "vector input"}),
        help="Type of the source input")

    group = parser.add_argument_group("Search")
    add(group, "beam_size", type=int_at_least(1), default=5, help="Beam size")
    add(group, "n_best", type=int_at_least(1), default=1, help="Output the N best translations of each line")
    add(group, "min_length", type=int_at_least(0), default=0, help="Minimum output length (tokens)")
    add(group, "max_length", type=int_at_least(1), default=100, help="Maximum output length (tokens)")
    add(group, "ratio", type=float_in(0, float("inf")), default=0.0,
        help="Also end hypotheses at RATIO times the source length (0: off)")
    add(group, "length_penalty", default="none", type=choice("length_penalty", ["none", "wu", "avg"]),
        help="Length penalty of finished hypotheses")
    add(group, "alpha", type=float, default=0.0, help="Length penalty parameter (wu)")
    add(group, "coverage_penalty", default="none", type=choice("coverage_penalty", ["none", "wu", "summary"]),
        help="Coverage penalty of finished hypotheses")
    add(group, "beta", type=float, default=0.0, help="Coverage penalty weight")
    add(group, "block_ngram_repeat", type=int_at_least(0), default=0, help="Forbid repeating n-grams of this size")
    add(group, "ignore_when_blocking", nargs="+", default=[],
        help="Tokens that do not count when blocking repeated n-grams")
    add(group, "replace_unk", action="store_true",
        help="Replace <unk> with the source word of highest attention (copy attention for copy models)")
    add(group, "phrase_table", default="",
        help="With -replace_unk: a file of 'source|||target' lines to translate replaced words")
    add(group, "random_sampling_topk", type=int, default=1,
        help="Sample from the K most likely tokens (-1: all; 1: greedy search); needs -beam_size 1")
    add(group, "random_sampling_temp", type=float_in(0, float("inf")), default=1.0,
        help="Temperature of random sampling")
    add(group, "seed", type=int, default=829, help="Random seed (sampling)")

    group = parser.add_argument_group("Efficiency and logging")
    add(group, "batch_size", type=int_at_least(1), default=30, help="Sentences or tokens a batch")
    add(group, "batch_type", default="sents", type=choice("batch_type", ["sents", "tokens"]), help="sents or tokens")
    add(group, "gpu", type=int, default=-1, help="CUDA device (-1: CPU)")
    add(group, "verbose", action="store_true", help="Log each sentence, its translations and scores")
    add(group, "attn_debug", action="store_true", help="Log the attention of each 1-best translation")
    add(group, "report_time", action="store_true", help="Log the time taken and the speed")
    add(group, "log_file", default="", help="Also write the log to this file")


def build_parser(prog, groups, description=None):
    """A parser for ``prog`` holding the option ``groups`` (functions such as ``preprocess_opts``)."""
    parser = OptionParser(prog, description)
    for add_group in groups:
        add_group(parser)
    return parser


def _refuse_unknown(parser, unknown):
    for token in unknown:
        name = token.lstrip("-").split("=", 1)[0]
        if token.startswith("-") and name in UNSUPPORTED_OPTIONS:
            parser.error(f"option -{name} is not supported by onmt_lite: {UNSUPPORTED_OPTIONS[name]}")
    parser.error(f"unrecognized arguments: {' '.join(unknown)}")


def config_dict(parser, opt):
    """The options of ``opt`` as a plain dict keyed by option name, without the config options."""
    values = {}
    for action in parser._actions:
        if action.dest in ("help", "config", "save_config") or not action.option_strings:
            continue
        values[action.dest] = getattr(opt, action.dest)
    return values


def parse(parser, args=None):
    """Parse ``args`` (default ``sys.argv[1:]``); handle ``-save_config``; refuse unknown options."""
    opt, unknown = parser.parse_known_args(args)
    if unknown:
        _refuse_unknown(parser, unknown)
    if getattr(opt, "save_config", None):
        values = {k: v for k, v in config_dict(parser, opt).items() if v is not None}
        write_text(opt.save_config, yaml.safe_dump(values, sort_keys=False, allow_unicode=True))
        print(f"Wrote config file to {opt.save_config}")
        sys.exit(0)
    return opt
