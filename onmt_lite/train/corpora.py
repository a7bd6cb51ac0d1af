"""The training data of ``-data``: its vocab record, the corpora chosen by -data_ids and
-data_weights, the stream of training batches, and where that stream resumes from a checkpoint.

Data preprocessed without -train_ids has one unnamed corpus (``PREFIX.train.N.pt``), read by one
``BatchIterator`` whose position is ``{epoch, shard, batch}`` (as before corpora had names). Several
corpora (``PREFIX.train_ID.N.pt``) are read by a ``WeightedBatches``, whose position is every
corpus's plus the round robin's turn.
"""

import os

from onmt_lite.data.iterator import BatchIterator, WeightedBatches, describe_round, saved_round
from onmt_lite.data.noise import SourceNoise
from onmt_lite.data.shards import VOCAB_FORMAT, load_plain, shard_paths, train_kind, vocab_path
from onmt_lite.data.vocab import SPECIALS, vocabs_from_plain
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.logging import logger


def load_data(opt):
    """The vocab record, the vocabularies, ``{corpus id: training shard paths}`` of the -data_ids
    corpora (id None: the unnamed corpus) and the validation shard paths of ``-data``."""
    if not os.path.exists(vocab_path(opt.data)) and not shard_paths(opt.data, "train"):
        raise UserError(
            f"-data {opt.data}: no training shards {opt.data}.train.N.pt (run onmt_lite_preprocess)"
        )
    record = load_plain(
        vocab_path(opt.data), VOCAB_FORMAT, "vocabulary file (from onmt_lite_preprocess)"
    )
    vocabs = vocabs_from_plain(record)
    return record, vocabs, chosen_corpora(opt, record), shard_paths(opt.data, "valid")


def _holding(ids):
    if ids == [None]:
        return "one unnamed corpus (preprocessed without -train_ids)"
    return f"the corpora {', '.join(ids)}"


def check_data_ids(opt, record):
    """-data_ids must name corpora of the data (each once), -data_weights give one weight per id,
    and several corpora exclude -single_pass and -epochs (each corpus has epochs of its own)."""
    held = record.get("train_ids", [None])
    ids = list(opt.data_ids)
    if ids == [None] and held != [None]:
        raise UserError(
            f"-data {opt.data} holds {_holding(held)}: choose them with -data_ids (and their "
            f"-data_weights)"
        )
    for corpus_id in ids:
        if corpus_id not in held:
            raise UserError(
                f"-data_ids {corpus_id}: -data {opt.data} has no such corpus (it holds "
                f"{_holding(held)})"
            )
        if ids.count(corpus_id) > 1:
            raise UserError(f"-data_ids {' '.join(ids)}: {corpus_id} is given twice")
    if len(opt.data_weights) != len(ids):
        raise UserError(
            f"-data_weights gives {len(opt.data_weights)} weight(s) for {len(ids)} -data_ids "
            f"corpora: give one whole number per corpus"
        )
    if len(ids) > 1 and (opt.single_pass or opt.epochs):
        raise UserError(
            f"-{'single_pass' if opt.single_pass else 'epochs'} counts passes over one corpus; "
            f"with several -data_ids each corpus starts its next epoch on its own: stop with "
            f"-train_steps instead"
        )


def chosen_corpora(opt, record):
    """``{corpus id: shard paths}`` of the -data_ids corpora, in their order."""
    check_data_ids(opt, record)
    corpora = {}
    for corpus_id in opt.data_ids:
        corpora[corpus_id] = shard_paths(opt.data, train_kind(corpus_id))
        if not corpora[corpus_id]:
            raise UserError(
                f"-data {opt.data}: no training shards {opt.data}.{train_kind(corpus_id)}.N.pt "
                f"(run onmt_lite_preprocess)"
            )
    return corpora


def describe_corpora(corpora, weights, record):
    """A log line's words on the training corpora: shards, examples and, with several, their
    weights."""
    counts = record.get("counts", {})

    def described(corpus_id, paths):
        examples = counts.get(train_kind(corpus_id), {}).get("examples")
        return f"{len(paths)} shard(s)" + (f", {examples} examples" if examples is not None else "")

    if list(corpora) == [None]:
        return f"training corpus: {described(None, corpora[None])}"
    return "training corpora: " + "; ".join(
        f"{corpus_id} (weight {weight}): {described(corpus_id, paths)}"
        for (corpus_id, paths), weight in zip(corpora.items(), weights)
    )


