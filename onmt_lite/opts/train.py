"""Options of onmt_lite_train (besides the model options)."""

from onmt_lite.opts.parser import add, compatibility_group, log_file_opts, opennmt_py_1x_command
from onmt_lite.opts.values import (
    FLOAT32_MAX,
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


def _optimization_opts(parser):
    group = parser.add_argument_group("Optimization")
    add(
        group,
        "optim",
        default="sgd",
        type=choice(
            "optim",
            ["sgd", "adagrad", "adadelta", "adam", "adamw"],
            {
                "sparseadam": "sparse embedding updates are not supported",
                "adafactor": "Adafactor is not implemented",
                "fusedadam": "apex's fused Adam is not supported",
            },
        ),
        help="Optimizer",
    )
    add(
        group,
        "learning_rate",
        type=float_in(0, FLOAT32_MAX),
        default=1.0,
        help="Base learning rate",
    )
    add(group, "adam_beta1", type=float_in(0, 1), default=0.9, help="Adam beta1")
    add(group, "adam_beta2", type=float_in(0, 1), default=0.999, help="Adam beta2")
    add(
        group,
        "adagrad_accumulator_init",
        type=float_in(0, FLOAT32_MAX),
        default=0.0,
        help="Initial Adagrad accumulator value",
    )
    add(
        group,
        "weight_decay",
        type=float_in(0, FLOAT32_MAX),
        default=0.0,
        help="Weight decay (L2; decoupled for adamw)",
    )
    add(
        group,
        "max_grad_norm",
        type=float_in(0, FLOAT32_MAX),
        default=5.0,
        help="Clip the gradient norm to this (0: no clipping)",
    )
    add(
        group,
        "decay_method",
        default="none",
        type=choice(
            "decay_method",
            ["none", "noam", "rsqrt", "plateau"],
            {"noamwd": "noam with a step decay is not implemented; use noam"},
        ),
        help="Learning rate schedule: none (step decay below), noam, rsqrt, plateau (decay on no "
        "improvement)",
    )
    add(
        group,
        "warmup_steps",
        type=int_in(0, MAX_STEPS),
        default=4000,
        help="Warm-up steps for noam and rsqrt",
    )
    add(
        group,
        "learning_rate_decay",
        type=float_in(0, 1),
        default=0.5,
        help="Decay factor of the step decay and of plateau",
    )
    add(
        group,
        "start_decay_steps",
        type=int_in(0, MAX_STEPS),
        default=50000,
        help="Step decay: start at this step",
    )
    add(
        group,
        "decay_steps",
        type=int_in(1, MAX_STEPS),
        default=10000,
        help="Step decay: decay every N steps",
    )
    add(
        group,
        "lr_mult",
        nargs="*",
        default=[],
        help="PATTERN=FACTOR ...: scale the learning rate of parameters whose names match the glob",
    )
    add(
        group,
        "freeze",
        nargs="*",
        default=[],
        help="PATTERN ...: do not update parameters whose names match",
    )
    add(
        group,
        "dropout",
        type=float_in(0, 1),
        nargs="+",
        default=[0.3],
        help="Dropout probability; several values: a schedule, with -dropout_steps",
    )
    add(
        group,
        "dropout_steps",
        type=int_in(0, MAX_STEPS),
        nargs="+",
        default=[0],
        help="The steps after which each -dropout (and -attention_dropout) value applies",
    )
    add(
        group,
        "model_dtype",
        default="fp32",
        type=choice("model_dtype", ["fp32", "bf16", "fp16"]),
        help="Precision of the forward pass: fp32, or mixed precision with float32 weights (bf16; "
        "fp16 with dynamic loss scaling)",
    )
    add(
        group,
        "use_ckpting",
        nargs="*",
        default=[],
        type=choice("use_ckpting", ["ffn", "mha"], {"lora": "it has no LoRA layers"}),
        help="Activation checkpointing (OpenNMT-py 3.x's option): recompute these parts of the "
        "Transformer layers in the backward pass instead of keeping their activations: ffn "
        "(feed-forward blocks), mha (self- and context attention); the same gradients for "
        "less memory",
    )
    add(
        group,
        "torch_compile",
        action="store_true",
        help="Train the Transformer layers through torch.compile (fused kernels, for GPUs; the "
        "first steps compile them, tens of seconds); its dropout masks are not those of a run "
        "without it",
    )
    add(
        group,
        "cuda_graphs",
        action="store_true",
        help="Replay the decoder's (and a Transformer encoder's) forward and backward passes as "
        "recorded CUDA graphs, one pair per bucket of batch shapes (batches padded up to them): "
        "fewer launches from the host, which sets the pace of a small model's steps on a GPU. "
        "Needs a GPU; a Transformer or input-feeding RNN decoder without copy attention, "
        "coverage, -lambda_align, -truncated_decoder, -use_ckpting or -torch_compile; its "
        "dropout masks are not those of a run without it",
    )
    add(
        group,
        "loss_class",
        default="",
        help="Train and validate with this LossComputeBase subclass: MODULE:CLASS or FILE.py:CLASS "
        "(see docs/research.md)",
    )
    add(
        group,
        "label_smoothing",
        type=float_in(0, 1),
        default=0.0,
        help="Label smoothing: this much probability mass spread over the vocabulary",
    )
    add(
        group,
        "average_decay",
        type=float_in(0, 1),
        default=0.0,
        help="Keep an exponential moving average of the weights, mixing them in with the weight "
        "max(DECAY, 1 - (step + 1) / (step + 10)); validation and checkpoints use it (0: off)",
    )
    add(
        group,
        "average_every",
        type=int_in(1, MAX_STEPS),
        default=1,
        help="Update the moving average after steps 1, 1 + N, 1 + 2N, ... (with -average_decay)",
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
    _optimization_opts(parser)
    _noise_opts(parser)
