"""Text to translate: read, tokenized as in training, batched by length, empty lines set aside."""

from onmt_lite.data.batch import ShardView
from onmt_lite.data.copy import EX_UNK_ID
from onmt_lite.data.corpus import Tokenizer, read_lines
from onmt_lite.data.example import feature_ids, make_example
from onmt_lite.data.features import FeatureReader
from onmt_lite.data.iterator import pooled_batches
from onmt_lite.data.shards import make_shard
from onmt_lite.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from onmt_lite.utils.errors import UserError


def prefix_ids(example, vocab_size):
    """The ids a target prefix forces (``-tgt_prefix``): its target-vocabulary ids, but a word the
    vocabulary lacks is copied (id ``vocab_size`` + its place in the example's source vocabulary)
    when the source has it (copy models), and the specials (a literal ``</s>``...) are ``<unk>``: a
    prefix never ends a sentence."""
    alignment = example.get("alignment")
    ids = []
    for position, token in enumerate(example["tgt"]):
        if token in (PAD_ID, BOS_ID, EOS_ID):
            token = UNK_ID
        elif token == UNK_ID and alignment is not None and alignment[position] != EX_UNK_ID:
            token = vocab_size + alignment[position]
        ids.append(token)
    return ids


def read_file_lines(path):
    """All lines of a UTF-8 file (errors name the file and line)."""
    return [text for _, text in read_lines(path)]


class TextBatches:
    """Batches of source lines (and optional targets), in length order; ``indices`` say the line.

    Args:
        sources: list of strings. targets: list of strings or None.
        vocabs: ``{"src": Vocab, "tgt": Vocab}``. tokenizers: (source, target) Tokenizer.
        copy: build the copy data (dynamic dictionary).
        first_index: the index of the first line in the batches' ``indices`` (lines from several
            callers decoded together keep distinct indices).
        prefixes: the targets are prefixes to force (``-tgt_prefix``): ``prefixes`` is then
            ``{index: prefix ids}`` (``prefix_ids``) of the lines decoded, else None.
        where: ``(name, line number)`` of the first source line, for errors (a line whose tokens
            carry another number of word features than the model's ``vocabs["src_feats"]``).

    ``src_tokens`` are each line's words, without their features.
    """

    def __init__(
        self,
        sources,
        targets,
        vocabs,
        tokenizers,
        copy,
        first_index=0,
        prefixes=False,
        where=("the source", 1),
    ):
        if targets is not None and len(targets) != len(sources):
            raise UserError(f"-src has {len(sources)} lines but -tgt has {len(targets)}")
        self.n_lines = len(sources)
        feat_vocabs = vocabs.get("src_feats") or []
        reader = FeatureReader(len(feat_vocabs), where[0], holder="the model's source tokens")
        split = [reader.split(where[1] + i, tokenizers[0](line)) for i, line in enumerate(sources)]
        self.src_tokens = [words for words, _ in split]
        tgt_tokens = [tokenizers[1](line) for line in targets] if targets is not None else None
        self.has_target = targets is not None
        examples = []
        self.lines = []
        for i, tokens in enumerate(self.src_tokens):
            if tokens:  # an empty source gives an empty output line, without running the model
                examples.append(
                    make_example(
                        first_index + i,
                        tokens,
                        tgt_tokens[i] if tgt_tokens else [],
                        vocabs["src"],
                        vocabs["tgt"],
                        copy,
                    )
                )
                if feat_vocabs:
                    examples[-1]["src_feats"] = feature_ids(split[i][1], feat_vocabs)
                self.lines.append(i)
        self.prefixes = (
            {example["index"]: prefix_ids(example, len(vocabs["tgt"])) for example in examples}
            if prefixes
            else None
        )
        self.view = ShardView(make_shard(examples)) if examples else None
        self._cuts = {}  # (batch_size, batch_type) -> the batches' example positions

    def _cut(self, batch_size, batch_type):
        """The batches' example positions (once, not per stream); none without examples."""
        if self.view is None:
            return []
        key = (batch_size, batch_type)
        if key not in self._cuts:
            self._cuts[key] = pooled_batches(
                self.view.src_lengths.tolist(),
                self.view.tgt_lengths.tolist(),
                batch_size,
                batch_type,
                pool_factor=64,
            )
        return self._cuts[key]

    def count(self, batch_size, batch_type):
        """How many batches ``batches`` yields in all."""
        return len(self._cut(batch_size, batch_type))

    def batches(self, batch_size, batch_type, part=0, parts=1):
        """Yield Batch objects; ``batch.indices`` holds each example's line number (from
        ``first_index``). With ``parts``, only every ``parts``-th batch from the ``part``-th (from
        0): a stream's share."""
        for ids in self._cut(batch_size, batch_type)[part::parts]:
            yield self.view.batch(ids)


def build_tokenizers(preprocess, src_spm="", tgt_spm=""):
    """Source and target tokenizers as in training, sentencepiece models overridable."""
    lower = bool(preprocess.get("lower"))
    return (
        Tokenizer(src_spm or preprocess.get("src_spm") or "", lower),
        Tokenizer(tgt_spm or preprocess.get("tgt_spm") or "", lower),
    )
