"""One metered pass on the pass runner: a no-grad forward, or a training step (forward, loss,
backward accumulating ``.grad``), under the memory listeners."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.call import Call
from moduleprofiler.forward_grad import without_gradients
from moduleprofiler.inputs import make_invocation
from moduleprofiler.loss import LossFn, loss_of
from moduleprofiler.memory.emulate import CudaKernelChoices
from moduleprofiler.memory.peak import LiveBytesListener, Location
from moduleprofiler.memory.report import PassMemory, PeakCall
from moduleprofiler.memory.saved import SavedTensorsListener
from moduleprofiler.progress import Progress
from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.shapes import iter_tensors
from moduleprofiler.shards import communicates_gradients
from moduleprofiler.state import preserved_state
from moduleprofiler.storage import distinct_bytes, new_storage_bytes


@dataclass(frozen=True)
class PassResult:
    """What one pass measured, with no reference left to the model or its tensors."""

    memory: PassMemory
    calls: tuple[dict[str, Any], ...]
    """Per call in execution order: ``index``, ``parent``, ``depth``, ``path``, ``type_name``,
    ``call_number`` and the values the listeners wrote."""


class OutputBytesListener(Listener):
    """``output_bytes`` per call: the new storages among its outputs (the number the counting
    pass records, for the passes that do not count)."""

    def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
             output: Any) -> None:
        module = call.module
        call.values["output_bytes"] = new_storage_bytes(output, args, kwargs,
                                                        module._parameters, module._buffers)


class PassProgress(Listener):
    """Moves a progress bar by one step per module call of the forward and, in a training
    pass, one per call whose backward has begun (the backward walks the calls in reverse, so
    both halves take about as many steps). ``offset``: the steps done before this pass;
    ``total``: the steps of every pass, ``None`` until the first pass has counted its calls."""

    def __init__(self, bar: Progress, offset: int, total: int | None, text: str) -> None:
        self.bar, self.offset, self.total, self.text = bar, offset, total, text
        self.calls = 0
        self.backward: set[int] = set()

    @property
    def done(self) -> int:
        return self.offset + self.calls + len(self.backward)

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls += 1
        self.bar.update(self.done, self.total, f"{self.text} forward")

    def backward_operator(self, owner: Call | None, func: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any], out: Any) -> None:
        if owner is not None and owner.index not in self.backward:
            self.backward.add(owner.index)
            self.bar.update(self.done, self.total, f"{self.text} backward")


def run_pass(module: nn.Module, inputs: Any, *, pred_fn: Callable[..., Any] | None,
             train: bool, loss_fn: LossFn | None, device: torch.device,
             emulate_cuda: bool = False, progress: PassProgress | None = None,
             keep_output: bool = True, grad: bool | None = None,
             allocator: bool = True) -> PassResult:
    """Run one metered pass of ``module`` on ``inputs`` (already on ``device``).

    Inference: eval mode, ``torch.no_grad()``. Training: train mode, grad enabled, the bytes
    saved for backward metered, ``loss_fn(output)`` (default: the one default loss,
    :func:`moduleprofiler.loss.default_loss`) and a backward that accumulates ``.grad`` as a
    training step does. The model's state (flags, buffers, ``.grad``) is restored afterwards.
    Under the caller's ``torch.autocast``, each pass starts with autocast's cache of cast
    weights empty, and a training pass's backward runs outside autocast with the cache
    cleared, as a step of PyTorch's mixed-precision recipe does.
    ``keep_output``: hold the model's output until the backward is over, as ``out =
    model(x); loss_fn(out).backward()`` does (``False``: freed once the loss is taken, as
    ``loss_fn(model(x)).backward()`` does).
    ``emulate_cuda`` (meta device): take CUDA's kernel choices (:mod:`.emulate`).
    ``allocator``: on CUDA, the peaks are the caching allocator's (``False``: the operator
    accounting's, as on the CPU: a model spread over several devices).
    ``progress``: a listener that moves a progress bar as the calls run.
    ``grad`` (inference): with gradients on; ``None``: off, unless the forward takes gradients
    itself (:func:`~moduleprofiler.forward_grad.without_gradients`).

    Raises:
        ProfilingError: the forward (naming the module), the loss or the backward raised;
            :class:`~moduleprofiler.errors.LossError` when no loss can be derived.
    """
    if not train and grad is None:
        return without_gradients(lambda with_grad: run_pass(
            module, inputs, pred_fn=pred_fn, train=False, loss_fn=loss_fn, device=device,
            emulate_cuda=emulate_cuda, progress=progress, keep_output=keep_output,
            grad=with_grad, allocator=allocator))
    meter = LiveBytesListener(inputs, device if allocator else None)
    saved = SavedTensorsListener(inputs) if train else None
    listeners: list[Listener] = [meter, saved] if saved is not None \
        else [OutputBytesListener(), meter]
    runner = PassRunner(module, listeners if progress is None else [*listeners, progress])
    invoke = make_invocation(module, inputs, pred_fn)
    grad_bytes = None
    # Under the caller's autocast, the cast copy of each weight lives until the context exits:
    # a pass starts without the copies an earlier pass left behind, as a step in its own
    # autocast region does.
    autocast = (torch.amp.is_autocast_available(device.type)  # the meta device has none
                and torch.is_autocast_enabled(device.type))
    if autocast:
        torch.clear_autocast_cache()
    # a DDP or FSDP2 backward is a real one, ``loss.backward()``: FSDP2 computes in its forward
    # on unsharded copies of the parameters, so a backward into the sharded parameters
    # (``inputs=``) reached none of them and ran nothing; the input leaves' gradients it
    # makes are set aside with the parameters'
    real_backward = train and communicates_gradients(module)
    try:
        with ExitStack() as stack:
            stack.enter_context(preserved_state(
                module, eval=not train, train=train, grads=train, input=inputs,
                leaves=iter_tensors(inputs) if real_backward else ()))
            stack.enter_context(torch.set_grad_enabled(train or bool(grad)))
            if emulate_cuda:
                stack.enter_context(CudaKernelChoices())
            if train:
                # The loss is taken inside the pass (outside every module call), so that its
                # operators are metered; the output lives through the backward only when kept.
                held: list[Any] = []

                def step() -> Tensor:
                    output = invoke()
                    if keep_output:
                        held.append(output)
                    return loss_of(output, loss_fn)

                loss = runner.forward(step)
                if autocast:
                    # the step's autocast region ends with the loss, and the backward runs
                    # outside it (as PyTorch's mixed-precision recipe has it): the copies the
                    # cache held are freed as the backward releases what it saved
                    torch.clear_autocast_cache()
                    stack.enter_context(torch.autocast(device.type, enabled=False))
                runner.backward(loss, _as_is, accumulate=True, every_leaf=real_backward)
                del loss
                held.clear()
                grad_bytes = distinct_bytes(p.grad for p in module.parameters()
                                            if p.grad is not None)
            else:
                runner.forward(invoke)
    finally:
        runner.finish()
        runner.release()
    cuda = meter.cuda  # the allocator's numbers on CUDA, else the operator accounting's
    memory = PassMemory(
        kind="training" if train else "inference",
        method="operator" if cuda is None else "allocator",
        baseline_bytes=meter.live.baseline_bytes if cuda is None else cuda.baseline_bytes,
        peak_bytes=meter.peak if cuda is None else cuda.peak,
        peak_call=_peak_call(meter.peak_at if cuda is None else meter.cuda_peak_at, runner.calls),
        operator_baseline_bytes=meter.live.baseline_bytes,
        operator_peak_bytes=meter.peak,
        allocations=meter.live.allocations,
        saved_bytes=saved.totals.activation if saved is not None else None,
        saved_param_bytes=saved.totals.parameter if saved is not None else None,
        saved_input_bytes=saved.totals.input if saved is not None else None,
        grad_bytes=grad_bytes,
        output_kept=keep_output if train else None,
        requested_baseline_bytes=meter.live.baseline_bytes if cuda is None
        else cuda.requested_baseline_bytes,
        requested_peak_bytes=meter.peak if cuda is None else meter.requested_peak_bytes,
    )
    return PassResult(memory, tuple(
        {"index": call.index, "parent": call.parent, "depth": call.depth, "path": call.path,
         "type_name": type(call.module).__name__, "call_number": call.call_number,
         **call.values}
        for call in runner.calls))


def _as_is(loss: Tensor) -> Tensor:
    """The loss ``run_pass`` computed at the end of the forward."""
    return loss


def _peak_call(where: Location | None, calls: Sequence[Call]) -> PeakCall | None:
    """The call running at the peak, with its module's type and number of calls."""
    if where is None:
        return None
    call, phase, accumulating = where
    if call is None:
        return PeakCall(None, None, None, phase)
    return PeakCall(call.path, call.call_number, call.index, phase, accumulating=accumulating,
                    type_name=type(call.module).__name__,
                    calls=sum(other.path == call.path for other in calls))
