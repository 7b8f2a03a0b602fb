"""What the meta prediction of ResNet-50's training step leaves out: the allocations alive at
the bare step's peak that no operator returns (a convolution's cuDNN workspace).

``benchmarks/gpu_memory.py`` reads ResNet-50 b32 at 0.998 of the allocator's requested-bytes
increase. This records the allocator's history (with C++ frames) over one bare step after a
warm-up, replays it to the peak, and sums the allocations alive there whose C++ frames run
through cuDNN's workspace, against the gap between the prediction and the requested bytes.

    PYTHONPATH=. python benchmarks/gpu_memory_workspace_probe.py
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import torchvision.models as tvm

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_memory_gap_probe import live_at_peak

from moduleprofiler.memory import measure_memory

MIB = 2**20


def _loss(output: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(output, torch.zeros(output.shape[0], dtype=torch.long,
                                               device=output.device))


WORKSPACE_FRAMES = ("run_conv_plan", "run_conv_plan_fused", "workspace")
"""C++ frames that allocate a cuDNN convolution's workspace (a buffer no operator returns)."""


def _cxx(entry: dict[str, Any]) -> str:
    """The first three named C++ frames of an allocation (innermost first)."""
    names = [f["name"] for f in entry.get("frames", ()) if f["name"]
             and not f["filename"].endswith(".py")
             and not f["name"].startswith(_RECORDER_FRAMES)]
    return " <- ".join(name.split("(")[0] for name in names[:3])[:160]


_RECORDER_FRAMES = ("torch::unwind", "torch::CapturedTraceback", "torch::cuda::",
                    "c10::cuda::CUDACachingAllocator", "c10::")
"""Frames of the recording and the allocator themselves, left out of :func:`_cxx`."""


def _peak_without(snapshot: dict[str, Any], left_out: Any) -> int:
    """The largest running sum of the trace's allocations, ``left_out(entry)`` ones not
    counted (a replay of the step without them)."""
    live: dict[int, int] = {}
    current = best = 0
    for trace in snapshot["device_traces"]:
        for entry in trace:
            if entry["action"] == "alloc" and not left_out(entry):
                live[entry["addr"]] = entry["size"]
                current += entry["size"]
                best = max(best, current)
            elif entry["action"] == "free_requested" and entry["addr"] in live:
                current -= live.pop(entry["addr"])
    return best


def _workspace(entry: dict[str, Any]) -> bool:
    return any(any(key in f["name"] for key in WORKSPACE_FRAMES)
               for f in entry.get("frames", ()) if not f["filename"].endswith(".py"))


def main() -> None:
    device = torch.device("cuda", 0)
    batch = 32
    with torch.device("meta"):
        meta = tvm.resnet50(weights=None).train()
    planned = measure_memory(meta, torch.randn(batch, 3, 224, 224, device="meta"), train=True,
                             loss_fn=_loss, device="meta", emulate="cuda", keep_output=False)
    assert planned.training is not None
    model = tvm.resnet50(weights=None).to(device).train()
    x = torch.randn(batch, 3, 224, 224, device=device)

    def step() -> int:
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["requested_bytes.all.current"]
        torch.cuda.reset_peak_memory_stats()
        _loss(model(x)).backward()
        torch.cuda.synchronize()
        return int(torch.cuda.memory_stats()["requested_bytes.all.peak"] - before)

    step()  # warm-up: cuDNN picks its algorithms, cuBLAS its workspace
    model.zero_grad(set_to_none=True)
    torch.cuda.memory._record_memory_history(max_entries=500_000, stacks="all")
    try:
        requested = step()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    gap = requested - planned.training.increase_bytes
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(device)}, cuDNN "
          f"{torch.backends.cudnn.version()}")
    print(f"requested-bytes increase of the bare step {requested:,} B; predicted "
          f"{planned.training.increase_bytes:,} B; gap {gap:,} B ({gap / MIB:.2f} MiB, "
          f"ratio {planned.training.increase_bytes / requested:.4f})")
    peak, alive = live_at_peak(snapshot)
    workspaces = [entry for entry in alive if _workspace(entry)]
    workspace = sum(entry["size"] for entry in workspaces)
    print(f"alive at the recorded peak: {len(alive)} allocations, {peak:,} B of blocks; "
          f"cuDNN convolution workspaces among them: {len(workspaces)}, {workspace:,} B "
          f"({workspace / MIB:.2f} MiB)")
    for entry in workspaces:
        print(f"  workspace {entry['size'] / MIB:9.2f} MiB  {_cxx(entry)}")
    without = _peak_without(snapshot, _workspace)
    print(f"the same step replayed without any convolution workspace peaks at {without:,} B: "
          f"{without - planned.training.increase_bytes:+,} B against the prediction")
    groups: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    for entry in alive:
        key = _cxx(entry)
        groups[key] += entry["size"]
        counts[key] += 1
    print("alive at the peak by where they were allocated (C++ frames):")
    for key, size in groups.most_common(8):
        print(f"  {size / MIB:9.2f} MiB in {counts[key]:3d}  {key}")


if __name__ == "__main__":
    main()
