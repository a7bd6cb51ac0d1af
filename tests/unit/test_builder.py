"""build_model and model_dims: sizes, contradictions, sharing, initialisation, pretrained and frozen
embeddings."""

import math

import pytest
import torch
import torch.nn as nn

from onmt_lite.data.vocab import Vocab
from onmt_lite.models.attention import GlobalAttention
from onmt_lite.models.builder import build_model, model_dims
from onmt_lite.models.copy_generator import CopyGenerator, NMTGenerator
from onmt_lite.models.rnn_decoder import InputFeedRNNDecoder, StdRNNDecoder
from onmt_lite.opts import build_parser, model_opts, parse, train_opts
from onmt_lite.utils.errors import UserError
from tests.model_helpers import (
    SRC_VOCAB,
    TGT_VOCAB,
    VOCABS,
    make_batch,
    make_model,
    model_options,
    random_pairs,
)

# Per-side sizes only (no -word_vec_size, -layers or -rnn_size), all different from each other.
PER_SIDE = [
    "-src_word_vec_size",
    5,
    "-tgt_word_vec_size",
    7,
    "-enc_rnn_size",
    10,
    "-dec_rnn_size",
    10,
    "-enc_layers",
    1,
    "-dec_layers",
    1,
]


def options(*args):
    """Options without the -word_vec_size/-layers/-rnn_size overrides of ``model_options``."""
    return parse(
        build_parser("test", [model_opts, train_opts]),
        ["-data", "unused", "-dropout", "0"] + [str(a) for a in args],
    )


def build(opt, vocabs=VOCABS, seed=0):
    torch.manual_seed(seed)
    return build_model(opt, vocabs)


def forward_backward(model):
    batch = make_batch(random_pairs(2))
    dec_out, _ = model(batch.src, batch.tgt, batch.src_lengths)
    dec_out.sum().backward()


# ---- sizes: -word_vec_size, -layers, -rnn_size override the per-side options ----


def test_per_side_options_set_each_side_when_no_override_is_given():
    dims = model_dims(options(*PER_SIDE, "-enc_layers", 3, "-dec_layers", 3))
    assert vars(dims) == {
        "src_emb": 5,
        "src_input": 5,
        "tgt_emb": 7,
        "enc_layers": 3,
        "dec_layers": 3,
        "enc_rnn": 10,
        "dec_rnn": 10,
    }


def test_overrides_replace_both_sides_even_when_the_per_side_options_disagree():
    opt = options(
        "-src_word_vec_size",
        5,
        "-tgt_word_vec_size",
        7,
        "-enc_rnn_size",
        10,
        "-dec_rnn_size",
        12,
        "-enc_layers",
        1,
        "-dec_layers",
        4,
        "-word_vec_size",
        6,
        "-layers",
        3,
        "-rnn_size",
        8,
    )
    dims = model_dims(opt)
    assert vars(dims) == {
        "src_emb": 6,
        "src_input": 6,
        "tgt_emb": 6,
        "enc_layers": 3,
        "dec_layers": 3,
        "enc_rnn": 8,
        "dec_rnn": 8,
    }


def test_per_side_sizes_give_the_module_shapes():
    model = build(options(*PER_SIDE, "-enc_layers", 2, "-dec_layers", 2))
    assert model.encoder.embeddings.weight.shape == (len(SRC_VOCAB), 5)
    assert model.decoder.embeddings.weight.shape == (len(TGT_VOCAB), 7)
    rnn = model.encoder.rnn
    assert (type(rnn), rnn.input_size, rnn.hidden_size, rnn.num_layers, rnn.bidirectional) == (
        nn.LSTM,
        5,
        10,
        2,
        False,
    )
    cells = model.decoder.rnn.cells
    assert len(cells) == 2
    assert (cells[0].input_size, cells[0].hidden_size) == (7 + 10, 10)  # embedding + input feed
    assert (cells[1].input_size, cells[1].hidden_size) == (10, 10)
    assert model.generator[0].weight.shape == (len(TGT_VOCAB), 10)


def test_override_sizes_give_the_module_shapes():
    model = build(options(*PER_SIDE, "-word_vec_size", 6, "-layers", 3, "-rnn_size", 8))
    assert model.encoder.embeddings.weight.shape == (len(SRC_VOCAB), 6)
    assert model.decoder.embeddings.weight.shape == (len(TGT_VOCAB), 6)
    assert (
        model.encoder.rnn.input_size,
        model.encoder.rnn.hidden_size,
        model.encoder.rnn.num_layers,
    ) == (6, 8, 3)
    assert len(model.decoder.rnn.cells) == 3
    assert (model.decoder.rnn.cells[0].input_size, model.decoder.rnn.cells[0].hidden_size) == (
        6 + 8,
        8,
    )
    assert model.generator[0].weight.shape == (len(TGT_VOCAB), 8)


