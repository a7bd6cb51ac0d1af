"""TranslationService on a random model: controls wait for the running search, failures stay with
their callers, idle models are let go. (Callers sharing a search get what they get alone:
tests/integration/test_server.py, with trained models.)"""

import concurrent.futures
import random
import threading

import pytest
import torch

from onmt_lite.models.builder import build_model
from onmt_lite.translate.feeder import RowFeeder
from onmt_lite.translate.search import SearchOptions
from onmt_lite.translate.service import TranslationService
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.errors import UserError
from tests.helpers import assert_same_translation
from tests.model_helpers import TRANSFORMER, VOCABS, model_options

WORDS = [f"s{i}" for i in range(12)] + ["oov1", "oov2"]


def sentences(n, seed, empty_every=0):
    rng = random.Random(seed)
    return [
        ""
        if empty_every and i % empty_every == 0
        else " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 7)))
        for i in range(n)
    ]


@pytest.fixture(scope="module", params=["rnn copy", "transformer"])
def load(request):
    torch.manual_seed(0)
    args = ["-copy_attn"] if request.param == "rnn copy" else TRANSFORMER
    model = build_model(model_options(*args), VOCABS).eval()
    loads = []

    def load(device):
        loads.append(device)
        return Translator(
            [model],
            VOCABS,
            search=SearchOptions(beam_size=3, n_best=2, max_length=9, min_length=1),
            batch_size=4,
        )

    load.calls = loads
    return load


def test_a_control_waits_for_the_running_search_and_a_request_after_unload_reloads(load):
    service = TranslationService(load)
    before = len(load.calls)
    running = service.translate(sentences(30, seed=1))
    unloaded = service.control("unload")
    unloaded.result(timeout=120)
    assert running.done() and len(running.result()) == 30  # finished before the unload
    assert not service.loaded
    again = service.translate(["s1 s2"]).result(timeout=60)
    assert service.loaded and len(load.calls) == before + 2 and again[0].hypotheses
    with pytest.raises(UserError, match="configured for the CPU"):
        service.control("to_gpu").result(timeout=60)
    service.control("to_cpu").result(timeout=60)  # already there: nothing reloaded
    assert len(load.calls) == before + 2
    service.close()


def test_a_too_long_sentence_fails_its_request_only(load):
    service = TranslationService(load, max_tokens=5)
    bad = service.translate(["s1 s2", "s1 s2 s3 s4 s5 s6"])
    good = service.translate(["s1 s2 s3 s4 s5"])
    with pytest.raises(
        UserError, match="sentence 2 has 6 tokens, more than this server's limit of 5"
    ):
        bad.result(timeout=60)
    assert len(good.result(timeout=60)) == 1
    service.close()


def test_a_failed_search_fails_its_requests_and_the_service_goes_on(load, monkeypatch):
    service = TranslationService(load)
    service.control("load").result()
    decode = TranslationService._decode
    calls = []

    def failing_once(self):
        calls.append(1)
        if len(calls) == 1:
            self._take_batch()  # accepted, then the search breaks
            raise RuntimeError("out of memory")
        return decode(self)

    monkeypatch.setattr(TranslationService, "_decode", failing_once)
    with pytest.raises(RuntimeError, match="out of memory"):
        service.translate(["s1 s2"]).result(timeout=60)
    assert service.translate(["s3 s4"]).result(timeout=60)[0].hypotheses
    service.close()


def test_an_idle_model_is_unloaded_after_its_timeout(load):
    service = TranslationService(load, idle_timeout=0.2, on_timeout="unload")
    service.translate(["s1"]).result(timeout=60)
    for _ in range(100):
        if not service.loaded:
            break
        threading.Event().wait(0.05)
    assert not service.loaded
    service.close()


def test_a_stopped_service_refuses_what_comes_after(load):
    service = TranslationService(load)
    queued = service.translate(["s1 s2"])
    service.close()
    assert len(queued.result(timeout=5)) == 1  # what was queued before the stop is done
    with pytest.raises(RuntimeError, match="stopped"):
        service.translate(["s1"])
    with pytest.raises(RuntimeError, match="stopped"):
        service.control("load")


