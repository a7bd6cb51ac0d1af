"""-cuda_graphs in training (``train/graphed.py``): the padded, replayed decoder calls give the
eager losses and weights, add their gradients without handing graph-owned memory over as
``.grad``, put the generator back after a recording (exact resume with dropout), and read nothing
from the device; the models a graph cannot take are refused by name. Off CUDA the same calls run
without graphs, and, recorded by ``tests/graph_replay.EmulatedGraph``, replay their recordings by a
CUDA graph's rules (what these tests check); bench/gpu_check.py has the CUDA line."""

import pytest
import torch

from onmt_lite.train import graphed
from onmt_lite.train.graphed import GraphedModel, bucket, graphing_problem
from onmt_lite.train.precision import Precision
from onmt_lite.utils.host_syncs import HostSyncCounter
from tests.graph_replay import EmulatedGraph
from tests.helpers import TINY_MODEL, invoke, one_line_error, preprocess_in_process
from tests.model_helpers import TRANSFORMER, make_batch, model_options, random_pairs
from tests.unit.test_trainer import make_trainer, params

MODELS = {
    "rnn": [],
    "rnn_mlp": ["-global_attention", "mlp"],
    "rnn_context_gate": ["-context_gate", "both"],
    "transformer": TRANSFORMER,
    "transformer_relative": [*TRANSFORMER, "-max_relative_positions", 4],
    "transformer_average": [*TRANSFORMER, "-self_attn_type", "average", "-aan_useffn"],
    # an encoder whose final state starts an RNN decoder: it runs as it is
    "transformer_to_rnn": [
        *TRANSFORMER[:2],
        *TRANSFORMER[4:],
        "-word_vec_size",
        8,
        "-rnn_size",
        8,
    ],
}


def graphed_trainer(*args, **kwargs):
    trainer, model = make_trainer(*args, **kwargs)
    trainer.graphed = GraphedModel(model)
    return trainer, model


def test_buckets_are_few_shapes_with_at_most_half_padding():
    sizes = [bucket(n) for n in range(1, 1000)]
    assert sorted(set(sizes)) == [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]
    assert all(n <= size < max(8, 1.5 * n) + 1 for n, size in zip(range(1, 1000), sizes))


def emulate_graphs(monkeypatch) -> list:
    """Make every ``RecordedCall`` record its passes as ``EmulatedGraph``s (CUDA's rules on the
    CPU: a replay sees the Python numbers and tensors of its recording) after the warm-ups a
    recording makes, and replay them; returns the graphs made."""
    graphs = []

    def emulated_record(self):
        self._warm_up()
        forward = EmulatedGraph()
        backward = EmulatedGraph()
        self._capture(forward.recording(), backward.recording())
        self.graphs = (forward, backward)
        graphs.extend(self.graphs)

    monkeypatch.setattr(graphed.RecordedCall, "_emulate_recording", emulated_record)
    return graphs


