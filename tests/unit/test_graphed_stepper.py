"""``-cuda_graphs``'s fixed-shape search step (``translate/graphed.py``), checked on the CPU, where
it runs without a graph: the lines and scores of the eager search (a Transformer, RNNs with and
without precomputed keys and coverage), with examples joining and leaving and every buffer
outgrown; the same with the step recorded once per buffer size and replayed by a CUDA graph's
rules (``tests/graph_replay.EmulatedGraph``: a replay sees its recording's Python numbers and
tensors); no read of the device and no copy from the host inside a step (either would break a
CUDA graph's recording); the searches it refuses. A real recording needs CUDA:
``bench/gpu_check.py`` and ``bench/gpu_translate_speed.py`` run it on a device."""

import collections
import types

import pytest
import torch

from onmt_lite.models.builder import build_model
from onmt_lite.translate import graphed
from onmt_lite.translate.beam_state import BeamState
from onmt_lite.translate.fast_paths import cast_for_decoding
from onmt_lite.translate.loading import load_models
from onmt_lite.translate.search import SearchOptions
from onmt_lite.translate.service import TranslationService
from onmt_lite.translate.stepper import ModelStepper
from onmt_lite.translate.translator import Translator
from onmt_lite.utils import cpu_paths
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.host_syncs import HostSyncCounter
from tests.helpers import (
    assert_same_translation,
    invoke,
    lines,
    one_line_error,
    trained_reversal_model,
)
from tests.graph_replay import EmulatedGraph
from tests.model_helpers import TRANSFORMER as RANDOM_TRANSFORMER
from tests.model_helpers import VOCABS, model_options

TRANSFORMER = [
    *("-encoder_type", "transformer", "-decoder_type", "transformer", "-position_encoding"),
    *("-layers", 2, "-rnn_size", 32, "-word_vec_size", 32, "-heads", 2, "-transformer_ff", 64),
    *("-batch_size", 32, "-optim", "adam", "-learning_rate", 0.002, "-dropout", 0, "-seed", 1),
]


