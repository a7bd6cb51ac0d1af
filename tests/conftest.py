"""Fixtures shared by the unit and integration tests."""

import logging
import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    # make test runs a worker per core: each on one thread, and so the commands it starts, because
    # two workers of two threads each on 2 cores spin against each other (the suite took 2.4x as
    # long). ONMT_LITE_TEST_THREADS=2 runs them on 2 threads all the same: the models trained and
    # the translations compared must hold on any thread count (other threads, other float rounding)
    os.environ["OMP_NUM_THREADS"] = os.environ.get("ONMT_LITE_TEST_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


# make test-fast (pytest -m "not slow"): the unit contract in 1.5 minutes on 2 cores. Slow: every
# end-to-end test (tests/integration: real commands, trained models) and the unit modules that train
# models for many steps, compile, or start several processes; make test and CI run everything.
SLOW_UNIT_MODULES = {
    "test_compiled.py",
    "test_distributed.py",
    "test_gpu_decoding.py",
    "test_graphed_stepper.py",
    "test_memory.py",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.parent.name == "integration" or item.path.name in SLOW_UNIT_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def two_threads():
    """PyTorch on 2 threads for the test (translation then decodes in two streams), as before
    after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def one_stream(monkeypatch):
    """Translation decodes in one stream, whatever the thread count."""
    from onmt_lite.translate import translator

    monkeypatch.setattr(
        translator,
        "decoding_streams",
        lambda threads, device, sampling, batches, fork: ([threads], False),
    )


@pytest.fixture
def logged():
    """The messages the ``onmt_lite`` logger emits during the test (it does not propagate to
    pytest's caplog once a command has set it up)."""
    from onmt_lite.utils.logging import logger

    messages = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: messages.append(record.getMessage())
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield messages
    logger.removeHandler(handler)
    logger.setLevel(old_level)
