"""Profile ResNet-18 (random weights, nothing downloaded) and write a self-contained HTML
report: summary, where the ops go, the collapsible module tree, a sortable table.

    python examples/html_report.py [report.html]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torchvision.models import resnet18

from moduleprofiler import ModuleProfiler


def main(target: str = "resnet18_report.html") -> Path:
    profile = ModuleProfiler().profile(resnet18(weights=None), torch.randn(1, 3, 224, 224))
    path = Path(target)
    profile.save(path, title="ResNet-18, 1x3x224x224")  # the format comes from the suffix
    profile.tree(max_depth=1).print()                   # the same numbers in the terminal
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB); open it in any browser")
    return path


if __name__ == "__main__":
    main(*sys.argv[1:2])
