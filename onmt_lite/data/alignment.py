"""Word alignments for guided alignment (Garg et al. 2019): Pharaoh lines, links, reference
matrices.

A Pharaoh line holds ``i-j`` pairs separated by spaces: source token i is linked to target token j,
both counted from 0 over the tokens after tokenization (OpenNMT-py 1.x's convention). Preprocessing
checks each line against its sentence pair (``AlignmentLine.links``), drops the links that a
truncation cuts off (``corpus.tokenize_lines``) and stores the links with the example; a batch
carries them as ``[n_links x 3]`` rows ``(example, target token, source token)``, from which the
loss builds the reference matrix (``reference_alignment``).
"""

import itertools
import re

import torch

from onmt_lite.data.corpus import read_lines
from onmt_lite.utils.errors import UserError, where

PAIR = re.compile(r"(\d+)-(\d+)")


class AlignmentLine:
    """The text of one line of an alignment file, with its file and line number (for errors)."""

    def __init__(self, path, lineno, text):
        self.path = path
        self.lineno = lineno
        self.text = text

    def links(self, src_len, tgt_len):
        """``[(source index, target index)]`` of the line, checked against a pair of ``src_len`` and
        ``tgt_len`` tokens: a malformed pair or an index outside the sentence is a UserError naming
        the file and line."""
        links = []
        for item in self.text.split():
            match = PAIR.fullmatch(item)
            if match is None:
                raise UserError(
                    f"{where(self.path, self.lineno)}: {item!r} is not a Pharaoh alignment pair "
                    f"'SRC-TGT' (0-based token indices)"
                )
            src = int(match.group(1))
            tgt = int(match.group(2))
            if src >= src_len or tgt >= tgt_len:
                raise UserError(
                    f"{where(self.path, self.lineno)}: link {item} is outside the sentence pair "
                    f"({src_len} source and {tgt_len} target tokens)"
                )
            links.append((src, tgt))
        return links


def with_alignment_lines(lines, align_path, src_path):
    """``(line_number, src_text, tgt_text, AlignmentLine)`` for each of ``lines`` (as
    ``read_parallel`` yields them) and the line of ``align_path`` with the same number; the files
    must have as many lines."""
    aligned = read_lines(align_path)
    n = 0
    for pair, align in itertools.zip_longest(lines, aligned):
        if pair is None or align is None:
            n_align = n + (align is not None) + sum(1 for _ in aligned)
            n_src = n + (pair is not None) + sum(1 for _ in lines)
            raise UserError(
                f"{align_path} has {n_align} lines but {src_path} has {n_src}: an alignment "
                f"file needs one line per sentence pair"
            )
        n += 1
        yield (*pair, AlignmentLine(align_path, *align))


def flat_links(examples_links):
    """The links of several examples as a shard stores them: ``[2 * n_links]`` long (source, target
    index, link after link) and ``[n_examples]`` long, the number of links of each example."""
    flat = [index for links in examples_links for link in links for index in link]
    return (
        torch.tensor(flat, dtype=torch.long),
        torch.tensor([len(links) for links in examples_links], dtype=torch.long),
    )


def batch_links(flat, counts, offsets, ids):
    """The links of the examples ``ids`` (``[n]`` long positions in the shard) as ``[n_links x 3]``
    long rows ``(position in ids, target index, source index)``; ``flat``, ``counts`` as
    ``flat_links`` gives them and ``offsets`` the first link of each example."""
    chosen = counts[ids]
    example = torch.repeat_interleave(torch.arange(ids.numel()), chosen)
    starts = torch.repeat_interleave(offsets[ids] - (torch.cumsum(chosen, 0) - chosen), chosen)
    links = flat.view(-1, 2)[starts + torch.arange(int(chosen.sum()))]
    return torch.stack([example, links[:, 1], links[:, 0]], 1)


def reference_alignment(links, tgt_len, batch_size, src_len):
    """The reference alignment ``[tgt_len x batch_size x src_len]`` float of ``links`` (``[n x 3]``
    rows ``(example, target index, source index)``): row t of example b (target token t) is 1 at its
    linked source tokens, divided by their number, so that it sums to 1; rows of unlinked tokens are
    0. A link given twice counts once."""
    ref = torch.zeros(tgt_len, batch_size, src_len, device=links.device)
    ref[links[:, 1], links[:, 0], links[:, 2]] = 1.0
    return ref / ref.sum(2, keepdim=True).clamp(min=1.0)
