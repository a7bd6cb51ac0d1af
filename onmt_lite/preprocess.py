"""Preprocessing: parallel text to a vocab file and shards of numericalised examples.

``preprocess(opt)`` reads the training corpora once to build the vocabularies, shared by all corpora
(unless vocabulary files are given), then again to write each corpus's shards of at most
``opt.shard_size`` examples. Every file is staged under a temporary name and renamed into place only
when everything succeeded.
"""

import functools
import os
import random

from onmt_lite.data import shards, vocab_building
from onmt_lite.data.corpus import CorpusStats, LengthLimits, Tokenizer, require_rereadable
from onmt_lite.data.example import make_aligned_example, make_example
from onmt_lite.data.features import FEAT_SEP, FeatureReader, corpus_feature_count
from onmt_lite.data.parallel import corpus_pairs
from onmt_lite.data.vocab import count_words
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import StagedOutputs
from onmt_lite.utils.locks import remove_stale_temporaries
from onmt_lite.utils.logging import logger
from onmt_lite.utils.output_paths import require_makeable_directory, require_outputs_not_inputs
from onmt_lite.utils.progress import Progress, count_lines


def output_directory(save_data):
    """The directory the outputs of ``save_data`` go into (``data/`` for ``data/ende`` and for
    ``data/``), as an absolute path."""
    return os.path.dirname(os.path.abspath(shards.vocab_path(save_data)))


def corpora_options(opt) -> list[tuple[str, str]]:
    """``(option, path)`` of each text file preprocessing reads (its corpora, the vocabulary and
    alignment files)."""
    corpora = [("-train_src", path) for path in opt.train_src]
    corpora += [("-train_tgt", path) for path in opt.train_tgt]
    corpora += [("-valid_src", opt.valid_src), ("-valid_tgt", opt.valid_tgt)]
    return [(option, path) for option, path in corpora if path]


def check_corpora_rereadable(opt):
    """Refuse a corpus that can be read only once (a pipe, standard input): each is read twice,
    the training files for the vocabulary and then for the shards, the validation files to count
    their lines and then for the shards."""
    for option, path in corpora_options(opt):
        require_rereadable(path, option, "preprocess reads it twice")


def check_log_file(opt):
    """Refuse a -log_file that is a file preprocessing reads: the log would be read as text. Checked
    before the log opens."""
    if opt.log_file:
        read = corpora_options(opt) + [
            (f"-{name}", getattr(opt, name))
            for name in ("src_vocab", "tgt_vocab", "train_align", "valid_align")
            if getattr(opt, name)
        ]
        require_outputs_not_inputs([("-log_file", opt.log_file)], read)


def check_outputs(save_data, overwrite):
    """Refuse an output directory that cannot be written or made, or existing outputs without
    ``overwrite``."""
    require_makeable_directory(output_directory(save_data), f"-save_data {save_data}")
    existing = (
        [shards.vocab_path(save_data)] if os.path.exists(shards.vocab_path(save_data)) else []
    )
    existing += shards.all_shard_paths(save_data)
    if existing and not overwrite:
        raise UserError(
            f"-save_data {save_data}: {existing[0]} already exists (use -overwrite to replace)"
        )
    return existing


def remove_stale_outputs(save_data):
    """Remove the temporaries that a killed preprocess left beside the outputs of ``save_data``
    (``.PREFIX.vocab.pt.XXXX.tmp``, ``.PREFIX.train.N.pt.XXXX.tmp``,
    ``.PREFIX.train_ID.N.pt.XXXX.tmp``, ...), saying so."""
    kinds = ("train*", "valid")  # train* covers the named corpora's train_ID
    patterns = [shards.vocab_path(save_data)] + [
        shards.shard_path(save_data, kind, "*") for kind in kinds
    ]
    for pattern in patterns:
        for stale in remove_stale_temporaries(pattern):
            logger.info(f"removed {stale}, left by an interrupted preprocess")


def with_progress(pairs, stats, src_path, desc, report_every=None):
    """Yield ``pairs`` while showing the lines read (``stats.read``) out of the lines of
    ``src_path``, and logging their number each time it passes a multiple of ``report_every``."""
    done = 0
    with Progress(count_lines(src_path), "lines", desc) as progress:
        for pair in pairs:
            progress.update(stats.read - done)
            if report_every and stats.read // report_every > done // report_every:
                logger.info(f"{desc}: {stats.read} lines read")
            done = stats.read
            yield pair
        progress.update(stats.read - done)


