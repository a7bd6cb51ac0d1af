"""Models with source word features: the builder sizes the encoder by the merged embedding, refuses
the combinations that cannot work, and the features change the encoding; checkpoints without them
load."""

import pytest
import torch

from onmt_lite.data.vocab import Vocab, vocabs_from_plain, vocabs_to_plain
from onmt_lite.models.builder import build_model
from onmt_lite.utils.errors import UserError
from tests.model_helpers import TRANSFORMER, VOCABS, model_options

# 7 and 16 values with specials
FEATS = [
    Vocab(["DET", "NOUN", "VERB"]),
    Vocab([f"x{i}" for i in range(12)]),
]
WITH_FEATS = {**VOCABS, "src_feats": FEATS}


def test_the_encoder_takes_the_concatenated_size_by_1x_rule():
    model = build_model(model_options("-feat_vec_exponent", 0.5), WITH_FEATS)  # word size 6
    assert [lut.embedding_dim for lut in model.encoder.embeddings.feat_luts] == [
        int(7**0.5),
        int(16**0.5),
    ]
    assert model.encoder.rnn.input_size == 6 + 2 + 4
    assert model.decoder.embeddings.n_feats == 0


def test_features_change_the_encoding_and_their_padding_rows_are_zero():
    torch.manual_seed(0)
    model = build_model(model_options("-feat_merge", "sum", "-param_init", 0.5), WITH_FEATS).eval()
    assert all(
        torch.equal(lut.weight[1], torch.zeros(6)) for lut in model.encoder.embeddings.feat_luts
    )
    src = torch.tensor([[4], [5]])
    lengths = torch.tensor([2])
    feats_a = torch.tensor([[[4, 4]], [[5, 4]]])
    feats_b = torch.tensor([[[6, 4]], [[5, 4]]])
    bank_a, _, _ = model.encode(src, lengths, feats_a)
    bank_b, _, _ = model.encode(src, lengths, feats_b)
    assert not torch.allclose(bank_a[0], bank_b[0])


def test_a_transformer_with_concatenated_features_is_refused_with_a_hint():
    with pytest.raises(
        UserError,
        match=r"-src_word_vec_size \(14\) equal to -rnn_size \(8\).*-feat_merge sum or mlp",
    ):
        build_model(model_options(*TRANSFORMER, "-feat_vec_size", 3), WITH_FEATS)
    model = build_model(
        model_options(*TRANSFORMER, "-feat_merge", "mlp", "-feat_vec_size", 3), WITH_FEATS
    )
    assert model.encoder.embeddings.embedding_size == 8


def test_shared_embeddings_with_features_are_refused():
    shared = {"src": VOCABS["src"], "tgt": VOCABS["src"], "src_feats": FEATS}
    with pytest.raises(UserError, match="-share_embeddings with source word features"):
        build_model(model_options("-share_embeddings"), shared)


def test_vocabularies_without_features_are_saved_as_before_and_old_ones_load():
    plain = vocabs_to_plain(VOCABS)
    assert set(plain) == {"src", "tgt"}
    assert vocabs_from_plain(plain)["src_feats"] == []
    with_feats = vocabs_from_plain(vocabs_to_plain(WITH_FEATS))
    assert with_feats["src_feats"] == FEATS


def test_options_of_a_checkpoint_from_before_features_build_the_same_model():
    opt = model_options()
    for name in ("feat_merge", "feat_vec_size", "feat_vec_exponent"):
        delattr(opt, name)
    torch.manual_seed(0)
    old = build_model(opt, VOCABS)
    torch.manual_seed(0)
    new = build_model(model_options(), VOCABS)
    assert {k: v.shape for k, v in old.state_dict().items()} == {
        k: v.shape for k, v in new.state_dict().items()
    }


def test_a_cnn_encoder_projects_the_concatenated_features_and_they_change_its_encoding():
    torch.manual_seed(0)
    cnn = ["-encoder_type", "cnn", "-decoder_type", "cnn", "-param_init", 0.5]
    model = build_model(model_options(*cnn, "-feat_vec_exponent", 0.5), WITH_FEATS).eval()
    assert model.encoder.linear.in_features == 6 + 2 + 4
    src = torch.tensor([[4], [5], [6]])
    lengths = torch.tensor([3])
    feats_a = torch.tensor([[[4, 4]], [[5, 4]], [[4, 4]]])
    feats_b = torch.tensor([[[4, 4]], [[5, 4]], [[6, 4]]])  # the last word's feature differs
    with torch.no_grad():
        bank_a, _, _ = model.encode(src, lengths, feats_a)
        bank_b, _, _ = model.encode(src, lengths, feats_b)
    assert not torch.allclose(bank_a[2], bank_b[2])
    assert not torch.allclose(bank_a[1], bank_b[1])  # a width-3 convolution sees its neighbour
