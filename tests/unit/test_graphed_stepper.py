"""``-cuda_graphs``'s fixed-shape search step (``translate/graphed.py``), checked on the CPU, where
it runs without a graph: the lines and scores of the eager search, with examples joining and
leaving and every buffer outgrown; no read of the device and no copy from the host inside a step
(either would break a CUDA graph's recording); the searches it refuses. The recording itself needs
CUDA: ``bench/gpu_check.py`` and ``bench/gpu_translate_speed.py`` run it on a device."""

import types

import pytest
import torch

from onmt_lite.translate import graphed
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.host_syncs import HostSyncCounter
from tests.helpers import (
    assert_same_translation,
    invoke,
    lines,
    one_line_error,
    trained_reversal_model,
)

TRANSFORMER = [
    *("-encoder_type", "transformer", "-decoder_type", "transformer", "-position_encoding"),
    *("-layers", 2, "-rnn_size", 32, "-word_vec_size", 32, "-heads", 2, "-transformer_ff", 64),
    *("-batch_size", 32, "-optim", "adam", "-learning_rate", 0.002, "-dropout", 0, "-seed", 1),
]


@pytest.fixture(scope="module")
def transformer(tmp_path_factory):
    return trained_reversal_model(
        tmp_path_factory, "graphed", [], TRANSFORMER, 200, n_train=1000, n_valid=200
    )


@pytest.fixture
def small_buffers(monkeypatch):
    """Buffers that every search outgrows (rows, sources, columns), and the steppers made."""
    monkeypatch.setattr(graphed, "FIRST_ROWS", 1)
    monkeypatch.setattr(graphed, "FIRST_SOURCES", 2)
    monkeypatch.setattr(graphed, "FIRST_COLUMNS", 2)
    made = []
    init = graphed.GraphedStepper.__init__

    def recorded_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(graphed.GraphedStepper, "__init__", recorded_init)
    return made


@pytest.mark.kernels  # scores compared to float rounding
@pytest.mark.parametrize(
    "beam_size,batch_size,n_best", [(5, 16, 2), (1, 64, 1), (3, 7, 3), (5, 200, 1)]
)
def test_the_fixed_shape_step_writes_the_lines_and_scores_of_the_eager_search(
    transformer, small_buffers, beam_size, batch_size, n_best
):
    sources = lines(transformer["src"])
    options = dict(beam_size=beam_size, batch_size=batch_size, n_best=n_best, max_length=40)
    options["attention"] = False  # (the library's default keeps it)
    eager = Translator.load([transformer["model"]], **options).translate(sources)
    fixed = Translator.load([transformer["model"]], cuda_graphs=True, **options).translate(sources)
    assert small_buffers  # the search ran on a GraphedStepper
    stepper = small_buffers[-1]
    assert stepper.record is False  # the CPU: the step runs as the graph would record it
    assert stepper.keys.size(1) > 1 and stepper.keys.size(3) > 2  # rows and sources outgrew theirs
    assert stepper.cache[0].size(2) > 2  # and the columns
    assert sum(len(r.tokens[0]) for r in eager) > 3 * len(sources)  # whole outputs
    for a, b in zip(eager, fixed):
        assert_same_translation(a, b)


def test_a_fixed_shape_step_reads_nothing_from_the_device_and_copies_nothing_from_the_host(
    transformer, monkeypatch
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
        [transformer["model"]], beam_size=5, attention=False, cuda_graphs=True
    )
    translator.translate(lines(transformer["src"])[:50])
    assert len(counters) > 10
    for counter in counters:
        assert counter.syncs == 0, counter.sync_kinds
        assert counter.counts["lift_fresh"] == 0  # torch.tensor(host data)
        assert counter.operations > 20  # the step was counted


def test_searches_that_need_what_a_graph_leaves_out_are_refused_by_name(transformer):
    path = transformer["model"]
    with pytest.raises(UserError, match="-cuda_graphs: a search with an ensemble"):
        Translator.load([path, path], cuda_graphs=True, attention=False)
    with pytest.raises(UserError, match="the attention kept"):
        Translator.load([path], cuda_graphs=True, replace_unk=True, attention=True)
    rnn = types.SimpleNamespace(decoder=torch.nn.LSTM(2, 2))
    assert graphed.graphing_problem([rnn], False) == "a decoder that is not a Transformer's"


def test_the_command_refuses_cuda_graphs_without_a_gpu(transformer, tmp_path, capsys):
    src = tmp_path / "src.txt"
    src.write_text("a b c\n")
    out = tmp_path / "out.txt"
    args = ["-model", transformer["model"], "-src", src, "-output", out, "-cuda_graphs"]
    error = one_line_error(invoke("translate", args, capsys))
    assert "-cuda_graphs needs -gpu" in error
    assert not out.exists()