def training_corpora(opt):
    """``(corpus id, source path, target path)`` of each training corpus (-train_src, -train_tgt,
    -train_ids); the id is None for the one unnamed corpus of a run without -train_ids."""
    n_src = len(opt.train_src)
    ids = list(opt.train_ids)
    if len(opt.train_tgt) != n_src:
        raise UserError(
            f"-train_src gives {n_src} file(s) but -train_tgt {len(opt.train_tgt)}: give one "
            "target file per source file"
        )
    if ids == [None] and n_src > 1:
        raise UserError(
            f"-train_src gives {n_src} corpora: name each with -train_ids (one id per file)"
        )
    if ids != [None] and len(ids) != n_src:
        raise UserError(
            f"-train_ids gives {len(ids)} id(s) for {n_src} corpora (-train_src): give one id per "
            "corpus"
        )
    for corpus_id in ids:
        if corpus_id is not None and not shards.CORPUS_ID.match(corpus_id):
            raise UserError(
                f"-train_ids {corpus_id}: an id is made of letters, digits, - and _ (it names the "
                f"shard files PREFIX.train_ID.N.pt)"
            )
        if corpus_id is not None and ids.count(corpus_id) > 1:
            raise UserError(
                f"-train_ids {' '.join(ids)}: {corpus_id} is given twice (each corpus needs its "
                "own id)"
            )
    return list(zip(ids, opt.train_src, opt.train_tgt))


def count_training_words(corpora, tokenizers, limits, num_threads, n_feats):
    """Counts of the filtered training pairs of all ``corpora`` together: (source word Counter,
    target Counter, one Counter per source word feature)."""
    src_counter = count_words(())
    tgt_counter = count_words(())
    feat_counters = [count_words(()) for _ in range(n_feats)]
    for _, src_path, tgt_path in corpora:
        stats = CorpusStats()
        reader = FeatureReader(n_feats, src_path, tgt_path)
        pairs = corpus_pairs(src_path, tgt_path, *tokenizers, limits, stats, num_threads)
        for lineno, src_tokens, tgt_tokens in with_progress(pairs, stats, src_path, "vocabulary"):
            reader.check_target(lineno, tgt_tokens)
            words, columns = reader.split(lineno, src_tokens)
            src_counter.update(words)
            tgt_counter.update(tgt_tokens)
            for counter, column in zip(feat_counters, columns):
                counter.update(column)
        if stats.kept == 0:
            raise UserError(f"{src_path}: no training pairs left ({stats.summary()})")
    return src_counter, tgt_counter, feat_counters


def build_vocabs(opt, tokenizers, limits, n_feats=0):
    """The source, target and source word features' vocabularies (``data.vocab_building``), the
    training data (all the corpora of ``training_corpora(opt)``) counted once if one needs it."""
    counts = functools.cache(
        lambda: count_training_words(
            training_corpora(opt), tokenizers, limits, opt.num_threads, n_feats
        )
    )
    return vocab_building.build_vocabs(opt, counts, n_feats)


def write_corpus(
    corpus_type,
    src_path,
    tgt_path,
    tokenizers,
    limits,
    vocabs,
    vocab_id,
    opt,
    staged,
    align_path="",
):
    """Write the shards of one corpus (``corpus_type``: ``valid``, ``train`` or a named corpus's
    ``train_ID``; with the alignments of ``align_path``, if given) into ``staged``, each tied to the
    vocabularies (source, target, feature list) by ``vocab_id``; returns (CorpusStats, number of
    shards)."""
    stats = CorpusStats()
    training = corpus_type != "valid"
    finish = functools.partial(
        make_aligned_example if align_path else make_example,
        src_vocab=vocabs[0],
        tgt_vocab=vocabs[1],
        dynamic_dict=opt.dynamic_dict,
        keep_target=not training,
        features=FeatureReader(len(vocabs[2]), src_path, tgt_path),
        feat_vocabs=vocabs[2],
    )
    pairs = corpus_pairs(
        src_path, tgt_path, *tokenizers, limits, stats, opt.num_threads, finish, align_path
    )
    examples = with_progress(pairs, stats, src_path, corpus_type, opt.report_every)
    if training and opt.shuffle:
        examples = list(examples)
        random.Random(opt.seed).shuffle(examples)
    written = []
    chunk = []

    def write_shard():
        # numbered from 0, as OpenNMT-py 1.x numbers PREFIX.train.0.pt, PREFIX.valid.0.pt, ...
        written.append(shards.shard_path(opt.save_data, corpus_type, len(written)))
        staged.save(shards.make_shard(chunk, vocab_id), written[-1])
        chunk.clear()

    for example in examples:
        chunk.append(example)
        if len(chunk) == opt.shard_size:
            write_shard()
    if chunk:
        write_shard()
    if stats.kept == 0:
        raise UserError(f"{src_path}: no {corpus_type} pairs left ({stats.summary()})")
    return stats, len(written)


