"""An example: one sentence pair as plain id lists, the unit that shards store and batches
gather."""

from onmt_lite.data import copy as copy_data


def make_example(
    lineno,
    src_tokens,
    tgt_tokens,
    src_vocab,
    tgt_vocab,
    dynamic_dict,
    keep_target=False,
    links=None,
    features=None,
    feat_vocabs=(),
):
    """One example as plain id lists (plus the copy data with ``dynamic_dict``, the target words
    themselves with ``keep_target``: validation references for BLEU, and the alignment ``links``,
    ``(source, target)`` token index pairs, when given). With ``features``, a ``FeatureReader``, the
    source tokens are split into words and features, ``src_feats`` holding each feature's ids in
    ``feat_vocabs``; the copy data sees the words alone."""
    if features is not None:
        features.check_target(lineno, tgt_tokens)
        src_tokens, columns = features.split(lineno, src_tokens)
    example = {
        "index": lineno,
        "src": src_vocab.numericalize(src_tokens),
        "tgt": tgt_vocab.numericalize(tgt_tokens),
    }
    if feat_vocabs:
        example["src_feats"] = feature_ids(columns, feat_vocabs)
    if links is not None:
        example["align"] = list(links)
    if keep_target:
        example["tgt_tokens"] = list(tgt_tokens)
    if dynamic_dict:
        ex_words = copy_data.source_vocab(src_tokens)
        example["src_ex_vocab"] = ex_words
        example["src_ex_tgt_ids"] = copy_data.target_ids(ex_words, tgt_vocab)
        example["src_map"] = copy_data.copy_ids(src_tokens, ex_words)
        example["alignment"] = copy_data.alignment_ids(tgt_tokens, ex_words)
    return example


def feature_ids(columns, feat_vocabs):
    """Each feature's values (``columns``, from ``FeatureReader.split``) as ids of its
    vocabulary."""
    return [vocab.numericalize(column) for vocab, column in zip(feat_vocabs, columns)]


def make_aligned_example(lineno, src_tokens, tgt_tokens, links, **options):
    """``make_example`` of a pair with its alignment links, as ``corpus_pairs`` gives it with an
    alignment file (``options``: make_example's keyword arguments)."""
    return make_example(lineno, src_tokens, tgt_tokens, links=links, **options)
