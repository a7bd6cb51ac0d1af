"""The k best entries (and the first best) of each row of a wide score matrix, faster than
``torch.topk`` and ``torch.argmax`` on the CPU.

A search step picks the k best of ``beam x vocabulary`` scores per example (100,000 entries for beam
5 and a 20,000-word vocabulary). PyTorch's CPU ``topk`` (and ``max`` with indices) walks such rows
element by element, a large part of a decoding step; ``amax`` is vectorised and much faster, so
``top_k`` first takes the maximum of each chunk of ``CHUNK`` entries, keeps the k chunks with the
highest maxima and runs ``topk`` on those alone. On any other device the functions are PyTorch's own
(one kernel there, where the chunks would take a dozen): the same results on every device.

Why that is exact: an entry outside the k kept chunks is at most its own chunk's maximum, which is
at most each kept chunk's maximum; so each of the k kept chunks holds an entry at least as large,
and the k best values all lie in the kept chunks. Only the order of equal values may differ from
``torch.topk``'s (which does not specify it either). ``row_argmax`` does the same for the accuracy
of a training step (the first best of each of some thousand rows of the vocabulary).
"""

import torch

from onmt_lite.utils.cpu_paths import cpu_path

CHUNK = 256


def chunked(scores) -> bool:
    """Whether the chunked search pays on ``scores``' device: on the CPU only (``cpu_path``)."""
    return cpu_path(scores.device)


def top_k(scores, k):
    """``torch.topk(scores, k, dim=1)`` for ``scores`` ``[rows x width]``: values and indices
    ``[rows x k]``, values in descending order."""
    rows, width = scores.shape
    n_chunks = width // CHUNK
    if n_chunks <= k or not chunked(scores):
        return scores.topk(k, dim=1)
    chunks = scores[:, : n_chunks * CHUNK].view(rows, n_chunks, CHUNK)
    kept = chunks.amax(2).topk(k, dim=1).indices  # [rows x k]
    offsets = torch.arange(CHUNK, device=scores.device)
    candidates = (kept.unsqueeze(2) * CHUNK + offsets).view(rows, k * CHUNK)
    if n_chunks * CHUNK < width:  # the last, partial chunk is always a candidate
        tail = torch.arange(n_chunks * CHUNK, width, device=scores.device)
        candidates = torch.cat([candidates, tail.expand(rows, -1)], 1)
    values, positions = scores.gather(1, candidates).topk(k, dim=1)
    return values, candidates.gather(1, positions)


def row_argmax(scores):
    """``scores.argmax(1)`` for ``scores`` ``[rows x width]`` without NaN: the first position of
    each row's maximum. The first chunk whose maximum is the row's holds that position (an earlier
    one would have the maximum too); ``argmax`` returns the first of equal values, among the chunks'
    maxima and within the chunk."""
    rows, width = scores.shape
    full = width // CHUNK
    if full < 2 or not chunked(scores):
        return scores.argmax(1)
    maxima = scores[:, : full * CHUNK].view(rows, full, CHUNK).amax(2)  # [rows x chunks]
    if full * CHUNK < width:  # the last, partial chunk
        maxima = torch.cat([maxima, scores[:, full * CHUNK :].amax(1, keepdim=True)], 1)
    first = maxima.argmax(1, keepdim=True)
    # the columns of that chunk; past the last column, the last again (later, so never the first
    # best)
    columns = (first * CHUNK + torch.arange(CHUNK, device=scores.device)).clamp_(max=width - 1)
    return columns.gather(1, scores.gather(1, columns).argmax(1, keepdim=True)).squeeze(1)


def row_positions(rows, total):
    """``[total]``: where each of ``total`` rows is in ``rows`` (0 for a row not there)."""
    position = torch.zeros(total, dtype=torch.long, device=rows.device)
    position[rows] = torch.arange(rows.numel(), device=rows.device)
    return position


def _spread(values, rows, total):
    """``values`` ``[len(rows) x ...]`` placed at ``rows`` of a ``[total x ...]`` tensor of -inf
    (None: ``values`` itself, which then holds every row)."""
    if rows is None:
        return values
    out = values.new_full((total,) + values.shape[1:], float("-inf"))
    out[rows] = values
    return out


def top_k_with_offsets(scores, offsets, k, rows=None):
    """The k best of ``scores + offsets`` per group of rows, without forming the sum.

    ``scores`` ``[groups*n x width]``, ``offsets`` ``[groups x n]`` (one per row): what
    ``top_k((scores + offsets.view(-1, 1)).view(groups, n * width), k)`` returns, values and indices
    into ``n * width``. With ``rows`` (indices into ``groups*n``), ``scores`` holds only those rows
    ``[len(rows) x width]`` and the others count as -inf; their offsets must be -inf. Adding a row's
    offset cannot reorder that row's entries, so each chunk's maximum plus its row's offset is the
    maximum of the chunk's sums, and the argument of ``top_k`` holds here chunk by chunk within each
    row. The sums are formed for the candidates only: the same float additions, so the same values.
    """
    width = scores.size(1)
    groups, n = offsets.shape
    total = groups * n
    n_chunks = width // CHUNK
    device = scores.device
    # [len(rows) x 1]
    row_offsets = offsets.view(-1, 1) if rows is None else offsets.view(-1, 1)[rows]
    if n_chunks * n <= k or not chunked(scores):
        return top_k(_spread(scores + row_offsets, rows, total).view(groups, n * width), k)
    maxima = scores[:, : n_chunks * CHUNK].view(-1, n_chunks, CHUNK).amax(2) + row_offsets
    # [groups x k]: row-in-group * n_chunks + chunk
    kept = _spread(maxima, rows, total).view(groups, n * n_chunks).topk(k, dim=1).indices
    row = torch.div(kept, n_chunks, rounding_mode="floor")
    column = (kept - row * n_chunks) * CHUNK  # [groups x k]: each kept chunk's first column
    candidates = ((row * width + column).unsqueeze(2) + torch.arange(CHUNK, device=device)).view(
        groups, k * CHUNK
    )
    # [groups x k]: into groups*n
    flat_row = row + torch.arange(groups, device=device).unsqueeze(1) * n
    # where each kept row is in ``scores`` (a row not there: 0; its offset is -inf)
    source = flat_row if rows is None else row_positions(rows, total)[flat_row]
    # each candidate plus its own row's offset, broadcast per kept chunk (no division per candidate)
    picked = scores.take(
        (source * width + column).unsqueeze(2) + torch.arange(CHUNK, device=device)
    )
    sums = (picked + offsets.view(-1)[flat_row].unsqueeze(2)).view(groups, k * CHUNK)
    if n_chunks * CHUNK < width:  # the last, partial chunk of every row is always a candidate
        tail = _spread(scores[:, n_chunks * CHUNK :] + row_offsets, rows, total).view(groups, -1)
        tails = torch.arange(n, device=device).unsqueeze(1) * width + torch.arange(
            n_chunks * CHUNK, width, device=device
        )
        candidates = torch.cat([candidates, tails.view(1, -1).expand(groups, -1)], 1)
        sums = torch.cat([sums, tail], 1)
    values, positions = sums.topk(k, dim=1)
    return values, candidates.gather(1, positions)
