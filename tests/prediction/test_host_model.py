"""The host model's prices: module calls by depth, the in-model factor and what stands in
where host costs lack either."""

from __future__ import annotations

import json

import pytest
import torch

from moduleprofiler.prediction import Calibration, HostCosts
from moduleprofiler.prediction.host_model import (
    IN_SITU_HOST_FACTOR,
    HostModel,
    missing_host_notes,
)
from moduleprofiler.prediction.op_classes import classify

OLD = HostCosts("old cpu", {"view": 1.0, "unary": 4.0, "module_call": 2.0, "cpu_op": 1.0})
NEW = HostCosts("new cpu", {**OLD.us, "module_call_depth": 0.5}, in_model=0.8,
                us_by_dtype={"bf16": {"unary": 6.0}})
RELU = classify(torch.ops.aten.relu.default, (torch.randn(4),), {}, torch.randn(4))
RELU_BF16 = classify(torch.ops.aten.relu.default, (torch.randn(4, dtype=torch.bfloat16),), {},
                     torch.randn(4, dtype=torch.bfloat16))
RELU_FP16 = classify(torch.ops.aten.relu.default, (torch.randn(4, dtype=torch.float16),), {},
                     torch.randn(4, dtype=torch.float16))


def test_a_module_call_costs_more_per_level_of_depth() -> None:
    model = HostModel(NEW, in_model=1.0)
    assert model.call_us(0) == pytest.approx(2.0)
    # 2 + 3 * 0.5 = 3.5 us at depth 3
    assert model.call_us(3) == pytest.approx(3.5)
    # costs without the depth cost: every depth the top level's 2 us
    assert HostModel(OLD, in_model=1.0).call_us(3) == pytest.approx(2.0)


def test_the_factor_is_the_costs_own_unless_given() -> None:
    # the costs' measured 0.8: relu 4 * 0.8 = 3.2 us, a call at depth 2 (2 + 1) * 0.8 = 2.4 us
    assert HostModel(NEW).factor == 0.8
    assert HostModel(NEW).op_us(RELU) == pytest.approx(3.2)
    assert HostModel(NEW).call_us(2) == pytest.approx(2.4)
    # given: it wins; scale multiplies it (half the speed: 4 * 1.0 * 2 = 8 us)
    assert HostModel(NEW, in_model=1.0).op_us(RELU) == pytest.approx(4.0)
    assert HostModel(NEW, scale=2.0, in_model=1.0).op_us(RELU) == pytest.approx(8.0)
    # none measured: the constant, 4 * 0.95 = 3.8 us
    assert HostModel(OLD).factor == IN_SITU_HOST_FACTOR == 0.95
    assert HostModel(OLD).op_us(RELU) == pytest.approx(3.8)


def test_a_launch_is_priced_by_the_loops_of_its_dtype() -> None:
    model = HostModel(NEW, in_model=1.0)
    assert RELU_BF16.dtype == "bf16" and RELU_FP16.dtype == "fp16"
    # bf16 measured: 6 us; fp32: 4 us; fp16 not measured: fp32's 4 us
    assert model.op_us(RELU_BF16) == pytest.approx(6.0)
    assert model.op_us(RELU) == pytest.approx(4.0)
    assert model.op_us(RELU_FP16) == pytest.approx(4.0)
    # a class the dtype's loops did not measure falls back to fp32's: a view costs 1 us
    assert NEW.for_dtype("bf16") == {**NEW.us, "unary": 6.0}
    # costs measured before the loops were by dtype: every dtype at fp32's 4 us
    assert HostModel(OLD, in_model=1.0).op_us(RELU_BF16) == pytest.approx(4.0)


def test_missing_host_notes_name_what_stands_in() -> None:
    factor, dtypes, depth = missing_host_notes(OLD)
    assert "no measured in-model factor" in factor and "0.95" in factor
    assert "fp32 loops only" in dtypes and "calibrate() measures them by dtype" in dtypes
    assert "no cost of a module call by depth" in depth
    assert missing_host_notes(NEW) == []


def test_older_calibration_files_load_without_the_new_host_costs() -> None:
    data = json.loads(Calibration("H200", "test", 132, "x", "today", {}, OLD).to_json())
    del data["host"]["in_model"]  # a file written before the factor was measured
    loaded = Calibration.from_dict(data)
    assert loaded.host == OLD and loaded.host is not None and loaded.host.in_model is None
    del data["host"]["us_by_dtype"]  # ... or before the loops were measured by dtype
    assert Calibration.from_dict(data).host == OLD
    newer = Calibration("H200", "test", 132, "x", "today", {}, NEW)
    assert Calibration.from_dict(json.loads(newer.to_json())).host == NEW


def test_a_routers_operators_have_host_classes_of_their_own_else_their_old_ones() -> None:
    ids = torch.randint(0, 8, (64,))
    sort = classify(torch.ops.aten.sort.default, (ids,), {}, torch.sort(ids))
    scan = classify(torch.ops.aten.cumsum.default, (ids, 0), {}, torch.cumsum(ids, 0))
    assert (sort.host, scan.host) == ("sort", "scan")
    older = HostCosts("cpu", {"view": 1.0, "unary": 4.0, "reduction": 5.0, "module_call": 2.0,
                              "cpu_op": 1.0})
    measured = HostCosts("cpu", {**older.us, "sort": 30.0, "scan": 20.0})
    # measured: the sort's own 30 us, the scan's 20; older costs: a reduction's 5, a unary's 4
    assert HostModel(measured, in_model=1.0).op_us(sort) == pytest.approx(30.0)
    assert HostModel(measured, in_model=1.0).op_us(scan) == pytest.approx(20.0)
    assert HostModel(older, in_model=1.0).op_us(sort) == pytest.approx(5.0)
    assert HostModel(older, in_model=1.0).op_us(scan) == pytest.approx(4.0)
