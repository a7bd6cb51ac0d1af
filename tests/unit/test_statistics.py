"""Statistics: cross-entropy, perplexity and accuracy from summed counts."""
import math

import pytest
import torch

from onmt_lite.loss.statistics import Statistics


def test_xent_ppl_and_accuracy_from_the_counts():
    stats = Statistics(loss=6.0, n_words=4, n_correct=3)
    assert stats.xent() == pytest.approx(1.5)
    assert stats.ppl() == pytest.approx(math.exp(1.5))  # 4.4817
    assert stats.accuracy() == pytest.approx(75.0)


def test_update_sums_the_three_counts_and_returns_itself():
    total = Statistics(2.0, 1, 1)
    assert total.update(Statistics(10.0, 4, 2)) is total
    assert (total.loss, total.n_words, total.n_correct) == (12.0, 5, 3)
    # word-weighted, not the mean of the two cross-entropies ((2 + 2.5) / 2 = 2.25)
    assert total.xent() == pytest.approx(2.4)
    assert total.ppl() == pytest.approx(math.exp(2.4))
    assert total.accuracy() == pytest.approx(60.0)


def test_updating_an_empty_statistics_gives_the_other_one():
    total = Statistics()
    for part in (Statistics(1.5, 2, 1), Statistics(0.25, 1, 0), Statistics(3.0, 3, 3)):
        total.update(part)
    assert total == Statistics(4.75, 6, 4)
    assert total != Statistics(4.75, 6, 3)


def test_ppl_is_capped_at_exp_100():
    assert Statistics(loss=1e6, n_words=10).ppl() == math.exp(100)
    assert Statistics(loss=1e308, n_words=1).ppl() == math.exp(100)
    assert Statistics(loss=99.0 * 3, n_words=3).ppl() == pytest.approx(math.exp(99))


def test_no_words_gives_zero_xent_and_accuracy_without_dividing_by_zero():
    stats = Statistics()
    assert stats.xent() == 0.0
    assert stats.ppl() == 1.0
    assert stats.accuracy() == 0.0


def test_tensor_counts_are_stored_as_plain_numbers():
    stats = Statistics(torch.tensor(2.5, dtype=torch.float64), torch.tensor(5), torch.tensor(2))
    assert type(stats.loss) is float and type(stats.n_words) is int and type(stats.n_correct) is int
    assert stats.xent() == pytest.approx(0.5)
