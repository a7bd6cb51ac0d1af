"""The encoder: packed sequences, bidirectional final states, zero memory past each length."""

import torch

from onmt_lite.models.rnn_encoder import concat_directions
from tests.model_helpers import make_batch, make_model, random_pairs


def test_concat_directions_by_hand():
    # layers*dirs = 4 (2 layers), batch 1, hidden 3
    state = torch.arange(2 * 2 * 1 * 3.0).view(4, 1, 3)
    expected = torch.stack(
        [torch.cat([state[0, 0], state[1, 0]]), torch.cat([state[2, 0], state[3, 0]])]
    ).unsqueeze(1)
    assert torch.equal(concat_directions(state, 2), expected)


def test_bidirectional_final_state_is_the_last_forward_and_first_backward_output():
    model, _ = make_model("-encoder_type", "brnn", "-rnn_type", "GRU")
    batch = make_batch(random_pairs(4, seed=9))
    with torch.no_grad():
        (final,), memory_bank, _ = model.encoder(batch.src, batch.src_lengths)
    half = memory_bank.size(2) // 2
    for b, length in enumerate(batch.src_lengths.tolist()):
        torch.testing.assert_close(final[-1, b, :half], memory_bank[length - 1, b, :half])
        torch.testing.assert_close(final[-1, b, half:], memory_bank[0, b, half:])
        assert (memory_bank[length:, b] == 0).all()


def test_lstm_encoder_matches_an_unpacked_run_of_each_example_alone():
    model, _ = make_model("-rnn_type", "LSTM")
    pairs = random_pairs(4, seed=10)
    batch = make_batch(pairs)
    with torch.no_grad():
        (h, c), memory_bank, _ = model.encoder(batch.src, batch.src_lengths)
        for b, length in enumerate(batch.src_lengths.tolist()):
            emb = model.encoder.embeddings(batch.src[:length, b : b + 1])
            out, (h_alone, c_alone) = model.encoder.rnn(emb)  # no packing, no padding
            torch.testing.assert_close(memory_bank[:length, b], out[:, 0])
            torch.testing.assert_close(h[:, b], h_alone[:, 0])
            torch.testing.assert_close(c[:, b], c_alone[:, 0])
