"""Property-based tests (hypothesis) of the text reader and the translator on random Unicode
lines."""

import os
import tempfile

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from onmt_lite.data.corpus import Tokenizer, read_lines
from onmt_lite.data.features import FEAT_SEP
from onmt_lite.models.builder import build_model
from onmt_lite.translate.search import SearchOptions
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.errors import UserError
from tests.model_helpers import VOCABS, model_options

# Any Unicode text but the line separator itself, NUL (refused by the reader) and lone surrogates
# (which cannot be encoded as UTF-8); Unicode's other line and paragraph separators are allowed.
LINE = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\x00"), max_size=40
)
WORDY_LINE = st.lists(st.one_of(st.sampled_from(["s1", "s2", "s7", "t1"]), LINE), max_size=8).map(
    " ".join
)
FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def write_bytes(data):
    fd, path = tempfile.mkstemp(suffix=".txt")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


@FUZZ
@given(st.lists(LINE, max_size=20))
def test_the_reader_gives_back_every_line_exactly(lines):
    path = write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    try:
        assert [text for _, text in read_lines(path)] == [line + "\n" for line in lines]
    finally:
        os.remove(path)
    for line in lines:
        tokens = Tokenizer()(line)
        assert all(token and token == "".join(token.split()) for token in tokens)


@FUZZ
@given(st.binary(max_size=200))
def test_the_reader_accepts_or_refuses_any_bytes_with_a_located_error(data):
    path = write_bytes(data)
    try:
        n_lines = len(list(read_lines(path)))
        assert n_lines == data.count(b"\n") + (not data.endswith(b"\n") and len(data) > 0)
    except UserError as err:
        assert str(err).startswith(f"{path}:") and ("UTF-8" in str(err) or "NUL" in str(err))
    finally:
        os.remove(path)


@pytest.fixture(scope="module", params=["plain", "copy"])
def translator(request):
    torch.manual_seed(0)
    args = ["-copy_attn"] if request.param == "copy" else []
    model = build_model(model_options(*args), VOCABS).eval()
    options = SearchOptions(beam_size=3, n_best=2, max_length=12)
    return Translator([model], VOCABS, search=options, replace_unk=True, batch_size=4)


@FUZZ
@given(lines=st.lists(WORDY_LINE, max_size=12))
@example(lines=["s1 s2", "s7 a\uffe8b"])  # the feature separator: the branch below, every run
def test_the_translator_gives_one_result_per_line_and_never_breaks_a_line(translator, lines):
    if any(FEAT_SEP in line for line in lines):
        # U+FFE8 separates a token's word features (docs/usage.md): a model without features
        # refuses a token that has some, naming the line
        with pytest.raises(UserError, match=r"the source:\d+: token \d+ .* U\+FFE8"):
            translator.translate(lines)
        return
    results = translator.translate(lines)
    assert len(results) == len(lines)
    output = "".join(h + "\n" for r in results for h in r.hypotheses[:1])
    assert output.count("\n") == len(lines)
    for line, result in zip(lines, results):
        assert len(result.hypotheses) == 2  # n-best, an empty line too: groups stay aligned
        assert all("\n" not in h and "\r" not in h for h in result.hypotheses)
        if not line.split():  # not decoded: empty outputs
            assert result.hypotheses == ["", ""] and result.scores == [0.0, 0.0]
