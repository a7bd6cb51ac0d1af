"""Statistics: loss, word and accuracy counts, accumulated over shards, batches and reports."""
import math
import time


class Statistics:
    """Sums over target words (padding excluded).

    Attributes:
        loss: summed negative log-likelihood (the unsmoothed cross-entropy, in nats).
        n_words: target words counted. n_correct: of them, those the model's argmax predicts.
        n_src_words: source words of the batches (for throughput; set by the trainer).
    """

    def __init__(self, loss=0.0, n_words=0, n_correct=0, n_src_words=0):
        self.loss, self.n_words, self.n_correct = float(loss), int(n_words), int(n_correct)
        self.n_src_words = int(n_src_words)
        self.start_time = time.time()

    def update(self, other):
        self.loss += other.loss
        self.n_words += other.n_words
        self.n_correct += other.n_correct
        self.n_src_words += other.n_src_words
        return self

    def xent(self):
        """Cross-entropy per word."""
        return self.loss / max(self.n_words, 1)

    def ppl(self):
        """Perplexity, ``exp(xent)`` (capped at exp(100))."""
        return math.exp(min(self.xent(), 100))

    def accuracy(self):
        """Percentage of words predicted right."""
        return 100.0 * self.n_correct / max(self.n_words, 1)

    def elapsed_time(self):
        return time.time() - self.start_time

    def __eq__(self, other):
        return (isinstance(other, Statistics) and math.isclose(self.loss, other.loss, rel_tol=1e-9, abs_tol=1e-9)
                and (self.n_words, self.n_correct) == (other.n_words, other.n_correct))

    def __repr__(self):
        return f"Statistics(loss={self.loss:.6g}, n_words={self.n_words}, n_correct={self.n_correct})"
