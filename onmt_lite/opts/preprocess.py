"""Options of onmt_lite_preprocess."""

from onmt_lite.opts.parser import add, compatibility_group, log_file_opts, opennmt_py_1x_command
from onmt_lite.opts.values import (
    MAX_LENGTH,
    MAX_PROCESSES,
    MAX_SIZE,
    MAX_STEPS,
    MAX_VOCAB_MULTIPLE,
    SEED,
    choice,
    int_in,
    only_value,
)


def _data_opts(parser):
    add(
        compatibility_group(parser),
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
        compatibility_group(parser),
        "max_shard_size",
        default="0",
        type=only_value(
            "max_shard_size", "0", "deprecated in 1.x, which accepted only 0; use -shard_size"
        ),
        help="Deprecated in 1.x: only 0 (its default) is accepted",
    )
    group = parser.add_argument_group("Data")
    add(
        group,
        "train_src",
        required=True,
        nargs="+",
        help="Training source text, one sentence a line; several files: several corpora, named by "
        "-train_ids",
    )
    add(
        group,
        "train_tgt",
        required=True,
        nargs="+",
        help="Training target text, one file per -train_src file",
    )
    add(
        group,
        "train_ids",
        nargs="+",
        default=[None],
        help="Names of the training corpora, one per -train_src file (letters, digits, - and _): "
        "their shards are PREFIX.train_ID.N.pt, and onmt_lite_train picks them with "
        "-data_ids; needed with several corpora",
    )
    add(group, "valid_src", default="", help="Validation source text")
    add(group, "valid_tgt", default="", help="Validation target text")
    add(
        group,
        "train_align",
        default="",
        help="Word alignments of the training pairs (guided alignment, -lambda_align): one line a "
        "pair, Pharaoh 'SRC-TGT' pairs of 0-based token indices",
    )
    add(
        group,
        "valid_align",
        default="",
        help="Word alignments of the validation pairs, as -train_align",
    )
    add(
        group,
        "save_data",
        required=True,
        help="Output prefix: writes PREFIX.vocab.pt, PREFIX.train.N.pt (PREFIX.train_ID.N.pt with "
        "-train_ids), PREFIX.valid.N.pt; a missing directory is made (and removed if the run "
        "fails)",
    )
    add(
        group,
        "shard_size",
        type=int_in(0, MAX_SIZE),
        default=1000000,
        help="Examples per shard file (0: all in one shard)",
    )
    add(group, "overwrite", action="store_true", help="Replace existing files of -save_data")
    add(
        group,
        "num_threads",
        type=int_in(1, MAX_PROCESSES),
        default=1,
        help="Processes that tokenize and numericalise the text, a chunk of lines each at a time; "
        "the output is the same as with one",
    )
    add(
        group,
        "shuffle",
        type=int,
        choices=[0, 1],
        default=0,
        help="Shuffle the training examples (with -seed) before writing them",
    )


def _vocab_opts(parser):
    group = parser.add_argument_group("Vocab")
    add(
        group,
        "src_vocab",
        default="",
        help="Source vocabulary file, one word a line (a count may follow the word)",
    )
    add(group, "tgt_vocab", default="", help="Target vocabulary file, as -src_vocab")
    add(
        group,
        "features_vocabs_prefix",
        default="",
        help="Source word feature i's vocabulary from the file PREFIX.source_feature_i.dict (i "
        "from 1), as -src_vocab; without it, from the training data",
    )
    add(
        group,
        "src_vocab_size",
        type=int_in(0, MAX_SIZE),
        default=50000,
        help="Maximum source vocabulary size, not counting the special tokens",
    )
    add(
        group,
        "tgt_vocab_size",
        type=int_in(0, MAX_SIZE),
        default=50000,
        help="Maximum target vocabulary size, not counting the special tokens",
    )
    add(
        group,
        "src_words_min_frequency",
        type=int_in(0, MAX_STEPS),
        default=0,
        help="Keep source words seen at least this often",
    )
    add(
        group,
        "tgt_words_min_frequency",
        type=int_in(0, MAX_STEPS),
        default=0,
        help="Keep target words seen at least this often",
    )
    add(group, "share_vocab", action="store_true", help="One vocabulary for source and target")
    add(
        group,
        "vocab_size_multiple",
        type=int_in(1, MAX_VOCAB_MULTIPLE),
        default=1,
        help="Pad each vocabulary with unused words (averyunlikelytokenN, as 1.x) to a multiple "
        "of this size, specials included (matrix products of such sizes can be faster on "
        f"some hardware; at most {MAX_VOCAB_MULTIPLE})",
    )
    add(
        group,
        "dynamic_dict",
        action="store_true",
        help="Store the per-example source vocabulary and alignment that copy attention needs",
    )


def _pruning_and_tokenization_opts(parser):
    group = parser.add_argument_group("Pruning and tokenization")
    add(
        group,
        "src_seq_length",
        type=int_in(1, MAX_LENGTH),
        default=50,
        help="Drop training pairs whose source is longer",
    )
    add(
        group,
        "tgt_seq_length",
        type=int_in(1, MAX_LENGTH),
        default=50,
        help="Drop training pairs whose target is longer",
    )
    add(
        group,
        "src_seq_length_trunc",
        type=int_in(0, MAX_LENGTH),
        default=0,
        help="Truncate sources to this many tokens (0: no truncation)",
    )
    add(
        group,
        "tgt_seq_length_trunc",
        type=int_in(0, MAX_LENGTH),
        default=0,
        help="Truncate targets to this many tokens (0: no truncation)",
    )
    add(
        group,
        "filter_valid",
        action="store_true",
        help="Apply the length filter to the validation data too",
    )
    add(group, "lower", action="store_true", help="Lowercase the text")
    add(group, "src_spm", default="", help="Sentencepiece model applied to the source text")
    add(group, "tgt_spm", default="", help="Sentencepiece model applied to the target text")
    add(
        group,
        "subword_prefix",
        default="▁",
        help="The mark of a subword token that starts a word (sentencepiece's); training's "
        "-src_noise infills whole words found with it",
    )
    add(
        group,
        "subword_prefix_is_joiner",
        action="store_true",
        help="-subword_prefix marks a token that continues the word before it (a joiner) instead",
    )


def _logging_and_randomness_opts(parser):
    group = parser.add_argument_group("Logging and randomness")
    add(group, "seed", type=SEED, default=3435, help="Random seed (for -shuffle)")
    add(
        group,
        "report_every",
        type=int_in(1, MAX_STEPS),
        default=100000,
        help="Log progress every this many lines read",
    )
    log_file_opts(group)


@opennmt_py_1x_command("preprocess")
def preprocess_opts(parser):
    """Data, vocab, pruning and tokenization, logging and randomness."""
    _data_opts(parser)
    _vocab_opts(parser)
    _pruning_and_tokenization_opts(parser)
    _logging_and_randomness_opts(parser)
