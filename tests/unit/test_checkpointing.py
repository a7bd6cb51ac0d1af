"""-use_ckpting: recomputing the Transformer's feed-forward and attention blocks in the backward
pass gives the gradients of the plain backward (float64, CPU), dropout included."""

import pytest
import torch

from onmt_lite.models.checkpointing import use_checkpointing
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.host_syncs import HostSyncCounter
from tests.model_helpers import TRANSFORMER, grads, make_batch, make_model, random_pairs

# the small test Transformer with dropout everywhere: the recomputed masks must be the same
WITH_DROPOUT = [*TRANSFORMER, "-dropout", 0.2, "-attention_dropout", 0.3]


def gradients(parts, model_args=WITH_DROPOUT):
    """The loss and gradients of one teacher-forced pass, the dropout drawn from seed 7."""
    model, _ = make_model(*model_args)
    set_up = use_checkpointing(model, parts)
    model.train()
    batch = make_batch(random_pairs(6, seed=3, min_len=4))
    torch.manual_seed(7)
    dec_out, _ = model(batch.src, batch.tgt, batch.src_lengths)
    torch.manual_seed(8)
    loss = (dec_out * torch.randn_like(dec_out)).sum()
    loss.backward()
    return set_up, loss.detach(), grads(model)


@pytest.mark.parametrize("parts", [["ffn"], ["mha"], ["ffn", "mha"]])
def test_recomputed_blocks_give_the_plain_gradients(parts):
    none, loss, expected = gradients([])
    count, loss_again, actual = gradients(parts)
    assert none == 0 and count > 0
    assert torch.equal(loss_again, loss)
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=1e-12, atol=1e-14, msg=name)


def test_the_blocks_really_run_again_in_the_backward_pass():
    """With ``ffn`` the backward pass runs each feed-forward block's layer norm again (one more
    per block), which shows its activations were not kept."""
    counts = {}
    for parts in ([], ["ffn"]):
        model, _ = make_model(*WITH_DROPOUT)
        use_checkpointing(model, parts)
        batch = make_batch(random_pairs(4, seed=5))
        dec_out, _ = model(batch.src, batch.tgt, batch.src_lengths)
        with HostSyncCounter() as counter:
            dec_out.sum().backward()
        counts[tuple(parts)] = counter.counts["native_layer_norm"]
    blocks = 2 + 2  # the test model's encoder and decoder layers
    assert counts[("ffn",)] == counts[()] + blocks


def test_evaluation_and_no_gradient_run_the_plain_forward():
    model, _ = make_model(*WITH_DROPOUT)
    use_checkpointing(model, ["ffn", "mha"])
    model.eval()
    batch = make_batch(random_pairs(3, seed=2))
    with torch.no_grad():
        out, _ = model(batch.src, batch.tgt, batch.src_lengths)
    reference, _ = make_model(*WITH_DROPOUT)
    reference.eval()
    with torch.no_grad():
        expected, _ = reference(batch.src, batch.tgt, batch.src_lengths)
    assert torch.equal(out, expected)


def test_lora_and_models_without_transformer_layers_are_refused_by_name():
    model, _ = make_model(*TRANSFORMER)
    with pytest.raises(UserError, match="-use_ckpting lora: onmt_lite has no LoRA layers"):
        use_checkpointing(model, ["lora"])
    rnn, _ = make_model()
    with pytest.raises(UserError, match="the model has no Transformer layers"):
        use_checkpointing(rnn, ["ffn"])
    assert use_checkpointing(rnn, []) == 0
