"""One metered pass: a no-grad forward, or forward + loss + backward, under the call tracker,
the live-storage accounting, the saved-tensor meter and (on CUDA) the allocator sampler."""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.errors import ProfilingError
from moduleprofiler.inputs import make_invocation
from moduleprofiler.memory._storage import distinct_bytes, model_tensors, tensors_in
from moduleprofiler.memory.calls import CallTracker
from moduleprofiler.memory.emulate import CudaKernelChoices
from moduleprofiler.memory.peak import (
    AllocationMode,
    CudaPeak,
    LiveBytes,
    Location,
    PeakMeter,
)
from moduleprofiler.memory.saved import SavedTensorMeter
from moduleprofiler.shapes import iter_tensors
from moduleprofiler.state import preserved_training_flags

LossFn = Callable[[Any], Tensor]


@dataclass
class PassResult:
    """What one pass left behind, before it becomes records."""

    tracker: CallTracker
    live: LiveBytes
    meter: PeakMeter
    cuda: CudaPeak | None
    saved: SavedTensorMeter | None
    grad_bytes: int | None


class _Locator:
    """Which call is running: the top of the stack in the forward (and in recomputation during
    the backward), else the call that created the executing autograd node."""

    def __init__(self, tracker: CallTracker) -> None:
        self.tracker = tracker
        self.phase = "forward"

    def __call__(self) -> Location:
        tracker = self.tracker
        if self.phase == "forward" or tracker.stack:
            return tracker.current(), self.phase, None
        node = torch._C._current_autograd_node()
        if node is None:
            return None, "backward", None
        if tracker.is_accumulation(node):
            return None, "backward", tracker.owner_of_accumulation(node)
        return tracker.call_of_node(node), "backward", None


def default_loss(output: Any) -> Tensor:
    """The output if it is a one-element tensor; else its ``loss`` entry or attribute if that is
    one (Hugging Face outputs with ``labels``); else the sum of every floating-point output
    tensor that requires grad."""
    if isinstance(output, Tensor) and output.numel() == 1:
        return output
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if isinstance(loss, Tensor) and loss.numel() == 1:
        return loss
    parts = [t.sum() for t in iter_tensors(output)
             if t.is_floating_point() and t.requires_grad]
    if not parts:
        raise ProfilingError(
            "the training pass found no output tensor that requires grad; pass loss_fn="
        )
    return functools.reduce(torch.add, parts)


def run_pass(module: nn.Module, inputs: Any, *, pred_fn: Callable[..., Any] | None,
             train: bool, loss_fn: LossFn | None, device: torch.device,
             emulate_cuda: bool = False) -> PassResult:
    """Run one metered pass of ``module`` on ``inputs`` (already on ``device``).

    Inference: eval mode, ``torch.no_grad()``. Training: train mode, grad enabled, saved
    tensors metered, then ``loss_fn(output)`` (default :func:`default_loss`) and its backward.
    Training flags are restored afterwards; gradients and buffers are the caller's business.
    ``emulate_cuda`` (meta device): take CUDA's kernel choices (:mod:`.emulate`).
    """
    tracker = CallTracker(module, record_outputs=not train)
    locate = _Locator(tracker)
    params = model_tensors(module)
    input_tensors = tensors_in(inputs)
    live = LiveBytes([*params, *input_tensors])
    meter = PeakMeter(live, locate)
    tracker.listeners.append(lambda call: meter.enter(call.index, locate.phase))
    cuda = CudaPeak(device, locate) if device.type == "cuda" else None
    if cuda is not None:
        tracker.listeners.append(lambda call: cuda.sample())
    saved = SavedTensorMeter(tracker.current, params, input_tensors) if train else None
    invoke = make_invocation(module, inputs, pred_fn)
    grad_bytes = None
    kind = "training" if train else "inference"
    with ExitStack() as stack:
        stack.callback(_release, tracker, live, saved)
        stack.enter_context(preserved_training_flags(module, eval=not train))
        if train:
            module.train()
        stack.enter_context(torch.enable_grad() if train else torch.no_grad())
        stack.enter_context(tracker.hooked())
        if emulate_cuda:
            stack.enter_context(CudaKernelChoices())
        stack.enter_context(AllocationMode(live, cuda))
        try:
            with saved.active() if saved is not None else nullcontext():
                output = invoke()
            if train:
                loss = (loss_fn or default_loss)(output)
                del output
                if not isinstance(loss, Tensor) or not loss.requires_grad:
                    raise ProfilingError(
                        f"the {kind} pass needs a loss tensor that requires grad, got "
                        f"{type(loss).__name__}"
                    )
                locate.phase = "backward"
                loss.backward()
                del loss
                grad_bytes = distinct_bytes(
                    p.grad for p in model_tensors(module)
                    if isinstance(p, nn.Parameter) and p.grad is not None
                )
            else:
                del output
        except ProfilingError:
            raise
        except Exception as exc:
            path = tracker.failed_path
            where = "outside any module's forward" if path is None else (
                f"in module {'<root>' if path == '' else path!r}")
            raise ProfilingError(
                f"the {kind} memory pass raised {type(exc).__name__} {where}: {exc}", path
            ) from exc
    if cuda is not None:
        cuda.finish()
    return PassResult(tracker, live, meter, cuda, saved, grad_bytes)


def _release(tracker: CallTracker, live: LiveBytes, saved: SavedTensorMeter | None) -> None:
    """Break every reference the meters hold to the model and its tensors, so that nothing
    outlives the pass waiting for the garbage collector."""
    tracker.release()
    live.release()
    if saved is not None:
        saved.release()
