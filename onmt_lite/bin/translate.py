"""onmt_lite_translate: translate text with a trained model or an ensemble (see
onmt_lite.translate.run)."""

from onmt_lite.opts import build_parser, config_opts, parse, translate_opts
from onmt_lite.translate.run import check_outputs, translate
from onmt_lite.utils.errors import run_command
from onmt_lite.utils.logging import init_logger
from onmt_lite.utils.memory import reuse_freed_memory

PROG = "onmt_lite_translate"


@run_command(PROG)
def main(args=None):
    opt = parse(build_parser(PROG, [config_opts, translate_opts], __doc__), args)
    # before the log file opens, since it may be refused as an output (translate checks again)
    check_outputs(opt)
    init_logger(opt.log_file, file_level=opt.log_file_level)
    reuse_freed_memory("cpu" if opt.gpu < 0 else "cuda")
    translate(opt)


if __name__ == "__main__":
    main()
