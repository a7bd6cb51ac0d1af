"""-encoder_type mean (OpenNMT-py 1.x's MeanEncoder): the memory bank is the source embeddings, the
decoder starts from their mean over the real positions."""

import pytest
import torch

from onmt_lite.utils.errors import UserError
from tests.helpers import preprocess_in_process, train_in_process
from tests.model_helpers import make_batch, make_model, random_pairs

MEAN = ["-encoder_type", "mean", "-word_vec_size", "8"]  # model_helpers' -rnn_size is 8


def test_final_state_is_the_mean_of_the_unpadded_embeddings_by_hand():
    model, _ = make_model(*MEAN, "-rnn_type", "LSTM")
    batch = make_batch(random_pairs(5, seed=3))
    assert len(set(batch.src_lengths.tolist())) > 1  # some examples are padded
    table = model.encoder.embeddings.lut.weight
    with torch.no_grad():
        (h, c), memory_bank, lengths = model.encoder(batch.src, batch.src_lengths)
    assert h.shape == (2, 5, 8) and torch.equal(lengths, batch.src_lengths)
    for b, length in enumerate(batch.src_lengths.tolist()):
        rows = [table[batch.src[i, b]] for i in range(length)]
        mean = sum(rows[1:], rows[0]) / length
        for layer in range(2):
            torch.testing.assert_close(h[layer, b], mean)
            torch.testing.assert_close(c[layer, b], mean)
        torch.testing.assert_close(memory_bank[:length, b], torch.stack(rows))
        assert (memory_bank[length:, b] == 0).all()


def test_padding_does_not_change_an_example():
    """One example alone (no padding) and in a padded batch: the same state, memory and decoder
    output."""
    model, _ = make_model(*MEAN)
    model.eval()
    pairs = random_pairs(4, seed=5)
    batch = make_batch(pairs)
    b = min(range(4), key=lambda i: batch.src_lengths[i])  # the shortest: the most padding
    alone = make_batch([pairs[b]])
    src_len = int(batch.src_lengths[b])
    tgt_len = len(pairs[b][1]) + 2
    with torch.no_grad():
        (h, c), memory_bank, _ = model.encoder(batch.src, batch.src_lengths)
        (h1, c1), memory_bank1, _ = model.encoder(alone.src, alone.src_lengths)
        dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
        dec_out1, attns1 = model(alone.src, alone.tgt, alone.src_lengths)
    assert batch.src.size(0) > src_len
    torch.testing.assert_close(h[:, b], h1[:, 0])
    torch.testing.assert_close(c[:, b], c1[:, 0])
    torch.testing.assert_close(memory_bank[:src_len, b], memory_bank1[:, 0])
    torch.testing.assert_close(dec_out[: tgt_len - 1, b], dec_out1[:, 0])
    torch.testing.assert_close(attns["std"][: tgt_len - 1, b, :src_len], attns1["std"][:, 0])


def test_gru_gets_one_state_and_the_bridge_maps_layers():
    model, _ = make_model(*MEAN, "-rnn_type", "GRU")
    batch = make_batch(random_pairs(3, seed=1))
    with torch.no_grad():
        final, _, _ = model.encoder(batch.src, batch.src_lengths)
    assert len(final) == 1 and final[0].shape == (2, 3, 8)
    model, _ = make_model(*MEAN, "-layers", "-1", "-enc_layers", "1", "-dec_layers", "3", "-bridge")
    with torch.no_grad():
        final, _, _ = model.encoder(batch.src, batch.src_lengths)
        model(batch.src, batch.tgt, batch.src_lengths)
    assert [s.shape for s in final] == [(3, 3, 8), (3, 3, 8)]
    assert not any(name.startswith("encoder.rnn") for name, _ in model.named_parameters())


def test_word_vectors_must_have_the_decoder_size():
    with pytest.raises(
        UserError,
        match=r"-encoder_type mean needs -src_word_vec_size \(6\) equal to -rnn_size \(8\)",
    ):
        make_model("-encoder_type", "mean")


def test_a_mean_encoder_model_trains_and_translates(tmp_path):
    from onmt_lite import Translator
    from onmt_lite.models.checkpoint import load_checkpoint

    data = preprocess_in_process(str(tmp_path), n_train=60, n_valid=10)
    _, lines = train_in_process(
        data,
        str(tmp_path / "m"),
        "-encoder_type",
        "mean",
        "-rnn_size",
        16,
        "-word_vec_size",
        16,
        "-layers",
        1,
        "-batch_size",
        8,
        "-train_steps",
        4,
        "-valid_steps",
        4,
        "-report_every",
        2,
    )
    assert any("Step 4/4" in line for line in lines)
    checkpoint = load_checkpoint(str(tmp_path / "m_step_4.pt"))
    assert checkpoint["opt"]["encoder_type"] == "mean"
    assert not any(name.startswith("encoder.rnn") for name in checkpoint["model"])
    results = Translator.load([str(tmp_path / "m_step_4.pt")], beam_size=3, max_length=6).translate(
        ["w1 w2 w3", "w4"]
    )
    assert len(results) == 2 and all(r.hypotheses for r in results)
