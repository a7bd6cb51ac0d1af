"""Preprocessing's per-line work in one process or in several (``-num_threads``), with the same
output.

The parent process reads the files (so an error still names its file and line) and hands out chunks
of ``CHUNK_LINES`` lines; each worker tokenizes, filters and finishes the pairs of its chunk (into
examples, say) and the parent takes the chunks back in file order: the same items in the same order
as one process yields.
"""

import collections
import itertools
import multiprocessing

from onmt_lite.data.alignment import with_alignment_lines
from onmt_lite.data.corpus import CorpusStats, read_parallel, tokenize_lines

CHUNK_LINES = 2000
_job = None  # in a worker: (src_tok, tgt_tok, limits, finish), given once when the worker starts


def _start_worker(job):
    global _job
    _job = job


def _finished(lines, src_tok, tgt_tok, limits, finish, stats):
    pairs = tokenize_lines(lines, src_tok, tgt_tok, limits, stats)
    return pairs if finish is None else (finish(*pair) for pair in pairs)


def _work(chunk):
    stats = CorpusStats()
    return list(_finished(chunk, *_job, stats)), stats


def corpus_pairs(
    src_path, tgt_path, src_tok, tgt_tok, limits, stats, processes=1, finish=None, align_path=""
):
    """Yield ``(line_number, src_tokens, tgt_tokens)`` for each pair the limits keep (or, with
    ``finish``, a picklable function, ``finish(line_number, src_tokens, tgt_tokens)``), counting
    into ``stats``; with ``processes`` > 1 the pairs are tokenized and finished by that many
    workers. With ``align_path``, a Pharaoh alignment file, each pair has its links as a fourth item
    (and argument)."""
    lines = read_parallel(src_path, tgt_path)
    if align_path:
        lines = with_alignment_lines(lines, align_path, src_path)
    if processes == 1:
        yield from _finished(lines, src_tok, tgt_tok, limits, finish, stats)
        return
    chunks = iter(lambda: list(itertools.islice(lines, CHUNK_LINES)), [])
    job = (src_tok, tgt_tok, limits, finish)
    with multiprocessing.get_context().Pool(processes, _start_worker, (job,)) as pool:
        # two chunks a worker in flight: the workers stay busy while memory holds only a few chunks
        pending = collections.deque(
            pool.apply_async(_work, (chunk,)) for chunk in itertools.islice(chunks, 2 * processes)
        )
        while pending:
            done, chunk_stats = pending.popleft().get()
            pending.extend(
                pool.apply_async(_work, (chunk,)) for chunk in itertools.islice(chunks, 1)
            )
            stats.add(chunk_stats)
            yield from done
