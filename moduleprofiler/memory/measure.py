"""``measure_memory``: static bytes plus a measured inference pass and, optionally, a training
pass, with the model left exactly as it was."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, Literal

import torch
from torch import nn

from moduleprofiler.memory._storage import tensors_in
from moduleprofiler.memory.passes import LossFn, PassResult, run_pass
from moduleprofiler.memory.peak import Location
from moduleprofiler.memory.preserve import (
    buffers_restored,
    grads_set_aside,
    needs_placing,
    placed_on,
    to_device,
)
from moduleprofiler.memory.report import CallMemory, MemoryReport, PassMemory, PeakCall
from moduleprofiler.memory.static import module_bytes


def _run_device(module: nn.Module, input: Any, device: str | torch.device | None
                ) -> torch.device:
    if device is not None:
        chosen = torch.device(device)
    elif any(t.device.type == "meta" for t in tensors_in(input)):
        chosen = torch.device("meta")  # meta inputs: a plan, whatever the model's device
    else:
        first = next(itertools.chain(module.parameters(), module.buffers(),
                                     tensors_in(input)), None)
        chosen = first.device if first is not None else torch.device("cpu")
    if chosen.type == "cuda" and chosen.index is None:
        chosen = torch.device("cuda", torch.cuda.current_device())
    return chosen


def _peak_call(where: Location | None, result: PassResult) -> PeakCall | None:
    if where is None:
        return None
    index, phase, owner = where
    if index is None:
        return PeakCall(owner, None, None, phase, accumulating=owner is not None)  # type: ignore[arg-type]
    call = result.tracker.calls[index]
    return PeakCall(call.path, call.call_number, index, phase)  # type: ignore[arg-type]


def _pass_memory(result: PassResult, train: bool) -> PassMemory:
    live, cuda, saved = result.live, result.cuda, result.saved
    return PassMemory(
        kind="training" if train else "inference",
        method="allocator" if cuda is not None else "operator",
        baseline_bytes=cuda.baseline_bytes if cuda is not None else live.baseline_bytes,
        peak_bytes=cuda.peak if cuda is not None else live.peak,
        peak_call=_peak_call(cuda.peak_at if cuda is not None else result.meter.peak_at, result),
        operator_baseline_bytes=live.baseline_bytes,
        operator_peak_bytes=live.peak,
        allocations=live.allocations,
        saved_bytes=saved.total("activation") if saved is not None else None,
        saved_param_bytes=saved.total("parameter") if saved is not None else None,
        saved_input_bytes=saved.total("input") if saved is not None else None,
        grad_bytes=result.grad_bytes,
    )


def _calls(inference: PassResult, training: PassResult | None) -> tuple[CallMemory, ...]:
    forward_max = inference.meter.inclusive(
        {c.index: c.parent for c in inference.tracker.calls}, "forward")
    train_values: dict[tuple[str, int], dict[str, int | None]] = {}
    if training is not None:
        train_calls = training.tracker.calls
        parents = {c.index: c.parent for c in train_calls}
        train_max = training.meter.inclusive(parents, "forward")
        backward_max = {call: value for (phase, call), value
                        in training.meter.max_by_call.items()
                        if phase == "backward" and call is not None}
        saved = training.saved.by_call if training.saved is not None else {}
        own = {c.index: saved[c.index].activation if c.index in saved else 0
               for c in train_calls}
        inclusive = dict(own)
        for call in sorted(parents, reverse=True):
            parent = parents[call]
            if parent is not None:
                inclusive[parent] += inclusive[call]
        for c in train_calls:
            train_values[(c.path, c.call_number)] = {
                "self_saved_bytes": own[c.index],
                "saved_bytes": inclusive[c.index],
                "self_saved_param_bytes": saved[c.index].parameter if c.index in saved else 0,
                "train_max_live_bytes": train_max.get(c.index),
                "backward_max_live_bytes": backward_max.get(c.index),
            }
    return tuple(
        CallMemory(
            index=c.index, parent=c.parent, depth=c.depth, path=c.path, type_name=c.type_name,
            call_number=c.call_number, output_bytes=c.output_bytes,
            max_live_bytes=forward_max.get(c.index),
            **train_values.get((c.path, c.call_number), {}),  # type: ignore[arg-type]
        )
        for c in inference.tracker.calls
    )


def measure_memory(
    module: nn.Module,
    input: Any = None,
    *,
    pred_fn: Callable[..., Any] | None = None,
    train: bool = False,
    loss_fn: LossFn | None = None,
    device: str | torch.device | None = None,
    emulate: Literal["cuda"] | None = None,
) -> MemoryReport:
    """Measure the memory of ``module`` on ``input``: parameter and buffer bytes, per-call output
    bytes, the peak of a no-grad forward and, with ``train=True``, the peak of forward + backward
    with the bytes autograd saves for backward per call.

    Args:
        module: the model; left exactly as it was (training flags, hooks, attributes,
            parameters, buffers and ``.grad`` of every parameter), even when the pass raises.
        input: as for :meth:`ModuleProfiler.profile`: a tensor (``module(x)``), a tuple or list
            (``module(*input)``), a dict (``module(**input)``), anything else (``module(input)``).
        pred_fn: called instead of ``module`` with the same unpacking; it must call ``module``.
        train: also run a training pass (train mode, gradients from no gradient at all, as after
            ``zero_grad(set_to_none=True)``); buffers such as BatchNorm statistics are put back.
        loss_fn: ``output -> scalar tensor`` for the training pass (default: the output itself
            when it is a scalar, else its ``loss``, else the sum of all output tensors).
        device: where to run. Default: ``meta`` if an input is on the meta device, else the
            device of the model's parameters. A different device
            (``"meta"`` to plan a model that does not fit, ``"cuda"`` for a CPU model) runs on
            temporary copies of the parameters and buffers; inputs are moved there too.
        emulate: ``"cuda"`` to plan a CUDA run on the meta device: dropout and
            ``scaled_dot_product_attention`` take the kernels CUDA would run, which keep less
            for backward than the CPU/meta ones (:mod:`moduleprofiler.memory.emulate`).
            Ignored on CUDA; refused on other devices.

    On CUDA the peaks come from the caching allocator (``torch.cuda.max_memory_allocated``
    after ``reset_peak_memory_stats``); on CPU and meta from operator-level accounting of live
    storages (see ``docs/memory.md``).

    Raises:
        ProfilingError: the forward, the loss or the backward raised (the module path is named).
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    run_device = _run_device(module, input, device)
    if emulate not in (None, "cuda"):
        raise ValueError(f"emulate must be None or 'cuda', got {emulate!r}")
    if emulate == "cuda" and run_device.type not in ("meta", "cuda"):
        raise ValueError(
            f"emulate='cuda' runs CUDA's attention operators, which exist only on the meta and "
            f"cuda devices; got device {str(run_device)!r} (pass device='meta')"
        )
    static = module_bytes(module)[""]
    with ExitStack() as stack:
        stack.enter_context(grads_set_aside(module))
        if needs_placing(module, run_device):
            stack.enter_context(placed_on(module, run_device))
        elif train:
            stack.enter_context(buffers_restored(module))
        inputs = to_device(input, run_device)
        options: dict[str, Any] = {"pred_fn": pred_fn, "loss_fn": loss_fn, "device": run_device,
                                   "emulate_cuda": emulate == "cuda" and run_device.type == "meta"}
        inference = run_pass(module, inputs, train=False, **options)
        training = run_pass(module, inputs, train=True, **options) if train else None
    return MemoryReport(
        device=str(run_device),
        param_bytes=static.param_bytes,
        buffer_bytes=static.buffer_bytes,
        trainable_param_bytes=static.trainable_param_bytes,
        inference=_pass_memory(inference, False),
        training=_pass_memory(training, True) if training is not None else None,
        calls=_calls(inference, training),
    )
