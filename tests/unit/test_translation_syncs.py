"""The host syncs and ATen operations of a decoding step, counted on the CPU (what would stall a
GPU): ``Translator.translate`` of 200 lines at batch 64, beam 5 and greedy, RNN and Transformer."""
import pytest
import torch

from onmt_lite.data.batch import Batch
from onmt_lite.translate import stepper as stepper_module
from onmt_lite.translate.inputs import TextBatches
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.host_syncs import HostSyncCounter, declare_host
from tests.helpers import lines, trained_reversal_model

SMALL = ["-rnn_size", 32, "-word_vec_size", 16, "-layers", 1, "-batch_size", 32, "-optim", "adam",
         "-learning_rate", 0.01, "-dropout", 0]
TRANSFORMER = ["-encoder_type", "transformer", "-decoder_type", "transformer",
               "-position_encoding", "-layers", 2, "-rnn_size", 32, "-word_vec_size", 32,
               "-heads", 2, "-transformer_ff", 64, "-batch_size", 32, "-optim", "adam",
               "-learning_rate", 0.002, "-dropout", 0]
# before the search kept its bookkeeping on the device: 12.6 (RNN, beam 5) to 17.3 syncs a step
# (Transformer, beam 5), 230 and 380 operations; now 1 a step (and 179 and 316 operations)
CEILINGS = {"rnn": 220, "transformer": 380}  # operations a step, with room for a PyTorch change


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    corpus = {"n_train": 1000, "n_valid": 200}
    rnn = [*SMALL, "-encoder_type", "brnn"]
    return {"rnn": trained_reversal_model(tmp_path_factory, "syncs_rnn", [], rnn, 200, **corpus),
            "transformer": trained_reversal_model(tmp_path_factory, "syncs_transformer", [],
                                                  TRANSFORMER, 200, **corpus)}


def counted_translation(monkeypatch, translator, sources):
    """``(steps, counter)`` of ``translator.translate(sources)`` as on a GPU: the batches are built
    on the host (not counted), and moving one to the device leaves its ``*_cpu`` tensors host
    data."""
    counter = HostSyncCounter()
    steps = []
    built = TextBatches.batches
    count = TextBatches.count
    step = stepper_module.ModelStepper.step

    def batches_built_on_the_host(self, *args):
        with counter.paused():
            batches = list(built(self, *args))
        yield from batches

    def batches_counted_on_the_host(self, *args):
        with counter.paused():
            return count(self, *args)

    def to_device(self, device):
        for name in ("src_lengths", "indices", "tgt"):  # the device's copies are other tensors
            if getattr(self, name) is not None:
                setattr(self, name, getattr(self, name).clone())
        for tensor in (self.src_lengths_cpu, self.indices_cpu, self.tgt_cpu):
            declare_host(tensor)
        return self

    def counted_step(self, tokens):
        steps.append(tokens.numel())
        return step(self, tokens)

    monkeypatch.setattr(TextBatches, "batches", batches_built_on_the_host)
    monkeypatch.setattr(TextBatches, "count", batches_counted_on_the_host)
    monkeypatch.setattr(Batch, "to", to_device)
    monkeypatch.setattr(stepper_module.ModelStepper, "step", counted_step)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one decoding stream
    try:
        with counter:
            results = translator.translate(sources)
    finally:
        torch.set_num_threads(threads)
    assert len(results) == len(sources)
    assert sum(len(r.tokens[0]) for r in results) > 2 * len(sources)  # whole outputs, not </s>
    return len(steps), counter


@pytest.mark.parametrize("kind", ["rnn", "transformer"])
@pytest.mark.parametrize("beam_size,attention", [(5, False), (5, True), (1, False)])
def test_a_decoding_step_reads_the_device_at_most_once(models, monkeypatch, kind, beam_size,
                                                        attention):
    translator = Translator.load([models[kind]["model"]], beam_size=beam_size, attention=attention,
                                 batch_size=64, max_length=50)
    sources = lines(models[kind]["src"])
    steps, counter = counted_translation(monkeypatch, translator, sources)
    assert steps > 15  # several steps per batch: what the average is over
    assert counter.syncs <= steps, counter.sync_kinds
    assert counter.host_reads > 0  # the host tensors were told apart (else every read would count)
    if not attention:
        assert counter.operations <= CEILINGS[kind] * steps, counter.operations / steps
