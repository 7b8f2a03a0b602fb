"""Small kernels inside a chain of others: the in-chain costs a calibration carries, how they
are reduced from the chain benchmark's samples, and how they price an operator."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from moduleprofiler import Profiler
from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.prediction import Calibration, shipped_calibrations
from moduleprofiler.prediction.device_model import DeviceModel
from moduleprofiler.prediction.in_chain import (
    CHAIN_TABLES,
    WIDTH,
    chain_operators,
    in_chain_costs,
)
from moduleprofiler.prediction.op_classes import OpWork


def test_in_chain_costs_by_hand() -> None:
    samples = {
        "fp32": {"64:alone:mean_rows": 3.9, "64:chain:mean_rows": 5.1,      # +1.2
                 "256:alone:mean_rows": 4.0, "256:chain:mean_rows": 5.0,    # +1.0
                 "64:alone:sum_rows": 3.9, "64:chain:sum_rows": 5.3,        # +1.4
                 "64:alone:convert_down": 0.0, "64:chain:convert_down": 0.0,  # no kernel
                 "64:alone:gelu": 1.2, "64:chain:gelu": 1.1,                # -0.1 -> 0
                 "64:alone:linear": 7.9, "64:chain:linear": 9.6},           # not priced
        "bf16": {"64:alone:mean_rows": 3.9, "64:chain:mean_rows": 5.5,      # fp32: +1.6
                 "64:alone:convert_down": 1.0, "64:chain:convert_down": 1.2},  # +0.2
    }
    costs = in_chain_costs(samples)
    # fp32 reductions: median of 1.2, 1.0, 1.4 and 1.6 = (1.2 + 1.4) / 2 = 1.3
    assert costs["fp32"]["mem_reduction"] == pytest.approx(1.3)
    assert costs["fp32"]["mem_unary"] == 0.0  # never below what the loop measured
    assert costs["bf16"] == {"mem_convert": pytest.approx(0.2)}
    assert "gemm_nt" not in costs["fp32"] and "mem_convert" not in costs["fp32"]


def _unary(nbytes: float, dtype: str = "bf16") -> OpWork:
    return OpWork("aten.relu", "mem_unary", (math.log2(nbytes),), dtype, 0.0, nbytes, "unary")


def test_an_operator_costs_its_in_chain_time_beside_its_tables() -> None:
    peaks = device_peaks("H100 SXM")
    rows = {"mem_unary": [[2 ** 10, 2.0], [2 ** 20, 3.0]],
            "gemm": [[64, 64, 64, 3.0]]}
    plain = Calibration("H100 SXM", "test", 132, "x", "today", {"bf16": rows})
    chained = Calibration("H100 SXM", "test", 132, "x", "today", {"bf16": rows},
                          in_chain={"bf16": {"mem_unary": 0.5, "gemm": 9.0}})
    before, after = DeviceModel(plain, peaks, peaks), DeviceModel(chained, peaks, peaks)
    # a measured shape: 2.0 us in the loop, 2.0 + 0.5 inside a chain
    assert before.op_us(_unary(2 ** 10)) == pytest.approx(2.0, rel=1e-3)
    assert after.op_us(_unary(2 ** 10)) == pytest.approx(2.5, rel=1e-3)
    assert before.without_in_chain and not after.without_in_chain
    # fp16 takes bf16's costs; a compute table never has one
    assert after.in_chain_us("mem_unary", "fp16") == 0.5
    assert after.in_chain_us("gemm", "bf16") == 0.0
    assert after.in_chain_us("mem_reduction", "bf16") == 0.0  # not measured: none


def test_a_calibration_without_in_chain_costs_loads_and_says_so() -> None:
    older = Calibration.from_dict({"name": "H100 SXM", "device_name": "test", "sms": 132,
                                   "torch_version": "x", "created": "today",
                                   "tables": {"fp32": {"mem_unary": [[1e3, 2.0], [1e9, 500.0]]}}})
    assert older.in_chain == {}
    profile = Profiler().predict(nn.ReLU(), torch.randn(8, 8), device=older, dtype="fp32",
                                 host=None)
    assert any("did not measure small kernels inside a chain" in note
               for note in profile.prediction_notes)
    # the shipped H200 calibration carries them: a row reduction costs about a microsecond more
    h200 = shipped_calibrations()["H200"]
    assert 0.5 < h200.in_chain["fp32"]["mem_reduction"] < 2.0
    shipped = Profiler().predict(nn.ReLU(), torch.randn(8, 8), device="H200", dtype="fp32")
    assert not any("inside a chain" in note for note in shipped.prediction_notes)


def test_the_chain_runs_every_operator_its_costs_are_read_from() -> None:
    pool = [torch.randn(WIDTH, WIDTH) for _ in range(2)]
    operators = chain_operators(4, torch.float32, 0, pool, torch.device("cpu"))
    names = [name for name, _ in operators]
    assert set(CHAIN_TABLES) <= set(names) and len(names) == len(set(names))
    for _, operator in operators:  # each reads what the ones before wrote
        operator()
