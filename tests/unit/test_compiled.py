"""-torch_compile: the Transformer layers' training forward through torch.compile computes what the
plain layers do, compiles once a layer whatever the batch's shape, and leaves validation and
translation to the plain forward. Traced with the ``eager`` backend (Dynamo's graphs run as they
are): Inductor's kernels are the device's business (bench/gpu_speed.py -levers)."""

import pytest
import torch

from onmt_lite.models.checkpointing import use_checkpointing
from onmt_lite.models.compiled import compile_layers
from onmt_lite.utils.errors import UserError
from tests.helpers import TINY_MODEL, preprocess_in_process, train_in_process
from tests.model_helpers import TRANSFORMER, make_batch, make_model, random_pairs


def _counting(graphs):
    """A torch.compile backend that runs Dynamo's graph as it is and counts the graphs."""

    def backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    return backend


def _trained(compiled, graphs=None):
    """Losses and gradients of two training batches of different shapes (dropout on, checkpointing
    of both parts on: the two wrappers compose)."""
    model, _ = make_model(
        *TRANSFORMER, "-layers", 1, "-dropout", 0.2, "-attention_dropout", 0.1, seed=3
    )
    use_checkpointing(model, ["ffn", "mha"])
    if compiled:
        assert compile_layers(model, _counting(graphs)) == 2
    model.train()
    torch.manual_seed(5)
    losses = []
    for seed in (1, 2):
        batch = make_batch(random_pairs(4 + seed, seed=seed))
        dec_out, _ = model(batch.src, batch.tgt, batch.src_lengths)
        loss = dec_out.square().sum()
        loss.backward()
        losses.append(loss.detach())
    return model, losses, [p.grad for p in model.parameters() if p.grad is not None]


def test_compiled_layers_train_as_the_plain_ones_and_compile_once_a_layer():
    graphs = []
    _, plain_losses, plain_grads = _trained(False)
    model, losses, grads = _trained(True, graphs)
    assert losses == plain_losses
    assert len(grads) == len(plain_grads)
    assert all(torch.equal(a, b) for a, b in zip(grads, plain_grads))
    compiled = len(graphs)
    assert compiled >= 2  # the encoder's layer and the decoder's, traced
    model.eval()
    with torch.no_grad():  # validation, translation: the plain forward, nothing compiled
        batch = make_batch(random_pairs(3, seed=7))
        model(batch.src, batch.tgt, batch.src_lengths)
    assert len(graphs) == compiled


def test_a_model_without_transformer_layers_is_refused_by_name():
    model, _ = make_model(seed=0)
    with pytest.raises(UserError, match="-torch_compile: the model has no Transformer layers"):
        compile_layers(model)


def test_onmt_lite_train_compiles_with_torch_compile(tmp_path, monkeypatch):
    calls = []

    def recorded(model, backend="inductor"):
        calls.append(backend)
        return 4

    monkeypatch.setattr("onmt_lite.train.main.compile_layers", recorded)
    data = preprocess_in_process(str(tmp_path))
    args = [*TINY_MODEL, "-encoder_type", "transformer", "-decoder_type", "transformer"]
    args += ["-rnn_size", 8, "-word_vec_size", 8, "-heads", 2, "-transformer_ff", 16]
    _, lines = train_in_process(data, str(tmp_path / "m"), *args, "-train_steps", 1)
    assert calls == []
    _, lines = train_in_process(
        data, str(tmp_path / "c"), *args, "-train_steps", 1, "-torch_compile"
    )
    assert calls == ["inductor"]
    assert any("-torch_compile: 4 Transformer layers train compiled" in line for line in lines)
