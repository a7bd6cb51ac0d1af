"""top_k: the same values as torch.topk, at indices that hold them, in every row shape it meets."""

import pytest
import torch

from onmt_lite.utils.topk import CHUNK, row_argmax, top_k, top_k_with_offsets


@pytest.mark.parametrize(
    "rows,width,k",
    [
        (32, 20004, 1),
        (32, 100020, 5),
        (3, 5 * CHUNK, 5),
        (7, 6 * CHUNK + 1, 5),
        (4, 2 * CHUNK, 5),
        (2, 10, 3),
    ],
)
def test_top_k_gives_torch_topk_values_at_valid_indices(rows, width, k):
    torch.manual_seed(rows * width + k)
    scores = torch.randn(rows, width)
    values, indices = top_k(scores, k)
    expected_values, expected_indices = scores.topk(k, dim=1)
    assert torch.equal(values, expected_values)
    assert torch.equal(indices, expected_indices)  # no ties in random floats: the same entries


def test_top_k_with_ties_and_minus_infinity_returns_entries_holding_the_best_values():
    torch.manual_seed(0)
    scores = torch.randint(0, 4, (16, 3 * CHUNK + 17)).float()  # many equal values
    scores[:, : 2 * CHUNK] = float("-inf")  # whole chunks that can never win
    scores[0] = float("-inf")
    scores[0, -1] = 1.0  # the only finite entry sits in the partial last chunk
    values, indices = top_k(scores, 5)
    assert torch.equal(values, scores.topk(5, dim=1).values)
    assert torch.equal(scores.gather(1, indices), values)
    assert all(len(set(row)) == 5 for row in indices.tolist())  # five different entries per row
    assert indices[0, 0].item() == scores.size(1) - 1


def test_the_best_entries_in_one_chunk_are_all_found():
    scores = torch.zeros(1, 8 * CHUNK)
    scores[0, 3 * CHUNK + 10 : 3 * CHUNK + 15] = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0])
    scores[0, 7 * CHUNK] = 0.5  # a chunk whose maximum is beaten by the first chunk's fifth entry
    values, indices = top_k(scores, 5)
    assert values.tolist() == [[5.0, 4.0, 3.0, 2.0, 1.0]]
    assert indices.tolist() == [[3 * CHUNK + 10 + i for i in range(5)]]


@pytest.mark.parametrize(
    "groups,n,width,k",
    [
        (28, 5, 20004, 5),
        (3, 5, 4 * CHUNK, 5),
        (2, 3, 7 * CHUNK + 9, 3),
        (4, 2, 300, 2),
        (5, 1, 20004, 1),
    ],
)
def test_top_k_with_offsets_equals_top_k_of_the_formed_sums(groups, n, width, k):
    """The same values and entries as adding each row's offset first (the beam search's old way)."""
    torch.manual_seed(groups * width + n)
    scores = torch.randn(groups * n, width).log_softmax(1)
    offsets = torch.randn(groups, n) * 4
    offsets[0, 1:] = float("-inf")  # a new example: one live row, its copies out of the race
    expected = top_k((scores + offsets.view(-1, 1)).view(groups, n * width), k)
    values, indices = top_k_with_offsets(scores, offsets, k)
    assert torch.equal(values, expected[0]) and torch.equal(indices, expected[1])
    assert (indices[0] < width).all()  # the example with one live row continues only from it


def test_top_k_with_offsets_finds_a_winner_in_a_partial_last_chunk_of_a_later_row():
    width = 3 * CHUNK + 7
    scores = torch.zeros(2, width)
    scores[1, width - 1] = 10.0  # only in row 1's partial chunk
    values, indices = top_k_with_offsets(scores, torch.tensor([[0.0, -1.0]]), 2)
    assert values.tolist() == [[9.0, 0.0]]
    assert indices[0, 0].item() == width + width - 1


@pytest.mark.parametrize(
    "groups,n,width,k", [(28, 5, 20004, 5), (3, 5, 4 * CHUNK, 5), (4, 2, 300, 2), (2, 3, 40, 4)]
)
def test_top_k_with_offsets_of_some_rows_equals_the_full_matrix_with_the_others_at_minus_infinity(
    groups, n, width, k
):
    """Rows just joined have one row in ``scores`` (``rows``); the full-matrix call is the
    reference."""
    torch.manual_seed(groups + n + width)
    full = torch.randn(groups * n, width).log_softmax(1)
    offsets = torch.randn(groups, n) * 4
    # every example but the first has just joined: only its first row is there
    offsets[1:, 1:] = float("-inf")
    rows = (offsets.view(-1) > float("-inf")).nonzero().view(-1)
    expected = top_k_with_offsets(full, offsets, k)
    values, indices = top_k_with_offsets(full[rows], offsets, k, rows)
    assert torch.equal(values, expected[0]) and torch.equal(indices, expected[1])
    assert (indices[1:] < width).all()


@pytest.mark.parametrize(
    "rows,width", [(64, 20004), (5, 4 * CHUNK), (3, 2 * CHUNK + 1), (4, CHUNK + 7), (2, 9)]
)
def test_row_argmax_is_the_first_position_of_the_maximum_as_torch_argmax(rows, width):
    torch.manual_seed(rows + width)
    scores = torch.randint(0, 5, (rows, width)).float()  # many ties: the first one must win
    scores[0] = float("-inf")
    scores[0, -1] = 0.0  # the best in the last, partial chunk (or the last column)
    scores[-1] = 2.0  # all equal: position 0
    assert torch.equal(row_argmax(scores), scores.argmax(1))
    plain = torch.randn(rows, width)
    assert torch.equal(row_argmax(plain), plain.argmax(1))


def test_row_argmax_reads_a_strided_slice():  # the fixed-vocabulary part of a copy model's scores
    torch.manual_seed(1)
    scores = torch.randn(6, 3 * CHUNK + 40)
    fixed = scores[:, : 3 * CHUNK + 5]
    assert torch.equal(row_argmax(fixed), fixed.argmax(1))


def test_off_the_cpu_the_functions_are_torchs_own_with_the_same_results(monkeypatch):
    """Where the chunks do not pay (any device but the CPU) each function falls back to PyTorch's
    own operation; run here on the CPU with the chunks switched off, both paths agree."""
    from onmt_lite.utils import topk

    torch.manual_seed(3)
    scores = torch.randn(12, 4 * CHUNK + 9).log_softmax(1)
    offsets = torch.randn(3, 4)
    offsets[1:, 2:] = float("-inf")
    rows = (offsets.view(-1) > float("-inf")).nonzero().view(-1)
    chunked = (
        top_k(scores, 5),
        row_argmax(scores),
        top_k_with_offsets(scores, offsets, 5),
        top_k_with_offsets(scores[rows], offsets, 5, rows),
    )
    assert topk.chunked(scores) and not topk.chunked(torch.empty(2, 2, device="meta"))
    monkeypatch.setattr(topk, "chunked", lambda scores: False)
    plain = (
        top_k(scores, 5),
        row_argmax(scores),
        top_k_with_offsets(scores, offsets, 5),
        top_k_with_offsets(scores[rows], offsets, 5, rows),
    )
    for a, b in zip(chunked, plain):
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            assert torch.equal(x, y)
