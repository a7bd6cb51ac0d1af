"""The convolutional model (-encoder_type cnn -decoder_type cnn): what it computes against its
formulas, written out independently here (1.x's layout: every layer's convolution as a sum over
its kernel's positions, the decoder run over the whole prefix); a step at a time as over the whole
target; an example alone as in a padded batch; the options it refuses."""

import math

import pytest
import torch

from onmt_lite.models.cnn import CNNState
from onmt_lite.utils.errors import UserError
from tests.model_helpers import make_batch, make_model, model_options, random_pairs
from onmt_lite.models.builder import build_model
from tests.model_helpers import VOCABS

CNN = ["-encoder_type", "cnn", "-decoder_type", "cnn"]
SCALE = math.sqrt(0.5)


def gated_convolution(conv, x, left, right):
    """``conv``'s output for ``x`` ``[H x N]`` with ``left`` and ``right`` zero positions added:
    the weight ``g * v / ||v||`` summed position by position, then ``a * sigmoid(b)``."""
    v = conv.v  # [2H x H x k]
    weight = conv.g[:, None, None] * v / v.reshape(v.size(0), -1).norm(dim=1)[:, None, None]
    padded = torch.cat([x.new_zeros(x.size(0), left), x, x.new_zeros(x.size(0), right)], 1)
    width = v.size(2)
    n_out = padded.size(1) - width + 1
    mixed = sum(weight[:, :, j] @ padded[:, j : j + n_out] for j in range(width))
    mixed = mixed + conv.bias[:, None]  # [2H x N']
    half = mixed.size(0) // 2
    return mixed[:half] * torch.sigmoid(mixed[half:])


def reference(model, src, tgt):
    """One example's decoder output ``[T x H]`` and top attention ``[T x S]`` by the paper's (and
    1.x's) formulas; ``src`` ``[S]``, ``tgt`` ``[T]`` ids."""
    encoder, decoder = model.encoder, model.decoder
    projected = encoder.linear(encoder.embeddings(src[:, None])[:, 0]).t()  # [H x S]
    x = projected
    for conv in encoder.layers:
        half = conv.v.size(2) // 2
        x = (x + gated_convolution(conv, x, half, half)) * SCALE
    keys = x.t()  # [S x H]
    values = ((x + projected) * SCALE).t()
    target_emb = decoder.linear(decoder.embeddings(tgt[:, None])[:, 0])  # [T x H]
    y = target_emb.t()  # [H x T]
    for conv, attention in zip(decoder.layers, decoder.attentions):
        out = gated_convolution(conv, y, conv.v.size(2) - 1, 0).t()  # [T x H]
        query = (target_emb + attention.linear_in(out)) * SCALE
        weights = torch.softmax(query @ keys.t(), dim=1)  # [T x S]
        y = y + ((weights @ values + out) * SCALE).t()
        y = y * SCALE
    return y.t(), weights


def stepwise(model, batch):
    """Decode ``batch.tgt[:-1]`` one position at a time: dec_out ``[T x B x H]``, attention."""
    memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
    outputs, attentions = [], []
    for t in range(batch.tgt.size(0) - 1):
        dec_out, attns, state = model.decode(batch.tgt[t : t + 1], memory_bank, lengths, state)
        outputs.append(dec_out)
        attentions.append(attns["std"])
    return torch.cat(outputs), torch.cat(attentions)


@pytest.mark.parametrize("width", [1, 3, 5])
@pytest.mark.parametrize("positions", [False, True])
def test_the_model_computes_the_formulas_whole_and_a_step_at_a_time(width, positions):
    args = [*CNN, "-cnn_kernel_width", width, "-layers", 3, "-param_init", 0.3]
    model, _ = make_model(*args, *(["-position_encoding"] if positions else []), seed=width)
    model.eval()
    with torch.no_grad():
        for pair in random_pairs(4, seed=5, min_len=2):
            batch = make_batch([pair])
            whole, attns = model(batch.src, batch.tgt, batch.src_lengths)
            steps, step_attns = stepwise(model, batch)
            expected, expected_attn = reference(model, batch.src[:, 0], batch.tgt[:-1, 0])
            for out, attn in ((whole, attns["std"]), (steps, step_attns)):
                torch.testing.assert_close(out[:, 0], expected, rtol=1e-9, atol=1e-12)
                torch.testing.assert_close(attn[:, 0], expected_attn, rtol=1e-9, atol=1e-12)
    # the test sees the weights: each output channel's kernel has norm |g|, not 1
    conv = model.decoder.layers[0]
    norms = conv.weight().flatten(1).norm(dim=1)
    torch.testing.assert_close(norms, conv.g.abs())
    assert norms.std() > 0.01


