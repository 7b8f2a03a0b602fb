"""A PyTorch Lightning ``Callback`` that profiles chosen training steps
(``docs/integrations/lightning.md``; the ``lightning`` extra).

::

    from moduleprofiler.integrations.lightning import ModuleProfilerCallback

    trainer = lightning.Trainer(callbacks=[ModuleProfilerCallback(start_step=5, num_steps=5)])

Works with both import names, ``lightning`` and ``pytorch_lightning``: the callback is an
instance of each installed package's ``Callback``, so either package's ``Trainer`` takes it.
The work is :class:`~moduleprofiler.integrations.StepWindow`'s; this module only wires it to
Lightning's hooks, loggers and log directory.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from os import PathLike
from pathlib import Path
from typing import Any

import torch

from moduleprofiler.core import Profiler
from moduleprofiler.efficiency import DevicePeaks
from moduleprofiler.integrations.window import WindowCallback, WindowResult, write_each

_BASES: list[type] = []
try:
    from lightning.pytorch import Callback as _LightningCallback

    _BASES.append(_LightningCallback)
except ImportError:  # pragma: no cover - the other name may be installed
    pass
try:
    from pytorch_lightning import Callback as _PLCallback

    _BASES.append(_PLCallback)
except ImportError:  # pragma: no cover
    pass
if not _BASES:  # pragma: no cover - exercised only without the extra
    raise ImportError("moduleprofiler.integrations.lightning needs PyTorch Lightning: "
                      "pip install lightning (or pytorch_lightning; from a moduleprofiler "
                      "checkout: pip install '.[lightning]')")


def first_item(batch: Any) -> Any:
    """The model's input in a Lightning batch: the first item of a tuple or list (the
    ``(inputs, targets)`` convention), anything else as it is (a tensor is ``model(x)``, a dict
    is ``model(**batch)``; the callback passes a dict whose keys ``forward`` does not take as
    its one argument, ``model(batch)``)."""
    return batch[0] if isinstance(batch, (tuple, list)) else batch


def _takes_keywords(forward: Callable[..., Any], keys: Iterable[Any]) -> bool:
    """Whether ``forward(**batch)`` can bind every key (``**kwargs``, or a parameter of each
    name); an unreadable signature is given the benefit of the doubt."""
    try:
        parameters = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return True
    if any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
        return True
    names = {parameter.name for parameter in parameters
             if parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)}
    return set(keys) <= names


def _module_input(module: Any, batch: Any) -> Any:
    """:func:`first_item` of ``batch`` for ``module``'s ``forward``: a dict whose keys it does
    not take as keywords (``def forward(self, batch)``, the habit of dict batches) is its one
    positional argument, as ``training_step`` calls ``self(batch)``."""
    item = first_item(batch)
    if isinstance(item, Mapping) and not _takes_keywords(module.forward, item):
        return (item,)
    return item


class _Hooks(WindowCallback):
    """The callback's hooks; mixed into every installed package's ``Callback`` below."""

    def __init__(self, start_step: int = 5, num_steps: int = 5, depth: int = 1,
                 log_dir: str | PathLike[str] | None = None, *,
                 forward_args: Callable[[Any], Any] = first_item,
                 loss_fn: Callable[[Any], torch.Tensor] | None = None,
                 peaks: DevicePeaks | str | None = None, memory: bool = True,
                 profiler: Profiler | None = None) -> None:
        super().__init__(log_dir, start_step=start_step, num_steps=num_steps, depth=depth,
                         forward_args=forward_args, loss_fn=loss_fn, peaks=peaks, memory=memory,
                         profiler=profiler)
        self._step = 0
        self._directory: Path | None = None

    # Every hook goes through WindowCallback._guarded: a profiling failure warns with its
    # cause and turns the callback off, never stopping the fit it watches.
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """A fit starts: a fresh window on the LightningModule, counted in the trainer's
        precision (``precision="bf16-mixed"``: its autocast), as the training step runs."""
        self._guarded("starting the profiling window", self._start, trainer, pl_module)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        """Counts training batches (``start_step`` is in batches from the fit's start)."""
        if self.window is not None:
            self._guarded(f"profiling training batch {self._step}", self.window.before_step,
                          self._step, batch)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """The window's last step logs the result and writes the files."""
        if self.window is None:
            return
        step, self._step = self._step, self._step + 1
        self._guarded(f"profiling training batch {step}", self._after_step, trainer, step)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """A fit that ended inside the window reports the steps it profiled; one that ended
        before it says so (a :class:`~moduleprofiler.integrations.window.WindowWarning`)."""
        if self.window is not None and not self._emitted:
            self._guarded("closing the profiling window", self._finish, trainer)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Training raised: the clock's hooks come off the model."""
        if self.window is not None:
            self._guarded("removing the profiler's hooks", self.window.release)

    def _start(self, trainer: Any, pl_module: Any) -> None:
        self._step = 0
        window = self._new_window(pl_module, trainer.precision_plugin.train_step_context)
        if window.forward_args is first_item:  # the default: read the module's forward
            window.forward_args = functools.partial(_module_input, pl_module)
        # read here, on every rank: under DDP trainer.log_dir is a broadcast from rank 0
        self._directory = Path(self.log_dir if self.log_dir is not None
                               else trainer.log_dir or trainer.default_root_dir)

    def _after_step(self, trainer: Any, step: int) -> None:
        assert self.window is not None
        result = self.window.after_step(step)
        if result is not None:
            self._emit(trainer, result)

    def _finish(self, trainer: Any) -> None:
        assert self.window is not None
        result = self.window.finish()
        if result is not None:
            self._emit(trainer, result)

    def _emit(self, trainer: Any, result: WindowResult) -> None:
        self.result, self._emitted = result, True
        assert self._directory is not None
        # each destination on its own: a logger that raises keeps neither the files nor the
        # other loggers from the result (nor they it)
        write_each([*((f"logger {type(logger).__name__}", functools.partial(
                        logger.log_metrics, result.scalars, step=trainer.global_step))
                      for logger in trainer.loggers),
                    (f"writing the files into {self._directory}",
                     functools.partial(result.write, self._directory))])


class ModuleProfilerCallback(_Hooks, *_BASES):  # type: ignore[misc]
    """Profiles training steps ``start_step … start_step + num_steps - 1`` of a fit.

    On the first of them it counts the LightningModule once on that batch (parameters,
    operations, FLOPs, forward and backward); it times every module over the window
    (host time on a CPU; device and host time on CUDA) and the whole steps just before it.
    At the window's end it logs ``moduleprofiler/step_ms``, ``moduleprofiler/mfu`` (where the
    device's peak is known) and ``moduleprofiler/<module>/<column>`` to every logger of the
    trainer, and writes ``moduleprofiler_report.html`` and ``moduleprofiler_profile.json``
    into ``log_dir`` (default: ``trainer.log_dir``). Under DDP every rank profiles and rank 0
    gathers: it logs its own numbers and writes every rank's profile. Training is unchanged.

    Args:
        start_step: the first profiled training batch (0-based, counted from the fit's start).
        num_steps: how many batches the per-module clock watches.
        depth: log the modules down to this depth (1: the LightningModule's children).
        log_dir: where the files go (default: ``trainer.log_dir``).
        forward_args: ``batch -> input`` of the LightningModule's ``forward`` for the count
            (default: :func:`first_item`).
        loss_fn: ``output -> scalar`` for the count's backward (default: the one default
            loss, :func:`moduleprofiler.loss.default_loss`).
        peaks: the device's peaks for MFU (see :class:`StepWindow`).
        memory: also measure the training step's memory on the counted batch (the peak,
            bytes saved for the backward and live per module).
        profiler: the profiler whose formulas count, with its own map entries (default: a
            new one, the registered formulas; see :class:`StepWindow`).
    """


__all__ = ["ModuleProfilerCallback", "first_item"]
