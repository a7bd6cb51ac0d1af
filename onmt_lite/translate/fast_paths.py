"""The CPU-only fast paths of decoding, chosen here and nowhere else.

- packed weights (``packed.py``): every linear layer and the fused decoder cells on prepacked
  oneDNN weights;
- int8, ``-quantize int8`` (``packed.py``): the linear and recurrent layers dynamically quantised;
- decoding streams (``streams.py``): several searches side by side, each over its share of the
  batches;
- the allocator (``utils/memory.py``): glibc keeps freed memory instead of unmapping it (the
  commands only).

Each is for the CPU alone: on any other device ``prepare_model`` leaves the model as it is (int8 is
refused) but for ``-precision`` (``decoding_dtype``, ``cast_for_decoding``: a half-precision model
on CUDA, bf16 on a CPU with bfloat16 instructions), ``decoding_streams`` gives one stream in this
process, and ``utils.memory`` leaves the allocator alone. None of them may change what a
float32 model writes: packing changes the products' float rounding only, streams decode each
example exactly as one stream would (int8 changes the output slightly, which is why it is asked
for by name). Streams run in forked processes only when the caller asks (``fork``): the command
line does, the library's ``Translator`` does not by default, since forking a process the caller
owns is the caller's decision.

Every model variant takes the same paths: a context gate's and the generators' layers (softmax or
sparsemax) are ``nn.Linear`` modules like the others, packed or quantised with them, and the
sparsemax of the attention and generator runs unchanged on their outputs; a decoder without
attention has fewer layers to pack. So no variant needs to fall back to the general path.
"""

import torch

from onmt_lite.models.recurrent import cpu_bf16_rnn
from onmt_lite.translate.packed import ROW_BUCKET, pack_for_cpu, quantize_int8
from onmt_lite.translate.streams import can_fork
from onmt_lite.utils.cpu_paths import cpu_path
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.logging import logger


def on_cpu(device) -> bool:
    """Whether the CPU fast paths apply to ``device`` (``utils.cpu_paths``)."""
    return cpu_path(device)


MAX_PACKED_ROWS = 4096  # oneDNN cannot pack for some millions of rows; a bigger hint gains nothing


def decoding_rows(batch_size: int, batch_type: str = "sents", beam_width: int = 1) -> tuple:
    """``(rows, multiple)``: the rows the decoder multiplies at each step (sentences x beam, at most
    ``MAX_PACKED_ROWS``), to pack the weights for, and what their count is padded to a multiple of.
    Token batches hold no fixed number of sentences: 64 rows, padded to multiples of ``ROW_BUCKET``.
    A beam search's rows are whole beams but for the first step of examples that join (a row each):
    padded to the beam width, they are padded only then."""
    if batch_type != "sents":
        return 64, ROW_BUCKET
    return min(
        batch_size * beam_width, MAX_PACKED_ROWS
    ), beam_width if beam_width > 1 else ROW_BUCKET


PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def decoding_dtype(precision: str, device) -> torch.dtype:
    """The dtype a model decodes in on ``device`` with ``-precision``: fp16 and bf16 on a CUDA
    device; on the CPU bf16 where oneDNN has bfloat16 kernels (AVX-512 BF16 or AMX: elsewhere
    PyTorch emulates them, slower than float32, so float32, said in the log), fp16 refused (no
    CPU has fast float16 products)."""
    if precision not in PRECISIONS:
        raise UserError(f"precision must be one of {', '.join(PRECISIONS)} (got {precision!r})")
    if precision == "fp32" or not on_cpu(device):
        return PRECISIONS[precision]
    if precision == "fp16":
        raise UserError(
            "-precision fp16 is for CUDA devices (-gpu); on the CPU use -precision bf16"
        )
    if not cpu_bf16_rnn():  # oneDNN's test for AVX-512 BF16 or AMX
        logger.info(
            "-precision bf16: this CPU has no bfloat16 instructions (AVX-512 BF16 or "
            "AMX); decoding in float32, which is faster here"
        )
        return torch.float32
    return torch.bfloat16


def cast_for_decoding(model, dtype: torch.dtype):
    """``model`` (in eval mode) in ``dtype``, changed in place and returned; its recurrent layers
    (``nn.LSTM``/``nn.GRU``: the encoder's, run once a batch) stay in float32, where every device
    has their kernels (``recurrent.run_rnn`` casts at their boundary)."""
    model.to(dtype)
    for module in model.modules():
        if isinstance(module, torch.nn.RNNBase):
            module.float()
    return model


def prepare_model(model, device, quantize: str = "none", rows=None, precision: str = "fp32"):
    """``model`` (on ``device``, in eval mode) ready to decode: quantised to int8 with
    ``quantize="int8"`` (the CPU only), cast to ``decoding_dtype(precision)`` when that is not
    float32, else on the CPU packed for ``rows`` (``decoding_rows``) when given; elsewhere as it
    is."""
    dtype = decoding_dtype(precision, device)
    if quantize == "int8":
        if not on_cpu(device):
            raise UserError("-quantize int8 is for CPU translation; leave out -gpu")
        if precision != "fp32":
            raise UserError(f"-quantize int8 and -precision {precision}: choose one")
        return quantize_int8(model)
    if dtype != torch.float32:
        return cast_for_decoding(model, dtype)
    if rows is not None and on_cpu(device):
        return pack_for_cpu(model, *rows)
    return model


def decoding_streams(
    threads: int, device, sampling: bool, batches: int, fork: bool = False
) -> tuple:
    """``(thread counts, in_processes)``: the decoding streams for ``batches`` batches on
    ``threads``.

    On a CPU with at least 2 threads: one stream per thread (but no more than batches) in forked
    processes when ``fork`` is asked for and the system can fork, else two threads of half the
    ``threads`` each. One stream for a single batch, off the CPU, or when sampling (the streams
    would take random numbers from one generator in an order that depends on timing, and ``-seed``
    would no longer fix the output)."""
    if not on_cpu(device) or sampling or threads < 2 or batches < 2:
        return [threads], False
    if fork and can_fork():
        return [1] * min(threads, batches), True
    return [threads - threads // 2, threads // 2], False