def test_an_example_gives_the_same_outputs_alone_and_inside_a_padded_batch():
    model, _ = make_model(*CNN, "-cnn_kernel_width", 5, "-param_init", 0.3)
    model.eval()
    pairs = random_pairs(5, seed=2)
    order = [3, 0, 4, 1, 2]
    with torch.no_grad():
        batch = make_batch(pairs, order)
        memory_bank, _, _ = model.encode(batch.src, batch.src_lengths)
        together, attns = model(batch.src, batch.tgt, batch.src_lengths)
        steps, step_attns = stepwise(model, batch)
        for position, index in enumerate(order):
            alone = make_batch([pairs[index]])
            alone_bank, _, _ = model.encode(alone.src, alone.src_lengths)
            dec_out, alone_attns = model(alone.src, alone.tgt, alone.src_lengths)
            src_len, tgt_len = alone.src.size(0), alone.tgt.size(0) - 1
            torch.testing.assert_close(memory_bank[:src_len, position], alone_bank[:, 0])
            for out, attn in ((together, attns["std"]), (steps, step_attns)):
                torch.testing.assert_close(out[:tgt_len, position], dec_out[:, 0])
                torch.testing.assert_close(
                    attn[:tgt_len, position, :src_len], alone_attns["std"][:, 0]
                )
                assert (attn[:tgt_len, position, src_len:] == 0).all()


def test_windows_of_a_truncated_target_continue_the_whole_pass():
    """-truncated_decoder: the state carries each layer's last k - 1 inputs across windows."""
    model, _ = make_model(*CNN, "-cnn_kernel_width", 3, "-position_encoding", "-param_init", 0.3)
    model.eval()
    batch = make_batch(random_pairs(3, seed=4, min_len=6))
    with torch.no_grad():
        whole, _ = model(batch.src, batch.tgt, batch.src_lengths)
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
        parts = []
        tgt = batch.tgt[:-1]
        for start in range(0, tgt.size(0), 4):
            dec_out, _, state = model.decode(tgt[start : start + 4], memory_bank, lengths, state)
            parts.append(dec_out)
            state = state.detach()
    assert isinstance(state, CNNState) and state.decoded == tgt.size(0)
    torch.testing.assert_close(torch.cat(parts), whole)


@pytest.mark.parametrize(
    "args,message",
    [
        (["-encoder_type", "cnn"], "-encoder_type cnn with -decoder_type rnn"),
        (["-decoder_type", "cnn", "-encoder_type", "transformer"], "CNNs go on both sides"),
        ([*CNN, "-cnn_kernel_width", 4], "-cnn_kernel_width 4 is even"),
        ([*CNN, "-copy_attn"], "-copy_attn: the CNN decoder has no copy attention"),
        ([*CNN, "-coverage_attn"], "-coverage_attn: the CNN decoder has no coverage"),
        ([*CNN, "-bridge"], "-bridge: the CNN decoder starts from no encoder state"),
        ([*CNN, "-global_attention", "none"], "-global_attention none is for RNN decoders"),
        ([*CNN, "-context_gate", "both"], "-context_gate both is for RNN decoders"),
        ([*CNN, "-lambda_align", 0.5], "-lambda_align (guided alignment) needs"),
    ],
)
def test_what_the_convolutional_model_cannot_do_is_refused_by_name(args, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_model(model_options(*args), VOCABS)


def test_a_state_reorders_and_joins_its_rows():
    windows = torch.arange(2 * 3 * 4 * 2.0).view(2, 3, 4, 2)  # [L x B x W x H]
    state = CNNState(windows, torch.tensor([5, 6, 7]), 7)
    rows = torch.tensor([2, 0, 0])
    moved = state.map(lambda t, dim: t.index_select(dim, rows))
    assert torch.equal(moved.windows, windows[:, rows])
    assert moved.positions.tolist() == [7, 5, 5] and moved.decoded == 7
    joined = moved.concat(CNNState(torch.zeros(2, 1, 4, 2), torch.tensor([0]), 0))
    assert joined.windows.shape == (2, 4, 4, 2) and joined.positions.tolist() == [7, 5, 5, 0]
    assert joined.decoded == 7 and joined.compact(3) is joined


def test_a_decoding_step_reads_the_weights_as_they_are_now():
    """Without gradients a step keeps its kernel matrix between steps (``step_weight``): an
    optimizer's update of a parameter or a load of other weights is seen at the next step."""
    model, _ = make_model(*CNN, "-param_init", 0.3, seed=1)
    other, _ = make_model(*CNN, "-param_init", 0.3, seed=2)
    model.eval()
    batch = make_batch(random_pairs(3, seed=6, min_len=3))
    with torch.no_grad():
        first, _ = stepwise(model, batch)
        for change in (
            lambda: model.decoder.layers[1].g.mul_(1.5),
            lambda: model.decoder.layers[0].v.add_(0.1),
            lambda: model.load_state_dict(other.state_dict()),
        ):
            change()
            steps, _ = stepwise(model, batch)
            whole, _ = model(batch.src, batch.tgt, batch.src_lengths)  # the kernel made anew
            torch.testing.assert_close(steps, whole)
            assert not torch.allclose(steps, first)
            first = steps
