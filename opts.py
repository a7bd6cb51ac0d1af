from onmt_lite.opts import *  # noqa: F401,F403  the options module lives in the package
