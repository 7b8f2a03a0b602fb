"""docs/distributed.md runs as written (in one process, on the fake process group), and so
does its torchrun recipe, examples/distributed_torchrun.py, on two CPU processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "distributed.md"


def test_python_blocks_run_in_order() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "__docs_distributed__"}
    for index, block in enumerate(blocks):
        exec(compile(block, f"docs/distributed.md block {index}", "exec"), namespace)
    assert not dist.is_initialized()


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                    reason="needs torch.distributed with gloo")
def test_the_torchrun_recipe_runs_on_two_processes() -> None:
    assert "torchrun --nproc_per_node 2 examples/distributed_torchrun.py" in \
        PAGE.read_text(encoding="utf-8")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
         "2", "examples/distributed_torchrun.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    # Linear(64, 256): 8 rows on rank 0 and 16 on rank 1, 64 * 256 MACs each
    # (min, median, max, skew = 262144 / 196608), printed as integers
    assert re.search(r"^\s*module\.0\s+131072\s+196608\s+262144\s+1\.333", result.stdout,
                     re.M), result.stdout
    # the DDP wrapper and the model show the work inside them: with Linear(256, 10)'s
    # 8 * 256 * 10 = 20480 MACs, rank 0 does 131072 + 20480 = 151552, rank 1 twice that
    for row in ("__root__", "module"):
        assert re.search(rf"^\s*{row}\s+151552\s+227328\s+303104\s+1\.333", result.stdout,
                         re.M), result.stdout
    # 151552 + 303104 MACs; parameters 64 * 256 + 256 + 256 * 10 + 10, once (not per rank)
    assert "forward MACs over the ranks: 454656, of the model's 19210 parameters" \
        in result.stdout
    # the gradient all-reduce: (64 * 256 + 256 + 256 * 10 + 10) floats * 4 bytes
    assert f"gradient all-reduce per rank: {(64 * 256 + 256 + 256 * 10 + 10) * 4} bytes" \
        in result.stdout
