"""train/idle_options.py: an option that the others make idle (given a value other than its
default) is named in a warning, and the warning tells the truth: the model, or the optimizer's
steps, are those of the run without it."""

import pytest
import torch

from onmt_lite.train.idle_options import idle_options
from onmt_lite.train.optim import Optimizer
from onmt_lite.train.resumed_options import checkpoint_options
from tests.model_helpers import TRANSFORMER, make_batch, make_model, model_options, random_pairs

RNN = ["-encoder_type", "brnn"]
BOTH_TRANSFORMER = [str(a) for a in TRANSFORMER]
CNN = ["-encoder_type", "cnn", "-decoder_type", "cnn"]

# (the options around it, the idle options, the warnings)
IDLE_IN_THE_MODEL = [
    (
        BOTH_TRANSFORMER,
        ["-rnn_type", "GRU"],
        ["-rnn_type GRU has no effect: the model has no recurrent layers"],
    ),
    (
        BOTH_TRANSFORMER,
        ["-input_feed", "0", "-global_attention", "mlp"],
        [
            f"-{name} has no effect: it is an RNN decoder's, and a Transformer decoder attends "
            "with its own multi-head softmax attention"
            for name in ("input_feed 0", "global_attention mlp")
        ],
    ),
    (
        CNN,
        ["-input_feed", "0", "-rnn_type", "GRU", "-heads", "4"],
        [
            "-rnn_type GRU has no effect: the model has no recurrent layers",
            "-input_feed 0 has no effect: it is an RNN decoder's, and a CNN decoder attends with "
            "its own dot-product softmax attention in every layer",
            "-heads 4 has no effect: the model has no Transformer layers",
        ],
    ),
    (
        RNN,
        ["-cnn_kernel_width", "5"],
        [
            "-cnn_kernel_width 5 has no effect: the model has no convolutional layers "
            "(-encoder_type/-decoder_type cnn)"
        ],
    ),
    (
        RNN,
        ["-heads", "4", "-transformer_ff", "64", "-max_relative_positions", "4"],
        [
            f"-{name} has no effect: the model has no Transformer layers"
            for name in ("heads 4", "transformer_ff 64", "max_relative_positions 4")
        ],
    ),
    (
        RNN,
        ["-self_attn_type", "scaled-dot-flash", "-attention_dropout", "0.3"],
        [
            f"-{name} has no effect: the model has no Transformer layers"
            for name in ("self_attn_type scaled-dot-flash", "attention_dropout 0.3")
        ],
    ),
]

# each with a learning rate that moves over the steps the test takes
STEP_DECAY = ["-start_decay_steps", "1", "-decay_steps", "1"]
IDLE_IN_THE_OPTIMIZER = [
    (
        ["-optim", "sgd", *STEP_DECAY],
        ["-adam_beta1", "0.8", "-adam_beta2", "0.98"],
        [
            f"-{name} has no effect: -optim sgd has no betas (adam, adamw, fusedadam and "
            "sparseadam have)"
            for name in ("adam_beta1 0.8", "adam_beta2 0.98")
        ],
    ),
    (  # 1.x built its Adafactor with betas 0.9 and 0.999 and without weight decay
        ["-optim", "adafactor", "-learning_rate", "0.1", *STEP_DECAY],
        ["-adam_beta1", "0.8", "-adam_beta2", "0.98", "-weight_decay", "0.01"],
        [
            "-adam_beta1 0.8 has no effect: -optim adafactor keeps 1.x's betas, 0.9 and 0.999",
            "-adam_beta2 0.98 has no effect: -optim adafactor keeps 1.x's betas, 0.9 and 0.999",
            "-weight_decay 0.01 has no effect: -optim adafactor has no weight decay (1.x's had "
            "none)",
        ],
    ),
    (  # 1.x's sparseadam: its two Adams take the betas, neither a weight decay
        ["-optim", "sparseadam", "-adam_beta2", "0.98", "-learning_rate", "0.1", *STEP_DECAY],
        ["-weight_decay", "0.01"],
        [
            "-weight_decay 0.01 has no effect: -optim sparseadam has no weight decay (1.x's had "
            "none)"
        ],
    ),
    (
        ["-optim", "adam", *STEP_DECAY],
        ["-adagrad_accumulator_init", "0.1"],
        ["-adagrad_accumulator_init 0.1 has no effect: it is -optim adagrad's, not adam's"],
    ),
    (
        ["-decay_method", "none", *STEP_DECAY],
        ["-warmup_steps", "2"],
        [
            "-warmup_steps 2 has no effect: -decay_method none does not warm up (noam, noamwd "
            "and rsqrt do)"
        ],
    ),
    (
        ["-optim", "adam", "-decay_method", "noam", "-warmup_steps", "2"],
        ["-learning_rate_decay", "0.3", "-start_decay_steps", "1", "-decay_steps", "2"],
        [
            "-learning_rate_decay 0.3 has no effect: -decay_method noam has no decay factor",
            "-start_decay_steps 1 has no effect: it times the step decay of -decay_method none "
            "and noamwd, not noam's",
            "-decay_steps 2 has no effect: it times the step decay of -decay_method none and "
            "noamwd, not noam's",
        ],
    ),
    (  # 1.x's noamwd reads the warm-up and the step decay; fusedadam the betas
        ["-optim", "fusedadam", "-adam_beta2", "0.98", "-decay_method", "noamwd"]
        + ["-warmup_steps", "2", "-learning_rate_decay", "0.3", *STEP_DECAY],
        ["-adagrad_accumulator_init", "0.1"],
        ["-adagrad_accumulator_init 0.1 has no effect: it is -optim adagrad's, not fusedadam's"],
    ),
]

