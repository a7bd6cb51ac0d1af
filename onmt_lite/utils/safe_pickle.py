"""Reading another toolkit's checkpoint without running its code: a restricted unpickler.

OpenNMT-py's checkpoints are pickles. 3.x's hold an ``argparse.Namespace`` of options beside the
tensors and word lists; 1.x's also hold torchtext ``Field`` and ``Vocab`` objects and OpenNMT-py's
own ``TextMultiField``. ``torch.load(weights_only=True)`` refuses all of these, and a plain
``torch.load`` would import those packages and let a crafted file call any function it names.

``load_foreign`` unpickles with a ``find_class`` that gives out only:

- what tensors are made of (torch's rebuild functions, storages, dtypes, ``torch.Size``);
- plain containers (``collections.OrderedDict``, ``Counter``, ``defaultdict``, ``set``, ...) and
  ``argparse.Namespace``;
- for a class of OpenNMT-py (``onmt.*``), torchtext (``torchtext.*``) or ``functools.partial``, a
  stand-in (``Foreign``) that keeps the pickled state as plain data and runs nothing;
- ``getattr``, as a function that answers None (1.x vocabularies pickle a bound method).

Anything else (``os.system``, ``builtins.eval``, a class of another package) is refused with a
one-line error naming it, before anything it names is imported or called.
"""

from __future__ import annotations

import _compat_pickle
import argparse
import collections
import pickle
import types
from typing import Any

import torch

from onmt_lite.utils.errors import UserError

# (module, name) pairs a checkpoint's pickle may name, beyond the tensor machinery below
ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "Counter"): collections.Counter,
    ("collections", "defaultdict"): collections.defaultdict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "slice"): slice,
    ("argparse", "Namespace"): argparse.Namespace,
    ("torch", "Size"): torch.Size,
    ("torch", "device"): torch.device,
}
TENSOR_REBUILDERS = (
    "_rebuild_tensor",
    "_rebuild_tensor_v2",
    "_rebuild_parameter",
    "_rebuild_parameter_with_state",
)
FOREIGN_PACKAGES = ("onmt", "torchtext")


class Foreign:
    """A stand-in for an object of OpenNMT-py or torchtext: ``origin`` names its class, ``state``
    holds what its pickle set (a dict, usually), ``args`` what it was called with."""

    origin = ""

    def __init__(self, *args: Any, **kwargs: Any):
        self.args = args
        self.kwargs = kwargs
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def get(self, name: str, default: Any = None) -> Any:
        """``name`` of the pickled state (its ``__dict__``), or ``default``."""
        if isinstance(self.state, dict):
            return self.state.get(name, default)
        return default

    def __repr__(self) -> str:
        return f"<{self.origin} (not imported)>"


_STAND_INS: dict[str, type] = {}


def stand_in(module: str, name: str) -> type:
    """The ``Foreign`` subclass for ``module.name`` (one per name, so that isinstance works)."""
    origin = f"{module}.{name}"
    if origin not in _STAND_INS:
        _STAND_INS[origin] = type(name, (Foreign,), {"origin": origin})
    return _STAND_INS[origin]


def _no_attribute(obj: Any, name: str, *default: Any) -> None:
    """What a pickled ``getattr(obj, name)`` gives here: None (a default factory, in 1.x)."""
    return None


class RestrictedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose globals are ``ALLOWED``, tensor rebuilders, stand-ins."""

    def find_class(self, module: str, name: str) -> Any:
        # torch.save writes protocol 2, whose names are Python 2's (__builtin__.set)
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if (module, name) in ALLOWED:
            return ALLOWED[(module, name)]
        if module == "torch._utils" and name in TENSOR_REBUILDERS:
            return getattr(torch._utils, name)
        if module == "torch" and (name.endswith("Storage") or _is_dtype(name)):
            return getattr(torch, name)
        if module == "torch.storage" and name == "UntypedStorage":
            return torch.storage.UntypedStorage
        if (module, name) == ("builtins", "getattr"):
            return _no_attribute
        if module.split(".")[0] in FOREIGN_PACKAGES or (module, name) == ("functools", "partial"):
            return stand_in(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which a checkpoint never holds")


def _is_dtype(name: str) -> bool:
    return isinstance(getattr(torch, name, None), torch.dtype)


def _load(file: Any, **kwargs: Any) -> Any:
    return RestrictedUnpickler(file, **kwargs).load()


# what torch.load takes as its pickle_module: an Unpickler and a load
RESTRICTED_PICKLE = types.SimpleNamespace(
    Unpickler=RestrictedUnpickler, load=_load, __name__="onmt_lite.utils.safe_pickle"
)


def load_foreign(path: str) -> Any:
    """Unpickle the checkpoint ``path`` (torch's zip or legacy format) with the restricted
    unpickler; tensors on the CPU. A refused or unreadable file is a UserError naming it."""
    try:
        return torch.load(
            path, map_location="cpu", weights_only=False, pickle_module=RESTRICTED_PICKLE
        )
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except pickle.UnpicklingError as err:
        raise UserError(f"{path}: refused, not loaded: {err}") from None
    except (RuntimeError, EOFError, OSError, ValueError, TypeError, AttributeError) as err:
        raise UserError(
            f"{path}: not a readable checkpoint ({type(err).__name__}: {err})"
        ) from None
