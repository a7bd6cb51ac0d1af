"""-tgt_prefix: each line's target prefix is forced, then the search goes on; checked against a
greedy decoding written out here (the model run teacher-forced over the whole sequence at every
step)."""

import pytest
import torch

from onmt_lite.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from onmt_lite.translate.search import SearchOptions
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.errors import UserError
from tests.helpers import scores_agree
from tests.model_helpers import SRC_VOCAB, TGT_VOCAB, TRANSFORMER, VOCABS, make_model

# compares lines decoded alone and together: run again under other kernels (make test-kernels)
pytestmark = pytest.mark.kernels

SOURCES = ["s1 s2 s3", "s4 s5 s1 s2", "s6", "s3 oov1 s2", "s7 s8 s9 s10 s11"]
PREFIXES = ["t1 t2", "", "t3 t4 t5 t6 t0", "t1 oov1", "s2"]
V = len(TGT_VOCAB)


def models(args, count=1):
    """float32 models (the Translator's copy data is float32)."""
    return [make_model(*args, seed=seed)[0].float().eval() for seed in range(count)]


def copy_log_probs(model, hidden, attention, source, ex_words):
    """log p over the vocabulary and the source's words: the copy generator, then each copied word
    that the vocabulary has moved onto its vocabulary id (written out, word by word)."""
    src_map = torch.zeros(len(source), 1, len(ex_words))
    for position, word in enumerate(source):
        src_map[position, 0, ex_words.index(word)] = 1
    probs = model.generator(hidden, attention, src_map)[0].exp()
    for j, word in enumerate(ex_words[2:], 2):
        if word in TGT_VOCAB:
            probs[TGT_VOCAB.lookup(word)] += probs[V + j]
            probs[V + j] = 0
    return probs.log()


def reference(ensemble, source_line, prefix_line, max_length):
    """(words, summed log-probability) of greedy decoding after forcing the prefix: every step runs
    each model over ``<s>`` and all tokens so far, averages the log-probabilities of the next token,
    takes the prefix's next token while there is one (a copy id for a word only the source has,
    else <unk>), then the best until </s> or ``max_length`` tokens."""
    source = source_line.split()
    prefix = prefix_line.split()
    src = torch.tensor([SRC_VOCAB.lookup(w) for w in source]).view(-1, 1)
    lengths = torch.tensor([len(source)])
    ex_words = ["<unk>", "<blank>"] + list(dict.fromkeys(source))
    copy = ensemble[0].decoder.copy_attn

    def forced(word):
        if word in TGT_VOCAB:
            return TGT_VOCAB.lookup(word)
        return V + ex_words.index(word) if copy and word in ex_words else UNK_ID

    tokens = []
    total = 0.0
    with torch.no_grad():
        while len(tokens) < max_length:
            tgt = torch.tensor([BOS_ID] + [t if t < V else UNK_ID for t in tokens] + [PAD_ID]).view(
                -1, 1
            )
            outputs = []
            for model in ensemble:
                dec_out, attns = model(src, tgt, lengths)
                outputs.append(
                    copy_log_probs(model, dec_out[-1], attns["copy"][-1], source, ex_words)
                    if copy
                    else model.generator(dec_out[-1])[0]
                )
            log_probs = torch.stack(outputs).mean(0)
            token = (
                forced(prefix[len(tokens)])
                if len(tokens) < len(prefix)
                else int(log_probs.argmax())
            )
            total += float(log_probs[token])
            if token == EOS_ID:
                break
            tokens.append(token)
    return [TGT_VOCAB.itos[t] if t < V else ex_words[t - V] for t in tokens], total


def translator(ensemble, **search):
    options = {"beam_size": 1, "max_length": 9, **search}
    return Translator(
        ensemble, VOCABS, search=SearchOptions(**options), tgt_prefix=True, batch_size=3
    )


@pytest.mark.parametrize(
    "args,count",
    [([], 1), (["-copy_attn"], 1), (TRANSFORMER, 1), ([], 2), ([*TRANSFORMER, "-copy_attn"], 2)],
)
def test_greedy_with_a_prefix_is_the_prefix_then_the_written_out_greedy_decoding(args, count):
    ensemble = models(args, count)
    results = translator(ensemble).translate(SOURCES, PREFIXES)
    for source, prefix, result in zip(SOURCES, PREFIXES, results):
        words, score = reference(ensemble, source, prefix, 9)
        assert result.tokens[0] == words
        assert result.scores[0] == pytest.approx(score, abs=1e-4)