def test_a_failed_control_is_logged_with_the_models_name_and_the_action():
    """The server's log names the model and what failed (it said ``_do('load',): ...``)."""
    import logging

    def load(device):
        raise UserError("-gpu 0: this machine has no CUDA device")

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("onmt_lite")
    level = logger.level
    logger.setLevel(logging.WARNING)
    logger.addHandler(handler)
    try:
        service = TranslationService(load, name="model 7")
        with pytest.raises(UserError, match="no CUDA device"):
            service.control("load").result(timeout=60)
        service.close()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert [r.getMessage() for r in records if r.levelno == logging.WARNING] == [
        "model 7: load failed: -gpu 0: this machine has no CUDA device"
    ]


def test_the_options_are_checked():
    with pytest.raises(UserError, match="on_timeout must be to_cpu or unload"):
        TranslationService(lambda device: None, on_timeout="delete")
    with pytest.raises(ValueError, match="unknown action 'delete'"):
        TranslationService(lambda device: None).control("delete")


def test_the_idle_action_runs_once_after_each_piece_of_work(load, monkeypatch):
    """A CPU model told to move to the CPU after 0 idle seconds does it once, not in a loop."""
    actions = []
    do = TranslationService._do
    monkeypatch.setattr(
        TranslationService, "_do", lambda self, action: actions.append(action) or do(self, action)
    )
    service = TranslationService(load, idle_timeout=0, on_timeout="to_cpu")
    service.translate(["s1"]).result(timeout=60)
    threading.Event().wait(0.3)
    assert actions.count("to_cpu") == 1
    service.translate(["s2"]).result(timeout=60)
    threading.Event().wait(0.3)
    assert actions.count("to_cpu") == 2 and service.loaded
    service.close()


@pytest.fixture(params=[False, True], ids=["eager", "fixed_shape"])
def long_search(request):
    """``(service, sentences)``: a random RNN model that writes up to 60 tokens a sentence, two
    sentences at a time, and 300 sentences: minutes of search unless something ends it. Also on
    ``-cuda_graphs``' fixed-shape step (run without a graph off CUDA), whose search joins whole
    beams into the rows of done examples (``BeamState`` slots)."""
    torch.manual_seed(0)
    model = build_model(model_options(), VOCABS).eval()
    search = SearchOptions(beam_size=3, max_length=60, min_length=60, attention=False)
    service = TranslationService(
        lambda device: Translator(
            [model], VOCABS, search=search, batch_size=2, cuda_graphs=request.param
        )
    )
    service.control("load").result(timeout=60)
    yield service, sentences(300, seed=5)
    service.close()


def test_a_request_given_up_leaves_the_search_and_the_model_serves_on(long_search, monkeypatch):
    """What a server's --request_timeout does: the sentences of the request leave the running
    search (the rest never join it), its Future fails, the next request is answered as alone."""
    service, many = long_search
    joined = []
    admit = RowFeeder.admit

    def counting_admit(self, src_lengths, slots=()):
        joining = admit(self, src_lengths, slots)
        if joining is not None:
            joined.append(len(joining.ids))
        return joining

    monkeypatch.setattr(RowFeeder, "admit", counting_admit)
    given_up = service.translate(many)
    while not joined:
        threading.Event().wait(0.01)
    service.cancel(given_up)
    with pytest.raises(concurrent.futures.CancelledError):
        given_up.result(timeout=60)
    after = service.translate(["s1 s2 s3"]).result(timeout=60)
    assert sum(joined) < len(many) // 2, sum(joined)  # the search ended long before its end
    alone = service.translator.translate(["s1 s2 s3"])[0]
    assert_same_translation(after[0], alone)


def test_a_close_out_of_time_ends_the_running_search_and_its_thread(long_search):
    service, many = long_search
    running = service.translate(many)
    while not running.running():
        threading.Event().wait(0.01)
    service.close(timeout=0.2)
    assert not service._thread.is_alive()  # no decoding thread outlives it (SIGTERM's exit)
    with pytest.raises(RuntimeError, match="the service has stopped"):
        running.result(timeout=1)
