"""Optional families (torchvision) register once their library's operators exist, even when
moduleprofiler, or a profiler's operator table, was made before."""

from __future__ import annotations

import torch

from moduleprofiler.operators import lookup
from moduleprofiler.operators.registry import (
    _BUILT_IN,
    _CHANGED,
    _FAMILY_LOADERS,
    MISSING,
    get_default_operator_map,
    lookup_in,
    register_family_loader,
    register_operator,
    unregister_operator,
)


def test_family_loader_runs_when_its_library_appears() -> None:
    op = torch.ops.aten.special_chebyshev_polynomial_t.default
    loaded: list[bool] = []

    def loader() -> bool:
        if not loaded:
            return False  # the library is not there yet
        register_operator(op)(lambda args, kwargs, out: (7, 0))
        return True

    register_family_loader(loader)
    try:
        assert loader in _FAMILY_LOADERS
        assert lookup(op) is MISSING
        table = get_default_operator_map()  # a profiler's table, made before the library
        loaded.append(True)  # the library is imported
        formula = lookup_in(table, op)
        assert formula is not MISSING and formula((), {}, None) == (7, 0)  # type: ignore[operator]
        assert loader not in _FAMILY_LOADERS
        assert op in get_default_operator_map()
    finally:
        if loader in _FAMILY_LOADERS:
            _FAMILY_LOADERS.remove(loader)
        if lookup(op) is not MISSING:
            unregister_operator(op)
        # the loader's formula counted as built in: the package's own entries as they were
        _BUILT_IN.pop(op, None)
        _CHANGED.discard(op)