def test_a_brnn_encoder_splits_rnn_size_over_two_directions():
    model, _ = make_model("-encoder_type", "brnn", "-rnn_size", 10)
    rnn = model.encoder.rnn
    assert (rnn.hidden_size, rnn.bidirectional, rnn.num_layers) == (5, True, 2)
    batch = make_batch(random_pairs(2))
    memory_bank, _, state = model.encode(batch.src, batch.src_lengths)
    assert memory_bank.shape[2] == 10
    assert state.hidden[0].shape == (2, 2, 10)  # [layers x batch x both directions]


def test_gru_builds_gru_modules():
    model = build(options(*PER_SIDE, "-rnn_type", "GRU", "-input_feed", 0))
    assert type(model.encoder.rnn) is nn.GRU and type(model.decoder.rnn) is nn.GRU


# ---- contradictions ----


def test_share_embeddings_with_different_vocabularies_is_refused():
    with pytest.raises(UserError, match="-share_embeddings.*-share_vocab"):
        build(model_options("-share_embeddings"), VOCABS)


def test_share_embeddings_with_different_word_vector_sizes_is_refused():
    with pytest.raises(UserError, match="-share_embeddings"):
        build(options(*PER_SIDE, "-share_embeddings"), {"src": TGT_VOCAB, "tgt": TGT_VOCAB})


def test_share_decoder_embeddings_needs_tgt_word_vec_size_equal_to_rnn_size():
    with pytest.raises(
        UserError, match=r"-share_decoder_embeddings.*-tgt_word_vec_size \(6\).*-rnn_size \(8\)"
    ):
        model_dims(model_options("-share_decoder_embeddings"))  # word_vec_size 6, rnn_size 8
    with pytest.raises(UserError, match="-share_decoder_embeddings"):
        build(options(*PER_SIDE, "-share_decoder_embeddings"))  # tgt 7, rnn 10


def test_different_encoder_and_decoder_rnn_sizes_are_refused():
    with pytest.raises(UserError, match=r"-enc_rnn_size 10 and -dec_rnn_size 12"):
        model_dims(options(*PER_SIDE, "-dec_rnn_size", 12))


def test_different_layer_counts_are_refused_without_bridge():
    with pytest.raises(UserError, match=r"-enc_layers 1 and -dec_layers 3.*-bridge"):
        build(options(*PER_SIDE, "-dec_layers", 3))


@pytest.mark.parametrize("rnn_type", ["LSTM", "GRU"])
@pytest.mark.parametrize("encoder_type", ["rnn", "brnn"])
def test_with_bridge_different_layer_counts_build_and_the_decoder_starts_with_dec_layers(
    rnn_type, encoder_type
):
    model = build(
        options(
            *PER_SIDE,
            "-enc_layers",
            1,
            "-dec_layers",
            3,
            "-bridge",
            "-rnn_type",
            rnn_type,
            "-encoder_type",
            encoder_type,
        )
    )
    assert model.encoder.rnn.num_layers == 1
    batch = make_batch(random_pairs(2))
    memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
    assert len(state.hidden) == (2 if rnn_type == "LSTM" else 1)
    assert all(h.shape == (3, 2, 10) for h in state.hidden)
    dec_out, _, next_state = model.decode(batch.tgt[:-1], memory_bank, lengths, state)
    assert dec_out.shape == (batch.tgt.size(0) - 1, 2, 10)
    assert next_state.hidden[0].shape == (3, 2, 10)


def test_an_odd_rnn_size_is_refused_for_brnn_only():
    with pytest.raises(UserError, match=r"brnn.*-rnn_size.*9"):
        model_dims(model_options("-encoder_type", "brnn", "-rnn_size", 9))
    assert model_dims(model_options("-encoder_type", "rnn", "-rnn_size", 9)).enc_rnn == 9


# ---- sharing ----


def test_share_embeddings_uses_one_table_for_both_sides():
    model = build(model_options("-share_embeddings"), {"src": TGT_VOCAB, "tgt": TGT_VOCAB})
    assert model.encoder.embeddings is model.decoder.embeddings
    assert model.encoder.embeddings.weight is model.decoder.embeddings.weight


def test_share_embeddings_accepts_equal_vocabularies_that_are_different_objects():
    copy = Vocab(TGT_VOCAB.itos[4:])
    model = build(model_options("-share_embeddings"), {"src": copy, "tgt": TGT_VOCAB})
    assert model.encoder.embeddings.weight is model.decoder.embeddings.weight


def test_without_share_embeddings_the_tables_are_separate():
    model = build(model_options(), {"src": TGT_VOCAB, "tgt": TGT_VOCAB})
    assert model.encoder.embeddings.weight is not model.decoder.embeddings.weight


