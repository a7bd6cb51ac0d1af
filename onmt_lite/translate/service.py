"""TranslationService: one model serving many callers at once (what ``onmt_lite_server`` runs per
model).

Every caller's sentences join one running search (the continuous batching of ``feeder.RowFeeder``):
a caller that arrives while others' sentences are decoding does not wait for them to finish, its
sentences take rows as they free up. What a caller gets back is what ``Translator.translate`` of
its sentences alone gives, because an example's output does not depend on what it is decoded with
(the batch-invariance tests), with two exceptions named in the server's documentation: int8 models
(activations quantised over all rows of a product) and random sampling (draws in arrival order).

One thread decodes; callers hand it work through a queue and wait on a
``concurrent.futures.Future``. Loading, unloading and moving the model between devices go through
the same queue, so they happen between searches, never under one.
"""

import collections
import concurrent.futures
import gc
import queue
import threading

import torch

from onmt_lite.data.vocab import BOS_ID, EOS_ID
from onmt_lite.translate.feeder import RowFeeder
from onmt_lite.translate.inputs import TextBatches
from onmt_lite.translate.search import Search
from onmt_lite.translate.result import Result
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.logging import logger

ACTIONS = ("load", "unload", "to_cpu", "to_gpu")


class _Job:
    """One caller's sentences: their Results, filled as examples finish, and the caller's future."""

    def __init__(self, sources, future):
        self.sources = sources
        self.future = future
        self.results = None
        self.remaining = 0


class _Control:
    def __init__(self, action, future):
        self.action = action
        self.future = future


_STOP = object()


class _ArrivalFeeder(RowFeeder):
    """A RowFeeder whose next batch is the next one of sentences that have arrived, taken without
    waiting: the search goes on with what it has when nothing new is there. The sentences of
    callers who gave up (``TranslationService.cancel``) leave the search at its next step."""

    def __init__(self, service, translator):
        super().__init__(
            [],
            translator.make_stepper,
            translator.search_options.beam_width,
            translator.batch_size,
            translator.batch_type,
            translator.device,
            running=translator.running_stepper,
        )
        self.service = service

    def _next_batch(self):
        batch = self.service._take_batch()
        return None if batch is None else [self.make_stepper(batch.to(self.device)), batch, 0]

    def dropped(self, ids: list[int]) -> set | None:
        """See ``Search.stream``: the ids of the examples whose callers gave up (all of them when
        the service is abandoned); None when none did."""
        if self.service._abandoned:
            self.waiting = None
            return set(ids)
        lines = self.service._drop_given_up()
        if not lines:
            return None
        if self.waiting is not None and int(self.waiting[1].indices_cpu[0]) in lines:
            self.waiting = None  # the rest of a batch of a job given up does not join
        return {i for i, (line, _) in self.examples.items() if line in lines}


