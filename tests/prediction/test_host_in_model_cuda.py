"""The host's in-model factor and module calls by depth measured on a real GPU, and the host
costs measured before or after kernel-record sessions (skipped without one)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.prediction.calibrate import measure_host
from moduleprofiler.prediction.host_in_model import in_model_samples
from moduleprofiler.timing.device_trace import device_trace, sessions_entered

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_the_in_model_factor_of_the_synthetic_stacks_is_near_one() -> None:
    cuda = torch.device("cuda")
    costs = measure_host(cuda, calls=100, rounds=5)
    assert costs.us["module_call_depth"] >= 0.0
    samples = in_model_samples(cuda, costs, rounds=1)
    assert set(samples) == {"mlp", "conv", "attention"}
    # host-bound forwards of tiny tensors: within a factor two of the loops' prices (0.87 to
    # 1.08 by stack and round on an H200's host)
    assert all(0.5 < values[0] < 2.0 for values in samples.values())


def test_host_this_after_a_kernel_record_session_says_so() -> None:
    cuda = torch.device("cuda")
    before = sessions_entered()
    with device_trace(cuda):
        torch.ones(8, device=cuda).add_(1)
    assert sessions_entered() == before + 1
    predicted = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(8, 64), device="H200",
                                         host="this")
    assert any(note.startswith("host='this': the host costs measured after ")
               for note in predicted.prediction_notes)


def test_calibrate_measures_the_host_before_its_profiler_sessions() -> None:
    # a fresh process: no session before calibrate(), so its host costs come before its own
    script = ("from moduleprofiler.prediction import calibrate\n"
              "print(repr(calibrate(quick=True, backward=False, dtypes=('bf16',)).notes))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    notes = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert not any("kernel-record session" in note for note in notes)
