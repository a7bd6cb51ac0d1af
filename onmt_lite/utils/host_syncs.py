"""Counting, on the CPU, what would stall a GPU: the host reading a tensor's values.

On CUDA every ``.item()``, ``int()``/``float()``/``bool()`` of a tensor, ``.tolist()`` and
``nonzero`` waits for the device to finish all the work queued before it, so one in a per-step loop
sets the pace of the whole loop. They are the same calls on the CPU, where they cost nothing, so a
count taken there (tests, ``bench/``) tells how many a step would make on a device:

- ``aten::_local_scalar_dense``: ``.item()``, ``int()``, ``float()``, ``bool()``, ``if tensor:``;
- ``aten::is_nonzero`` (``torch.is_nonzero``; it reads through ``_local_scalar_dense``, which is
  what this PyTorch's dispatcher shows);
- ``aten::nonzero`` (and ``nonzero_static``'s absence): an output whose size depends on the values;
- ``Tensor.tolist``, ``.numpy()`` and copies to the host (``.cpu()``, ``.to("cpu")`` in words),
  which on the CPU return without reaching the dispatcher (counted by a ``TorchFunctionMode``).

Tensors whose values live on the host on a GPU too are not device tensors, and reading them is no
sync: the counter is given them (``host=``, e.g. a batch's ``src_lengths_cpu``), and follows them
through every operation whose tensor inputs are all host tensors; a packed sequence's
``batch_sizes`` is one by PyTorch's contract. Reads of host tensors are counted apart
(``host_reads``).
"""

from __future__ import annotations

import collections
import contextlib

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

SYNC_OPS = ("_local_scalar_dense", "is_nonzero", "nonzero")
VIEWS = "(views)"  # the count of view operations among the others (no ATen name has brackets)


HOST_MARK = "_onmt_lite_host_data"  # the attribute that marks a tensor whose values are on the host


def is_host(tensor) -> bool:
    return isinstance(tensor, torch.Tensor) and getattr(tensor, HOST_MARK, False)


def mark_host(tensor, marked: list) -> None:
    """Mark ``tensor`` as a host tensor and remember it in ``marked`` (unmarked on exit)."""
    if isinstance(tensor, torch.Tensor) and not is_host(tensor):
        setattr(tensor, HOST_MARK, True)
        marked.append(tensor)


_ACTIVE: list = []  # the counters counting now (their marks), innermost last


def declare_host(tensor) -> None:
    """Say that ``tensor`` holds host data on a GPU too (e.g. ``tensors.host_copy``'s copies,
    read once the device is done with them): a counter counting now treats it as a host tensor."""
    for marked in _ACTIVE:
        mark_host(tensor, marked)


def _tensors(values):
    return [v for v in torch.utils._pytree.tree_leaves(values) if isinstance(v, torch.Tensor)]


class _Dispatched(TorchDispatchMode):
    """Counts every ATen operation by name (``aten::add`` -> ``add``), the syncs of device tensors
    apart from reads of host tensors, and marks the outputs of host-only operations as host."""

    def __init__(self, counts: collections.Counter, marked: list):
        super().__init__()
        self.counts = counts
        self.marked = marked

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        inputs = _tensors((args, kwargs))
        on_host = bool(inputs) and all(is_host(t) for t in inputs)
        self.counts["host_read" if on_host and name in SYNC_OPS else name] += 1
        if func.is_view or name == "_unsafe_view":  # a view of the data: no kernel on a GPU
            self.counts[VIEWS] += 1
        out = func(*args, **(kwargs or {}))
        if on_host:
            for tensor in _tensors(out):
                mark_host(tensor, self.marked)
        elif name == "_pack_padded_sequence":
            mark_host(out[1], self.marked)  # batch_sizes: on the CPU wherever the data is
        return out


TO_HOST = {torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu}


class _HostCopies(TorchFunctionMode):
    """Counts the reads that return before the dispatcher on the CPU: ``tolist``, ``numpy``,
    ``cpu()`` and ``to("cpu")`` of a tensor that is not a host tensor."""

    def __init__(self, counts: collections.Counter):
        super().__init__()
        self.counts = counts

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensor = args[0] if args and isinstance(args[0], torch.Tensor) else None
        to_cpu = func is torch.Tensor.to and _to_cpu(args, kwargs)
        if tensor is not None and (func in TO_HOST or to_cpu):
            self.counts["host_read" if is_host(tensor) else "to_host"] += 1
        return func(*args, **kwargs)


def _to_cpu(args, kwargs) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` names the CPU in words (``"cpu"``): on the CPU a
    ``to(x.device)`` also names it, though on a GPU it stays on the device, so only words count."""
    device = kwargs.get("device", args[1] if len(args) > 1 else None)
    return isinstance(device, str) and device.startswith("cpu")


class HostSyncCounter:
    """A context that counts the ATen operations and host syncs run inside it (this thread).

    >>> with HostSyncCounter() as counter:
    ...     float(torch.ones(3).sum())
    3.0
    >>> counter.syncs
    1
    """

    def __init__(self, host=()):
        self.counts: collections.Counter = collections.Counter()
        self._marked: list = []  # the tensors marked as host tensors, unmarked on exit
        self._modes = (_HostCopies(self.counts), _Dispatched(self.counts, self._marked))
        self._host = _tensors(list(host))

    def __enter__(self) -> HostSyncCounter:
        for tensor in self._host:
            mark_host(tensor, self._marked)
        _ACTIVE.append(self._marked)
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc):
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
        # by identity: another counter's marks may be an equal list (both empty)
        del _ACTIVE[next(i for i, m in enumerate(_ACTIVE) if m is self._marked)]
        for tensor in self._marked:  # no mark outlives the count
            delattr(tensor, HOST_MARK)
        self._marked.clear()
        return False

    @contextlib.contextmanager
    def paused(self):
        """Count nothing inside: work that runs on the host on a GPU too (building batches)."""
        for mode in reversed(self._modes):
            mode.__exit__(None, None, None)
        try:
            yield
        finally:
            for mode in self._modes:
                mode.__enter__()

    @property
    def syncs(self) -> int:
        """Host syncs counted: the sync operations and copies to the host of device tensors."""
        return sum(self.sync_kinds.values())

    @property
    def sync_kinds(self) -> dict[str, int]:
        """The syncs by kind (only those that occurred)."""
        return {name: self.counts[name] for name in (*SYNC_OPS, "to_host") if self.counts[name]}

    @property
    def host_reads(self) -> int:
        """Reads of host tensors: no sync on a device."""
        return self.counts["host_read"]

    @property
    def operations(self) -> int:
        """ATen operations counted (a stand-in for kernel launches), the syncs among them."""
        outside = ("to_host", "host_read", VIEWS)  # counted by the function mode, renamed, or twice
        return sum(count for name, count in self.counts.items() if name not in outside)

    @property
    def kernels(self) -> int:
        """The operations that launch a kernel on a GPU: all but views (with
        ``utils.cpu_paths.as_on_a_gpu``, the computations a GPU's way)."""
        return self.operations - self.counts[VIEWS]
