"""-self_attn_type average (1.x's average attention network): a decoder layer against 1.x's
formulas written out, where it goes in the model, its dropout, the options it makes idle and
CTranslate2's refusal. Decoding one position at a time equals the teacher-forced pass, also for
rows joining later: ``test_transformer.py``'s variants; OpenNMT-py 3.5.1's own average attention
network translates as its conversion does: ``test_convert.py``."""

import pytest
import torch

from onmt_lite.convert.ctranslate2 import check_convertible
from onmt_lite.models.average_attention import AverageSelfAttention, average_counts
from onmt_lite.models.builder import set_dropout
from onmt_lite.models.multihead import SelfAttention, additive_mask
from onmt_lite.models.transformer import FeedForward
from onmt_lite.train.idle_options import idle_options
from onmt_lite.utils.errors import UserError
from tests.model_helpers import TRANSFORMER, make_batch, make_model, model_options, random_pairs

AVERAGE = ["-self_attn_type", "average"]


def reference(module: AverageSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """1.x's average attention of ``x`` ``[B x T x H]`` as its decoding computes it: the running
    average ``a_t = (x_t + t a_{t-1}) / (t + 1)``, the position-wise feed-forward block
    ``a + W2 relu(W1 LayerNorm(a)) + b2`` when there is one, then the gates."""
    outputs = []
    average = torch.zeros_like(x[:, 0])
    for t in range(x.size(1)):
        average = (x[:, t] + t * average) / (t + 1)
        fed = average
        if module.feed_forward is not None:
            ff = module.feed_forward
            normed = torch.nn.functional.layer_norm(
                average, (x.size(2),), ff.norm.weight, ff.norm.bias, ff.norm.eps
            )
            inner = torch.relu(normed @ ff.inner.weight.t() + ff.inner.bias)
            fed = average + inner @ ff.outer.weight.t() + ff.outer.bias
        gates = torch.cat([x[:, t], fed], -1) @ module.gate.weight.t() + module.gate.bias
        input_gate, forget_gate = gates[:, : x.size(2)], gates[:, x.size(2) :]
        outputs.append(torch.sigmoid(input_gate) * x[:, t] + torch.sigmoid(forget_gate) * fed)
    return torch.stack(outputs, 1)


@pytest.mark.parametrize("ffn", [False, True])
def test_a_layers_average_attention_is_1x_running_average_and_gates(ffn):
    torch.manual_seed(0)
    dim = 6
    feed_forward = FeedForward(dim, dim, 0.0) if ffn else None
    module = AverageSelfAttention(dim, feed_forward).double().eval()
    x = torch.randn(3, 7, dim, dtype=torch.float64)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()[None, None]  # [1 x 1 x T x T]
    with torch.no_grad():
        counts = average_counts(additive_mask(causal, x.dtype).expand(3, 1, 7, 7))
        out, cache = module(x, counts)
        expected = reference(module, x)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    averages = x.cumsum(1) / torch.arange(1, 8, dtype=x.dtype).view(1, 7, 1)
    assert cache.shape == (2, 3, 1, 7, dim)
    torch.testing.assert_close(cache[1, :, 0], averages, rtol=0, atol=1e-14)


def test_the_decoder_layers_average_and_the_encoders_attend():
    model, _ = make_model(*TRANSFORMER, *AVERAGE, "-aan_useffn", "-layers", 2)
    decoder_parts = [layer.self_attn for layer in model.decoder.layers]
    assert all(isinstance(part, AverageSelfAttention) for part in decoder_parts)
    assert all(isinstance(layer.self_attn, SelfAttention) for layer in model.encoder.layers)
    names = {name for name, _ in model.named_parameters()}
    assert {
        "decoder.layers.1.self_attn.gate.weight",
        "decoder.layers.1.self_attn.feed_forward.inner.weight",
    } <= names
    assert not any(name.startswith("decoder.layers.0.self_attn.qkv") for name in names)
    plain, _ = make_model(*TRANSFORMER, *AVERAGE, "-layers", 2)
    assert plain.decoder.layers[0].self_attn.feed_forward is None


def test_the_feed_forward_of_the_average_drops_out_at_the_attention_dropout_as_in_1x():
    model, _ = make_model(
        *TRANSFORMER, *AVERAGE, "-aan_useffn", "-dropout", "0.3", "-attention_dropout", "0.1"
    )
    inside = model.decoder.layers[0].self_attn.feed_forward
    assert inside.dropout.p == 0.1
    assert model.decoder.layers[0].feed_forward.dropout.p == 0.3
    set_dropout(model, 0.2, 0.05)  # -dropout_steps
    assert (inside.dropout.p, model.decoder.layers[0].feed_forward.dropout.p) == (0.05, 0.2)


def test_the_full_context_alignment_of_an_average_is_its_plain_pass():
    """1.x's average ignored the mask of the full-context pass: the alignment is the plain one."""
    args = [*TRANSFORMER, *AVERAGE, "-layers", 2, "-alignment_layer", 0]
    full, _ = make_model(*args, "-full_context_alignment", seed=3)
    plain, _ = make_model(*args, seed=3)
    batch = make_batch(random_pairs(3, seed=5, min_len=2, max_len=6))
    attns = []
    with torch.no_grad():
        for model in (full.eval(), plain.eval()):
            memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
            _, attn, _ = model.decode(batch.tgt[:-1], memory_bank, lengths, state, None, True, True)
            attns.append(attn["align"])
    assert torch.equal(attns[0], attns[1])


@pytest.mark.parametrize(
    "args,warnings",
    [
        (
            ["-aan_useffn"],
            [
                "-aan_useffn has no effect: it is -self_attn_type average's, in a Transformer "
                "decoder"
            ],
        ),
        (
            [*AVERAGE, "-decoder_type", "rnn", "-max_relative_positions", "2"],
            [
                "-self_attn_type average has no effect: it is a Transformer decoder's (a "
                "Transformer encoder's self-attention is scaled-dot)"
            ],
        ),
        (
            [*AVERAGE, "-encoder_type", "brnn", "-max_relative_positions", "2"],
            [
                "-max_relative_positions 2 has no effect: no layer has scaled dot-product "
                "self-attention (-self_attn_type average has no positions)"
            ],
        ),
        ([*AVERAGE, "-aan_useffn", "-max_relative_positions", "2"], []),
    ],
)
def test_the_options_an_average_makes_idle_are_named(args, warnings):
    opt = model_options(*TRANSFORMER, *args)
    assert idle_options(opt) == warnings


def test_a_conversion_to_ctranslate2_is_refused_by_name():
    opt = model_options(*TRANSFORMER, *AVERAGE)
    with pytest.raises(UserError, match="CTranslate2's Transformer has no average attention"):
        check_convertible(opt, {}, "m.pt")


def test_a_step_reads_the_rows_last_average_and_no_other_column():
    """1.x's constant-time step: the cached columns before a row's last are not read (NaN there
    changes nothing), and the step's output is that of the whole sequence at its position."""
    torch.manual_seed(1)
    dim = 4
    module = AverageSelfAttention(dim, FeedForward(dim, dim, 0.0)).double().eval()
    x = torch.randn(2, 6, dim, dtype=torch.float64)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None, None].expand(2, 1, 6, 6)
    with torch.no_grad():
        whole, cache = module(x, average_counts(causal))
        buffer = torch.cat([cache[:, :, :, :5], torch.zeros_like(cache[:, :, :, :3])], 3)
        buffer[:, :, :, :4] = float("nan")  # all but column 4, the rows' last
        step, kept = module(x[:, 5:], average_counts(causal[:, :, 5:]), (buffer, 5, True))
    torch.testing.assert_close(step, whole[:, 5:], rtol=0, atol=1e-12)
    torch.testing.assert_close(kept[1, :, 0, 5], cache[1, :, 0, 5], rtol=0, atol=1e-12)
