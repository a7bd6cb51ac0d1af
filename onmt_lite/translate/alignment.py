"""Word alignments of translations (``-report_align``, ``-align_debug``), as OpenNMT-py 1.x makes
them.

After the search, the decoder runs once more, teacher-forced over each finished hypothesis
(inputs ``<s> w1 .. wn``, as 1.x's), and asked for its alignment head (``TransformerDecoder``'s
``attns["align"]``): the output at position t predicts token t+1, so its row of the alignment is
token t+1's. Each output token is aligned to its most attended source token; the Pharaoh pairs
``src-tgt`` (0-based) are sorted by source, then target index. With an ensemble the models'
alignments are averaged.
"""

import torch

from onmt_lite.data.vocab import BOS_ID, PAD_ID, UNK_ID
from onmt_lite.models.transformer import TransformerDecoder
from onmt_lite.utils.errors import UserError


def check_alignment_models(models, option="-report_align"):
    """A UserError unless every model has a Transformer decoder with its alignment head."""
    for model in models:
        decoder = model.decoder
        if not isinstance(decoder, TransformerDecoder):
            raise UserError(
                f"{option} needs a Transformer decoder (-decoder_type transformer): the alignment "
                "is a decoder layer's attention over the source, and an RNN decoder has no layers "
                "of it"
            )
        problem = decoder.alignment.problem(
            len(decoder.layers), decoder.layers[0].context_attn.heads
        )
        if problem:
            raise UserError(
                f"{option}: the model's {problem}; the head is the model's: train one with "
                "-alignment_layer and -alignment_heads that its decoder has"
            )


def decoder_inputs(hypotheses, vocab_size):
    """``[max_len + 1 x R]`` long: ``<s>`` then each hypothesis's tokens (lists of ids; copied
    words, ids from ``vocab_size`` on, as ``<unk>``), then padding."""
    length = 1 + max((len(tokens) for tokens in hypotheses), default=0)
    inputs = torch.full((length, len(hypotheses)), PAD_ID, dtype=torch.long)
    inputs[0] = BOS_ID
    for row, tokens in enumerate(hypotheses):
        inputs[1 : len(tokens) + 1, row] = torch.tensor(tokens, dtype=torch.long)
    return inputs.masked_fill(inputs >= vocab_size, UNK_ID)


@torch.no_grad()
def alignment_matrices(models, batch, hypotheses, vocab_size):
    """The alignment ``[n_tokens x src_len]`` of each hypothesis: ``hypotheses`` is a list of
    ``(example in batch, token ids)`` pairs; every model's alignment head, averaged, one
    teacher-forced pass for all."""
    rows = torch.tensor(
        [example for example, _ in hypotheses], dtype=torch.long, device=batch.src.device
    )
    inputs = decoder_inputs([tokens for _, tokens in hypotheses], vocab_size).to(batch.src.device)
    total = None
    for model in models:
        memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths, batch.src_feats)
        state = state.map(lambda t, dim: t.index_select(dim, rows))
        _, attns, _ = model.decode(
            inputs,
            memory_bank.index_select(1, rows),
            lengths.index_select(0, rows),
            state,
            need_attention=False,
            need_alignment=True,
        )
        total = attns["align"] if total is None else total + attns["align"]
    align = (total / len(models)).float().cpu()  # [T x R x S]
    src_lengths = batch.src_lengths_cpu[rows.cpu()]
    return [
        align[: len(tokens), row, : int(src_lengths[row])]
        for row, (_, tokens) in enumerate(hypotheses)
    ]


def pharaoh(matrix):
    """``"src-tgt src-tgt ..."``: each output token (row of ``matrix`` ``[n_tokens x src_len]``)
    with its most attended source token, sorted by source then target index (1.x's order); "" for
    None (an empty line)."""
    if matrix is None:
        return ""
    pairs = (
        sorted((int(src), tgt) for tgt, src in enumerate(matrix.argmax(1).tolist()))
        if matrix.numel()
        else []
    )
    return " ".join(f"{src}-{tgt}" for src, tgt in pairs)


def align_results(models, batch, hypothesis_ids: dict, results: list, vocab_size: int) -> None:
    """Set the ``alignment`` of the Results of ``batch``'s examples: each n-best hypothesis's
    (``hypothesis_ids``: ``{line: the token ids of its n-best}``), one teacher-forced pass."""
    lines = batch.indices_cpu.tolist()
    hypotheses = [(b, tokens) for b, line in enumerate(lines) for tokens in hypothesis_ids[line]]
    matrices = iter(alignment_matrices(models, batch, hypotheses, vocab_size))
    for line in lines:
        results[line].alignment = [next(matrices) for _ in hypothesis_ids[line]]
