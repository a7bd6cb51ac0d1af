"""Stock methods: a fast path may stand in for a method researchers edit only while it is the
package's own.

The fused training loss (``loss.criteria.LinearLogSoftmaxNLL``) computes what
``NMTGenerator.forward`` and ``NMTCriterion.forward`` compute, without their ``[N x V]`` matrix.
A researcher who edits one of them (in the file, by a monkeypatch, on an instance, or in a
subclass) must see the edit train: ``is_stock`` says whether the fast path may run.
"""

from __future__ import annotations

_STOCK: dict[type, object] = {}  # class: its forward as the package defines it


def stock_forward(cls: type) -> type:
    """Class decorator: remember ``cls.forward`` as defined, for ``is_stock``."""
    _STOCK[cls] = cls.forward
    return cls


def is_stock(instance: object, cls: type) -> bool:
    """Whether ``instance`` is a ``cls`` itself (no subclass) whose ``forward`` is the one
    ``cls`` was defined with: not replaced on the class, nor set on the instance."""
    defined = _STOCK.get(cls)
    return (
        type(instance) is cls
        and defined is not None
        and cls.forward is defined
        and "forward" not in vars(instance)
    )
