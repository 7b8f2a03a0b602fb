"""A Hugging Face ``TrainerCallback`` that profiles chosen training steps
(``docs/integrations/transformers.md``; the ``trainer`` extra).

::

    from moduleprofiler.integrations.transformers import ModuleProfilerCallback

    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[ModuleProfilerCallback(start_step=5, num_steps=5)])

The work is :class:`~moduleprofiler.integrations.StepWindow`'s; this module wires it to the
``Trainer``'s events. Two things differ from Lightning, both because of what the ``Trainer``
gives a callback:

* a callback never sees the batch, so the batch is taken from the model's own call in the
  step before the window (a forward pre-hook, removed as soon as it has it) and the model is
  counted on it when the window starts: with a fixed batch size and sequence length it is the
  window's shape (``start_step`` must be at least 1);
* the ``Trainer`` calls its reporting integrations (TensorBoard, W&B...) before any callback
  passed to it, and gives callbacks no way to log through them; so the callback writes its
  numbers where they are read: an entry of ``trainer.state.log_history`` (in
  ``trainer_state.json``), TensorBoard scalars (:func:`tensorboard_dir`) when ``report_to``
  names TensorBoard, and the HTML report and JSON profile in ``args.output_dir``.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from os import PathLike
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from moduleprofiler.core import Profiler
from moduleprofiler.devices import resolve_device
from moduleprofiler.efficiency import DevicePeaks
from moduleprofiler.inputs import compiled_inside
from moduleprofiler.integrations.window import (
    WindowCallback,
    WindowResult,
    WindowWarning,
    write_each,
)
from moduleprofiler.warn import LowerBoundWarning, warn

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("moduleprofiler.integrations.transformers needs Transformers: "
                      "pip install transformers accelerate (from a moduleprofiler checkout: "
                      "pip install '.[trainer]')") from exc


def _detached(value: Any) -> Any:
    """A copy of a batch that the training step cannot change afterwards."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {key: _detached(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_detached(item) for item in value)
    return value


def tensorboard_dir(args: Any) -> str:
    """Where the callback's TensorBoard events go: the arguments' ``logging_dir`` where the
    Transformers version has one, else ``TENSORBOARD_LOGGING_DIR`` (the Trainer's own
    TensorBoard directory when set), else ``<output_dir>/runs/moduleprofiler`` (a run of its
    own beside the Trainer's in ``<output_dir>/runs``)."""
    return str(getattr(args, "logging_dir", None) or os.getenv("TENSORBOARD_LOGGING_DIR")
               or Path(args.output_dir) / "runs" / "moduleprofiler")


def step_context(args: Any, model: nn.Module) -> Callable[[], AbstractContextManager[Any]] | None:
    """The autocast a training step runs in under ``args.bf16`` / ``args.fp16`` (mixed
    precision), on the model's device; ``None`` without them. The Trainer's ``Accelerator``
    usually wraps the model's ``forward`` in the same autocast, but not on every path
    (DeepSpeed, FSDP): entered again, an autocast of the same dtype changes nothing."""
    dtype = torch.bfloat16 if getattr(args, "bf16", False) else \
        torch.float16 if getattr(args, "fp16", False) else None
    if dtype is None:
        return None
    return functools.partial(torch.autocast, resolve_device(model).type, dtype=dtype)


def _compiled(args: Any, model: nn.Module) -> str | None:
    """Why the model's own call runs inside compiled code, where the callback's hooks cannot
    go (``None``: it runs eagerly)."""
    if getattr(args, "torch_compile", False):
        return "the Trainer compiles the model (torch_compile=True)"
    if any(inside is model for inside in compiled_inside(model)):
        return "the model's own call is compiled (model.compile())"
    return None


