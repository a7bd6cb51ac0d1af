"""onmt_lite_train: train a model on preprocessed data (see onmt_lite.train.main)."""
from onmt_lite.opts import build_parser, config_opts, model_opts, parse, train_opts
from onmt_lite.train.main import train
from onmt_lite.utils.errors import run_command
from onmt_lite.utils.logging import init_logger
from onmt_lite.utils.memory import reuse_freed_memory

PROG = "onmt_lite_train"


@run_command(PROG)
def main(args=None):
    opt = parse(build_parser(PROG, [config_opts, model_opts, train_opts], __doc__), args)
    init_logger(opt.log_file)
    reuse_freed_memory()
    train(opt)


if __name__ == "__main__":
    main()
