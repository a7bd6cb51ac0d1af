"""Options of onmt_lite_train's optimization: the optimizer and its settings, the learning-rate
schedule, gradient clipping, per-parameter learning rates and freezing (part of ``train_opts``)."""

from onmt_lite.opts.parser import add, compatibility_group
from onmt_lite.opts.values import (
    FLOAT32_MAX,
    MAX_STEPS,
    choice,
    float_in,
    int_in,
    only_number,
)


def optimization_opts(parser):
    """The optimizer, its learning-rate schedule, clipping, per-layer rates and freezing."""
    group = parser.add_argument_group("Optimization")
    add(
        group,
        "optim",
        default="sgd",
        type=choice(
            "optim",
            ["sgd", "adagrad", "adadelta", "adafactor", "adam", "adamw", "fusedadam", "sparseadam"],
        ),
        help="Optimizer (adam's epsilon is 1e-9, 1.x's; fusedadam is Adam with 1e-8, as 1.x's "
        "apex FusedAdam: every Adam here runs fused; adafactor is 1.x's, with its fixed betas "
        "0.9 and 0.999 and no weight decay; sparseadam updates only the embedding rows of each "
        "step's tokens, with epsilon 1e-8)",
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
            ["none", "noam", "noamwd", "rsqrt", "plateau"],
        ),
        help="Learning rate schedule: none (step decay below), noam, noamwd (noam times the step "
        "decay), rsqrt, plateau (decay on no improvement)",
    )
    add(
        group,
        "warmup_steps",
        type=int_in(0, MAX_STEPS),
        default=4000,
        help="Warm-up steps for noam, noamwd and rsqrt",
    )
    add(
        group,
        "learning_rate_decay",
        type=float_in(0, 1),
        default=0.5,
        help="Decay factor of the step decay (none, noamwd) and of plateau",
    )
    add(
        group,
        "start_decay_steps",
        type=int_in(0, MAX_STEPS),
        default=50000,
        help="Step decay (none, noamwd): start at this step",
    )
    add(
        group,
        "decay_steps",
        type=int_in(1, MAX_STEPS),
        default=10000,
        help="Step decay (none, noamwd): decay every N steps",
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
    # 1.x's fp16 went through apex; what its defaults asked for is what -model_dtype fp16 does
    fixed_weights = "-model_dtype fp16 keeps float32 weights and casts per operation (apex's O1)"
    add(
        compatibility_group(parser),
        "apex_opt_level",
        default="O1",
        type=choice(
            "apex_opt_level",
            ["O1"],
            {
                "O0": "it is float32 training: use -model_dtype fp32",
                "O2": f"float16 weights are not supported: {fixed_weights}",
                "O3": f"float16 weights are not supported: {fixed_weights}",
            },
        ),
        help="1.x's apex level with -model_dtype fp16: O1 only, its default, which "
        "-model_dtype fp16 does (float32 weights, operations cast to float16)",
    )
    add(
        compatibility_group(parser),
        "loss_scale",
        default=0.0,
        type=only_number(
            "loss_scale",
            0.0,
            "a fixed loss scale is not supported: -model_dtype fp16 scales the loss dynamically "
            "(1.x's 0)",
        ),
        help="1.x's loss scale with -model_dtype fp16: 0 only, its default, dynamic scaling, "
        "which -model_dtype fp16 does",
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
