"""Profile a torchvision CNN (no weights downloaded): the tree, the costliest layer types,
and the totals.

    python examples/torchvision_cnn.py [model_name]
"""

from __future__ import annotations

import sys

import torch
import torchvision

from moduleprofiler import ModuleProfiler


def main(name: str = "resnet18") -> None:
    model = torchvision.models.get_model(name, weights=None)
    profile = ModuleProfiler().profile(model, torch.randn(1, 3, 224, 224))
    print(profile.tree(max_depth=2))
    print(profile.top(5, by="macs"))
    print(f"{profile.total_params:,} parameters, {profile.total_macs:,} MACs, "
          f"{profile.total_flops:,} FLOPs, complete: {profile.complete}")


if __name__ == "__main__":
    main(*sys.argv[1:])
