"""The host loops of a calibration: every class on fp32 tensors and the launch classes again
by reduced-precision dtype."""

from __future__ import annotations

import pytest
import torch

from moduleprofiler.prediction.calibrate import (
    DTYPED_HOST_BENCHES,
    HOST_BENCHES,
    cpu_op_us,
    measure_host,
)


def test_measure_host_measures_the_launch_classes_by_dtype() -> None:
    costs = measure_host(torch.device("cpu"), calls=2, rounds=1, dtypes=("bf16",))
    assert set(costs.us) == {*HOST_BENCHES, "module_call_depth"}
    assert set(costs.us_by_dtype) == {"bf16"}
    assert set(costs.us_by_dtype["bf16"]) == set(DTYPED_HOST_BENCHES)
    assert all(us > 0 for us in costs.us_by_dtype["bf16"].values())
    # the per-dtype loops are the fp32 ones' classes less those without a dtype, and the
    # router's operators (sorts and scans of integer ids; the grouped product in bf16)
    assert set(HOST_BENCHES) - set(DTYPED_HOST_BENCHES) == {
        "view", "module_call", "cpu_op", "sort", "topk", "scan", "histogram", "grouped_gemm"}


def test_measure_host_names_an_unknown_dtype() -> None:
    with pytest.raises(ValueError, match=r"dtypes: \['fp8'\]"):
        measure_host(torch.device("cpu"), calls=1, rounds=1, dtypes=("fp8",))


def test_cpu_op_us_times_a_tiny_cpu_operator() -> None:
    # a 2 x 8 addition on the CPU: far under a millisecond, never zero
    assert 0 < cpu_op_us(calls=20, rounds=2) < 1000
