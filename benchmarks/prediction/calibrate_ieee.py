"""Measure the fp32 matrix-product tables with TF32 off (``gemm_ieee``, ``gemm_nt_ieee``,
``gemm_bias_nt_ieee``, ``gemm_bias_ieee``, ``bmm_ieee``: PyTorch's default precision, whose
kernels the TF32 rows do not time) on this CUDA device; ``merge`` as ``calibrate_kernels.py``'s
(its held-out residuals are recomputed, each row predicted from the others).

    PYTHONPATH=. python3 benchmarks/prediction/calibrate_ieee.py --out ieee.json
    python benchmarks/prediction/calibrate_kernels.py merge ieee.json \\
        moduleprofiler/prediction/calibrations/h200.json
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_kernels import measure_main

from moduleprofiler.prediction.calibrate import _Sweep, ieee_matmul_tables


def tables(sweep: _Sweep, device: torch.device, dtype: torch.dtype,
           held_out: bool) -> dict[str, list[list[float]]]:
    """The IEEE rows in fp32 (none in other dtypes, and no held-out shapes: the merge's
    leave-one-out residuals stand for them)."""
    if held_out or dtype != torch.float32:
        return {}
    return ieee_matmul_tables(sweep, dtype, quick=False)


if __name__ == "__main__":
    measure_main(__doc__, tables)