RNN = [
    *("-encoder_type", "brnn", "-layers", 2, "-rnn_size", 32, "-word_vec_size", 16),
    *("-batch_size", 32, "-optim", "adam", "-learning_rate", 0.01, "-dropout", 0, "-seed", 1),
]
KINDS = {
    "transformer": TRANSFORMER,
    # the average attention network: its cache holds the layers' inputs
    "transformer_average": [*TRANSFORMER, "-self_attn_type", "average", "-aan_useffn"],
    "rnn": [*RNN, "-global_attention", "general"],
    # precomputed keys and a coverage state
    "rnn_mlp_coverage": [*RNN, "-global_attention", "mlp", "-coverage_attn"],
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    corpus = {"n_train": 1000, "n_valid": 200}
    return {
        kind: trained_reversal_model(tmp_path_factory, f"graphed_{kind}", [], args, 200, **corpus)
        for kind, args in KINDS.items()
    }


@pytest.fixture
def transformer(models):
    return models["transformer"]


@pytest.fixture
def small_buffers(monkeypatch):
    """Buffers that every search outgrows (rows, sources, columns), and the steppers made."""
    monkeypatch.setattr(graphed, "FIRST_ROWS", 1)
    monkeypatch.setattr(graphed, "FIRST_SOURCES", 2)
    monkeypatch.setattr(graphed, "FIRST_COLUMNS", 2)
    made = []
    init = graphed.GraphedStepper.__init__

    def recorded_init(self, *args, **kwargs):
        kwargs["rows"] = None  # the search's most rows unsaid: the rows' buffers grow too
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(graphed.GraphedStepper, "__init__", recorded_init)
    return made


SEARCHES = [(5, 16, 2), (1, 64, 1), (3, 7, 3), (5, 200, 1)]  # beam, batch, n-best


# an RNN's state has no columns to drop: fewer searches
@pytest.mark.kernels  # scores compared to float rounding
@pytest.mark.parametrize(
    "kind,beam_size,batch_size,n_best",
    [("transformer", *search) for search in SEARCHES]
    + [("transformer_average", *SEARCHES[0])]
    + [(kind, *search) for kind in ("rnn", "rnn_mlp_coverage") for search in SEARCHES[1:3]],
)
def test_the_fixed_shape_step_writes_the_lines_and_scores_of_the_eager_search(
    models, small_buffers, kind, beam_size, batch_size, n_best
):
    path = models[kind]["model"]
    sources = lines(models[kind]["src"])
    options = dict(beam_size=beam_size, batch_size=batch_size, n_best=n_best, max_length=40)
    options["attention"] = False  # (the library's default keeps it)
    eager = Translator.load([path], **options).translate(sources)
    fixed = Translator.load([path], cuda_graphs=True, **options).translate(sources)
    assert small_buffers  # the search ran on a GraphedStepper
    stepper = small_buffers[-1]
    assert stepper.record is False  # the CPU: the step runs as the graph would record it
    rows, sources_held, columns = stepper.size
    assert rows > 1 and sources_held > 2  # the rows and sources outgrew their buffers
    # and the cache its columns
    assert columns > 2 if kind.startswith("transformer") else columns == 0
    assert sum(len(r.tokens[0]) for r in eager) > 3 * len(sources)  # whole outputs
    for a, b in zip(eager, fixed):
        assert_same_translation(a, b)


@pytest.fixture
def recordings(monkeypatch):
    """``GraphedStepper``s that record (as on CUDA), each recording an ``EmulatedGraph`` (CUDA's
    rules on the CPU: a replay sees the Python numbers and the tensors of its recording) after a
    warm-up run undone, as the real recording makes it. ``steppers``: those made; ``sizes``: the
    buffer sizes of each recording; ``graphs``: the recordings."""
    made = types.SimpleNamespace(steppers=[], sizes=[], graphs=[])
    init = graphed.GraphedStepper.__init__

    def recording_init(self, *args, **kwargs):
        kwargs["record"] = True
        init(self, *args, **kwargs)
        made.steppers.append(self)

    def emulated_record(self):
        self._warm_up()
        self.graph = EmulatedGraph()
        with self.graph.recording():
            self.out = self._decode()
        made.sizes.append(self.size)
        made.graphs.append(self.graph)

    monkeypatch.setattr(graphed.GraphedStepper, "__init__", recording_init)
    monkeypatch.setattr(graphed.GraphedStepper, "_record_graph", emulated_record)
    return made


@pytest.mark.kernels  # scores compared to float rounding
@pytest.mark.parametrize(
    "kind,beam_size,batch_size",
    [
        ("transformer", 5, 16),
        ("transformer", 1, 64),
        ("transformer_average", 5, 16),
        ("rnn", 5, 16),
        ("rnn_mlp_coverage", 3, 7),
    ],
)
def test_the_step_replayed_from_its_recording_writes_the_lines_and_scores_of_the_eager_search(
    models, small_buffers, recordings, kind, beam_size, batch_size
):
    """What the CPU's run of the step at each call hides: a replay sees the Python numbers of its
    recording and the tensors it read then, at their addresses. Recorded by ``EmulatedGraph``,
    which holds a CUDA graph's rules on the CPU, every step but the recordings' is a replay, and
    the lines and scores are still the eager search's (with the buffers outgrown: recorded anew)."""
    path = models[kind]["model"]
    sources = lines(models[kind]["src"])
    options = dict(beam_size=beam_size, batch_size=batch_size, max_length=40, attention=False)
    eager = Translator.load([path], **options).translate(sources)
    fixed = Translator.load([path], cuda_graphs=True, **options).translate(sources)
    replays = sum(graph.replays for graph in recordings.graphs)
    assert len(recordings.graphs) > 2  # recorded again as the buffers grew
    assert replays > 15 and replays > 4 * len(recordings.graphs)
    assert all(graph.operations for graph in recordings.graphs)
    for a, b in zip(eager, fixed):
        assert_same_translation(a, b)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_fixed_shape_step_reads_nothing_from_the_device_and_copies_nothing_from_the_host(
    models, monkeypatch, kind
):
    """What a CUDA graph cannot record: a wait for the device (a read of its values) or a copy
    of host data (``torch.tensor`` of a list) inside the step."""
    counters = []
    decode = graphed.GraphedStepper._decode

    def counted(self):
        with HostSyncCounter() as counter:
            out = decode(self)
        counters.append(counter)
        return out

    monkeypatch.setattr(graphed.GraphedStepper, "_decode", counted)
    translator = Translator.load(
        [models[kind]["model"]], beam_size=5, attention=False, cuda_graphs=True
    )
    translator.translate(lines(models[kind]["src"])[:50])
    assert len(counters) > 10
    for counter in counters:
        assert counter.syncs == 0, counter.sync_kinds
        assert counter.counts["lift_fresh"] == 0  # torch.tensor(host data)
        assert counter.operations > 20  # the step was counted


# kernels a step around the graphed step (the reversal Transformer, 200 lines, batch 16),
# 2026-11-29: beam 5 43.4, greedy 38.5 before a join took its batch's rows as views, wrote each
# buffer its rows fill with one operation and greedy search kept no finished scores; 39.7 and 30.0
# after
@pytest.mark.parametrize("beam,ceiling", [(5, 42), (1, 34)])
def test_around_the_graphed_step_the_search_launches_few_kernels(
    transformer, monkeypatch, beam, ceiling
):
    """What the host still launches one by one around the step with -cuda_graphs (the search's
    bookkeeping, the joins) stays under a ceiling, counted on the CPU as on a GPU."""
    counter = HostSyncCounter()
    steps = []

    def paused(method, step=False):
        def run(self, *args):
            if step:
                steps.append(self.n_rows)
            with counter.paused():
                return method(self, *args)

        return run

    options = dict(beam_size=beam, batch_size=16, attention=False, cuda_graphs=True)
    translator = Translator.load([transformer["model"]], **options)
    sources = lines(transformer["src"])
    with cpu_paths.as_on_a_gpu():
        translator.translate(sources[:16])  # the recordings' sizes
        decode = paused(graphed.GraphedStepper._decode, step=True)
        monkeypatch.setattr(graphed.GraphedStepper, "_decode", decode)
        # (the encoder's kernels, a batch's, are the same without graphs)
        monkeypatch.setattr(ModelStepper, "__init__", paused(ModelStepper.__init__))
        with counter:
            translator.translate(sources)
    assert len(steps) > 30
    assert counter.kernels <= ceiling * len(steps), counter.kernels / len(steps)


@pytest.mark.kernels  # half-precision rounding
@pytest.mark.parametrize("kind", ["transformer", "rnn"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_model_steps_in_its_own_precision_with_the_same_lines(models, kind, dtype):
    """The buffers take the model's dtype (``-precision``): the lines of the search without graphs,
    the scores to that precision's rounding (a Transformer's attention reads padded columns). On
    bench/host_cost.py's models 300 lines of 300 were identical, scores within 0.004 in float16 and
    0.03 in bfloat16; here 98 to 100 of 100, the scores of a line within 0.012."""
    path = models[kind]["model"]
    sources = lines(models[kind]["src"])[:100]
    loaded, vocabs, preprocess = load_models([path], torch.device("cpu"))
    half = [cast_for_decoding(model, dtype) for model in loaded]
    search = SearchOptions(beam_size=5, attention=False)
    results = [
        Translator(
            half, vocabs, preprocess=preprocess, search=search, cuda_graphs=graphs
        ).translate(sources)
        for graphs in (False, True)
    ]
    same = [(a.scores[0], b.scores[0]) for a, b in zip(*results) if a.hypotheses == b.hypotheses]
    assert len(same) >= 0.9 * len(sources)  # (a wrong dtype or state: next to none)
    assert all(abs(a - b) <= 0.02 * abs(a) + 0.01 for a, b in same)  # (a line: a few %)


def test_a_beam_search_of_sentence_batches_starts_with_all_its_rows(transformer, monkeypatch):
    """Each growth is recorded again (a wait and a garbage collection): a search that says how many
    rows it holds at most (batch x beam) gets them at once."""
    sizes = []
    fit = graphed.GraphedStepper._fit

    def recorded_fit(self, *args):
        fit(self, *args)
        sizes.append(self.size[0])

    monkeypatch.setattr(graphed.GraphedStepper, "_fit", recorded_fit)
    translator = Translator.load(
        [transformer["model"]], beam_size=3, batch_size=10, attention=False, cuda_graphs=True
    )
    translator.translate(lines(transformer["src"])[:40])
    assert sizes and set(sizes) == {30}


@pytest.mark.kernels  # translations compared
def test_examples_join_with_whole_beams_into_the_rows_of_done_ones_and_never_leave(
    transformer, monkeypatch
):
    """A fixed-shape step computes every row of its buffers, so rows cost it nothing: an example
    joins with all its beam's rows (no first step on one row, then a copy of every buffer to
    spread it), and one that is done stays, idle, until an example joining takes its rows: no
    example leaves (each leaving group copied every buffer), the rows held never pass the batch's,
    the columns no row uses are dropped only when the buffers are full, and every line and score
    is the one of the search without graphs."""
    calls = collections.Counter()
    steppers = []

    def counted(cls, name):
        method = getattr(cls, name)

        def run(self, *args, **kwargs):
            if name == "extend":  # True: into idle examples' rows
                calls[name, bool(args[1:] and args[1])] += 1
            elif name == "_shift_columns_left":  # True: the buffers are full
                calls[name, self.columns + 1 > self.size[2]] += 1
            else:
                calls[name, None] += 1
            if isinstance(self, graphed.GraphedStepper) and self not in steppers:
                steppers.append(self)
            return method(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, run)

    counted(BeamState, "keep")
    for name in ("extend", "release_columns", "_shift_columns_left"):
        counted(graphed.GraphedStepper, name)
    monkeypatch.setattr(graphed, "FIRST_COLUMNS", 8)  # full within a few steps
    options = dict(beam_size=5, batch_size=32, n_best=2, max_length=40, attention=False)
    sources = lines(transformer["src"])
    eager = Translator.load([transformer["model"]], **options).translate(sources)
    assert calls["keep", None] > 10  # without graphs done examples leave
    calls.clear()
    fixed = Translator.load([transformer["model"]], cuda_graphs=True, **options).translate(sources)
    assert steppers  # (one per decoding stream: one per thread)
    assert calls["keep", None] == 0
    assert calls["extend", True] > 5
    assert all(s.size[0] == 160 and s.n_rows <= 160 for s in steppers)  # 32 examples x 5
    assert calls["_shift_columns_left", True] > 0 and calls["_shift_columns_left", False] == 0, (
        calls
    )
    assert calls["release_columns", None] > calls["_shift_columns_left", True]
    for a, b in zip(eager, fixed):
        assert_same_translation(a, b)


def test_searches_that_need_what_a_graph_leaves_out_are_refused_by_name(transformer):
    path = transformer["model"]
    with pytest.raises(UserError, match="-cuda_graphs is not for a search with an ensemble"):
        Translator.load([path, path], cuda_graphs=True, attention=False)
    with pytest.raises(UserError, match="the attention kept"):
        Translator.load([path], cuda_graphs=True, replace_unk=True, attention=True)
    other = types.SimpleNamespace(decoder=torch.nn.LSTM(2, 2))
    assert "a decoder other than" in graphed.graphing_problem([other], False)


def test_the_command_refuses_cuda_graphs_without_a_gpu(transformer, tmp_path, capsys):
    src = tmp_path / "src.txt"
    src.write_text("a b c\n")
    out = tmp_path / "out.txt"
    args = ["-model", transformer["model"], "-src", src, "-output", out, "-cuda_graphs"]
    error = one_line_error(invoke("translate", args, capsys))
    assert "-cuda_graphs needs -gpu" in error
    assert not out.exists()


def test_the_server_searches_on_the_graphed_stepper_and_answers_as_alone(small_buffers):
    """Requests that share a running search (joining it, leaving it) on a random Transformer: the
    n-best of each sentence as the search without graphs gives it alone."""
    torch.manual_seed(0)
    model = build_model(model_options(*RANDOM_TRANSFORMER), VOCABS).eval()
    search = SearchOptions(beam_size=5, n_best=3, max_length=15, min_length=4, attention=False)
    words = [f"s{i}" for i in range(12)]
    requests = [
        [" ".join(words[(i * j) % 12 : (i * j) % 12 + j]) for j in range(1, 8)] for i in (1, 5)
    ]
    service = TranslationService(
        lambda device: Translator([model], VOCABS, search=search, batch_size=4, cuda_graphs=True)
    )
    try:
        answers = [service.translate(request) for request in requests]
        results = [answer.result(timeout=120) for answer in answers]
    finally:
        service.close()
    assert small_buffers  # the service's search ran on a GraphedStepper
    alone = Translator([model], VOCABS, search=search, batch_size=4)
    for request, result in zip(requests, results):
        for sentence, answer in zip(request, result):
            assert_same_translation(answer, alone.translate([sentence])[0])


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_the_servers_searches_one_after_another_keep_one_stepper_and_its_recordings(
    recordings, kind
):
    """A server runs a search for each burst of requests: the later bursts, no larger than the
    first, run on the first's stepper and record nothing, and each sentence's n-best is what the
    search without graphs gives it alone."""
    torch.manual_seed(0)
    options = RANDOM_TRANSFORMER if kind == "transformer" else []
    model = build_model(model_options(*options), VOCABS).eval()
    search = SearchOptions(beam_size=3, n_best=2, max_length=15, min_length=4, attention=False)
    words = [f"s{i}" for i in range(12)]
    requests = [[" ".join(words[i : i + 3 + (i * j) % 7]) for i in range(6)] for j in (1, 2, 3)]
    requests[1] = requests[1][:2]  # fewer rows and shorter sources than the first
    service = TranslationService(
        lambda device: Translator([model], VOCABS, search=search, batch_size=4, cuda_graphs=True)
    )
    first_recordings = None
    results = []
    try:
        for request in requests:  # each answered before the next comes: a search each
            results.append(service.translate(request).result(timeout=120))
            first_recordings = first_recordings or list(recordings.sizes)
    finally:
        service.close()
    assert len(recordings.steppers) == 1  # one stepper for the three searches
    assert first_recordings and recordings.sizes == first_recordings  # in the first alone
    assert sum(graph.replays for graph in recordings.graphs) > 30  # the later two replayed
    alone = Translator([model], VOCABS, search=search, batch_size=4)
    for request, result in zip(requests, results):
        for sentence, answer in zip(request, result):
            assert_same_translation(answer, alone.translate([sentence])[0])


def test_a_search_after_one_that_failed_midway_starts_on_buffers_as_a_new_steppers(
    recordings, monkeypatch
):
    """The first request's search fails when its first sentence finishes (rows, columns and a
    beam's reorder still pending); the next request's search restarts the stepper as new (no
    rows, columns or reorder of the failed one; filler rows as a new stepper's) and answers each
    sentence as the search without graphs does alone."""
    made = recordings.steppers
    torch.manual_seed(0)
    model = build_model(model_options(*RANDOM_TRANSFORMER), VOCABS).eval()
    search = SearchOptions(beam_size=3, n_best=2, max_length=15, min_length=4, attention=False)
    words = [f"s{i}" for i in range(12)]
    requests = [[" ".join(words[i : i + 2 + i % 5]) for i in range(n)] for n in (6, 3)]
    translator = Translator([model], VOCABS, search=search, batch_size=4, cuda_graphs=True)
    record = translator.record

    def failing_record(*args):
        monkeypatch.setattr(translator, "record", record)  # the first call alone fails
        (stepper,) = made
        stepper.reorder(torch.arange(stepper.n_rows).flip(0))  # as a beam's step leaves it
        raise RuntimeError("a failure in the middle of a search")

    monkeypatch.setattr(translator, "record", failing_record)
    restarted = []
    restart = graphed.GraphedStepper.restart

    def recorded_restart(self, first):
        filler = slice(self.n_rows, None)
        assert self.columns > 0 and not torch.equal(self.order, self.identity)  # left midway
        assert set(self.lengths[filler].tolist()) != {1}  # rows that left: filler now
        restart(self, first)
        filler = slice(self.n_rows, None)
        restarted.append(
            (self.columns, int(self.cached), self.order.tolist(), self.identity.tolist())
            + (self.lengths[filler].tolist(), [float(b[filler].abs().sum()) for b in self.state])
        )
        return self

    monkeypatch.setattr(graphed.GraphedStepper, "restart", recorded_restart)
    service = TranslationService(lambda device: translator)
    try:
        with pytest.raises(RuntimeError, match="in the middle of a search"):
            service.translate(requests[0]).result(timeout=120)
        answer = service.translate(requests[1]).result(timeout=120)
    finally:
        service.close()
    assert len(made) == 1 and len(restarted) == 1
    columns, cached, order, identity, filler_lengths, filler_sums = restarted[0]
    assert (columns, cached, order) == (0, 0, identity)
    assert set(filler_lengths) == {1} and set(filler_sums) == {0.0}
    alone = Translator([model], VOCABS, search=search, batch_size=4)
    for sentence, result in zip(requests[1], answer):
        assert_same_translation(result, alone.translate([sentence])[0])
