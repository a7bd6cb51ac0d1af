import torch

from onmt_lite.models.attention import GlobalAttention


def test_dot_attention_by_hand_and_zero_weight_on_padding():
    attn = GlobalAttention(2, "dot").double()
    # [1 x 3 x 2]
    memory = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]]], dtype=torch.float64)
    query = torch.tensor([[[2.0, 0.0]]], dtype=torch.float64)
    _, align = attn(query, memory, torch.tensor([2]))
    expected = torch.softmax(torch.tensor([2.0, 0.0], dtype=torch.float64), 0)
    torch.testing.assert_close(align[0, 0, :2], expected)
    assert align[0, 0, 2].item() == 0.0


def test_every_type_sums_to_one_and_masks_padding_exactly():
    torch.manual_seed(0)
    memory = torch.randn(3, 5, 4)
    query = torch.randn(3, 2, 4)
    lengths = torch.tensor([5, 2, 1])
    for kind in ("dot", "general", "mlp"):
        attn_h, align = GlobalAttention(4, kind)(query, memory, lengths)
        assert attn_h.shape == (3, 2, 4) and align.shape == (3, 2, 5)
        torch.testing.assert_close(align.sum(-1), torch.ones(3, 2))
        assert (align[1, :, 2:] == 0).all() and (align[2, :, 1:] == 0).all()


def test_coverage_enters_the_score():
    torch.manual_seed(0)
    memory = torch.randn(2, 4, 3)
    query = torch.randn(2, 1, 3)
    lengths = torch.tensor([4, 4])
    for kind in ("dot", "general", "mlp"):
        attn = GlobalAttention(3, kind, coverage=True)
        _, without = attn(query, memory, lengths, torch.zeros(2, 1, 4))
        _, with_cov = attn(
            query, memory, lengths, torch.tensor([[[3.0, 0, 0, 0]], [[0, 0, 0, 2.0]]])
        )
        assert not torch.allclose(without, with_cov), kind
