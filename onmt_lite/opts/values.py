"""The values an option takes: ``type=`` functions that check a value as it is read (a one-line
error naming the option, exit 2), and the bounds of the numeric options."""

import argparse
import math


def choice(option, allowed, unsupported=None):
    """A ``type=`` that accepts one of ``allowed``; a known-but-unsupported value gets its
    reason."""
    unsupported = unsupported or {}

    def parse(value):
        if value in allowed:
            return value
        if value in unsupported:
            raise argparse.ArgumentTypeError(
                f"onmt_lite does not support -{option} {value} ({unsupported[value]}); "
                f"choose from {', '.join(allowed)}"
            )
        raise argparse.ArgumentTypeError(
            f"invalid value {value!r}; choose from {', '.join(allowed)}"
        )

    parse.__name__ = option
    return parse


def only_value(option, allowed, reason):
    """A ``type=`` that accepts the one value ``allowed`` (a string; None accepts none) and refuses
    any other with ``reason`` (for 1.x's deprecated options, which 1.x accepted at their default
    only)."""

    def parse(value):
        if value == allowed:
            return value
        raise argparse.ArgumentTypeError(f"{value!r} is refused: {reason}")

    parse.__name__ = option
    return parse


def only_number(option, allowed, reason):
    """A ``type=`` that accepts the number ``allowed`` however it is written (``0``, ``-0.0``) and
    refuses any other with ``reason`` (a 1.x option whose default onmt_lite does, and whose other
    values it does not)."""

    def parse(value):
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
        if number == allowed:
            return number
        raise argparse.ArgumentTypeError(f"{value!r} is refused: {reason}")

    parse.__name__ = option
    return parse


def shown(value) -> str:
    """An option's value as a command line writes it (a list's items separated by spaces)."""
    if isinstance(value, (list, tuple)):
        return " ".join(str(item) for item in value)
    return str(value)


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


def int_in(low, high):
    """A ``type=`` for a whole number in ``[low, high]``."""

    def parse(value):
        number = int_at_least(low)(value)
        if number > high:
            raise argparse.ArgumentTypeError(f"{number} is above the maximum {high}")
        return number

    parse.__name__ = f"int in [{low}, {high}]"
    parse.bounds = (low, high)  # for the tests that walk the options
    return parse


SEED = int_in(-(2**63), 2**64 - 1)  # what torch.manual_seed takes

# The upper bounds of the numeric options: values the code can represent and run with, checked
# when the option is read (a one-line error naming the option and the bound, exit 2). Each says why.
# Step numbers and counts that grow with a run or its data (steps, lines, word counts): Python ints
# that reach int64 (torch, TensorBoard's step) with room left for step + N.
MAX_STEPS = 2**62
# A size or count of things held at once (a layer's width, a vocabulary, a batch, a shard): a matrix
# dimension, which BLAS (MKL's LP64, cuBLAS) takes as a 32-bit int.
MAX_SIZE = 2**31 - 1
# Tokens of a sequence (lengths, positions, n-grams): positions are float32 in the position
# encodings and the length penalties, which hold every whole number up to 2 ** 24 only.
MAX_LENGTH = 2**24
# Layers of an encoder or decoder: deeper than any published model (DeepNet, 1,000 layers).
MAX_LAYERS = 1024
# Beam size (and -n_best, at most the beam): each search step scores beam x vocabulary candidates of
# each sentence, 200 MB a sentence at 1,000 x 50,000; wider beams cannot run at any batch size.
MAX_BEAM = 1000
# -vocab_size_multiple: matrix shapes want multiples of 8 to 128; a larger multiple only adds up
# to that many unused words to the vocabulary.
MAX_VOCAB_MULTIPLE = 2**16
# Processes started on one machine: Linux's PID_MAX_LIMIT, the most processes a 64-bit kernel runs.
MAX_PROCESSES = 2**22
# A CUDA device index: torch keeps it in an int8 (torch.device("cuda", 128) is cuda:-128).
MAX_CUDA_DEVICE = 127
# A TCP port is 16 bits.
MAX_PORT = 2**16 - 1
# Weights, losses, gradients and scores are float32: a larger factor would be infinite there.
FLOAT32_MAX = 3.4028234663852886e38
LOG_LEVELS = {"CRITICAL": 50, "ERROR": 40, "WARNING": 30, "INFO": 20, "DEBUG": 10, "NOTSET": 0}


def log_level(value):
    """A ``type=`` for a logging level, by 1.x's names or numbers (``INFO`` or ``20``): the
    number."""
    if value in LOG_LEVELS:
        return LOG_LEVELS[value]
    if value in map(str, LOG_LEVELS.values()):
        return int(value)
    raise argparse.ArgumentTypeError(
        f"invalid level {value!r}; choose from {', '.join(LOG_LEVELS)} or "
        f"{', '.join(map(str, LOG_LEVELS.values()))}"
    )


def float_in(low, high, infinite=False):
    """A ``type=`` for a number in ``[low, high]``; an infinite one only with ``infinite`` (``high``
    of ``inf`` means no upper bound, not that infinity is a value)."""

    def parse(value):
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
        if math.isinf(number) and not infinite:  # before the range: the clearer reason
            raise argparse.ArgumentTypeError(f"{number} is not a finite number")
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{number} is outside [{low}, {high}]")
        return number

    parse.__name__ = f"float in [{low}, {high}]"
    parse.bounds = (low, high)  # for the tests that walk the options
    return parse