def vocab_record(src_vocab, tgt_vocab, feat_vocabs, vocab_id, opt, counts):
    return {
        "format": shards.VOCAB_FORMAT,
        "src": src_vocab.to_plain(),
        "tgt": tgt_vocab.to_plain(),
        "src_feats": [vocab.to_plain() for vocab in feat_vocabs],
        "vocab_id": vocab_id,
        "share_vocab": bool(opt.share_vocab),
        "dynamic_dict": bool(opt.dynamic_dict),
        "train_align": bool(opt.train_align),
        "lower": bool(opt.lower),
        "src_spm": opt.src_spm,
        "tgt_spm": opt.tgt_spm,
        "counts": counts,
        "train_ids": list(opt.train_ids),
        "subword_prefix": opt.subword_prefix,
        "subword_prefix_is_joiner": bool(opt.subword_prefix_is_joiner),
    }


def check_alignment_options(opt):
    """-valid_align needs -valid_src; alignment files index whitespace tokens, not sentencepiece
    pieces; one -train_align file aligns one training corpus."""
    if opt.valid_align and not opt.valid_src:
        raise UserError("-valid_align needs -valid_src and -valid_tgt (the pairs it aligns)")
    if opt.train_align and len(opt.train_src) > 1:
        raise UserError(
            f"-train_align aligns one training corpus; -train_src gives {len(opt.train_src)} "
            f"(guided alignment with several corpora is not supported)"
        )
    spm = [name for name in ("src_spm", "tgt_spm") if getattr(opt, name)]
    for name in ("train_align", "valid_align"):
        if getattr(opt, name) and spm:
            raise UserError(
                f"-{name} with -{spm[0]}: the alignments index the whitespace tokens of the text, "
                "not the sentencepiece pieces the model would see (give text already split into "
                f"pieces and alignments of those, without -{spm[0]})"
            )


def source_feature_count(opt):
    """The number of word features of the source tokens (those of the first non-empty line of the
    first training source); refused with sentencepiece, which would cut the features off their
    words."""
    n_feats = corpus_feature_count(opt.train_src[0])
    if n_feats and opt.src_spm:
        raise UserError(
            f"-src_spm with word features ({opt.train_src[0]} has tokens word{FEAT_SEP}feature): "
            "sentencepiece would split the features off their words; give text already split "
            "into pieces, each with its features, without -src_spm"
        )
    return n_feats


def preprocess(opt):
    """Run preprocessing for the parsed options; returns the list of files written."""
    if bool(opt.valid_src) != bool(opt.valid_tgt):
        raise UserError("-valid_src and -valid_tgt go together: give both or neither")
    check_alignment_options(opt)
    train_corpora = training_corpora(opt)
    check_corpora_rereadable(opt)
    existing = check_outputs(opt.save_data, opt.overwrite)
    remove_stale_outputs(opt.save_data)
    n_feats = source_feature_count(opt)
    tokenizers = (Tokenizer(opt.src_spm, opt.lower), Tokenizer(opt.tgt_spm, opt.lower))
    train_limits = LengthLimits(
        opt.src_seq_length_trunc, opt.tgt_seq_length_trunc, opt.src_seq_length, opt.tgt_seq_length
    )
    src_vocab, tgt_vocab, feat_vocabs = build_vocabs(opt, tokenizers, train_limits, n_feats)
    logger.info(
        f"vocabulary: {len(src_vocab)} source, {len(tgt_vocab)} target words (with specials)"
        + "".join(f"; feature {i}: {len(vocab)} values" for i, vocab in enumerate(feat_vocabs))
    )
    vocab_id = shards.vocab_id(
        src_vocab.to_plain(), tgt_vocab.to_plain(), [v.to_plain() for v in feat_vocabs]
    )
    counts = {}
    with StagedOutputs() as staged:
        # made now, after the vocabularies: a refused or failed run leaves no directory behind
        staged.make_directory(output_directory(opt.save_data), f"-save_data {opt.save_data}")
        corpora = [
            (shards.train_kind(corpus_id), src_path, tgt_path, train_limits, opt.train_align)
            for corpus_id, src_path, tgt_path in train_corpora
        ]
        if opt.valid_src:
            valid_limits = (
                train_limits
                if opt.filter_valid
                else LengthLimits(opt.src_seq_length_trunc, opt.tgt_seq_length_trunc)
            )
            corpora.append(("valid", opt.valid_src, opt.valid_tgt, valid_limits, opt.valid_align))
        for corpus_type, src_path, tgt_path, limits, align_path in corpora:
            stats, n_shards = write_corpus(
                corpus_type,
                src_path,
                tgt_path,
                tokenizers,
                limits,
                (src_vocab, tgt_vocab, feat_vocabs),
                vocab_id,
                opt,
                staged,
                align_path,
            )
            logger.info(f"{corpus_type}: {stats.summary()}; {n_shards} shard(s)")
            counts[corpus_type] = {"examples": stats.kept, "shards": n_shards}
        staged.save(
            vocab_record(src_vocab, tgt_vocab, feat_vocabs, vocab_id, opt, counts),
            shards.vocab_path(opt.save_data),
        )
        written = staged.final_paths()
        for stale in set(existing) - set(written):
            os.remove(stale)
        staged.commit()
    for path in written:
        logger.info(f"wrote {path}")
    return written
