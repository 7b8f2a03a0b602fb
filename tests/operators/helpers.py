"""Counting helpers for the operator-formula tests."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import FlopCounterMode

import moduleprofiler.operators  # noqa: F401  (registers the families)
from moduleprofiler.operators._common import Count
from moduleprofiler.operators.registry import MISSING, OperatorCounter, lookup

MODES: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] = {
    "no_grad": torch.no_grad,
    "grad": torch.enable_grad,
    "inference_mode": torch.inference_mode,
}


def counter_of(fn: Callable[..., Any], *args: Any, mode: str = "no_grad",
               **kwargs: Any) -> OperatorCounter:
    """Run ``fn(*args, **kwargs)`` under ``mode`` and an :class:`OperatorCounter`."""
    counter = OperatorCounter()
    with MODES[mode](), counter:
        fn(*args, **kwargs)
    return counter


def count(fn: Callable[..., Any], *args: Any, mode: str = "no_grad", **kwargs: Any) -> Count:
    """(ops, macs) of every operator ``fn`` dispatches; fails on operators without a formula."""
    counter = counter_of(fn, *args, mode=mode, **kwargs)
    assert not counter.missing, f"operators without a formula: {dict(counter.missing)}"
    return counter.ops, counter.macs


def ops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    return count(fn, *args, **kwargs)[0]


def macs(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    return count(fn, *args, **kwargs)[1]


def formula_count(op: torch._ops.OpOverload, *args: Any, out: Any = None, **kwargs: Any
                  ) -> Count:
    """Call ``op``'s formula directly (for kernels this machine cannot run: CUDA ones)."""
    formula = lookup(op)
    assert formula is not None and formula is not MISSING, f"{op} has no formula"
    return formula(args, kwargs, out)  # type: ignore[operator, no-any-return]


def fcm_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """FlopCounterMode's total for ``fn`` (no_grad)."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fn(*args, **kwargs)
    return int(counter.get_total_flops())


def on_meta(value: Any) -> Any:
    """Meta-device copies of every tensor in ``value`` (other leaves unchanged)."""
    return tree_map(
        lambda t: t.to("meta") if isinstance(t, torch.Tensor) else t, value
    )


@contextlib.contextmanager
def math_sdpa_without_onednn() -> Iterator[None]:
    """The decomposed reference path of PEERS.md: math SDPA, oneDNN off."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH), torch.backends.mkldnn.flags(enabled=False):
        yield
