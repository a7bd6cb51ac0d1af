"""A CUDA graph's rules on the CPU, for the tests of ``-cuda_graphs`` (translation's and
training's), which cannot record a real one without a GPU.

``EmulatedGraph`` keeps the ATen operations run while it records, with their arguments, and a
``replay`` runs them again on the same tensors, each result written where the recording's went.
So, as on a GPU:

- a Python number is what it was at the recording (a length read from a batch, a counter of the
  host): a replay does not see it change;
- a tensor the recording made is the same memory at every replay, and one it read is read again
  where it was (a tensor made anew outside the graph is not seen; one freed outside it, which a
  GPU's replay would read as garbage, is kept alive here: that is not caught);
- the recording itself changes nothing: what its operations wrote is put back at its end (a CUDA
  recording launches no kernel), so only the replays step;
- the recording may not read the device (``.item()``, ``bool()``, ``nonzero``: a sync) nor copy
  host data (``torch.tensor`` of a list): either fails, as it would on a GPU;
- random operations draw anew at each replay (CUDA graphs advance the generator's offset).

The off-CUDA paths of ``translate/graphed.py`` and ``train/graphed.py`` run the step again at
each call, which hides the first two rules: a test swaps their recording for this one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

# what a CUDA recording refuses: a wait for the device's values, a copy of host data
FORBIDDEN = {"_local_scalar_dense", "is_nonzero", "nonzero", "masked_select", "lift_fresh"}


class RecordingError(RuntimeError):
    """An operation that a CUDA graph's recording would refuse."""


def _written(func, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors ``func`` writes into (its schema's ``Tensor(a!)`` arguments)."""
    tensors = []
    for i, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(argument.name)
        tensors += [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]
    return tensors


def _detached(value):
    return value.detach() if isinstance(value, torch.Tensor) else value


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: EmulatedGraph):
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in FORBIDDEN:
            raise RecordingError(f"aten.{name} while recording a graph")
        for tensor in _written(func, args, kwargs):
            self.graph._keep_before(tensor)
        out = func(*args, **kwargs)
        for value in tree_flatten(out)[0]:
            if value is not None and not isinstance(value, torch.Tensor):
                raise RecordingError(f"aten.{name} gave the host a value ({value!r})")
        self.graph.operations.append((func, args, kwargs, out))
        return out


class EmulatedGraph:
    """``torch.cuda.CUDAGraph``'s part the tests need: ``recording()`` (a context), ``replay()``,
    and ``replays``, their count."""

    def __init__(self):
        self.operations: list[tuple] = []
        self.replays = 0
        self._before: dict[int, tuple] = {}  # storage address -> (storage, its bytes before)

    def _keep_before(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in self._before:
            self._before[storage.data_ptr()] = (storage, storage.clone())

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        try:
            with _Recorder(self):
                yield
        finally:
            for storage, before in self._before.values():  # the recording launched nothing
                storage.copy_(before)
            self._before.clear()

    def replay(self) -> None:
        """Run the recorded operations again, each on the recording's tensors, each result
        copied into the recording's."""
        with torch.no_grad():
            for func, args, kwargs, out in self.operations:
                if func.is_view:  # its result is the recorded view of the same memory
                    continue
                fresh = func(*tree_map(_detached, args), **tree_map(_detached, kwargs))
                returns = func._schema.returns
                outs = out if isinstance(out, (tuple, list)) else (out,)
                results = fresh if isinstance(fresh, (tuple, list)) else (fresh,)
                for i, (old, new) in enumerate(zip(outs, results)):
                    aliased = i < len(returns) and returns[i].alias_info is not None
                    if isinstance(old, torch.Tensor) and not aliased:  # (else written in place)
                        old.detach().copy_(new)
        self.replays += 1
