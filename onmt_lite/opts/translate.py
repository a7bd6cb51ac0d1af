"""Options of onmt_lite_translate."""

from onmt_lite.opts.parser import add, compatibility_group, log_file_opts, opennmt_py_1x_command
from onmt_lite.opts.values import (
    FLOAT32_MAX,
    MAX_BEAM,
    MAX_CUDA_DEVICE,
    MAX_LENGTH,
    MAX_PROCESSES,
    MAX_SIZE,
    SEED,
    choice,
    float_in,
    int_in,
)


def _model_and_data_opts(parser):
    group = parser.add_argument_group("Model and data")
    add(group, "model", nargs="+", required=True, help="Checkpoint(s); several make an ensemble")
    add(
        group,
        "src",
        required=True,
        help="Source text to translate, one sentence a line (- for standard input)",
    )
    add(group, "tgt", default="", help="Reference translations: gold scores, BLEU and chrF")
    add(
        group,
        "tgt_prefix",
        action="store_true",
        help="Each line's -tgt (needed) is a prefix its translations start with: forced, then "
        "decoding goes on (gold scores of -tgt are logged, BLEU and chrF are not)",
    )
    add(group, "output", "-out", default="pred.txt", help="Where to write the translations")
    add(
        group,
        "src_spm",
        default="",
        help="Sentencepiece model for the source (default: as in training)",
    )
    add(
        group,
        "tgt_spm",
        default="",
        help="Sentencepiece model to decode the output (default: as in training)",
    )
    add(
        group,
        "avg_raw_probs",
        action="store_true",
        help="Average an ensemble's probabilities instead of its log-probabilities",
    )
    compatibility = compatibility_group(parser)
    add(
        compatibility,
        "data_type",
        default="text",
        type=choice(
            "data_type",
            ["text"],
            dict.fromkeys(["img", "audio", "vec"], "onmt_lite reads text only"),
        ),
        help="Type of the source input: text only",
    )
    add(
        compatibility,
        "fp32",
        action="store_true",
        help="Decode in float32 (the default; 1.x turned an fp16 model back to float32): the same "
        "as -precision fp32",
    )
    for name in ("dynamic_dict", "share_vocab"):  # 1.x needed them to translate with copy models
        add(
            compatibility,
            name,
            action="store_true",
            help="Not needed: copy models build each line's source vocabulary themselves and the "
            "vocabularies come from the model",
        )


def _search_opts(parser):
    group = parser.add_argument_group("Search")
    add(
        group,
        "beam_size",
        type=int_in(1, MAX_BEAM),
        default=5,
        help=f"Beam size (at most {MAX_BEAM}: each step scores beam x vocabulary candidates a "
        "sentence)",
    )
    add(
        group,
        "n_best",
        type=int_in(1, MAX_BEAM),
        default=1,
        help="Output the N best translations of each line (at most -beam_size)",
    )
    add(
        group,
        "min_length",
        type=int_in(0, MAX_LENGTH),
        default=0,
        help="Minimum output length (tokens)",
    )
    add(
        group,
        "max_length",
        type=int_in(1, MAX_LENGTH),
        default=100,
        help=f"Maximum output length (tokens; at most {MAX_LENGTH})",
    )
    group.add_argument(
        "-max_sent_length",
        "--max_sent_length",
        dest="max_length",
        type=int_in(1, MAX_LENGTH),
        default=100,
        help="The same as -max_length (deprecated in OpenNMT-py 1.x)",
    )
    # infinity has a meaning: no cut before -max_length (any ratio beyond float32's is the same)
    add(
        group,
        "max_length_ratio",
        type=float_in(0, float("inf"), infinite=True),
        default=0.0,
        help="Also end each hypothesis at R times its source's length, rounded up (0: off; "
        "OpenNMT-py 3.x's name: its bound is the batch's longest source's, plus 5)",
    )
    add(
        group,
        "ratio",
        type=float_in(0, FLOAT32_MAX),
        default=0.0,
        help="1.x's early stop of a beam search (0: off): at a step where some of its candidates "
        "end, an example stops once it has -n_best finished hypotheses and its best candidate's "
        "score over R times its source's length is at most the best finished hypothesis's score "
        "per token (1.x's count: its tokens, </s> included, + 2). A heuristic: a longer "
        "hypothesis might have won. Not -max_length_ratio",
    )
    add(
        group,
        "length_penalty",
        default="none",
        type=choice("length_penalty", ["none", "wu", "avg"]),
        help="Length penalty of finished hypotheses",
    )
    add(
        group,
        "alpha",
        type=float_in(-FLOAT32_MAX, FLOAT32_MAX),
        default=0.0,
        help="Length penalty parameter (wu)",
    )
    add(
        group,
        "coverage_penalty",
        default="none",
        type=choice("coverage_penalty", ["none", "wu", "summary"]),
        help="Coverage penalty of finished hypotheses",
    )
    add(
        group,
        "beta",
        type=float_in(-FLOAT32_MAX, FLOAT32_MAX),
        default=0.0,
        help="Coverage penalty weight",
    )
    add(
        group,
        "stepwise_penalty",
        action="store_true",
        help="Apply the coverage penalty at every step, not only to finished hypotheses",
    )
    add(
        group,
        "block_ngram_repeat",
        type=int_in(0, MAX_LENGTH),
        default=0,
        help="Forbid repeating n-grams of this size",
    )
    add(
        group,
        "ignore_when_blocking",
        nargs="+",
        default=[],
        help="Tokens that do not count when blocking repeated n-grams",
    )
    add(
        group,
        "replace_unk",
        action="store_true",
        help="Replace <unk> with the source word of highest attention (copy attention for copy "
        "models)",
    )
    add(
        group,
        "phrase_table",
        default="",
        help="With -replace_unk: a file of 'source|||target' lines to translate replaced words",
    )
    add(
        group,
        "random_sampling_topk",
        type=int_in(-1, MAX_SIZE),
        default=1,
        help="Sample from the K most likely tokens (-1: all; 1: greedy search); needs -beam_size 1",
    )
    add(
        group,
        "random_sampling_temp",
        type=float_in(0, FLOAT32_MAX),
        default=1.0,
        help="Temperature of random sampling",
    )
    add(group, "seed", type=SEED, default=829, help="Random seed (sampling)")


