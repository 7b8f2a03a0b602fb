"""Predicted vs measured peak memory of a training step on a CUDA GPU.

    PYTHONPATH=. python3 benchmarks/gpu_memory.py           # ResNet-50 b32, GPT-2 b8 s512
    PYTHONPATH=. python3 benchmarks/gpu_memory.py --quick   # tiny models; runs without a GPU
    PYTHONPATH=. python3 benchmarks/gpu_memory.py --only resnet50   # the cases named so

For each case:

* **predicted**: ``measure_memory(..., train=True, device="meta", emulate="cuda",
  keep_output=False)`` on the model built on the meta device (nothing allocated; the
  operator-level accounting of live storages);
* **measured**: a plain training step on the GPU with no profiler at all, after one warm-up
  step: ``reset_peak_memory_stats``, ``loss_fn(model(x)).backward()`` (the output freed once
  the loss is taken), ``max_memory_allocated``;
* **on-GPU**: ``measure_memory`` of the GPU model: the allocator's peak with the module call
  that was running when it was reached, and the operator accounting run on the CUDA tensors.

Prints one line per case with predicted / measured, both absolute (the prediction counts only
the model and its inputs as already allocated; the GPU also holds the cuBLAS workspaces), as
the increase over what was allocated before the step, and as the increase of the allocator's
requested bytes (which its block rounding and cache history leave out). Writes
``$OUT/gpu_memory.json`` when ``OUT`` is set.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moduleprofiler.memory import measure_memory

MIB = 2**20


@dataclass
class Case:
    """A model factory (called under a ``torch.device`` context), its input and its loss."""

    name: str
    build: Callable[[], nn.Module]
    make_input: Callable[[torch.device], Any]
    loss_fn: Callable[[Any], Tensor]


def _classification_loss(output: Tensor) -> Tensor:
    target = torch.zeros(output.shape[0], dtype=torch.long, device=output.device)
    return F.cross_entropy(output, target)


def _lm_loss(output: Any) -> Tensor:
    return output.loss  # type: ignore[no-any-return]


def _resnet(batch: int, size: int, name: str = "resnet50") -> Case:
    import torchvision.models as tvm

    return Case(
        f"{name} b{batch} {size}px",
        lambda: getattr(tvm, name)(weights=None),
        lambda device: torch.randn(batch, 3, size, size, device=device),
        _classification_loss,
    )


def _gpt2(batch: int, seq: int, attention: str, layers: int = 12) -> Case:
    from transformers import GPT2Config, GPT2LMHeadModel

    def build() -> nn.Module:
        config = GPT2Config(n_layer=layers)
        config._attn_implementation = attention
        return GPT2LMHeadModel(config)

    def make_input(device: torch.device) -> dict[str, Tensor]:
        ids = torch.randint(0, 50257, (batch, seq), device=device)
        return {"input_ids": ids, "labels": ids}

    return Case(f"gpt2-{layers}L b{batch} s{seq} {attention}", build, make_input, _lm_loss)


def _call(model: nn.Module, example: Any) -> Any:
    return model(**example) if isinstance(example, dict) else model(example)


def _measured_step(model: nn.Module, example: Any, loss_fn: Callable[[Any], Tensor],
                   device: torch.device) -> tuple[int, int, int]:
    """(allocated before the step, peak during it, the increase in requested bytes) of one
    plain training step."""
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    requested = torch.cuda.memory_stats(device)["requested_bytes.all.current"]
    loss = loss_fn(_call(model, example))
    loss.backward()
    del loss
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    requested = torch.cuda.memory_stats(device)["requested_bytes.all.peak"] - requested
    model.zero_grad(set_to_none=True)
    return before, peak, requested


def run_case(case: Case, device: torch.device | None) -> dict[str, Any]:
    """Predicted (meta), and on a GPU measured and on-GPU numbers, for one case."""
    torch.manual_seed(0)
    row: dict[str, Any] = {"case": case.name}
    with torch.device("meta"):
        meta_model = case.build().train()
    meta_input = case.make_input(torch.device("meta"))
    start = time.perf_counter()
    # keep_output=False: the measured step frees the output once the loss is taken
    # (``loss_fn(model(x)).backward()``); the default keeps it through the backward, which
    # for GPT-2 holds its logits (8 x 512 x 50257 x 4 bytes = 785 MiB) there too
    planned = measure_memory(meta_model, meta_input, train=True, loss_fn=case.loss_fn,
                             device="meta", emulate="cuda", keep_output=False)
    assert planned.training is not None
    row.update(predicted_bytes=planned.training.peak_bytes,
               predicted_at=str(planned.training.peak_call),
               predict_s=round(time.perf_counter() - start, 2))
    del meta_model, meta_input
    if device is None:
        return row
    with torch.device(device):
        model = case.build().train()
    example = case.make_input(device)
    _measured_step(model, example, case.loss_fn, device)  # warm-up: cuBLAS/cuDNN handles
    before, peak, requested = _measured_step(model, example, case.loss_fn, device)
    row.update(measured_bytes=peak, measured_before_bytes=before,
               model_and_input_bytes=planned.training.baseline_bytes,
               ratio=planned.training.peak_bytes / peak,
               increase_ratio=planned.training.increase_bytes / (peak - before),
               measured_requested_increase_bytes=requested,
               requested_increase_ratio=planned.training.increase_bytes / requested)
    try:
        report = measure_memory(model, example, train=True, loss_fn=case.loss_fn,
                                keep_output=False)
        assert report.training is not None
        row.update(gpu_allocator_bytes=report.training.peak_bytes,
                   gpu_operator_bytes=report.training.operator_peak_bytes,
                   gpu_peak_at=str(report.training.peak_call),
                   gpu_saved_bytes=report.training.saved_bytes,
                   predicted_saved_bytes=planned.training.saved_bytes,
                   operator_on_gpu_ratio=report.training.operator_peak_bytes / peak,
                   gpu_requested_increase_bytes=report.training.requested_increase_bytes)
    except Exception as exc:  # keep the measured ratio
        traceback.print_exc()
        row["gpu_error"] = f"{type(exc).__name__}: {exc}"
    del model, example
    gc.collect()
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny models (a smoke test)")
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    options = parser.parse_args()
    device = torch.device("cuda", 0) if torch.cuda.is_available() else None
    if options.quick:
        cases = [_resnet(2, 64, "resnet18"), _gpt2(2, 64, "eager", layers=2),
                 _gpt2(2, 64, "sdpa", layers=2)]
    else:
        cases = [_resnet(32, 224), _gpt2(8, 512, "eager"), _gpt2(8, 512, "sdpa")]
    cases = [case for case in cases if options.only in case.name]
    print(f"torch {torch.__version__}, device "
          f"{torch.cuda.get_device_name(0) if device is not None else 'none (prediction only)'}")
    rows = []
    for case in cases:
        if device is not None:
            gc.collect()
            torch.cuda.empty_cache()
        try:
            row = run_case(case, device)
        except Exception as exc:  # report and go on with the next case
            traceback.print_exc()
            row = {"case": case.name, "error": f"{type(exc).__name__}: {exc}"}
        rows.append(row)
        if "error" in row:
            print(f"{row['case']:28s} ERROR {row['error']}")
        elif "gpu_error" in row:
            print(f"{row['case']:28s} predicted {row['predicted_bytes'] / MIB:9.1f} MiB  "
                  f"measured {row['measured_bytes'] / MIB:9.1f} MiB  ratio {row['ratio']:.4f} "
                  f"(on-GPU measure_memory failed: {row['gpu_error']})")
        elif "measured_bytes" in row:
            print(f"{row['case']:28s} predicted {row['predicted_bytes'] / MIB:9.1f} MiB  "
                  f"measured {row['measured_bytes'] / MIB:9.1f} MiB  "
                  f"ratio {row['ratio']:.4f} (increase over what was allocated before the step: "
                  f"{row['increase_ratio']:.4f}; over the requested bytes' increase: "
                  f"{row['requested_increase_ratio']:.4f})  | on GPU: operator accounting "
                  f"{row['gpu_operator_bytes'] / MIB:9.1f} MiB (ratio "
                  f"{row['operator_on_gpu_ratio']:.4f}), allocator "
                  f"{row['gpu_allocator_bytes'] / MIB:9.1f} MiB at {row['gpu_peak_at']}; "
                  f"before the step {row['measured_before_bytes'] / MIB:.1f} MiB vs model+input "
                  f"{row['model_and_input_bytes'] / MIB:.1f} MiB")
        else:
            print(f"{row['case']:28s} predicted {row['predicted_bytes'] / MIB:9.1f} MiB at "
                  f"{row['predicted_at']} ({row['predict_s']} s)")
    print(json.dumps(rows))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gpu_memory.json"), "w") as file:
            json.dump({"torch": torch.__version__, "rows": rows}, file, indent=2)


if __name__ == "__main__":
    main()
