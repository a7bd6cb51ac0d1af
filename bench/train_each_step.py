"""``onmt_lite_train`` reading each step's loss and gradient norm before its update, as it did
before 2026-11-28 (and still does with an optimizer that cannot skip an update on the device): the
baseline of ``gpu_speed.py``'s ``each_step`` lever, which measures what reading them every few
steps (``onmt_lite/train/step_checks.py``) pays on a GPU. Not an option of the command: a lever
to measure, no behaviour a user needs.

    python bench/train_each_step.py ONMT_LITE_TRAIN_OPTIONS...
"""

import sys

from onmt_lite.bin.train import main
from onmt_lite.train.optim import Optimizer

# the trainer reads each step when its optimizer cannot skip one on the device
Optimizer.can_skip_on_device = property(lambda self: False)

if __name__ == "__main__":
    sys.exit(main())
