"""On a CUDA GPU: the kernel clock's device low-confidence flag on a real model.

    PYTHONPATH=. python benchmarks/gpu_low_confidence.py

ResNet-50 (torchvision, ``weights=None``) at batch 8 in eval, timed with the defaults
(adaptive, kernel clock): a normal run must flag no module's device time, though only about a
quarter of its kept iterations is traced. The same model under a budget too short for
``min_iters`` (a run cut to a handful of samples) must flag every row. Prints, for each run,
why it stopped, the hooked and traced samples kept, the traced block's own minimum and the
flagged rows.
"""

from __future__ import annotations

import warnings

import torch


def main() -> None:
    import torchvision.models as tvm

    from moduleprofiler.timing import time_modules

    warnings.filterwarnings("ignore")
    model = tvm.resnet50(weights=None).cuda().eval()
    x = torch.randn(8, 3, 224, 224, device="cuda")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for label, keywords in (("default run", {}), ("budget 0.05 s", {"max_seconds": 0.05})):
        timing = time_modules(model, x, progress=False, **keywords)  # type: ignore[arg-type]
        frame = timing.to_df("module")
        traced = frame["device_ms"].notna()
        counts = [n for n in (len(timing.samples(info.path)) for info in timing.modules) if n]
        flags = frame.loc[traced, "device_low_confidence"]
        print(f"{label}: clock {timing.clock}, stopped by {timing.stop_reason}, "
              f"{len(timing.timing.hooked_ms)} hooked samples kept, traced samples per module "
              f"{min(counts)}-{max(counts)}, traced block's minimum "
              f"{timing.timing.min_traced_samples} (min_iters {timing.timing.min_samples}); "
              f"device_low_confidence True in {int(flags.sum())} of {len(flags)} rows, "
              f"self_device_low_confidence True in "
              f"{int(frame.loc[traced, 'self_device_low_confidence'].sum())}")


if __name__ == "__main__":
    main()