class TranslationService:
    """A model that callers in any thread share: ``translate(sources)`` returns a Future of their
    Results (a list, one per source, as ``Translator.translate``).

    Args:
        load: ``load(device)`` returns a Translator on ``device`` ("cpu", a CUDA device, or None for
            the configured one).
        gpu: the configured CUDA device index, or -1 for the CPU (what ``to_gpu`` moves to).
        max_tokens: a sentence with more source tokens than this fails its caller's request
            (UserError) before anything is decoded.
        idle_timeout: seconds without work after which ``on_timeout`` ("to_cpu" or "unload") is
            done to a loaded model; -1: never.
        name: the decoding thread's name.
    """

    def __init__(
        self,
        load,
        gpu=-1,
        max_tokens=1000,
        idle_timeout=-1,
        on_timeout="to_cpu",
        name="translation",
    ):
        if on_timeout not in ("to_cpu", "unload"):
            raise UserError(f"on_timeout must be to_cpu or unload (got {on_timeout!r})")
        self._load = load
        self.gpu = gpu
        self.max_tokens = max_tokens
        self.idle_timeout = idle_timeout
        self.on_timeout = on_timeout
        self.name = name
        self.translator = None
        self._idled = False
        self._inbox = queue.Queue()  # jobs and controls, in arrival order
        self._ready = collections.deque()  # batches of accepted sentences not yet in the search
        self._lines = {}  # example index -> (job, line)
        self._next_index = 0
        self._held = None  # a control (or stop) that came during a search: done after it
        self._given_up = queue.SimpleQueue()  # futures of jobs whose callers gave up (cancel)
        self._closed = False
        self._abandoned = False  # close() ran out of time: searches end now, jobs fail
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ---- the callers' side ------------------------------------------------------------------

    def translate(self, sources: list[str]) -> concurrent.futures.Future:
        """A Future of the Results of ``sources`` (translated together with whatever else is
        running)."""
        if isinstance(sources, str) or not all(isinstance(s, str) for s in sources):
            raise TypeError("translate: sources must be a list of strings")
        return self._put(_Job(list(sources), concurrent.futures.Future()))

    def control(self, action: str) -> concurrent.futures.Future:
        """A Future of doing ``action`` (one of ``ACTIONS``) between searches; its result is
        None."""
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}")
        return self._put(_Control(action, concurrent.futures.Future()))

    def cancel(self, future: concurrent.futures.Future) -> None:
        """Give up a ``translate`` Future: its sentences leave the search at its next step (or
        are never decoded), and the Future fails with ``concurrent.futures.CancelledError``."""
        if not future.cancel():  # already running: the decoding thread drops it
            self._given_up.put(future)

    def _put(self, item):
        if self._closed:
            raise RuntimeError("the service has stopped")
        self._inbox.put(item)
        return item.future

    @property
    def loaded(self) -> bool:
        return self.translator is not None

    def close(self, timeout=None):
        """Finish the work already queued, then stop the decoding thread; after ``timeout``
        seconds, the searches still running end at their next step and their requests fail."""
        self._closed = True
        self._inbox.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self._abandoned = True
            self._thread.join()  # a step and an encoding at most: no thread outlives the service

    # ---- the decoding thread ----------------------------------------------------------------

    def _run(self):
        while True:
            if self._abandoned:
                self._fail_all(RuntimeError("the service has stopped"))
                self._stop()
                return
            item = self._held
            self._held = None
            if item is None:
                try:  # idle: wait for work, the timeout once after each piece of work
                    timed = self.loaded and self.idle_timeout >= 0 and not self._idled
                    item = self._inbox.get(timeout=self.idle_timeout if timed else None)
                except queue.Empty:
                    self._idled = True
                    # errors: logged
                    self._settle(concurrent.futures.Future(), self.on_timeout)
                    continue
            self._idled = False
            if item is _STOP:
                self._stop()
                return
            if isinstance(item, _Control):
                self._settle(item.future, item.action)
                continue
            try:
                self._do("load")
            except Exception as err:
                if item.future.set_running_or_notify_cancel():
                    item.future.set_exception(err)
                continue
            self._accept(item)
            try:
                self._decode()
            except Exception as err:  # a failed search fails the requests in it, not the service
                self._fail_all(err)

    def _stop(self):
        """Refuse what came after the stop, and let the model go."""
        self.translator = None
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP and item.future.set_running_or_notify_cancel():
                item.future.set_exception(RuntimeError("the service has stopped"))

    def _drop_given_up(self) -> set:
        """The line indices of the jobs whose callers gave up since the last call, taken out of
        the service (their batches not yet in the search too); their Futures fail."""
        futures = set()
        while not self._given_up.empty():
            futures.add(self._given_up.get())
        if not futures:
            return set()
        dropped = {index for index, (job, _) in self._lines.items() if job.future in futures}
        for index in dropped:
            del self._lines[index]
        kept = [batch for batch in self._ready if int(batch.indices_cpu[0]) not in dropped]
        self._ready = collections.deque(kept)
        for future in futures:
            if not future.done():
                future.set_exception(concurrent.futures.CancelledError())
        if dropped:
            logger.info(f"{len(dropped)} sentence(s) of a request given up left the search")
        return dropped

    def _settle(self, future, action):
        """``future``'s result is ``self._do(action)``, or its error (logged, too, with the
        service's name: ``model 100: load failed: ...``)."""
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(self._do(action))
        except Exception as err:
            logger.warning(f"{self.name}: {action} failed: {err}")
            future.set_exception(err)

    def _do(self, action):
        if action == "load":
            if self.translator is None:
                self.translator = self._load(None)
        elif action == "unload":
            self.translator = None
            self._release()
        elif action in ("to_cpu", "to_gpu"):
            if action == "to_gpu" and self.gpu < 0:
                raise UserError("this model is configured for the CPU (its opt has no gpu)")
            device = "cpu" if action == "to_cpu" else torch.device("cuda", self.gpu)
            if self.translator is not None and self.translator.device == torch.device(device):
                return
            self.translator = None  # the old copy goes before the new one comes
            self._release()
            self.translator = self._load(device)

    def _release(self):
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _accept(self, job):
        """Tokenise a job's sentences and queue their batches (a job with a too long sentence
        fails)."""
        if not job.future.set_running_or_notify_cancel():
            return  # its caller gave up while it waited
        translator = self.translator
        try:
            inputs = TextBatches(
                job.sources,
                None,
                translator.vocabs,
                translator.tokenizers,
                translator.copy,
                first_index=self._next_index,
            )
            for line, tokens in enumerate(inputs.src_tokens):
                if len(tokens) > self.max_tokens:
                    raise UserError(
                        f"sentence {line + 1} has {len(tokens)} tokens, more than this server's "
                        f"limit of {self.max_tokens} (--max_sentence_tokens)"
                    )
        except Exception as err:
            job.future.set_exception(err)
            return
        first = self._next_index
        self._next_index = self._next_index + inputs.n_lines
        job.results = [Result(tokens) for tokens in inputs.src_tokens]
        for result in job.results:
            if not result.source:  # an empty line: not decoded, as by the Translator
                result.fill_empty(translator.search_options.n_best)
        job.remaining = len(inputs.lines)
        self._lines.update((first + line, (job, line)) for line in inputs.lines)
        self._ready.extend(inputs.batches(translator.batch_size, translator.batch_type))
        if job.remaining == 0:
            job.future.set_result(job.results)

    def _take_batch(self):
        """The next batch of arrived sentences (the inbox read without waiting), or None."""
        if self._abandoned:
            return None
        while self._held is None and not self._ready:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Job):
                self._accept(item)
            else:
                self._held = item  # a control or a stop: after this search, before later jobs
        return self._ready.popleft() if self._ready else None

    def _decode(self):
        """One search over the accepted sentences and those arriving while it runs."""
        translator = self.translator
        feeder = _ArrivalFeeder(self, translator)
        with torch.no_grad():
            for example, nbest in Search(translator.search_options, BOS_ID, EOS_ID).stream(feeder):
                index, ex_words = feeder.examples.pop(example)
                if index not in self._lines or self._abandoned:
                    continue  # dropped: its caller gave up, or the service stops
                job, line = self._lines.pop(index)
                translator.record(job.results[line], nbest, ex_words)
                job.remaining -= 1
                if job.remaining == 0:
                    job.future.set_result(job.results)

    def _fail_all(self, err):
        """Fail every request whose sentences were accepted and not finished."""
        jobs = {id(job): job for job, _ in self._lines.values()}
        self._lines.clear()
        self._ready.clear()
        for job in jobs.values():
            if not job.future.done():
                job.future.set_exception(err)
