"""onmt_lite_convert: models between onmt_lite, OpenNMT-py and CTranslate2 (see
onmt_lite.convert.run and docs/interop.md)."""

from onmt_lite.convert.run import convert
from onmt_lite.opts import build_parser, config_opts, parse
from onmt_lite.opts.convert import convert_opts
from onmt_lite.utils.errors import run_command
from onmt_lite.utils.logging import init_logger

PROG = "onmt_lite_convert"


@run_command(PROG)
def main(args=None):
    opt = parse(build_parser(PROG, [config_opts, convert_opts], __doc__), args)
    init_logger()
    convert(opt)


if __name__ == "__main__":
    main()
