"""Fixtures shared by the unit and integration tests."""
import pytest
import torch


@pytest.fixture
def two_threads():
    """PyTorch on 2 threads for the test (translation then decodes in two streams), as before after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def one_stream(monkeypatch):
    """Translation decodes in one stream, whatever the thread count."""
    from onmt_lite.translate import translator

    monkeypatch.setattr(translator, "decoding_streams",
                        lambda threads, device, sampling, batches, fork: ([threads], False))