def training_batches(opt, corpora, record, src_vocab):
    """The stream of training batches: one corpus's ``BatchIterator`` (ending as -single_pass and
    -epochs say), or a ``WeightedBatches`` of several repeating ones; the -data_to_noise corpora's
    sources noised as -src_noise says."""
    noise = source_noise(opt, corpora, record, src_vocab)

    def corpus_batches(corpus_id, paths, repeat, epochs):
        return BatchIterator(
            paths,
            opt.batch_size,
            opt.batch_type,
            opt.pool_factor,
            shuffle=True,
            seed=opt.seed,
            repeat=repeat,
            vocab=record.get("vocab_id"),
            multiple=opt.batch_size_multiple,
            epochs=epochs,
            noise=noise if corpus_id in opt.data_to_noise else None,
        )

    if len(corpora) == 1:
        ((corpus_id, paths),) = corpora.items()
        return corpus_batches(corpus_id, paths, not opt.single_pass, opt.epochs)
    return WeightedBatches(
        {
            corpus_id: corpus_batches(corpus_id, paths, True, 0)
            for corpus_id, paths in corpora.items()
        },
        opt.data_weights,
    )


def source_noise(opt, corpora, record, src_vocab):
    """The ``SourceNoise`` of -src_noise and -src_noise_prob for the -data_to_noise corpora (None
    without them), after checking that the options go together."""
    if not opt.src_noise and not opt.data_to_noise:
        return None
    if len(opt.src_noise_prob) != len(opt.src_noise):
        raise UserError(
            f"-src_noise names {len(opt.src_noise)} noise(s) but -src_noise_prob gives "
            f"{len(opt.src_noise_prob)} probabilities: give one per noise"
        )
    if not opt.src_noise or not opt.data_to_noise:
        given, missing = (
            ("-src_noise", "-data_to_noise") if opt.src_noise else ("-data_to_noise", "-src_noise")
        )
        raise UserError(
            f"{given} without {missing} noises nothing: -data_to_noise names the corpora "
            f"(-data_ids) whose sources get the noises of -src_noise"
        )
    for corpus_id in opt.data_to_noise:
        if corpus_id not in corpora:
            raise UserError(
                f"-data_to_noise {corpus_id}: this run trains on {_holding(list(corpora))}"
            )
    if opt.copy_attn:
        raise UserError(
            "-src_noise changes the sources, which copy attention's per-example source "
            "vocabularies describe as they were: train without -copy_attn"
        )
    if opt.lambda_align > 0:
        raise UserError(
            "-src_noise moves and removes source words, which the -train_align alignments of "
            "-lambda_align point at as they were: train without one of them"
        )
    if record.get("src_feats"):
        raise UserError(
            f"-src_noise changes the source words, which would no longer line up with the word "
            f"features of -data {opt.data}: train without -src_noise, or on data without features"
        )
    noise = SourceNoise(
        opt.src_noise,
        opt.src_noise_prob,
        src_vocab.itos,
        record.get("subword_prefix", "\u2581"),
        record.get("subword_prefix_is_joiner", False),
    )
    if "infilling" in opt.src_noise and not noise.word_start[len(SPECIALS) :].any():
        raise UserError(
            f"-src_noise infilling: no source word of -data {opt.data} starts a word by its "
            f"-subword_prefix {record.get('subword_prefix', '')!r}, so nothing would be infilled; "
            f"for text without subwords preprocess with -subword_prefix ''"
        )
    return noise


def restore_position(batches, saved):
    """Continue ``batches`` (``training_batches``'s) from a checkpoint's data position ``saved``; a
    position of the other kind (one corpus against several) cannot be, and the data starts again."""
    if isinstance(batches, WeightedBatches) != ("corpora" in saved):
        logger.info(
            "the checkpoint's data position is of "
            + ("one corpus" if "corpora" not in saved else "several corpora")
            + ": the training data starts from its beginning"
        )
        return
    if "corpora" in saved and saved_round(saved) != batches.round:
        logger.info(
            f"the checkpoint took turns {describe_round(saved_round(saved))}, this run "
            f"{describe_round(batches.round)}: each corpus continues, the turns start "
            "again"
        )
    batches.load_state_dict(saved)