@pytest.mark.parametrize("copy", [False, True])
def test_share_decoder_embeddings_ties_the_generator_output_weight(copy):
    model, _ = make_model(
        "-word_vec_size", 8, "-share_decoder_embeddings", *(["-copy_attn"] if copy else [])
    )
    output_layer = model.generator.linear if copy else model.generator[0]
    assert output_layer.weight is model.decoder.embeddings.weight
    assert sum(p is model.decoder.embeddings.weight for p in model.parameters()) == 1


def test_both_sharing_options_tie_encoder_decoder_and_generator_to_one_weight():
    model = build(
        model_options("-word_vec_size", 8, "-share_embeddings", "-share_decoder_embeddings"),
        {"src": TGT_VOCAB, "tgt": TGT_VOCAB},
    )
    weight = model.encoder.embeddings.weight
    assert model.decoder.embeddings.weight is weight and model.generator[0].weight is weight


@pytest.mark.parametrize("copy", [False, True])
def test_without_share_decoder_embeddings_the_generator_has_its_own_weight(copy):
    model, _ = make_model("-word_vec_size", 8, *(["-copy_attn"] if copy else []))
    output_layer = model.generator.linear if copy else model.generator[0]
    assert output_layer.weight is not model.decoder.embeddings.weight


# ---- initialisation ----


def test_param_init_draws_every_parameter_within_the_bound_and_zeroes_padding_rows():
    model, _ = make_model("-param_init", 0.05)
    for emb in (model.encoder.embeddings, model.decoder.embeddings):
        assert torch.equal(emb.weight[1], torch.zeros_like(emb.weight[1]))
        assert emb.weight[torch.arange(emb.weight.size(0)) != 1].abs().min() > 0
    for name, param in model.named_parameters():
        assert param.abs().max() <= 0.05, name
    largest = max(p.abs().max().item() for p in model.parameters())
    assert largest > 0.045  # the whole range is used, not a narrower one


def test_param_init_glorot_draws_matrices_within_the_xavier_bound():
    model, _ = make_model("-param_init", 0.05, "-param_init_glorot")
    matrices = 0
    for name, param in model.named_parameters():
        if param.dim() > 1:
            fan_out, fan_in = param.shape
            bound = math.sqrt(6 / (fan_in + fan_out))
            assert bound > 0.05, name
            assert param.abs().max() <= bound + 1e-6, name  # float32 draws
            assert param.abs().max() > 0.05, name  # not the -param_init uniform draw
            matrices += 1
        else:
            assert param.abs().max() <= 0.05, name  # vectors keep -param_init
    assert matrices > 5
    for emb in (model.encoder.embeddings, model.decoder.embeddings):
        assert torch.equal(emb.weight[1], torch.zeros_like(emb.weight[1]))


def test_the_same_seed_gives_identical_parameters_and_another_seed_different_ones():
    first, _ = make_model("-copy_attn", "-bridge", seed=3)
    again, _ = make_model("-copy_attn", "-bridge", seed=3)
    other, _ = make_model("-copy_attn", "-bridge", seed=4)
    names = [name for name, _ in first.named_parameters()]
    assert names == [name for name, _ in other.named_parameters()]
    for (name, a), b, c in zip(first.named_parameters(), again.parameters(), other.parameters()):
        assert torch.equal(a, b), name
        assert not torch.equal(a, c), name


# ---- pretrained and frozen embeddings ----


@pytest.mark.parametrize("side", ["enc", "dec"])
def test_pretrained_vectors_fill_the_first_columns_of_the_embedding(tmp_path, side):
    vocab = SRC_VOCAB if side == "enc" else TGT_VOCAB
    vectors = torch.arange(len(vocab) * 4, dtype=torch.float32).view(len(vocab), 4) / 100 + 1
    path = tmp_path / "vectors.pt"
    torch.save(vectors, path)
    model = build(model_options(f"-pre_word_vecs_{side}", path))  # word_vec_size 6
    baseline = build(model_options())
    emb, base_emb = (
        (model.encoder.embeddings, baseline.encoder.embeddings)
        if side == "enc"
        else (model.decoder.embeddings, baseline.decoder.embeddings)
    )
    assert torch.equal(emb.weight[:, :4].detach(), vectors)
    # the other columns keep their init
    assert torch.equal(emb.weight[:, 4:], base_emb.weight[:, 4:])
    other = baseline.decoder.embeddings if side == "enc" else baseline.encoder.embeddings
    unloaded = model.decoder.embeddings if side == "enc" else model.encoder.embeddings
    assert torch.equal(unloaded.weight, other.weight)