class ModuleProfilerCallback(WindowCallback, TrainerCallback):  # type: ignore[misc]
    """Profiles training steps ``start_step … start_step + num_steps - 1`` of
    ``Trainer.train()``.

    It counts the model once (parameters, operations, FLOPs, forward and backward) on the
    batch of the step before the window, times every module over the window (host time on a
    CPU; device and host time on CUDA) and the whole steps just before it, and at the window's
    end writes ``moduleprofiler/step_ms``, ``moduleprofiler/mfu`` (where the device's peak is
    known) and ``moduleprofiler/<module>/<column>``: into ``state.log_history``, into
    TensorBoard (:func:`tensorboard_dir`) when ``args.report_to`` names it, and as
    ``moduleprofiler_report.html`` and ``moduleprofiler_profile.json`` in ``log_dir``
    (default ``args.output_dir``). Under DDP every rank profiles and rank 0 gathers. Training
    is unchanged.

    Args:
        start_step: the first profiled optimizer step (0-based; at least 1).
        num_steps: how many steps the per-module clock watches.
        depth: log the modules down to this depth (1: the model's children).
        log_dir: where the files go (default: ``args.output_dir``).
        loss_fn: ``output -> scalar`` for the count's backward (default: the one default
            loss, :func:`moduleprofiler.loss.default_loss`: the output's ``loss`` when the
            batch has labels).
        peaks: the device's peaks for MFU (see :class:`StepWindow`).
        memory: also measure the training step's memory on the counted batch (the peak,
            bytes saved for the backward and live per module).
        profiler: the profiler whose formulas count, with its own map entries (default: a
            new one, the registered formulas; see :class:`StepWindow`).

    Raises:
        ValueError, TypeError: a bad argument (the message names it).
    """

    def __init__(self, start_step: int = 5, num_steps: int = 5, depth: int = 1,
                 log_dir: str | PathLike[str] | None = None, *,
                 loss_fn: Callable[[Any], torch.Tensor] | None = None,
                 peaks: DevicePeaks | str | None = None, memory: bool = True,
                 profiler: Profiler | None = None) -> None:
        super().__init__(log_dir, start_step=start_step, num_steps=num_steps, depth=depth,
                         loss_fn=loss_fn, peaks=peaks, memory=memory, profiler=profiler)
        if isinstance(start_step, int) and start_step < 1:
            raise ValueError("start_step must be >= 1: the Trainer shows a callback no batch, "
                             "so the window's model is counted on the batch of the step "
                             f"before it; got {start_step}")
        self._batch: Any = None
        self._capture: RemovableHandle | None = None

    # -- the Trainer's events --------------------------------------------------------------
    # Every event goes through WindowCallback._guarded: a profiling failure warns with its
    # cause and turns the callback off, never stopping the training it watches.
    def on_train_begin(self, args: Any, state: Any, control: Any, model: nn.Module | None = None,
                       **kwargs: Any) -> None:
        """Training starts: a fresh window on the model, counted in the step's precision
        (``bf16``/``fp16``: their autocast)."""
        self._batch = None
        self._drop_an_abandoned_step()
        self._guarded("starting the profiling window", self._start, args, model)

    def on_step_begin(self, args: Any, state: Any, control: Any,
                      model: nn.Module | None = None, **kwargs: Any) -> None:
        """The step before the window keeps its batch; every step tells the window."""
        window = self.window
        if window is None:
            return
        step = state.global_step
        if step == self.start_step and self._batch is None:
            # a train() resumed from a checkpoint at the window's first step: the step before
            # it, whose batch the count needs, ran in an earlier run
            self.window = None
            window.release()
            warn(WindowWarning(
                f"moduleprofiler: training started at step {step} (resumed from a "
                f"checkpoint), the profiling window's first step (start_step="
                f"{self.start_step}): the model is counted on the batch of the step before "
                f"the window, which this run did not run, so nothing was profiled or logged; "
                f"pass a start_step above {step}"))
            return
        if step == self.start_step - 1 and model is not None and self._capture is None:
            self._capture = model.register_forward_pre_hook(self._keep_batch, with_kwargs=True)
        self._guarded(f"profiling training step {step}", window.before_step, step,
                      self._batch if step == self.start_step else None)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The window's last step writes the result (``global_step`` already counts it)."""
        self._release_capture()
        if self.window is not None:
            step = state.global_step - 1
            self._guarded(f"profiling training step {step}", self._after_step, args, state,
                          step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Training that ended inside the window reports the steps it profiled; training
        that ended before it says so (a
        :class:`~moduleprofiler.integrations.window.WindowWarning`)."""
        self._release_capture()
        if self.window is not None and not self._emitted:
            self._guarded("closing the profiling window", self._finish, args, state)

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """An evaluation or prediction batch: a profiled step still open here was abandoned
        (:meth:`_drop_an_abandoned_step`)."""
        self._drop_an_abandoned_step()

    # -- internals -------------------------------------------------------------------------
    def _drop_an_abandoned_step(self) -> None:
        """A profiled step that began and never ended was abandoned: the training running it
        raised, and the Trainer tells a callback of no exception (Lightning's
        ``on_exception`` has no twin). Its hooks stayed on the model and timed every later
        call; the next event that runs outside a training step (an evaluation or prediction
        batch, the next ``train()``) takes them off and says so. In a healthy run no such
        event comes inside a step (the Trainer evaluates after ``on_step_end``)."""
        window = self.window
        if window is None or not window.stepping:
            return
        self.window = None
        self._release_capture()
        window.release()
        warn(WindowWarning(
            "moduleprofiler: training stopped inside the profiling window (it raised; the "
            "Trainer tells a callback of no exception): the window's hooks stayed on the model "
            "until now and came off; nothing of that run was logged"))

    def _start(self, args: Any, model: nn.Module | None) -> None:
        if model is None:
            raise ValueError("ModuleProfilerCallback needs the Trainer's model")
        compiled = _compiled(args, model)
        if compiled is not None:
            self.window, self.result = None, None
            # the Trainer calls a torch.compile wrapper of the model, which no callback is
            # given, or the model compiled in place: every hook on the model (the batch's
            # capture first) runs inside the compiled call, where Dynamo traces it (graph
            # breaks, recompiles) or never calls it
            warn(WindowWarning(
                f"moduleprofiler: {compiled}, and the callback's hooks would run inside the "
                "compiled program (Dynamo would break the graph and recompile at them, or "
                "never call them): the callback profiles nothing in this run, and training "
                "goes on; profile a run without the compile (the same counts; the eager "
                "program's times)"))
            return
        self._new_window(model, step_context(args, model))

    def _after_step(self, args: Any, state: Any, step: int) -> None:
        assert self.window is not None
        result = self.window.after_step(step)
        if result is not None:
            self._emit(args, state, result)

    def _finish(self, args: Any, state: Any) -> None:
        assert self.window is not None
        result = self.window.finish()
        if result is not None:
            self._emit(args, state, result)

    def _keep_batch(self, module: nn.Module, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> None:
        # a forward pre-hook on the user's model: a failure here would stop the step itself
        self._guarded("keeping the batch of the step before the window", self._keep,
                      args, kwargs)

    def _keep(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._batch is None:  # gradient accumulation calls the model several times a step
            self._batch = _detached(kwargs if kwargs else args)
        self._release_capture()

    def _release_capture(self) -> None:
        if self._capture is not None:
            self._capture.remove()
            self._capture = None

    def _emit(self, args: Any, state: Any, result: WindowResult) -> None:
        self._emitted = True
        if not state.is_world_process_zero:
            return
        self.result = result
        state.log_history.append({**result.scalars, "step": state.global_step})
        report_to = args.report_to if isinstance(args.report_to, (list, tuple)) \
            else [args.report_to]
        # each destination on its own: TensorBoard failing (not installed, a directory that
        # cannot be written) keeps not the files from the result, nor they it
        destinations: list[tuple[str, Callable[[], object]]] = []
        if "tensorboard" in report_to or "all" in report_to:
            destinations.append(("writing TensorBoard's events",
                                 functools.partial(self._to_tensorboard, args, state, result)))
        folder = Path(self.log_dir if self.log_dir is not None else args.output_dir)
        destinations.append((f"writing the files into {folder}",
                             functools.partial(result.write, folder)))
        write_each(destinations)

    def _to_tensorboard(self, args: Any, state: Any, result: WindowResult) -> None:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=tensorboard_dir(args))
        try:
            # the logged scalars under their own keys, the modules of every depth down to
            # ``depth`` (the profile's writer takes one depth); 64-bit, so a count of
            # billions is exact
            for key, value in result.scalars.items():
                writer.add_scalar(key, value, state.global_step, new_style=True,
                                  double_precision=True)
            with warnings.catch_warnings():
                # the window has said which logged numbers are lower bounds: once per cause
                warnings.simplefilter("ignore", LowerBoundWarning)
                # the module tree and the report's summary as text, no scalar twice
                result.profile.to_tensorboard(writer, state.global_step, columns=[])
        finally:
            writer.close()
