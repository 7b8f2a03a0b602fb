"""Every script in examples/ runs (fast settings) and prints what it promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
# Scripts run by the test file of their feature.
ELSEWHERE = {
    "memory_planning.py": "tests/memory/test_example.py",
    "training_timing.py": "tests/timing/test_example.py",
    "html_report.py": "tests/export/test_docs.py",
    "latex_table.py": "tests/export/test_docs.py",
    "distributed_torchrun.py": "tests/distributed/test_docs.py",
}
EXPECTED = {
    "torchvision_cnn.py": "complete: True",
    "huggingface_transformer.py": "backward",
    "custom_formula.py": "(formula)",
    "meta_device.py": "FLOPs per 128 tokens",
    "language_model.py": "per generated token",
    "roofline.py": "modules drawn against",
}


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_example_runs(script: str) -> None:
    env = {**os.environ, "MODULEPROFILER_FAST": "1"}
    result = subprocess.run([sys.executable, str(EXAMPLES / script)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert EXPECTED[script] in result.stdout


def test_every_example_is_executed_by_a_test() -> None:
    for script in sorted(path.name for path in EXAMPLES.glob("*.py")):
        if script in ELSEWHERE:
            assert script in (ROOT / ELSEWHERE[script]).read_text(encoding="utf-8")
        else:
            assert script in EXPECTED, f"{script} is not run by any test"