def test_pretrained_vectors_with_the_wrong_row_count_are_refused(tmp_path):
    path = tmp_path / "vectors.pt"
    torch.save(torch.zeros(len(SRC_VOCAB) + 1, 4), path)
    with pytest.raises(UserError, match=rf"{len(SRC_VOCAB) + 1} x 4.*{len(SRC_VOCAB)} rows"):
        build(model_options("-pre_word_vecs_enc", path))


def test_of_pretrained_vectors_wider_than_the_embedding_the_first_columns_are_kept(
    tmp_path, logged
):
    """As OpenNMT-py 1.x (a 1.x command line with 100-dimensional GloVe vectors and
    -word_vec_size 6 was refused here), with a warning."""
    path = tmp_path / "vectors.pt"
    vectors = torch.randn(len(TGT_VOCAB), 7)
    torch.save(vectors, path)
    model = build(model_options("-pre_word_vecs_dec", path))
    assert torch.equal(model.decoder.embeddings.weight.detach(), vectors[:, :6])
    assert logged == [
        f"{path}: pretrained embeddings of 7 dimensions, the first 6 kept (the word vector size)"
    ]


@pytest.mark.parametrize("side", ["enc", "dec"])
def test_fix_word_vecs_freezes_that_side_only(side):
    model, _ = make_model(f"-fix_word_vecs_{side}")
    frozen = (model.encoder if side == "enc" else model.decoder).embeddings.weight
    assert frozen.requires_grad is False
    assert all(p.requires_grad for p in model.parameters() if p is not frozen)
    forward_backward(model)
    assert frozen.grad is None
    trainable = (model.decoder if side == "enc" else model.encoder).embeddings.weight
    assert trainable.grad is not None and trainable.grad.abs().sum() > 0


def test_without_fix_word_vecs_every_parameter_requires_grad():
    model, _ = make_model()
    assert all(p.requires_grad for p in model.parameters())


# ---- module choices ----


def test_copy_attn_builds_a_copy_generator_otherwise_an_nmt_generator():
    assert type(make_model("-copy_attn")[0].generator) is CopyGenerator
    assert type(make_model()[0].generator) is NMTGenerator


def test_input_feed_chooses_the_decoder_class():
    assert type(make_model("-input_feed", 0)[0].decoder) is StdRNNDecoder
    assert type(make_model("-input_feed", 1)[0].decoder) is InputFeedRNNDecoder


def test_copy_attention_is_a_separate_module_unless_reused():
    assert isinstance(make_model("-copy_attn")[0].decoder.copy_attention, GlobalAttention)
    assert make_model("-copy_attn", "-reuse_copy_attn")[0].decoder.copy_attention is None
    assert make_model()[0].decoder.copy_attention is None


def test_copy_attn_type_sets_the_separate_copy_attention_type():
    decoder = make_model("-copy_attn", "-global_attention", "general", "-copy_attn_type", "mlp")[
        0
    ].decoder
    assert decoder.copy_attention.attn_type == "mlp" and decoder.attn.attn_type == "general"
    assert (
        make_model("-copy_attn", "-global_attention", "dot")[0].decoder.copy_attention.attn_type
        == "dot"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["-layers", 2],
        ["-layers", 2, "-input_feed", 0],
        [
            "-encoder_type",
            "transformer",
            "-decoder_type",
            "transformer",
            "-heads",
            2,
            "-word_vec_size",
            8,
            "-transformer_ff",
            16,
            "-position_encoding",
        ],
    ],
)
def test_set_dropout_reaches_every_dropout_of_the_model(args):
    """A model built with dropout, its dropout then set to 0: in training mode it computes what it
    computes in eval mode (no dropout anywhere); set to other rates, every dropout holds them."""
    from onmt_lite.models.builder import set_dropout
    from onmt_lite.models.dropout import Dropout
    from tests.model_helpers import VOCABS, make_batch, model_options, random_pairs

    torch.manual_seed(0)
    model = build_model(
        model_options(*args, "-dropout", 0.5, "-attention_dropout", 0.5), VOCABS
    ).double()
    batch = make_batch(random_pairs(4))
    model.eval()
    reference, _ = model(batch.src, batch.tgt, batch.src_lengths)
    model.train()
    set_dropout(model, 0.0, 0.0)
    trained, _ = model(batch.src, batch.tgt, batch.src_lengths)
    torch.testing.assert_close(trained, reference, rtol=0, atol=1e-12)
    set_dropout(model, 0.2, 0.1)
    rates = [m.p for m in model.modules() if isinstance(m, (torch.nn.Dropout, Dropout))]
    rates += [
        m.dropout for m in model.modules() if isinstance(m, torch.nn.RNNBase) and m.num_layers > 1
    ]
    assert rates and set(rates) == {0.2}
    assert all(m.dropout_p == 0.1 for m in model.modules() if hasattr(m, "dropout_p"))
