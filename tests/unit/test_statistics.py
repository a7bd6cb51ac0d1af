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


def test_statistics_on_the_device_are_added_there_and_read_once_with_the_extra_values():
    """Shards' statistics stay tensors while they are summed (no read); the first read brings all
    three, and ``settle`` reads extra values (the gradient norm) in the same read."""
    from onmt_lite.utils.host_syncs import HostSyncCounter

    total = Statistics(1.5, 2, 1, n_src_words=3)
    with HostSyncCounter() as counter:
        for loss, words, correct in ((2.25, 5, 4), (0.5, 3, 0)):
            numbers = (torch.tensor(loss), torch.tensor(words), torch.tensor(correct))
            shard = Statistics.on_device(*numbers)
            total.update(shard)
    assert counter.syncs == 0
    with HostSyncCounter() as counter:
        (norm,) = total.settle(torch.tensor(7.0))
    assert counter.syncs == 1
    assert norm == 7.0
    assert (total.loss, total.n_words, total.n_correct, total.n_src_words) == (4.25, 10, 5, 3)
    assert isinstance(total.n_words, int) and isinstance(total.loss, float)
    assert total.settle() == []  # nothing left on the device


def test_reading_or_setting_a_count_settles_the_device_part_first():
    stats = Statistics.on_device(torch.tensor(3.0), torch.tensor(4), torch.tensor(2))
    assert stats == Statistics(3.0, 4, 2)
    pending = Statistics.on_device(torch.tensor(1.0), torch.tensor(1), torch.tensor(1))
    pending.n_words = 10  # the distributed sum sets the summed counts
    assert (pending.loss, pending.n_words, pending.n_correct) == (1.0, 10, 1)


def test_a_loss_given_as_a_number_is_taken_too():
    """A researcher's ``_compute_loss`` may pass ``_stats`` a Python number as the summed NLL."""
    stats = Statistics.on_device(2.5, torch.tensor(3), torch.tensor(1))
    assert (stats.loss, stats.n_words, stats.n_correct) == (2.5, 3, 1)