def test_an_oov_prefix_word_is_copied_by_a_copy_model_and_unknown_to_a_plain_one():
    plain, copy = (
        translator(models(args)).translate(["s3 oov1 s2"], ["oov1 oov7"])[0]
        for args in ([], ["-copy_attn"])
    )
    assert plain.tokens[0][:2] == ["<unk>", "<unk>"]
    assert copy.tokens[0][:2] == ["oov1", "<unk>"]  # oov7 is in no vocabulary


@pytest.mark.parametrize("args", [[], ["-copy_attn"], TRANSFORMER])
def test_every_n_best_hypothesis_of_a_beam_starts_with_the_prefix_and_the_first_is_the_best(args):
    results = translator(models(args), beam_size=5, n_best=5).translate(SOURCES, PREFIXES)
    for prefix, result in zip(PREFIXES, results):
        assert len(result.tokens) == 5
        for words in result.tokens:
            assert words[: len(prefix.split())] == (
                prefix.replace("oov1", "<unk>").split()
                if "-copy_attn" not in args
                else prefix.split()
            )
        assert result.scores == sorted(result.scores, reverse=True)


@pytest.mark.parametrize("args,beam", [([], 4), (TRANSFORMER, 3), (["-copy_attn"], 3)])
def test_a_batch_of_different_prefix_lengths_translates_each_line_as_on_its_own(args, beam):
    search = translator(models(args), beam_size=beam, n_best=min(beam, 2))
    together = search.translate(SOURCES, PREFIXES)
    for i, result in enumerate(together):
        alone = search.translate([SOURCES[i]], [PREFIXES[i]])[0]
        assert alone.tokens[0] == result.tokens[0]  # (a random model's later hypotheses may tie)
        for x, y, words in zip(alone.scores, result.scores, alone.tokens):
            assert scores_agree(x, y, len(words) + 1), (x, y)


def test_an_empty_prefix_decodes_as_without_a_prefix():
    ensemble = models([])
    options = SearchOptions(beam_size=3, n_best=2, max_length=9)
    free = Translator(ensemble, VOCABS, search=options).translate(SOURCES)
    prefixed = Translator(ensemble, VOCABS, search=options, tgt_prefix=True).translate(
        SOURCES, [""] * len(SOURCES)
    )
    assert [r.tokens for r in prefixed] == [r.tokens for r in free]
    assert [r.scores for r in prefixed] == [r.scores for r in free]


def test_a_whole_target_line_as_prefix_is_reproduced_and_sampling_keeps_it_too():
    line = "t3 t1 t4 t4 t0 s2"
    for search in ({"beam_size": 3}, {"sampling": True, "sampling_topk": 0}):
        result = translator(models([]), max_length=20, **search).translate(["s1 s2"], [line])[0]
        assert result.tokens[0][:6] == line.split()


def test_a_prefix_never_ends_the_sentence_and_its_specials_are_unknown_words():
    result = translator(models([]), beam_size=3, min_length=0).translate(
        ["s1 s2"], ["t1 </s> <s> t2"]
    )[0]
    assert result.tokens[0][:4] == ["t1", "<unk>", "<unk>", "t2"]


def test_the_prefix_counts_in_the_length_but_is_always_output_whole():
    ensemble = models([])
    long = translator(ensemble, max_length=3).translate(["s1 s2"], ["t1 t2 t3 t4 t5"])[0]
    assert long.tokens[0] == ["t1", "t2", "t3", "t4", "t5"]
    short = translator(ensemble, max_length=4).translate(["s1 s2"], ["t1 t2"])[0]
    assert (
        short.tokens[0] == reference(ensemble, "s1 s2", "t1 t2", 4)[0] and len(short.tokens[0]) <= 4
    )
    # -min_length counts the prefix: with a minimum of the prefix's length, </s> may follow it at
    # once
    ended = translator(ensemble, min_length=2, max_length=9).translate(["s1 s2"], ["t1 t2"])[0]
    assert ended.tokens[0] == reference(ensemble, "s1 s2", "t1 t2", 9)[0]


def test_prefixes_need_targets():
    with pytest.raises(UserError, match="-tgt_prefix needs -tgt"):
        translator(models([])).translate(["s1 s2"])
