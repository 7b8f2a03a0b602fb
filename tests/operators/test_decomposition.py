"""A composite operator counted as its decomposition counts its parts with the formulas of the
table of the pass that counts it: a profiler's own operator formulas count inside it, other
profilers are unaffected, and ``inference_mode`` (the composite arrives whole) reads as
``no_grad`` (its parts arrive)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from moduleprofiler import ModuleProfiler
from moduleprofiler.operators.registry import (
    MISSING,
    OPERATOR_FORMULAS,
    OperatorCounter,
    PassFormulas,
    changed_keys,
    decomposition_count,
    get_default_operator_map,
    lookup,
    register_operator,
    unregister_operator,
)

aten = torch.ops.aten

MODES: dict[str, Callable[[], Any]] = {"no_grad": torch.no_grad,
                                       "inference_mode": torch.inference_mode}


def thousand(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> tuple[int, int]:
    """A user's own formula: 1000 ops and 7 macs a call, whatever the shapes."""
    return 1000, 7


class MultiDot(nn.Module):
    """``linalg.multi_dot`` of (2, 3), (3, 4), (4, 5): two ``mm``, cheapest order first."""

    def forward(self, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
        return torch.linalg.multi_dot([a, b, c])


class Outer(nn.Module):
    """``torch.outer`` of 3 and 4 elements: one broadcast ``mul``."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return torch.outer(a, b)


class MatrixPower(nn.Module):
    """``linalg.matrix_power(m, 3)`` of a 3 x 3 matrix: two ``mm``, through ``matmul``."""

    def forward(self, m: Tensor) -> Tensor:
        return torch.linalg.matrix_power(m, 3)


A, B, C = torch.randn(2, 3), torch.randn(3, 4), torch.randn(4, 5)

CASES = [
    # (2x3)(3x4) first: 2*4*(2*3 - 1) = 40 ops, 24 macs; then (2x4)(4x5): 2*5*(2*4 - 1) = 70
    # ops, 40 macs: 110 ops, 64 macs; the user's mm: 2 * 1000 ops, 2 * 7 macs
    (MultiDot(), (A, B, C), aten.mm, (110, 64), (2000, 14)),
    # 3 * 4 = 12 multiplies, no macs; the user's mul: 1000 ops, 7 macs
    (Outer(), (torch.randn(3), torch.randn(4)), aten.mul, (12, 0), (1000, 7)),
    # two 3x3 products: 2 * 3*3*(2*3 - 1) = 90 ops, 2 * 27 = 54 macs; the user's mm: 2 * 1000
    # ops, 2 * 7 macs (matrix_power's decomposition runs ``matmul``, itself a composite)
    (MatrixPower(), (torch.randn(3, 3),), aten.mm, (90, 54), (2000, 14)),
]


def totals(profiler: ModuleProfiler, model: nn.Module, inputs: tuple[Tensor, ...], mode: str
           ) -> tuple[Any, Any]:
    with MODES[mode]():
        profile = profiler.profile(model, inputs)
    assert profile.complete
    return profile.total_ops, profile.total_macs


@pytest.mark.parametrize(("model", "inputs", "part", "built_in", "own"), CASES,
                         ids=["multi_dot", "outer", "matrix_power"])
@pytest.mark.parametrize("mode", list(MODES))
def test_a_profilers_own_formula_counts_inside_a_composite(
        model: nn.Module, inputs: tuple[Tensor, ...], part: Any, built_in: tuple[int, int],
        own: tuple[int, int], mode: str) -> None:
    mine, other = ModuleProfiler(), ModuleProfiler()
    mine.operator_fn_map[part] = thousand
    assert totals(mine, model, inputs, mode) == own
    # a profiler without the entry is unaffected, before and after the other one counted
    assert totals(other, model, inputs, mode) == built_in
    assert totals(ModuleProfiler(), model, inputs, mode) == built_in


def test_a_composite_arrives_whole_under_inference_mode() -> None:
    # what the tests above rely on: inference_mode hands the mode the composite itself
    counter = OperatorCounter()
    with torch.inference_mode(), counter:
        torch.linalg.multi_dot([A, B, C])
    assert dict(counter.calls) == {"aten.linalg_multi_dot.default": 1}


def test_a_part_deleted_from_a_profilers_map_leaves_the_composite_unknown() -> None:
    profiler = ModuleProfiler()
    del profiler.operator_fn_map[aten.mm]
    with torch.inference_mode():
        whole = profiler.profile(MultiDot(), (A, B, C))
    # the decomposition's mm has no formula in this profiler: the composite's work is unknown
    assert whole.unsupported_ops == {"aten.linalg_multi_dot": 1}
    assert whole.records[0].self_ops is None and whole.lower_bounds == ("ops", "macs", "flops")
    with torch.no_grad():
        parts = profiler.profile(MultiDot(), (A, B, C))
    assert parts.unsupported_ops == {"aten.mm": 2} and parts.records[0].self_ops is None


def test_decomposition_count_takes_a_table() -> None:
    op = aten.linalg_multi_dot.default
    # the registered formulas: 110 ops, 64 macs (as above)
    assert decomposition_count(op, ([A, B, C],), {}) == (110, 64)
    table = get_default_operator_map()
    table[aten.mm] = thousand
    assert decomposition_count(op, ([A, B, C],), {}, table) == (2000, 14)
    del table[aten.mm]
    assert decomposition_count(op, ([A, B, C],), {}, table) is MISSING


def test_an_operator_counter_with_a_table_counts_composites_with_it() -> None:
    table = get_default_operator_map()
    table[aten.mm] = thousand
    counter = OperatorCounter(table)
    with torch.inference_mode(), counter:
        torch.linalg.multi_dot([A, B, C])
    assert (counter.ops, counter.macs) == (2000, 14)


def test_allclose_counts_its_isclose_with_the_passs_table() -> None:
    x, y = torch.randn(2, 3), torch.randn(3)
    # the registered formulas: isclose of (2, 3) with (3,) is 69 ops (its test in
    # test_elementwise), and the all over 6 results 5: 74
    built_in = OperatorCounter()
    with torch.no_grad(), built_in:
        torch.allclose(x, y)
    assert built_in.ops == 74
    # isclose runs three abs: |rtol * b| (3 elements), |a - b| and |a| in the finiteness test
    # (6 each), 3 + 6 + 6 = 15 ops; with the user's abs, 1000 ops and 7 macs each:
    # 74 - 15 + 3 * 1000 = 3059 ops, 3 * 7 = 21 macs
    table = get_default_operator_map()
    table[aten.abs] = thousand
    for mode in MODES.values():
        counter = OperatorCounter(table)
        with mode(), counter:
            torch.allclose(x, y)
        assert (counter.ops, counter.macs) == (3059, 21)
    parts = OperatorCounter(table)
    with torch.no_grad(), parts:
        torch.isclose(x, y)
    assert parts.ops + 5 == 3059


class Call(nn.Module):
    """A module whose forward is one call of ``fn``: its operators are counted (no formula)."""

    def __init__(self, fn: Callable[..., Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Tensor) -> Tensor:
        return self.fn(*args)


def _sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


COMPOSITES = [
    # F.linear of (2, 3) by a (4, 3) weight with bias: under no_grad one addmm (t is free):
    # 2*4*(2*3 - 1) + 2*4 = 48 ops, 2*3*4 = 24 macs; the user's addmm 1000 ops, 7 macs
    (Call(torch.nn.functional.linear), (torch.randn(2, 3), torch.randn(4, 3), torch.randn(4)),
     aten.addmm, (48, 24)),
    # torch.matmul of (2, 3) and (3, 4): one mm, 2*4*(2*3 - 1) = 40 ops, 24 macs
    (Call(torch.matmul), (torch.randn(2, 3), torch.randn(3, 4)), aten.mm, (40, 24)),
    # F.conv2d of (1, 2, 5, 5) by (3, 2, 3, 3), no bias: one convolution, 1*3*3*3 = 27
    # outputs of 2*3*3 = 18 products each: 27*(2*18 - 1) = 945 ops, 27*18 = 486 macs
    (Call(torch.nn.functional.conv2d), (torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)),
     aten.convolution, (945, 486)),
    # softmax of (2, 5) along the last dim: one _softmax, 2 rows * (4*5 - 1) = 38 ops
    (Call(lambda x: torch.softmax(x, -1)), (torch.randn(2, 5),), aten._softmax, (38, 0)),
]


@pytest.mark.parametrize(("model", "inputs", "part", "built_in"), COMPOSITES,
                         ids=["linear", "matmul", "conv2d", "softmax"])
def test_a_composite_with_a_direct_formula_counts_a_profilers_own_part_formula(
        model: nn.Module, inputs: tuple[Tensor, ...], part: Any, built_in: tuple[int, int]
        ) -> None:
    # under inference_mode the composite arrives whole (aten.linear, aten.matmul, aten.conv2d,
    # aten.softmax), under no_grad its part: both count the user's formula for the part
    mine = ModuleProfiler()
    mine.operator_fn_map[part] = thousand
    for mode in MODES:
        assert totals(mine, model, inputs, mode) == (1000, 7), mode
        # without an entry of its own: the registered formulas, on either path
        assert totals(ModuleProfiler(), model, inputs, mode) == built_in, mode


@pytest.mark.parametrize(("model", "inputs", "part", "built_in"), COMPOSITES,
                         ids=["linear", "matmul", "conv2d", "softmax"])
def test_a_composite_counts_flop_counter_macs_without_own_entries(
        model: nn.Module, inputs: tuple[Tensor, ...], part: Any, built_in: tuple[int, int]
        ) -> None:
    # the oracle: FlopCounterMode counts 2 flops per multiply-accumulate (softmax: none)
    with torch.no_grad(), FlopCounterMode(display=False) as oracle:
        model(*inputs)
    for mode in MODES:
        assert 2 * totals(ModuleProfiler(), model, inputs, mode)[1] \
            == oracle.get_total_flops() == 2 * built_in[1]


@contextmanager
def registered_for_everyone(part: Any, formula: Any) -> Iterator[None]:
    """``formula`` in the registry itself for ``part`` (``register_operator``), the package's
    own entry put back afterwards."""
    key = part if part in OPERATOR_FORMULAS else part.default
    original = OPERATOR_FORMULAS[key]
    unregister_operator(key)
    register_operator(key)(formula)
    try:
        yield
    finally:
        unregister_operator(key)
        register_operator(key)(original)


@pytest.mark.parametrize(("model", "inputs", "part", "built_in"), COMPOSITES,
                         ids=["linear", "matmul", "conv2d", "softmax"])
def test_a_composite_with_a_direct_formula_counts_a_part_formula_registered_for_everyone(
        model: nn.Module, inputs: tuple[Tensor, ...], part: Any, built_in: tuple[int, int]
        ) -> None:
    # the same with the registry's own entry replaced: every profiler, either path
    with registered_for_everyone(part, thousand):
        assert changed_keys(None)
        for mode in MODES:
            assert totals(ModuleProfiler(), model, inputs, mode) == (1000, 7), mode
    # the package's own entry back: the registry holds the built-in formulas only again
    assert not changed_keys(None)
    assert totals(ModuleProfiler(), model, inputs, "inference_mode") == built_in


def test_a_composite_registered_for_everyone_counts_where_it_arrives_whole() -> None:
    linear, inputs, _, _ = COMPOSITES[0]
    with registered_for_everyone(aten.linear, thousand):
        # its own formula, not its parts: under no_grad its addmm counts the built-in 48 ops
        assert totals(ModuleProfiler(), linear, inputs, "inference_mode") == (1000, 7)
        assert totals(ModuleProfiler(), linear, inputs, "no_grad") == (48, 24)


def test_a_profilers_entry_for_the_composite_itself_counts_where_it_arrives_whole() -> None:
    linear, inputs, _, _ = COMPOSITES[0]
    mine = ModuleProfiler()
    mine.operator_fn_map[aten.linear] = thousand
    mine.operator_fn_map[aten.mm] = thousand  # a part of other composites: not this call's
    assert totals(mine, linear, inputs, "inference_mode") == (1000, 7)
    # under no_grad the linear never arrives: its addmm counts the registered 48 ops
    assert totals(mine, linear, inputs, "no_grad") == (48, 24)


def test_attention_counts_the_kernel_its_device_takes_with_own_part_formulas() -> None:
    # on a CPU, scaled_dot_product_attention takes the flash kernel on either path (its math
    # reference, with bmm, runs on the meta device only): the user's bmm prices nothing here,
    # and inference_mode reads as no_grad: the flash kernel's 1176 ops and 512 macs (its
    # test in test_attention)
    q = torch.randn(1, 2, 4, 8)
    mine = ModuleProfiler()
    mine.operator_fn_map[aten.bmm] = thousand
    for mode in MODES:
        assert totals(mine, Call(_sdpa), (q, q, q), mode) == (1176, 512), mode


def test_a_part_deleted_from_a_profilers_map_leaves_a_direct_composite_unknown() -> None:
    linear, inputs, _, _ = COMPOSITES[0]
    profiler = ModuleProfiler()
    del profiler.operator_fn_map[aten.addmm]
    with torch.inference_mode():
        whole = profiler.profile(linear, inputs)
    assert whole.unsupported_ops == {"aten.linear": 1} and whole.records[0].self_ops is None
    with torch.no_grad():
        parts = profiler.profile(linear, inputs)
    assert parts.unsupported_ops == {"aten.addmm": 1} and parts.records[0].self_ops is None


def test_a_table_without_own_entries_keeps_every_direct_formula() -> None:
    # the check is made once, when a pass's formulas are set up: a profiler without entries of
    # its own looks up the registered direct formula itself, and pays nothing per call
    profiler = ModuleProfiler()
    assert not changed_keys(profiler.operator_fn_map)
    formulas = PassFormulas(profiler.operator_fn_map)
    assert formulas.formula(aten.linear.default) is lookup(aten.linear.default)
    profiler.operator_fn_map[aten.addmm] = thousand
    assert changed_keys(profiler.operator_fn_map)
    split = PassFormulas(profiler.operator_fn_map).formula(aten.linear.default)
    assert split.__name__ == "linear_by_decomposition"
    # an entry equal to the registered formula prices nothing otherwise
    again = ModuleProfiler()
    again.operator_fn_map[aten.addmm] = lookup(aten.addmm.default)
    assert not changed_keys(again.operator_fn_map)


class Interpolate(nn.Module):
    """``F.interpolate`` (bilinear, x2): ``upsample_bilinear2d.vec`` under ``inference_mode``,
    its ``upsample_bilinear2d.default`` under ``no_grad``."""

    def forward(self, x: Tensor) -> Tensor:
        return F.interpolate(x, scale_factor=2.0, mode="bilinear")


class OneHot(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.one_hot(x, 5)


UNRELATED = [
    # bilinear x2 of (1, 2, 3, 3): 1 * 2 * 6 * 6 = 72 outputs * 9 ops (test_pooling's case)
    (Interpolate(), (torch.randn(1, 2, 3, 3),), (648, 0)),
    # one_hot validates its 3 indices: min and max, 3 - 1 = 2 comparisons each (test_free);
    # the scatter of ones is free
    (OneHot(), (torch.tensor([1, 2, 3]),), (4, 0)),
]


@pytest.mark.parametrize(("model", "inputs", "built_in"), UNRELATED,
                         ids=["interpolate", "one_hot"])
def test_an_own_entry_for_another_operator_leaves_a_composite_as_it_was(
        model: nn.Module, inputs: tuple[Tensor, ...], built_in: tuple[int, int]) -> None:
    # a profiler pricing relu its own way: these composites reach no relu, so under
    # inference_mode they keep their direct formulas, as under no_grad their eager parts
    # (counted as decompositions they read 756 and 25: torch's Python decomposition of the
    # upsample, and one_hot's branch for tensors without data)
    mine = ModuleProfiler()
    mine.operator_fn_map[aten.relu] = thousand
    for mode in MODES:
        assert totals(mine, model, inputs, mode) == built_in, mode


def test_a_composite_is_taken_apart_as_the_eager_kernel_takes_it() -> None:
    # an own formula for the part eager dispatch runs (upsample_bilinear2d.default): the
    # composite's C++ kernel reaches it, as no_grad does, not torch's Python decomposition
    # (arange, clamp, _unsafe_index)
    mine = ModuleProfiler()
    mine.operator_fn_map[aten.upsample_bilinear2d.default] = thousand
    for mode in MODES:
        assert totals(mine, Interpolate(), (torch.randn(1, 2, 3, 3),), mode) == (1000, 7), mode
