"""Options of onmt_lite_convert (no 1.x counterpart; -quantization as CTranslate2 names it)."""

from onmt_lite.opts.parser import add
from onmt_lite.opts.values import choice

FORMATS = ("onmt_lite", "opennmt-py", "ctranslate2")
QUANTIZATIONS = ("none", "int8", "int8_float32", "float16", "bfloat16")


def convert_opts(parser):
    group = parser.add_argument_group("Conversion")
    add(group, "model", required=True, help="The checkpoint to convert")
    add(
        group,
        "output",
        required=True,
        help="Where to write it: a checkpoint file, or a directory with -to ctranslate2",
    )
    add(
        group,
        "from",
        dest="from_format",
        default="onmt_lite",
        type=choice("from", FORMATS[:2]),
        help="What -model is: onmt_lite, or opennmt-py (a 1.x or 3.x checkpoint)",
    )
    add(
        group,
        "to",
        dest="to_format",
        default="onmt_lite",
        type=choice("to", FORMATS),
        help="What to write: onmt_lite, opennmt-py (a 3.5.1 checkpoint) or ctranslate2 (a model "
        "directory; Transformers only)",
    )
    add(
        group,
        "quantization",
        default="none",
        type=choice("quantization", QUANTIZATIONS),
        help="-to ctranslate2: the weights' type in the model directory (none: float32)",
    )
    add(group, "overwrite", action="store_true", help="Replace -output if it exists")
