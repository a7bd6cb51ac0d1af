"""Embeddings: shapes, the padding row, pretrained vectors, freezing and dropout."""

import pytest
import torch

from onmt_lite.models.embeddings import Embeddings
from onmt_lite.utils.errors import UserError

IDS = torch.tensor([[4, 5, 2], [1, 6, 9], [1, 1, 3], [1, 1, 1]])  # [len 4 x batch 3], padding id 1


def test_output_is_len_by_batch_by_dim_and_holds_the_rows_of_the_ids():
    emb = Embeddings(10, 5)
    out = emb(IDS)
    assert out.shape == (4, 3, 5)
    torch.testing.assert_close(out[1, 2], emb.weight[9])
    torch.testing.assert_close(out, emb.weight[IDS])


def test_the_padding_row_gets_no_gradient():
    torch.manual_seed(0)
    emb = Embeddings(10, 5)
    (emb(IDS) * torch.randn(4, 3, 5)).sum().backward()
    grad = emb.lut.weight.grad
    assert torch.equal(grad[1], torch.zeros(5))
    used = [2, 3, 4, 5, 6, 9]
    assert all(grad[i].abs().sum() > 0 for i in used)
    assert all(torch.equal(grad[i], torch.zeros(5)) for i in (0, 7, 8))


def test_the_padding_row_is_zero_at_construction():
    assert torch.equal(Embeddings(10, 5).weight[1], torch.zeros(5))
    assert Embeddings(10, 5).lut.padding_idx == 1


def test_load_pretrained_copies_into_the_first_columns(tmp_path):
    emb = Embeddings(10, 5)
    before = emb.weight.detach().clone()
    vectors = torch.randn(10, 3, dtype=torch.float64)
    torch.save(vectors, tmp_path / "v.pt")
    emb.load_pretrained(tmp_path / "v.pt")
    assert torch.equal(emb.weight[:, :3].detach(), vectors.float())
    assert torch.equal(emb.weight[:, 3:].detach(), before[:, 3:])


def test_load_pretrained_rejects_a_file_that_is_not_a_tensor(tmp_path):
    torch.save({"vectors": torch.zeros(10, 3)}, tmp_path / "dict.pt")
    with pytest.raises(
        UserError, match=r"dict\.pt: pretrained embeddings must be a \[vocab x dim\] tensor"
    ):
        Embeddings(10, 5).load_pretrained(tmp_path / "dict.pt")


def test_load_pretrained_rejects_a_one_dimensional_tensor(tmp_path):
    torch.save(torch.zeros(10), tmp_path / "flat.pt")
    with pytest.raises(UserError, match=r"\[vocab x dim\]"):
        Embeddings(10, 5).load_pretrained(tmp_path / "flat.pt")


def test_load_pretrained_rejects_an_unreadable_file(tmp_path):
    (tmp_path / "words.txt").write_text("the 0.1 0.2 0.3\n")
    with pytest.raises(UserError, match=r"words\.txt: cannot load pretrained embeddings"):
        Embeddings(10, 5).load_pretrained(tmp_path / "words.txt")
    with pytest.raises(UserError, match=r"missing\.pt: pretrained embeddings file not found"):
        Embeddings(10, 5).load_pretrained(tmp_path / "missing.pt")


def test_load_pretrained_leaves_the_table_unchanged_when_it_refuses(tmp_path):
    emb = Embeddings(10, 5)
    before = emb.weight.detach().clone()
    torch.save(torch.ones(11, 3), tmp_path / "rows.pt")
    with pytest.raises(UserError, match="11 x 3"):
        emb.load_pretrained(tmp_path / "rows.pt")
    assert torch.equal(emb.weight.detach(), before)


def test_freeze_stops_gradients_to_the_table():
    emb = Embeddings(10, 5)
    emb.freeze()
    assert emb.weight.requires_grad is False
    assert emb(IDS).requires_grad is False


def test_dropout_is_active_in_train_mode_and_off_in_eval_mode():
    torch.manual_seed(0)
    emb = Embeddings(10, 5, dropout=0.5)
    lookup = emb.weight[IDS].detach()
    emb.train()
    first = emb(IDS).detach()
    second = emb(IDS).detach()
    assert not torch.equal(first, second)
    nonpad = IDS != 1
    # each surviving value is scaled by 1 / (1 - 0.5); some values are dropped
    assert ((first == 0) | torch.isclose(first, 2 * lookup)).all()
    assert (first[nonpad] == 0).any() and (first[nonpad] != 0).any()
    emb.eval()
    assert torch.equal(emb(IDS).detach(), lookup)
    assert torch.equal(emb(IDS).detach(), lookup)
