"""LaTeX for a paper: a per-module table of one model and a one-row-per-model summary of
several, both booktabs ``table`` floats with human units, every name escaped.

    python examples/latex_table.py [out_dir]

Preamble: ``\\usepackage{booktabs}`` (``\\usepackage[T1]{fontenc}`` recommended).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torchvision.models import mobilenet_v3_small, resnet18

from moduleprofiler import ModuleProfiler
from moduleprofiler.export import summary


def small_cnn(width: int = 16) -> nn.Module:
    """A factory the command line can call too: ``examples/latex_table.py:small_cnn``."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10),
    )


def main(out_dir: str = ".") -> tuple[Path, Path]:
    profiler = ModuleProfiler()
    x = torch.randn(1, 3, 224, 224)
    profiles = {
        "ResNet-18": profiler.profile(resnet18(weights=None), x),
        "MobileNetV3-Small": profiler.profile(mobilenet_v3_small(weights=None), x),
        "small_cnn (ours)": profiler.profile(small_cnn(), x),
    }
    directory = Path(out_dir)
    per_module = directory / "resnet18_modules.tex"
    profiles["ResNet-18"].save(per_module, max_depth=1, caption="ResNet-18 by top-level module",
                               label="tab:resnet18")
    models = directory / "models.tex"
    summary(profiles).save(models, caption="Parameters and compute per model, 1x3x224x224",
                           label="tab:models")
    print(models.read_text(encoding="utf-8"))
    return per_module, models


if __name__ == "__main__":
    main(*sys.argv[1:2])
