#!/usr/bin/env python
"""Make a checkpoint smaller for translation: drop the training state, optionally store float16.

    python tools/release_model.py -model run_step_10000.pt -output release.pt [-fp16]

The checkpoint is loaded onto the CPU (a checkpoint saved on a GPU machine works anywhere). The
optimizer, random-generator, data-position and trainer state are removed, and so are the raw weights
that a ``-average_decay`` run keeps beside its averaged ones (the average is what translates), so
the released file translates but cannot resume training. With ``-fp16`` every floating-point weight
is stored as float16 (half the size); translating loads those values into the float32 model. A
weight beyond float16's range (|w| > 65504, which would become inf) is refused, naming the
checkpoint and the parameter, and nothing is written: release such a model without ``-fp16``.
"""

from __future__ import annotations

from onmt_lite.opts import OptionParser, add, parse
from onmt_lite.utils.errors import UserError, run_command
from onmt_lite.utils.files import save_tensors
from onmt_lite.utils.output_paths import require_file_path

PROG = "release_model.py"
TRAINING_STATE = ("optim", "rng", "data", "trainer", "raw_weights")


def build_parser():
    """The option parser of release_model.py."""
    parser = OptionParser(
        PROG, "Drop the training state of a checkpoint (optionally store float16)."
    )
    group = parser.add_argument_group("Release")
    add(group, "model", required=True, help="The checkpoint to release")
    add(group, "output", required=True, help="The released checkpoint to write")
    add(group, "fp16", action="store_true", help="Store floating-point weights as float16")
    return parser


def to_half(state: dict, source: str = "the checkpoint", part: str = "model") -> dict:
    """``state`` with its floating-point tensors converted to float16; a UserError naming ``source``
    and the parameter ``part``.NAME if a finite weight overflows float16 (|w| > 65504 becomes inf,
    which translation would take for a diverged run)."""
    import torch

    half = {}
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            half[name] = tensor
            continue
        half[name] = tensor.to(torch.float16)
        overflow = torch.isfinite(tensor) & ~torch.isfinite(half[name])
        if overflow.any():
            largest = tensor[overflow].abs().max().item()
            raise UserError(
                f"{source}: -fp16: parameter {part}.{name} has a weight of magnitude "
                f"{largest:.6g}, beyond float16's largest 65504 (it would become inf); "
                f"release without -fp16 to keep float32 weights"
            )
    return half


def release(checkpoint: dict, fp16: bool = False, source: str = "the checkpoint") -> dict:
    """The checkpoint without its training state, with float16 weights if ``fp16`` (``source``, the
    checkpoint's path, names it in errors)."""
    released = {k: v for k, v in checkpoint.items() if k not in TRAINING_STATE}
    if fp16:
        for part in ("model", "generator"):
            released[part] = to_half(released[part], source, part)
    return released


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run release_model.py with ``argv`` (default: the command line)."""
    opt = parse(build_parser(), argv)
    # imported after parsing, so that -h does not load torch
    from onmt_lite.models.checkpoint import load_checkpoint

    require_file_path(opt.output, "-output")
    checkpoint = load_checkpoint(opt.model)  # map_location="cpu"
    # checked in full before anything is written: a refused -fp16 leaves no output
    save_tensors(release(checkpoint, opt.fp16, opt.model), opt.output)
    print(f"released {opt.model} as {opt.output}" + (" (float16)" if opt.fp16 else ""))


if __name__ == "__main__":
    main()
