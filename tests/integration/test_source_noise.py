"""Source noise in training (-data_to_noise, -src_noise, -src_noise_prob; preprocess
-subword_prefix): the noised corpus's batches against their plain versions, exact resume,
refusals."""

import os
import random

import pytest

from onmt_lite.data.iterator import BatchIterator
from onmt_lite.data.noise import SourceNoise
from onmt_lite.data.shards import VOCAB_FORMAT, load_plain, shard_paths, vocab_path
from onmt_lite.models.checkpoint import load_checkpoint
from onmt_lite.utils.errors import UserError
from tests.helpers import TINY_MODEL, run_in_process, step_losses, train_in_process, write_lines
from tests.unit.test_noise import infilled_from


def sentences(n, seed):
    """Texts of 1-3 'sentences' of words w0..w9, each ended by '.' or '?'."""
    rng = random.Random(seed)
    return [
        " ".join(
            " ".join(
                [f"w{rng.randrange(10)}" for _ in range(rng.randint(1, 4))] + [rng.choice(".?")]
            )
            for _ in range(rng.randint(1, 3))
        )
        for _ in range(n)
    ]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Corpus a (160 pairs, noised in the tests) and b (40), target = source; word tokens, so
    -subword_prefix ''."""
    from onmt_lite.opts import build_parser, config_opts, parse, preprocess_opts
    from onmt_lite.preprocess import preprocess

    directory = tmp_path_factory.mktemp("noise")
    files = {}
    for name, n, seed in (("a", 160, 1), ("b", 40, 2), ("valid", 20, 3)):
        files[name] = write_lines(directory / f"{name}.txt", sentences(n, seed))
    prefix = str(directory / "data")
    preprocess(
        parse(
            build_parser("p", [config_opts, preprocess_opts]),
            [
                "-train_src",
                files["a"],
                files["b"],
                "-train_tgt",
                files["a"],
                files["b"],
                "-train_ids",
                "a",
                "b",
                "-valid_src",
                files["valid"],
                "-valid_tgt",
                files["valid"],
                "-save_data",
                prefix,
                "-subword_prefix",
                "",
                "-dynamic_dict",
            ],
        )
    )
    return prefix


def test_infilled_batches_are_the_plain_ones_with_whole_words_replaced_and_resume_alike(data):
    record = load_plain(vocab_path(data), VOCAB_FORMAT, "vocab")
    assert record["subword_prefix"] == "" and record["subword_prefix_is_joiner"] is False
    noise = SourceNoise(["infilling"], [0.4], record["src"], "", False)
    paths = shard_paths(data, "train_a")

    def stream(with_noise, state=None, n=30):
        batches = BatchIterator(
            paths, 16, shuffle=True, seed=3, repeat=True, noise=noise if with_noise else None
        )
        if state:
            batches.load_state_dict(state)
        out = []
        for batch in batches:
            out.append(batch)
            if len(out) == n:
                return out, batches.state_dict()

    plain, _ = stream(False)
    noised, _ = stream(True)
    changed = 0
    for p, q in zip(plain, noised):  # 30 batches: 3 epochs of 10
        assert (
            q.tgt.equal(p.tgt)
            and q.indices.equal(p.indices)
            and p.src_map is not None
            and q.src_map is None
        )
        for b in range(p.batch_size):
            source = tuple(p.src[: int(p.src_lengths[b]), b].tolist())
            output = tuple(q.src[: int(q.src_lengths[b]), b].tolist())
            assert infilled_from(source, output, tuple(range(len(source))))
            changed += source != output
    assert changed > 0.5 * sum(p.batch_size for p in plain)
    first, state = stream(True, n=13)
    rest, _ = stream(True, state=state, n=17)
    assert [b.src.tolist() for b in first + rest] == [b.src.tolist() for b in noised]


def test_one_text_under_two_corpus_ids_is_noised_two_ways(data, tmp_path):
    """The same shard under two names (a corpus listed twice, both noised): the same batches, other
    noise."""
    import shutil

    record = load_plain(vocab_path(data), VOCAB_FORMAT, "vocab")
    noise = SourceNoise(["infilling"], [0.4], record["src"], "", False)
    (path,) = shard_paths(data, "train_a")
    twin = str(tmp_path / os.path.basename(path).replace("train_a", "train_twin"))
    shutil.copyfile(path, twin)

    def first_batches(paths, with_noise=True):
        batches = iter(
            BatchIterator(
                paths, 16, shuffle=True, seed=3, repeat=True, noise=noise if with_noise else None
            )
        )
        return [next(batches) for _ in range(5)]

    one = first_batches([path])
    other = first_batches([twin])
    assert [b.indices.tolist() for b in one] == [b.indices.tolist() for b in other]
    assert [b.src.tolist() for b in one] != [b.src.tolist() for b in other]
    assert [b.src.tolist() for b in one] == [b.src.tolist() for b in first_batches([path])]


ARGS = [
    *TINY_MODEL,
    "-data_ids",
    "a",
    "b",
    "-data_weights",
    3,
    1,
    "-optim",
    "adam",
    "-learning_rate",
    "0.01",
    "-report_every",
    1,
    "-valid_steps",
    100,
    "-save_checkpoint_steps",
    3,
    "-seed",
    5,
]
NOISE = [
    "-data_to_noise",
    "a",
    "-src_noise",
    "sen_shuffling",
    "infilling",
    "-src_noise_prob",
    0.5,
    0.3,
]


def test_a_resumed_noised_run_gives_the_losses_of_the_uninterrupted_one_and_noise_changes_them(
    data, tmp_path
):
    _, full = train_in_process(data, str(tmp_path / "full"), *ARGS, *NOISE, "-train_steps", 7)
    _, first = train_in_process(data, str(tmp_path / "part"), *ARGS, *NOISE, "-train_steps", 3)
    _, second = train_in_process(
        data,
        str(tmp_path / "part"),
        *ARGS,
        *NOISE,
        "-train_steps",
        7,
        "-train_from",
        tmp_path / "part_step_3.pt",
    )
    _, plain = train_in_process(data, str(tmp_path / "plain"), *ARGS, "-train_steps", 7)
    full_losses = step_losses(full)
    assert sorted(full_losses) == list(range(1, 8))
    assert {**step_losses(first), **step_losses(second)} == full_losses
    assert len(step_losses(plain)) == 7
    # the same seed and batches but for the noise: the weights after step 1 (a's batch) differ
    noised, unnoised = (
        load_checkpoint(str(tmp_path / f"{run}_step_3.pt"))["model"] for run in ("full", "plain")
    )
    assert any(not noised[name].equal(unnoised[name]) for name in noised)


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            ["-src_noise", "infilling", "-src_noise_prob", 0.1],
            "-src_noise without -data_to_noise noises nothing",
        ),
        (["-data_to_noise", "a"], "-data_to_noise without -src_noise noises nothing"),
        (
            ["-data_to_noise", "a", "-src_noise", "infilling"],
            "-src_noise names 1 noise(s) but -src_noise_prob gives 0",
        ),
        (
            ["-data_to_noise", "c", "-src_noise", "infilling", "-src_noise_prob", 0.1],
            "-data_to_noise c: this run trains on the corpora a, b",
        ),
        ([*NOISE, "-copy_attn"], "train without -copy_attn"),
    ],
)
def test_noise_options_that_do_not_go_together_are_refused_before_training(
    data, tmp_path, args, expected
):
    with pytest.raises(UserError) as refused:
        train_in_process(data, str(tmp_path / "m"), *ARGS, "-train_steps", 1, *args)
    assert expected in str(refused.value)
    assert not os.path.exists(tmp_path / "m_step_1.pt")


def test_infilling_word_tokens_with_sentencepiece_s_prefix_is_refused_and_mask_is_refused(tmp_path):
    text = write_lines(tmp_path / "t.txt", sentences(30, 4))
    result = run_in_process(
        "preprocess",
        "-train_src",
        text,
        "-train_tgt",
        text,
        "-train_ids",
        "a",
        "-save_data",
        tmp_path / "d",
    )
    assert result.returncode == 0, result.stderr
    result = run_in_process(
        "train",
        "-data",
        tmp_path / "d",
        *TINY_MODEL,
        "-data_ids",
        "a",
        "-data_to_noise",
        "a",
        "-src_noise",
        "infilling",
        "-src_noise_prob",
        0.2,
        "-train_steps",
        1,
        "-save_model",
        tmp_path / "m",
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "starts a word by its -subword_prefix '\u2581', so nothing would be infilled"
        in result.stderr
    )
    result = run_in_process("train", "-data", tmp_path / "d", "-src_noise", "mask")
    assert result.returncode == 2 and "word masking is not implemented" in result.stderr


def test_noise_with_guided_alignment_is_refused(tmp_path):
    """The alignments point at source positions before the noise moved or removed their words."""
    text = sentences(20, 5)
    src = write_lines(tmp_path / "s.txt", text)
    align = write_lines(
        tmp_path / "a.txt", [" ".join(f"{i}-{i}" for i in range(len(t.split()))) for t in text]
    )
    result = run_in_process(
        "preprocess",
        "-train_src",
        src,
        "-train_tgt",
        src,
        "-train_ids",
        "a",
        "-train_align",
        align,
        "-subword_prefix",
        "",
        "-save_data",
        tmp_path / "d",
    )
    assert result.returncode == 0, result.stderr
    result = run_in_process(
        "train",
        "-data",
        tmp_path / "d",
        "-data_ids",
        "a",
        *NOISE,
        "-encoder_type",
        "transformer",
        "-decoder_type",
        "transformer",
        "-layers",
        1,
        "-rnn_size",
        8,
        "-word_vec_size",
        8,
        "-heads",
        2,
        "-transformer_ff",
        8,
        "-lambda_align",
        0.05,
        "-alignment_layer",
        0,
        "-train_steps",
        1,
        "-save_model",
        tmp_path / "m",
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        "-src_noise moves and removes source words, which the -train_align alignments"
        in result.stderr
    )
    assert not os.path.exists(tmp_path / "m_step_1.pt")
