"""Measure the mixture-of-experts rows of ``moduleprofiler.prediction.calibrate_experts`` on this
CUDA device (grouped products, the router's sort and top-k), and the held-out shapes that prove
them; ``merge`` and ``check`` as ``calibrate_kernels.py``'s.

    PYTHONPATH=. python3 benchmarks/prediction/calibrate_experts.py --out experts.json
    python benchmarks/prediction/calibrate_kernels.py merge experts.json \\
        moduleprofiler/prediction/calibrations/h200.json
    python benchmarks/prediction/calibrate_kernels.py check experts.json CALIBRATION...
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_kernels import measure_main

from moduleprofiler.prediction.calibrate_experts import expert_tables

if __name__ == "__main__":
    measure_main(__doc__, expert_tables)