@pytest.mark.parametrize("recording", ["run", "emulated"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_padded_replayed_calls_give_the_eager_losses_and_weights(kind, recording, monkeypatch):
    """``recording`` "run": each call runs again (the off-CUDA path); "emulated": each replays its
    bucket's recording by CUDA's rules (``EmulatedGraph``), so that a Python number or a tensor
    of the recording's batch that a replay would still see shows."""
    graphs = emulate_graphs(monkeypatch) if recording == "emulated" else []
    steps = [
        [make_batch(random_pairs(5, seed=1)), make_batch(random_pairs(3, seed=2))],
        [make_batch(random_pairs(13, seed=3, max_len=20))],
        [make_batch(random_pairs(4, seed=4))],
        [make_batch(random_pairs(6, seed=5)), make_batch(random_pairs(2, seed=6))],
    ]
    eager, eager_model = make_trainer(*MODELS[kind], optim="adam", learning_rate=0.01)
    replayed, replayed_model = graphed_trainer(*MODELS[kind], optim="adam", learning_rate=0.01)
    for batches in steps:
        expected = eager.train_step(batches)
        got = replayed.train_step(batches)
        assert got.loss == pytest.approx(expected.loss, rel=1e-9)
        assert (got.n_words, got.n_correct) == (expected.n_words, expected.n_correct)
    assert len(replayed.graphed.recorded) >= 2  # the 13 rows and 20 positions: another bucket
    if recording == "emulated":  # each bucket's pair recorded once, replayed for other batches
        assert len(graphs) == 2 * len(replayed.graphed.recorded)
        assert sum(graph.replays for graph in graphs) > len(graphs)
    assert replayed.graphed.graphs_encoder == (kind.startswith("transformer") and "rnn" not in kind)
    before = params(make_trainer(*MODELS[kind])[1])
    after = params(replayed_model)
    for name, value in params(eager_model).items():
        torch.testing.assert_close(after[name], value, rtol=1e-9, atol=1e-12, msg=name)
        assert not torch.equal(value, before[name]), name  # every weight trained


@pytest.mark.parametrize("buckets", [1, 2])
def test_two_replays_in_a_step_add_both_gradients(buckets):
    """Two batches of one bucket, or of two (whose gradients go to the same buffers): the second
    replay overwrites the first's gradients, so they must have been added to ``.grad``, not
    handed over as it."""
    second = (
        random_pairs(4, seed=6)
        if buckets == 1
        else random_pairs(20, seed=6, min_len=10, max_len=20)
    )
    batches = [make_batch(random_pairs(4, seed=5)), make_batch(second)]
    eager, eager_model = make_trainer()
    replayed, replayed_model = graphed_trainer()
    eager.train_step(batches)
    replayed.train_step(batches)
    assert len(replayed.graphed.recorded) == buckets
    after = params(replayed_model)
    for name, value in params(eager_model).items():
        torch.testing.assert_close(after[name], value, rtol=1e-9, atol=1e-12, msg=name)


@pytest.mark.parametrize("recording", ["run", "emulated"])
@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_with_dropout_a_run_that_records_again_draws_what_the_uninterrupted_one_drew(
    kind, recording, monkeypatch
):
    """A resumed run records its buckets anew, warm-up included: the generator is put back after
    each recording, so the losses are the uninterrupted run's (``recording``: as in the test
    above)."""
    if recording == "emulated":
        emulate_graphs(monkeypatch)
    args = [*MODELS[kind], "-dropout", 0.3]
    steps = [[make_batch(random_pairs(6, seed=10 + i))] for i in range(4)]
    torch.manual_seed(7)
    straight, _ = graphed_trainer(*args)
    torch.manual_seed(7)  # the same first masks
    expected = [straight.train_step(batches).loss for batches in steps]
    torch.manual_seed(7)
    resumed, model = graphed_trainer(*args)
    torch.manual_seed(7)
    got = [resumed.train_step(batches).loss for batches in steps[:2]]
    resumed.graphed = GraphedModel(model)  # the resumed process: no recording yet
    got += [resumed.train_step(batches).loss for batches in steps[2:]]
    assert got == expected
    torch.manual_seed(7)
    plain, _ = make_trainer(*args)
    torch.manual_seed(7)
    # the masks are drawn over the padded shapes: other masks than without graphs
    assert [plain.train_step(batches).loss for batches in steps] != expected


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_a_replayed_call_reads_nothing_from_the_device_and_copies_nothing_from_the_host(
    kind, monkeypatch
):
    """What a CUDA graph cannot record: a wait for the device or a copy of host data inside the
    decoder's forward or backward pass."""
    counters = []

    def counted(method):
        def run(self, *args):
            with HostSyncCounter() as counter:
                out = method(self, *args)
            counters.append(counter)
            return out

        return run

    monkeypatch.setattr(graphed.RecordedCall, "forward", counted(graphed.RecordedCall.forward))
    monkeypatch.setattr(graphed.RecordedCall, "backward", counted(graphed.RecordedCall.backward))
    trainer, _ = graphed_trainer(*MODELS[kind], "-dropout", 0.3)
    trainer.train_step([make_batch(random_pairs(6, seed=1))])
    assert len(counters) == (4 if kind == "transformer" else 2)  # a Transformer's encoder too
    for counter in counters:
        assert counter.syncs == 0, counter.sync_kinds
        assert counter.counts["lift_fresh"] == 0  # torch.tensor(host data)
        assert counter.operations > 20  # the pass was counted


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_past_the_limit_calls_run_padded_and_draw_what_a_recording_would(kind):
    """Past ``max_buckets`` a call runs padded without a recording: with dropout, the losses and
    weights of a run that recorded every bucket (whether a bucket is recorded depends on the run's
    history: a resumed run starts with none)."""
    args = [*MODELS[kind], "-dropout", 0.3]
    steps = [[make_batch(random_pairs(n, seed=20 + n))] for n in (4, 20, 4, 20)]
    results = []
    for max_buckets in (graphed.MAX_BUCKETS, 1):
        torch.manual_seed(8)
        trainer, model = make_trainer(*args)
        trainer.graphed = GraphedModel(model, max_buckets=max_buckets)
        torch.manual_seed(8)
        losses = [trainer.train_step(batches).loss for batches in steps]
        results.append((losses, params(model), len(trainer.graphed.recorded)))
    (recorded_losses, recorded_weights, n_all), (losses, weights, n_one) = results
    # two buckets of each graphed module (the Transformer's encoder too), against one in all
    assert (n_all, n_one) == (4 if kind == "transformer" else 2, 1)
    assert losses == recorded_losses
    assert all(torch.equal(recorded_weights[n], w) for n, w in weights.items())


@pytest.mark.parametrize(
    "args,phrase",
    [
        (["-input_feed", 0], "input-feeding"),
        (["-copy_attn"], "copy attention"),
        (["-coverage_attn"], "coverage"),
        (["-truncated_decoder", 4], "-truncated_decoder"),
        ([*TRANSFORMER, "-use_ckpting", "ffn"], "activation checkpointing"),
        ([*TRANSFORMER, "-torch_compile"], "-torch_compile"),
    ],
)
def test_what_a_graph_leaves_out_is_refused_by_name(args, phrase):
    from onmt_lite.models.builder import build_model
    from tests.model_helpers import VOCABS

    opt = model_options(*args)
    assert phrase in graphing_problem(build_model(opt, VOCABS), opt)
    assert graphing_problem(build_model(model_options(), VOCABS), model_options()) is None


def test_the_command_refuses_cuda_graphs_without_a_gpu_and_names_what_else_it_refuses(
    tmp_path, capsys
):
    data = preprocess_in_process(str(tmp_path))
    base = ["-data", data, "-save_model", tmp_path / "m", *TINY_MODEL, "-train_steps", 1]
    error = one_line_error(invoke("train", [*base, "-cuda_graphs"], capsys))
    assert "-cuda_graphs needs a GPU" in error
    error = one_line_error(invoke("train", [*base, "-cuda_graphs", "-input_feed", 0], capsys))
    assert "-cuda_graphs is not for a model with a decoder other than" in error
    assert not list(tmp_path.glob("m*.pt"))


def test_a_recording_holds_the_position_table_it_reads_when_a_longer_input_makes_another():
    """A graph reads the table by address: made anew for a longer source (the encoder's, shared
    with -share_embeddings) or target, the old one must stay alive for the graphs that read it."""
    trainer, model = graphed_trainer(*TRANSFORMER)
    trainer.train_step([make_batch(random_pairs(4, seed=1))])
    encoder, decoder = trainer.graphed.recorded.values()
    embeddings = model.decoder.embeddings
    old = embeddings._encoding_table
    assert any(table is old for table in decoder.held)
    embeddings(torch.zeros(500, 2, dtype=torch.long))  # a 500-word target: a longer table
    assert embeddings._encoding_table is not old
    assert any(table is old for table in decoder.held)


@pytest.mark.kernels  # bfloat16 rounding
@pytest.mark.parametrize("kind", ["rnn", "transformer"])
def test_under_bf16_autocast_the_replayed_calls_give_the_eager_losses(kind):
    """A recording runs under the step's autocast without its cache (a graph must cast the
    weights at each replay): the losses are those without graphs, to bfloat16's rounding of the
    padded sums."""
    losses = []
    for graphs in (False, True):
        trainer, model = (graphed_trainer if graphs else make_trainer)(
            *MODELS[kind], optim="adam", learning_rate=0.01
        )
        model.float()
        trainer.precision = Precision("bf16", "cpu")
        batches = [make_batch(random_pairs(6, seed=seed)) for seed in range(4)]
        losses.append([trainer.train_step([batch]).loss for batch in batches])
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)
    assert losses[0][-1] < losses[0][0]  # trained
    # the recording ran under autocast: an RNN decoder's output (its attention's product) is
    # bfloat16 (a Transformer's comes out of a layer norm, float32 under autocast)
    dtypes = {recorded.outputs.dtype for recorded in trainer.graphed.recorded.values()}
    assert dtypes == ({torch.bfloat16} if kind == "rnn" else {torch.float32})
