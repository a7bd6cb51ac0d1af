"""onmt_lite_preprocess: parallel text to a vocab file and shards (see onmt_lite.preprocess)."""

from onmt_lite.opts import build_parser, config_opts, parse, preprocess_opts
from onmt_lite.preprocess import check_log_file, preprocess
from onmt_lite.utils.errors import run_command
from onmt_lite.utils.logging import init_logger

PROG = "onmt_lite_preprocess"


@run_command(PROG)
def main(args=None):
    opt = parse(build_parser(PROG, [config_opts, preprocess_opts], __doc__), args)
    check_log_file(opt)
    init_logger(opt.log_file, file_level=opt.log_file_level)
    preprocess(opt)


if __name__ == "__main__":
    main()
