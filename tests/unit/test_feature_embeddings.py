"""Source word features in Embeddings: 1.x's size rule and the concat, sum and mlp merges, checked
against the formulas written out from the module's own tables."""

import pytest
import torch

from onmt_lite.models.embeddings import Embeddings, FeatureSpec

WORDS = torch.tensor([[4, 5], [6, 1]])  # [len 2 x batch 2]
FEATS = torch.tensor([[[4, 5], [5, 6]], [[6, 4], [1, 1]]])  # [len 2 x batch 2 x 2 features]


def test_feature_sizes_follow_the_exponent_rule_without_feat_vec_size():
    spec = FeatureSpec((10, 30), "concat", -1, 0.7)
    assert spec.dims(8) == [int(10**0.7), int(30**0.7)] == [5, 10]
    assert spec.output_size(8) == 8 + 5 + 10


def test_feat_vec_size_sets_every_feature_size_and_sum_uses_the_word_size():
    assert FeatureSpec((10, 30), "concat", 3).dims(8) == [3, 3]
    assert FeatureSpec((10, 30), "mlp", 3).output_size(8) == 8
    assert FeatureSpec((10, 30), "sum", 3).dims(8) == [8, 8]
    assert FeatureSpec((10, 30), "sum", 3).output_size(8) == 8


def test_concat_is_the_word_vector_followed_by_each_feature_vector():
    torch.manual_seed(0)
    emb = Embeddings(10, 4, features=FeatureSpec((7, 12), "concat", -1, 0.7))
    assert [lut.embedding_dim for lut in emb.feat_luts] == [int(7**0.7), int(12**0.7)]
    out = emb(WORDS, feats=FEATS)
    assert out.shape == (2, 2, 4 + 3 + 5) and emb.embedding_size == 12
    for i in range(2):
        for b in range(2):
            expected = torch.cat(
                [
                    emb.lut.weight[WORDS[i, b]],
                    emb.feat_luts[0].weight[FEATS[i, b, 0]],
                    emb.feat_luts[1].weight[FEATS[i, b, 1]],
                ]
            )
            torch.testing.assert_close(out[i, b], expected)


def test_sum_adds_word_sized_feature_vectors():
    torch.manual_seed(0)
    emb = Embeddings(10, 4, features=FeatureSpec((7, 12), "sum"))
    out = emb(WORDS, feats=FEATS)
    assert out.shape == (2, 2, 4)
    expected = emb.lut.weight[6] + emb.feat_luts[0].weight[6] + emb.feat_luts[1].weight[4]
    torch.testing.assert_close(out[1, 0], expected)


def test_mlp_is_a_relu_of_a_linear_map_of_the_concatenation_back_to_the_word_size():
    torch.manual_seed(0)
    emb = Embeddings(10, 4, features=FeatureSpec((7, 12), "mlp", 2))
    linear = emb.feat_mlp[0]
    assert tuple(linear.weight.shape) == (4, 4 + 2 + 2)
    out = emb(WORDS, feats=FEATS)
    concat = torch.cat([emb.lut.weight[5], emb.feat_luts[0].weight[5], emb.feat_luts[1].weight[6]])
    expected = torch.clamp(linear.weight @ concat + linear.bias, min=0)
    torch.testing.assert_close(out[0, 1], expected)


def test_position_encoding_scales_the_merged_vector_by_its_own_size():
    torch.manual_seed(0)
    emb = Embeddings(10, 4, position_encoding=True, features=FeatureSpec((7,), "concat", 2))
    out = emb(WORDS, feats=FEATS[..., :1])
    concat = torch.cat([emb.lut.weight[6], emb.feat_luts[0].weight[6]])  # position 1 of column 0
    angles = torch.tensor([1.0, 1.0 / 10000 ** (2 / 6), 1.0 / 10000 ** (4 / 6)])
    sinusoid = torch.stack([angles.sin(), angles.cos()], -1).flatten()
    torch.testing.assert_close(out[1, 0], concat * 6**0.5 + sinusoid)


def test_a_model_with_features_refuses_ids_without_them():
    emb = Embeddings(10, 4, features=FeatureSpec((7, 12)))
    with pytest.raises(ValueError, match="take 2 word feature"):
        emb(WORDS)
    with pytest.raises(ValueError, match="take 2 word feature"):
        emb(WORDS, feats=FEATS[..., :1])
