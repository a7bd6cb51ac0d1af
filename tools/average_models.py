#!/usr/bin/env python
"""Average the weights of several checkpoints of one model into a new checkpoint.

    python tools/average_models.py -models run_step_8000.pt run_step_9000.pt run_step_10000.pt \
        -output run_avg.pt

The checkpoints must have the same vocabularies and the same tensor names and shapes. Every
floating-point tensor of ``model`` and ``generator`` becomes the elementwise mean (computed in
float64, stored in the first checkpoint's dtype); other tensors must be equal in all checkpoints.
The output keeps the ``vocab``, ``opt``, ``preprocess`` and ``step`` of the last checkpoint and has
no training state (``optim``, ``rng``, ``data``, ``trainer`` and a ``-average_decay`` run's
``raw_weights`` are removed; such a run's ``model`` and ``generator`` are its moving average): it is
for translating, not resuming.
"""

from __future__ import annotations

from onmt_lite.opts import OptionParser, add, parse
from onmt_lite.utils.errors import UserError, run_command
from onmt_lite.utils.files import save_tensors
from onmt_lite.utils.output_paths import require_file_path

PROG = "average_models.py"
PARTS = ("model", "generator")
TRAINING_STATE = ("optim", "rng", "data", "trainer", "raw_weights")


def build_parser():
    """The option parser of average_models.py."""
    parser = OptionParser(PROG, "Average the weights of several checkpoints of one model.")
    group = parser.add_argument_group("Averaging")
    add(group, "models", required=True, nargs="+", help="The checkpoints to average")
    add(group, "output", required=True, help="The averaged checkpoint to write")
    return parser


def check_compatible(first, other, first_path, path):
    """A UserError naming the first difference of vocabularies or tensors between two
    checkpoints."""
    if other["vocab"] != first["vocab"]:
        raise UserError(f"{path}: its vocabularies differ from those of {first_path}")
    for part in PARTS:
        names = set(first[part])
        other_names = set(other[part])
        if names != other_names:
            diff = sorted(names ^ other_names)[:3]
            raise UserError(
                f"{path}: {part} tensors differ in name from those of {first_path} ({diff})"
            )
        for name, tensor in first[part].items():
            if other[part][name].shape != tensor.shape:
                raise UserError(
                    f"{path}: {part} tensor {name} has shape {tuple(other[part][name].shape)}, "
                    f"{first_path} has {tuple(tensor.shape)}"
                )


def average_state(states, part, paths):
    """The elementwise mean of the tensors of ``part`` over ``states``."""
    import torch

    averaged = {}
    for name, tensor in states[0][part].items():
        if tensor.is_floating_point():
            total = sum(state[part][name].to(torch.float64) for state in states)
            averaged[name] = (total / len(states)).to(tensor.dtype)
        else:
            for state, path in zip(states[1:], paths[1:]):
                if not torch.equal(state[part][name], tensor):
                    raise UserError(
                        f"{path}: non-floating {part} tensor {name} differs from {paths[0]}"
                    )
            averaged[name] = tensor.clone()
    return averaged


def average_checkpoints(paths):
    """The averaged checkpoint of the checkpoint files ``paths``."""
    from onmt_lite.models.checkpoint import load_checkpoint

    states = [load_checkpoint(path) for path in paths]
    for state, path in zip(states[1:], paths[1:]):
        check_compatible(states[0], state, paths[0], path)
    result = {k: v for k, v in states[0].items() if k not in TRAINING_STATE}
    for key in ("vocab", "opt", "preprocess", "step"):
        if key in states[-1]:
            result[key] = states[-1][key]
    for part in PARTS:
        result[part] = average_state(states, part, paths)
    return result


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run average_models.py with ``argv`` (default: the command line)."""
    opt = parse(build_parser(), argv)
    require_file_path(opt.output, "-output")
    save_tensors(average_checkpoints(opt.models), opt.output)
    print(f"averaged {len(opt.models)} checkpoints into {opt.output}")


if __name__ == "__main__":
    main()
