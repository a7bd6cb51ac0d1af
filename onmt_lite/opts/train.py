"""Options of onmt_lite_train (besides the model options)."""

from onmt_lite.opts.optimization import optimization_opts
from onmt_lite.opts.parser import add, compatibility_group, log_file_opts, opennmt_py_1x_command
from onmt_lite.opts.values import (
    MAX_CUDA_DEVICE,
    MAX_LENGTH,
    MAX_PORT,
    MAX_PROCESSES,
    MAX_SIZE,
    MAX_STEPS,
    SEED,
    choice,
    float_in,
    int_in,
    only_value,
)


def _general_opts(parser):
    group = parser.add_argument_group("General")
    add(
        group,
        "data",
        required=True,
        help="Prefix of the preprocessed data (PREFIX.vocab.pt, PREFIX.train.N.pt)",
    )
    add(
        group,
        "data_ids",
        nargs="+",
        default=[None],
        help="Train on these corpora of -data (its -train_ids, shards PREFIX.train_ID.N.pt); left "
        "out: the one corpus of data preprocessed without -train_ids",
    )
    # weights are relative: 2 ** 31 - 1 to 1 is past any mix a run can show
    add(
        group,
        "data_weights",
        type=int_in(1, MAX_SIZE),
        nargs="+",
        default=[1],
        help="One whole number per -data_ids corpus: a step's batches come from the corpora in "
        "turn, WEIGHT batches from each (a round robin), every corpus starting its next "
        f"epoch on its own (at most {MAX_SIZE})",
    )
    add(
        group,
        "save_model",
        default="model",
        help="Checkpoints are written to SAVE_MODEL_step_N.pt; a missing directory is made, as "
        "OpenNMT-py does (and removed if the run ends without a checkpoint)",
    )
    add(
        group,
        "save_checkpoint_steps",
        type=int_in(1, MAX_STEPS),
        default=5000,
        help="Save a checkpoint every N steps",
    )
    add(
        group,
        "keep_checkpoint",
        type=int_in(-1, MAX_STEPS),
        default=-1,
        help="Keep only the last N checkpoints (-1: all; 0: write none, as OpenNMT-py 1.x)",
    )
    add(group, "train_from", default="", help="Continue training from this checkpoint")
    add(
        group,
        "overwrite",
        action="store_true",
        help="Replace existing checkpoints of -save_model (without it they are refused, unless "
        "-train_from is one)",
    )
    add(
        group,
        "reset_optim",
        default="none",
        type=choice("reset_optim", ["none", "all", "states", "keep_states"]),
        help="With -train_from: none (resume everything), all (new optimizer and schedule), "
        "states (new optimizer moments, checkpoint settings), keep_states (checkpoint "
        "moments, new settings)",
    )
    add(group, "seed", type=SEED, default=-1, help="Random seed (-1: draw one and log it)")
    add(
        group,
        "gpu_ranks",
        type=int_in(0, MAX_CUDA_DEVICE),
        nargs="*",
        default=[],
        help="CUDA devices to train on, one process each (as many as -world_size; 0 to "
        f"{MAX_CUDA_DEVICE})",
    )
    add(
        group,
        "gpu",
        type=int_in(-1, MAX_CUDA_DEVICE),
        default=-1,
        help="Train on this CUDA device (-1: CPU)",
    )
    add(
        group,
        "world_size",
        type=int_in(1, MAX_PROCESSES),
        default=1,
        help="Training processes: onmt_lite starts them (under torchrun, torchrun does)",
    )
    add(
        group,
        "gpu_backend",
        default="auto",
        type=choice("gpu_backend", ["auto", "nccl", "gloo"]),
        help="torch.distributed backend (auto: nccl on CUDA devices, gloo on CPUs)",
    )
    add(
        group,
        "master_ip",
        default="localhost",
        help="Address where the processes of -world_size meet",
    )
    add(
        group,
        "master_port",
        type=int_in(1, MAX_PORT),
        default=10000,
        help="Port where the processes meet",
    )
    add(
        group,
        "gpu_verbose_level",
        type=int_in(0, MAX_SIZE),
        default=0,
        help="With several processes: 1 or more, every process logs (its rank first), not only "
        "rank 0",
    )
    add(
        compatibility_group(parser),
        "gpuid",
        nargs="*",
        default=[],
        type=only_value(
            "gpuid", None, "deprecated in 1.x, which refused any value; use -gpu_ranks (or -gpu)"
        ),
        help="Deprecated in 1.x: accepted without a value only",
    )
    add(
        compatibility_group(parser),
        "queue_size",
        type=int_in(1, MAX_SIZE),
        default=40,
        help="1.x's queue of batches that one producer process filled for the training processes; "
        "here each process reads its own batches",
    )
    log_file_opts(group)
    add(
        group,
        "report_every",
        type=int_in(1, MAX_STEPS),
        default=50,
        help="Log statistics every N steps",
    )
    add(
        group,
        "tensorboard",
        action="store_true",
        help="Write scalars for TensorBoard (needs tensorboard)",
    )
    add(group, "tensorboard_log_dir", default="runs/onmt", help="TensorBoard log directory")
    add(
        group,
        "exp",
        default="",
        help="TensorBoard run name: scalars go to -tensorboard_log_dir/EXP",
    )