def _efficiency_and_logging_opts(parser):
    group = parser.add_argument_group("Efficiency and logging")
    add(
        group,
        "batch_size",
        type=int_in(1, MAX_SIZE),
        default=None,
        help="Sentences or tokens a batch (default: 30 on the CPU, as in OpenNMT-py 1.x; with -gpu "
        "256 sentences, or 8192 tokens with -batch_type tokens: a GPU's step costs about the "
        "same for 32 rows as for 256)",
    )
    add(
        group,
        "shard_size",
        type=int_in(0, MAX_SIZE),
        default=0,
        help="Read, translate and write -src in pieces of N lines, never holding the whole file "
        "(0: all at once); the output is the same",
    )
    add(
        group,
        "batch_type",
        default="sents",
        type=choice("batch_type", ["sents", "tokens"]),
        help="sents or tokens",
    )
    add(group, "gpu", type=int_in(-1, MAX_CUDA_DEVICE), default=-1, help="CUDA device (-1: CPU)")
    add(
        group,
        "threads",
        type=int_in(0, MAX_PROCESSES),
        default=0,
        help="CPU threads for the tensor operations (0: PyTorch's default, one per core); with 2 "
        "or more, searches decode side by side: one per thread, each in a process of its "
        "own, on Linux; elsewhere two threads, each with half of them",
    )
    add(
        group,
        "quantize",
        default="none",
        type=choice("quantize", ["none", "int8"]),
        help="int8: dynamic int8 quantisation of the linear and recurrent layers (CPU; faster, "
        "slightly different output)",
    )
    add(
        group,
        "precision",
        default="fp32",
        type=choice("precision", ["fp32", "fp16", "bf16"]),
        help="The precision the model decodes in (OpenNMT-py 3.x's option): fp16 and bf16 cast "
        "it on a CUDA device (faster, slightly different output); on the CPU bf16 where "
        "the CPU has bfloat16 instructions (AVX-512 BF16 or AMX), float32 elsewhere; fp16 "
        "needs -gpu. Scores and the search stay in float32",
    )
    add(
        group,
        "cuda_graphs",
        action="store_true",
        help="Replay each search step as one recorded CUDA graph: fewer launches from the host, "
        "which sets the pace of a small model's steps on a GPU. Needs -gpu; one model with a "
        "Transformer or input-feeding RNN decoder, without copy attention, relative "
        "positions, -replace_unk, -attn_debug, -attn_plot or a coverage penalty",
    )
    add(
        group, "verbose", action="store_true", help="Log each sentence, its translations and scores"
    )
    add(
        group,
        "attn_debug",
        action="store_true",
        help="Log the attention of each 1-best translation",
    )
    add(
        group,
        "report_align",
        action="store_true",
        help="After each output line write ' ||| ' and its word alignment, Pharaoh 'SRC-TGT' "
        "pairs: each output token's most attended source token in the alignment head "
        "(Transformer decoders)",
    )
    add(
        group,
        "align_debug",
        action="store_true",
        help="Log the alignment matrix of each 1-best translation",
    )
    add(
        group,
        "attn_plot",
        default="",
        help="Write an attention heatmap PNG per input line into DIR (needs matplotlib)",
        metavar="DIR",
    )
    add(group, "report_time", action="store_true", help="Log the time taken and the speed")
    add(
        group,
        "dump_beam",
        default="",
        metavar="FILE",
        help="Write each line's search steps (every kept hypothesis: token, parent, score) to "
        "FILE as JSON when translation ends",
    )
    log_file_opts(group)


@opennmt_py_1x_command("translate")
def translate_opts(parser):
    """Model and data, search, efficiency and logging."""
    _model_and_data_opts(parser)
    _search_opts(parser)
    _efficiency_and_logging_opts(parser)