IDLE_ELSEWHERE = [
    (
        ["-dropout", "0.1"],
        ["-dropout_steps", "5"],
        [
            "-dropout_steps 5 has no effect: -dropout and -attention_dropout have one value each, "
            "no schedule"
        ],
    ),
    (
        [],
        ["-tensorboard_log_dir", "boards", "-exp", "run7"],
        [
            f"-{name} has no effect: without -tensorboard nothing is written"
            for name in ("tensorboard_log_dir boards", "exp run7")
        ],
    ),
]


@pytest.mark.parametrize(
    "around,idle,warnings", IDLE_IN_THE_MODEL + IDLE_IN_THE_OPTIMIZER + IDLE_ELSEWHERE
)
def test_an_idle_option_is_named_and_the_options_around_it_are_not(around, idle, warnings):
    assert idle_options(model_options(*around)) == []
    assert idle_options(model_options(*around, *idle)) == warnings


@pytest.mark.parametrize("reset_optim,named", [("none", []), ("keep_states", ["adam_beta2 0.98"])])
def test_what_a_resumed_run_takes_from_its_checkpoint_goes_unnamed(reset_optim, named):
    """-train_from: the model options (and with -reset_optim none or states the optimizer's) are
    the checkpoint's, which its run named: only this command line's are."""
    opt = model_options(
        *RNN,
        "-heads",
        "4",
        "-adam_beta2",
        "0.98",
        "-tensorboard_log_dir",
        "boards",
        "-train_from",
        "c.pt",
        "-reset_optim",
        reset_optim,
    )
    betas = "has no effect: -optim sgd has no betas (adam, adamw, fusedadam and sparseadam have)"
    assert idle_options(opt, checkpoint_options(opt)) == [
        *(f"-{name} {betas}" for name in named),
        "-tensorboard_log_dir boards has no effect: without -tensorboard nothing is written",
    ]


def test_opennmt_py_1x_transformer_recipe_names_nothing():
    recipe = [
        *BOTH_TRANSFORMER,
        "-position_encoding",
        "-optim",
        "adam",
        "-adam_beta2",
        "0.998",
        "-decay_method",
        "noam",
        "-warmup_steps",
        "8000",
        "-learning_rate",
        "2",
        "-max_grad_norm",
        "0",
        "-param_init",
        "0",
        "-param_init_glorot",
        "-label_smoothing",
        "0.1",
    ]
    assert idle_options(model_options(*recipe)) == []


@pytest.mark.parametrize("around,idle,warnings", IDLE_IN_THE_MODEL)
def test_the_model_is_the_same_without_the_idle_option(around, idle, warnings):
    batch = make_batch(random_pairs(3, seed=4))
    outputs = []
    for args in (around, around + idle):
        model, _ = make_model(*args, "-dropout", "0.3", seed=7)
        torch.manual_seed(11)  # the same dropout masks, in training mode
        dec_out, _ = model.train()(batch.src, batch.tgt, batch.src_lengths)
        outputs.append((model.state_dict(), dec_out))
    (state, dec_out), (idle_state, idle_dec_out) = outputs
    assert state.keys() == idle_state.keys()
    for name in state:
        torch.testing.assert_close(idle_state[name], state[name], rtol=0, atol=0, msg=name)
    torch.testing.assert_close(idle_dec_out, dec_out, rtol=0, atol=0)


@pytest.mark.parametrize("around,idle,warnings", IDLE_IN_THE_OPTIMIZER)
def test_the_optimizers_steps_are_the_same_without_the_idle_option(around, idle, warnings):
    weights = []
    for args in (around, around + idle):
        model, opt = make_model(*args, seed=3)
        optim = Optimizer(model, opt, 8)
        rates = []
        for step in range(4):
            torch.manual_seed(step)
            for parameter in model.parameters():
                parameter.grad = torch.randn_like(parameter)
                if isinstance(optim.optimizer_of[id(parameter)], torch.optim.SparseAdam):
                    rows = torch.tensor([[0, 2, 5]])  # sparseadam's lookup tables: a few rows
                    values = parameter.grad[rows[0]]
                    parameter.grad = torch.sparse_coo_tensor(
                        rows, values, parameter.shape, check_invariants=True
                    )
            rates.append(optim.learning_rate())
            optim.step()
        weights.append((rates, [p.detach().clone() for p in model.parameters()]))
    (rates, params), (idle_rates, idle_params) = weights
    assert idle_rates == rates and len(set(rates)) > 1  # a schedule that moves, unchanged
    for param, idle_param in zip(params, idle_params):
        torch.testing.assert_close(idle_param, param, rtol=0, atol=0)


def test_the_options_of_validation_are_idle_without_validation_data():
    opt = model_options(
        "-data",
        "runs/d",
        "-valid_steps",
        "100",
        "-valid_metrics",
        "BLEU",
        "-early_stopping",
        "2",
        "-early_stopping_criteria",
        "BLEU",
    )
    assert idle_options(opt, validation=True) == []
    why = "runs/d has no validation data (preprocess with -valid_src and -valid_tgt)"
    assert idle_options(opt, validation=False) == [
        f"-{name} has no effect: {why}"
        for name in (
            "valid_steps 100",
            "valid_metrics BLEU",
            "early_stopping 2",
            "early_stopping_criteria BLEU",
        )
    ]
    assert idle_options(model_options(), validation=False) == []  # defaults: nothing named


def test_the_options_of_word_features_are_idle_without_features_in_the_data():
    opt = model_options("-data", "runs/d", "-feat_merge", "sum", "-feat_vec_exponent", "0.5")
    assert idle_options(opt, features=True) == []
    assert idle_options(opt, features=False) == [
        f"-{name} has no effect: runs/d has no source word features (word\uffe8feat tokens)"
        for name in ("feat_merge sum", "feat_vec_exponent 0.5")
    ]