def _batches_and_steps_opts(parser):
    group = parser.add_argument_group("Batches and steps")
    add(
        group,
        "train_steps",
        type=int_in(1, MAX_STEPS),
        default=100000,
        help="Total training steps (absolute)",
    )
    add(
        group,
        "single_pass",
        action="store_true",
        help="Stop after one pass over the training data (or at -train_steps, if sooner); the "
        "pass's last step takes the batches left (with several processes, an incomplete last "
        "step is left out)",
    )
    add(
        group,
        "epochs",
        type=int_in(0, MAX_STEPS),
        default=0,
        help="Stop after this many passes over the training data (or at -train_steps, if sooner), "
        "as -single_pass does after one; 0: -train_steps decides",
    )
    add(
        group,
        "batch_size",
        type=int_in(1, MAX_SIZE),
        default=64,
        help="Sentences or tokens (-batch_type) a batch",
    )
    add(
        group,
        "batch_type",
        default="sents",
        type=choice("batch_type", ["sents", "tokens"]),
        help="Count -batch_size in sentences or padded tokens",
    )
    add(
        group,
        "batch_size_multiple",
        type=int_in(1, MAX_SIZE),
        default=1,
        help="A batch holds a multiple of this many sentences where it can (the rest goes to the "
        "next batch)",
    )
    add(
        group,
        "normalization",
        default="sents",
        type=choice("normalization", ["sents", "tokens"]),
        help="Divide the loss by the number of sentences or target tokens of the step",
    )
    add(
        group,
        "pool_factor",
        type=int_in(1, MAX_SIZE),
        default=8192,
        help="Sort this many batches' worth of examples by length before cutting batches",
    )
    add(
        group,
        "num_workers",
        type=int_in(0, 1),
        default=0,
        help="1: a thread makes the next training batches (and pins them for CUDA) while a step "
        "runs; the same batches and losses as 0, which makes each when the loop needs it "
        "(OpenNMT-py 3.x's option; its 2 and more are processes, which onmt_lite does not use)",
    )
    # a step's batches are held at once (and counted by itertools.islice, times -world_size)
    add(
        group,
        "accum_count",
        type=int_in(1, MAX_SIZE),
        nargs="+",
        default=[1],
        help="Accumulate gradients over N batches before an optimizer step; several values: a "
        "schedule, with -accum_steps",
    )
    add(
        group,
        "accum_steps",
        type=int_in(0, MAX_STEPS),
        nargs="+",
        default=[0],
        help="The steps after which each -accum_count value applies (the first 0)",
    )
    add(
        group,
        "max_generator_batches",
        type=int_in(0, MAX_LENGTH),
        default=32,
        help="Run generator and loss this many target positions at a time (0: all at once)",
    )
    add(
        group,
        "truncated_decoder",
        type=int_in(0, MAX_LENGTH),
        default=0,
        help="Truncated BPTT: backpropagate through windows of N target positions (0: off)",
    )
    add(
        group,
        "valid_steps",
        type=int_in(1, MAX_STEPS),
        default=10000,
        help="Validate every N steps",
    )
    add(
        group,
        "valid_batch_size",
        type=int_in(1, MAX_SIZE),
        default=32,
        help="Validation batch size",
    )
    add(
        group,
        "early_stopping",
        type=int_in(0, MAX_STEPS),
        default=0,
        help="Stop after N validations without improvement (0: never)",
    )
    add(
        group,
        "early_stopping_criteria",
        nargs="*",
        default=None,
        type=choice("early_stopping_criteria", ["ppl", "accuracy", "BLEU", "chrF"]),
        help="Validation scores to watch (default: ppl); the first also picks SAVE_MODEL_best.pt",
    )
    add(
        group,
        "valid_metrics",
        nargs="*",
        default=[],
        type=choice("valid_metrics", ["BLEU", "chrF"]),
        help="Also decode the validation set greedily at each validation and log these sacrebleu "
        "scores",
    )


def _noise_opts(parser):
    group = parser.add_argument_group("Source noise")
    add(
        group,
        "data_to_noise",
        nargs="+",
        default=[],
        help="Noise the sources of these training corpora (their -train_ids)",
    )
    add(
        group,
        "src_noise",
        nargs="+",
        default=[],
        type=choice(
            "src_noise",
            ["sen_shuffling", "infilling"],
            {
                "mask": "word masking is not implemented (1.x's did not run either); infilling "
                "masks spans of words"
            },
        ),
        help="Noises applied in this order to those sources: sen_shuffling (swap sentences), "
        "infilling (replace spans of whole words with one <unk> each)",
    )
    add(
        group,
        "src_noise_prob",
        type=float_in(0, 1),
        nargs="+",
        default=[],
        help="For each -src_noise: the share of sentences it swaps or of words it covers",
    )


@opennmt_py_1x_command("train")
def train_opts(parser):
    """General, batches and steps, optimization, source noise."""
    _general_opts(parser)
    _batches_and_steps_opts(parser)
    optimization_opts(parser)
    _noise_opts(parser)
