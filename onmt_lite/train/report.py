"""Progress reports: OpenNMT-style log lines, and TensorBoard scalars when asked for."""

import time

from onmt_lite.utils.logging import logger


class Reporter:
    """Logs training and validation statistics; writes TensorBoard scalars with a log directory."""

    def __init__(self, train_steps, tensorboard_dir=None):
        self.train_steps, self.start, self.writer = train_steps, time.time(), None
        if tensorboard_dir:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                logger.warning(
                    "-tensorboard: the tensorboard package is not installed "
                    "(pip install tensorboard); no scalars are written"
                )
            else:
                self.writer = SummaryWriter(tensorboard_dir)

    def training(self, step, stats, lr):
        elapsed = max(stats.elapsed_time(), 1e-9)
        logger.info(
            f"Step {step}/{self.train_steps}; acc: {stats.accuracy():6.2f}; ppl: "
            f"{stats.ppl():8.2f}; xent: {stats.xent():5.2f}; lr: {lr:.5g}; "
            f"{stats.n_src_words / elapsed:5.0f}/{stats.n_words / elapsed:5.0f} tok/s; "
            f"{time.time() - self.start:6.0f} sec"
        )
        self._scalars("train", step, stats, lr=lr, tgt_per_sec=stats.n_words / elapsed)

    def validation(self, step, stats, extra=""):
        logger.info(
            f"Validation at step {step}: perplexity {stats.ppl():.4f}, accuracy "
            f"{stats.accuracy():.2f}, xent {stats.xent():.4f}{extra}"
        )
        self._scalars("valid", step, stats)

    def _scalars(self, prefix, step, stats, **more):
        if self.writer is None:
            return
        values = {"xent": stats.xent(), "ppl": stats.ppl(), "accuracy": stats.accuracy(), **more}
        for name, value in values.items():
            self.writer.add_scalar(f"{prefix}/{name}", value, step)
        self.writer.flush()
