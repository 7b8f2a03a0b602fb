"""The result of :func:`~moduleprofiler.memory.measure_memory`: a profile whose records carry
the memory columns (declared by the listeners that write them: ``SavedTensorsListener.columns``,
``LiveBytesListener.columns``), with the measured passes' evidence
(the peaks and the calls that set them) attached."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pandas as pd

from moduleprofiler.deprecation import warn_deprecated
from moduleprofiler.export.frame import module_values
from moduleprofiler.export.json_io import plain_data
from moduleprofiler.export.keys import FIELD_KEYS
from moduleprofiler.export.profile import Profile
from moduleprofiler.export.units import human_bytes
from moduleprofiler.export.view import View
from moduleprofiler.memory.saved import SavedTensorsListener
from moduleprofiler.records import CallPosition, display_path

Phase = Literal["forward", "backward"]
Method = Literal["operator", "allocator"]
PassKind = Literal["inference", "training"]


@dataclass(frozen=True)
class PeakCall:
    """Where a peak was reached: the module call that was running. As a dict
    (``report.to_dict()``, the JSON) its ``path``, ``index`` and ``type_name`` are
    ``module``, ``call`` and ``type``, as the frames name them."""

    FIELD_KEYS: ClassVar[dict[str, str]] = FIELD_KEYS
    """Attribute -> key in its dict and JSON (:data:`moduleprofiler.export.keys.FIELD_KEYS`)."""

    path: str | None
    """Module path (``""`` is the root); ``None``: outside every module call (e.g. the loss)."""
    call_number: int | None
    """0 for the module's first call, ...; ``None`` outside every module call."""
    index: int | None
    """Position of the call in its pass (``report.records[index]`` for the inference pass);
    ``None`` outside every call."""
    phase: Phase
    accumulating: bool = False
    """The peak was set while accumulating the gradient of a parameter of ``path`` (whose
    first call the accumulation belongs to)."""
    type_name: str | None = None
    """The module's type."""
    calls: int | None = None
    """How many times the module was called in the pass."""

    def __str__(self) -> str:
        """``0 (Linear), call 1 of 2, backward``: the module path and type, which call
        (counted from 1), the phase."""
        if self.path is None:
            return f"outside every module call ({self.phase})"
        name = display_path(self.path)
        if self.type_name is not None:
            name = f"{name} ({self.type_name})"
        if self.accumulating:
            return f"{name}, gradient accumulation, backward"
        if self.call_number is None:
            return f"{name}, {self.phase}"
        which = f"call {self.call_number + 1}" + (
            f" of {self.calls}" if self.calls is not None else "")
        return f"{name}, {which}, {self.phase}"


@dataclass(frozen=True)
class PassMemory:
    """One measured pass: a no-grad forward (``inference``) or forward + backward
    (``training``)."""

    KEYS: ClassVar[dict[str, str]] = {
        "inference": "the no-grad forward's pass: its fields below",
        "training": "the training step's pass (forward and backward; None without train=True)",
        "kind": "a pass: inference or training",
        "method": "a pass: allocator (its peaks are the CUDA caching allocator's) or operator "
                  "(the operator-level accounting of live storages)",
        "baseline_bytes": "a pass: memory live when it started (parameters, buffers, inputs; "
                          "on CUDA all the allocator had handed out)",
        "peak_bytes": "a pass: the highest live memory during it, baseline included",
        "increase_bytes": "a pass: peak_bytes - baseline_bytes, what it needed on top of what "
                          "was there (an attribute, no key)",
        "peak_call": "a pass: the module call running when its memory peaked",
        "operator_baseline_bytes": "a pass: the operator accounting's baseline_bytes",
        "operator_peak_bytes": "a pass: the operator accounting's peak_bytes",
        "allocations": "a pass: storages its operators allocated",
        "output_kept": "the training pass: whether the model's output was held through the "
                       "backward",
        "requested_baseline_bytes": "a pass: baseline_bytes in the bytes tensors asked for "
                                    "(the allocator's blocks round them up)",
        "requested_peak_bytes": "a pass: peak_bytes in the bytes tensors asked for, the same "
                                "for the same step whatever the allocator's cache held",
        "requested_increase_bytes": "a pass: requested_peak_bytes - requested_baseline_bytes "
                                    "(an attribute, no key)",
        "accumulating": "peak_call: the peak was set while accumulating a parameter's "
                        "gradient",
        "phase": "peak_call: forward or backward, the phase its pass was in at the peak",
    }
    """The keys of a pass (``report.to_dict()["inference"]``, ``["training"]``, the JSON's
    ``result_fields``) and of its ``peak_call`` that no other table of the glossary holds, with
    their meaning (docs/glossary.md lists them); ``saved_bytes``, ``saved_param_bytes``,
    ``saved_input_bytes``, ``grad_bytes``, ``call_number`` and ``calls`` there are the
    training pass's or the peak call's value of the names the glossary gives, and so are its
    ``module``, ``type`` and ``call``."""

    kind: PassKind
    method: Method
    """``allocator``: ``peak_bytes``/``baseline_bytes`` from the CUDA caching allocator;
    ``operator``: from the operator-level accounting of live storages."""
    baseline_bytes: int
    """Live when the pass started: parameters, buffers and inputs (on CUDA: everything the
    allocator had handed out)."""
    peak_bytes: int
    """Highest live memory during the pass, baseline included."""
    peak_call: PeakCall | None
    operator_baseline_bytes: int
    operator_peak_bytes: int
    """The operator-level accounting's numbers (equal to the above when ``method`` is
    ``operator``; on CUDA, the prediction to compare with the allocator's)."""
    allocations: int
    """Storages the operators allocated."""
    saved_bytes: int | None = None
    """Training: distinct activation storages autograd saved for backward."""
    saved_param_bytes: int | None = None
    """Training: parameter and buffer storages saved for backward (not activation memory)."""
    saved_input_bytes: int | None = None
    """Training: storages of the model's inputs saved for backward."""
    grad_bytes: int | None = None
    """Training: the parameters' gradients after the backward."""
    output_kept: bool | None = None
    """Training: whether the model's output was held until the backward was over (``out =
    model(x); loss_fn(out).backward()``, ``measure_memory(keep_output=True)``) or freed once
    the loss was taken (``loss_fn(model(x)).backward()``); ``None`` for inference."""
    requested_baseline_bytes: int | None = None
    requested_peak_bytes: int | None = None
    """The same two numbers in the bytes tensors asked for. On CUDA, ``peak_bytes`` is the
    caching allocator's allocated bytes, which count whole blocks: a request served from a
    cached block too large to split gets all of it, so one step reads up to about 2 % more or
    less with what the cache held before it. The requested bytes are the same for the same
    step whatever came before: the number to compare runs with. Off CUDA they equal
    ``baseline_bytes`` and ``peak_bytes`` (the accounting counts the storages' own bytes);
    ``None`` where the allocator keeps no such count."""

    @property
    def increase_bytes(self) -> int:
        """``peak_bytes - baseline_bytes``: what the pass needed on top of what was there."""
        return self.peak_bytes - self.baseline_bytes

    @property
    def requested_increase_bytes(self) -> int | None:
        """``requested_peak_bytes - requested_baseline_bytes`` (``None`` when unknown)."""
        if self.requested_peak_bytes is None or self.requested_baseline_bytes is None:
            return None
        return self.requested_peak_bytes - self.requested_baseline_bytes


def peak_note(measured: PassMemory) -> str:
    """A pass's peak and the module call that set it, in the one wording of every note on it
    (:meth:`MemoryReport.notes`, the command line's ``--what memory``)."""
    return (f"{measured.kind} peak {human_bytes(measured.peak_bytes)} "
            f"(+{human_bytes(measured.increase_bytes)} above the parameters and inputs) "
            f"at {measured.peak_call or 'no module call'}")


@dataclass(frozen=True, repr=False, kw_only=True)
class MemoryReport(Profile):
    """Static and measured memory of one model on one input: a profile with one record per
    call of the inference pass, its memory columns in ``record.metrics`` (those the two
    listeners declare: ``SavedTensorsListener.columns``, ``LiveBytesListener.columns``), and
    the passes' evidence: the peaks
    and the calls that set them. Counts are not measured here (``merge`` it into a counted
    profile to see both)."""

    TOTALS_ONLY: ClassVar[dict[str, str]] = {
        "device": "the device the memory passes ran on",
        "trainable_param_bytes": "of param_bytes, the parameters with requires_grad",
        "inference_baseline_bytes": "memory live when the no-grad forward started: parameters, "
                                    "buffers and inputs",
        "inference_peak_call": "the module call running when the no-grad forward's memory "
                               "peaked",
        "training_baseline_bytes": "memory live when the training step started",
        "training_peak_call": "the module call running when the training step's memory peaked",
        "saved_param_bytes": "parameter and buffer storages autograd saved for the backward, "
                             "and those of tensors the modules held as attributes before "
                             "the pass (not activation memory; per module: "
                             "self_saved_param_bytes)",
        "saved_input_bytes": "storages of the model's inputs autograd saved for the backward",
        "grad_bytes": "the parameters' gradients after the backward",
        "training_output_kept": "whether the training step held the model's output through "
                                "its backward (measure_memory(keep_output=...))",
    }
    """The keys of :meth:`totals` that no column and no ``summary()`` holds, with their
    meaning (docs/glossary.md lists them)."""

    device: str
    param_bytes: int
    buffer_bytes: int
    trainable_param_bytes: int
    inference: PassMemory
    training: PassMemory | None
    input_shapes: Any = None
    """The shape tree of the model's arguments in both passes, as the root call's
    ``input_shapes`` column holds it (``None``: a ``pred_fn`` gave them, or a document
    written before it was kept)."""
    input_dtypes: tuple[str, ...] = ()
    """Their dtypes, as the root call's ``input_dtypes`` column holds them."""

    @property
    def model_input(self) -> tuple[Any, tuple[str, ...]] | None:
        """:attr:`input_shapes` and :attr:`input_dtypes` (``None`` where unknown)."""
        if self.input_shapes is None:
            return None
        return self.input_shapes, tuple(self.input_dtypes)

    @property
    def model_size_bytes(self) -> int:
        """Parameters plus buffers, each tensor once."""
        return self.param_bytes + self.buffer_bytes

    @property
    def peak_bytes(self) -> int:
        """The training peak when a training pass ran, else the inference peak."""
        return (self.training or self.inference).peak_bytes

    @property
    def peak_call(self) -> PeakCall | None:
        """Where :attr:`peak_bytes` was reached."""
        return (self.training or self.inference).peak_call

    @property
    def peak_activation_bytes(self) -> int:
        """Inference peak above the baseline: the activations a forward needs at most."""
        return self.inference.increase_bytes

    def summary(self, memory: Any = None, latency: Any = None) -> pd.DataFrame:
        """The one-row model table (:meth:`Profile.summary`), its memory columns from this
        report's own passes (or from ``memory``, another report, when given)."""
        return super().summary(self if memory is None else memory, latency)

    def module_columns(self) -> dict[str, dict[str, Any]]:
        """Per module path, its calls' memory columns combined by each column's aggregation
        (the module frame's values: the maxima the largest, the saved bytes summed)."""
        names = list(dict.fromkeys(name for record in self.records for name in record.metrics))
        called = {record.path for record in self.records}
        return {path: values for path, values in module_values(self, names).items()
                if path in called}

    def call_columns(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Deprecated: each record's ``metrics``, by ``(path, call_number)``."""
        warn_deprecated("MemoryReport.call_columns()", "use {(r.path, r.call_number): "
                        "r.metrics for r in report.records}")
        return {(r.path, r.call_number): r.metrics for r in self.records}

    def totals(self) -> dict[str, Any]:
        """Whole-model numbers as a flat dict (``None`` where not measured)."""
        training = self.training
        return {
            "device": self.device,
            "param_bytes": self.param_bytes,
            "buffer_bytes": self.buffer_bytes,
            "trainable_param_bytes": self.trainable_param_bytes,
            "model_size_bytes": self.model_size_bytes,
            "inference_baseline_bytes": self.inference.baseline_bytes,
            "inference_peak_bytes": self.inference.peak_bytes,
            "peak_activation_bytes": self.peak_activation_bytes,
            "inference_peak_call": None if self.inference.peak_call is None
            else str(self.inference.peak_call),
            "training_baseline_bytes": training.baseline_bytes if training else None,
            "training_peak_bytes": training.peak_bytes if training else None,
            "training_peak_call": None if training is None or training.peak_call is None
            else str(training.peak_call),
            "saved_bytes": training.saved_bytes if training else None,
            "saved_param_bytes": training.saved_param_bytes if training else None,
            "saved_input_bytes": training.saved_input_bytes if training else None,
            "grad_bytes": training.grad_bytes if training else None,
            "training_output_kept": training.output_kept if training else None,
        }

    def to_dict(self) -> dict[str, Any]:
        """The profile's plain-Python view, with the device, the static bytes and both
        passes."""
        return {**super().to_dict(), "device": self.device, "param_bytes": self.param_bytes,
                "buffer_bytes": self.buffer_bytes,
                "trainable_param_bytes": self.trainable_param_bytes,
                "inference": plain_data(self.inference),
                "training": plain_data(self.training)}

    def notes(self) -> tuple[str, ...]:
        """The evidence in words: the static bytes, each pass's peak and the call that set
        it; for training also the bytes saved for backward and the gradients, and whether the
        model's output was kept through the backward."""
        def size(value: int | None) -> str:
            return "n/a" if value is None else human_bytes(value)

        unread = self.unknown_params
        lines = [f"device {self.device}: parameters {'>=' if unread else ''}"
                 f"{size(self.param_bytes)}, buffers {size(self.buffer_bytes)}"]
        if unread:
            lines.append(f"packed weights that cannot be read in modules {list(unread)} are "
                         "left out of the parameters, the baselines and the peaks: lower "
                         "bounds")
        for measured in (self.inference, self.training):
            if measured is not None:
                lines.append(peak_note(measured))
                requested = measured.requested_increase_bytes
                if requested is not None and requested != measured.increase_bytes:
                    lines.append(
                        f"{measured.kind}: +{size(requested)} requested by tensors; the "
                        "allocator's blocks round it up by an amount that depends on what its "
                        "cache held before (requested_peak_bytes compares runs exactly)")
        if self.training is not None:
            lines.append(f"training: saved for backward {size(self.training.saved_bytes)}, "
                         f"gradients {size(self.training.grad_bytes)}")
            lines.append("the model's output " + (
                "kept through the backward" if self.training.output_kept
                else "freed before the backward"))
        return tuple(lines)

    def tree(self, columns: Sequence[str] | None = None, *, width: int | None = None,
             **options: Any) -> View:
        """:meth:`Profile.tree` (by default with the memory columns measured: saved bytes and
        the live maxima, training first), the evidence (:meth:`notes`) under it."""
        if columns is None:  # the activation columns measured, in the records' order
            measured = {name for r in self.records for name, v in r.metrics.items()
                        if v is not None}
            order = self.records[0].metrics if self.records else {}
            columns = [name for name in order if name in measured
                       and name != SavedTensorsListener.param_column.name]
        view = super().tree(columns, width=width, **options)
        return dataclasses.replace(view, notes=(*self.notes(), *view.notes))


@dataclass(frozen=True)
class CallMemory(CallPosition):
    """Deprecated (removed in 0.3.0): the memory of one module call, as ``report.calls``
    listed it; each call is now a record of the report (``report.records``), its columns in
    ``record.metrics``. Making one warns."""

    output_bytes: int | None
    """New storages among the outputs, in the inference pass (``CallRecord.output_bytes``)."""
    max_live_bytes: int | None
    self_saved_bytes: int | None = None
    saved_bytes: int | None = None
    self_saved_param_bytes: int | None = None
    train_max_live_bytes: int | None = None
    backward_max_live_bytes: int | None = None

    def __post_init__(self) -> None:
        # 3: this line, the dataclass's generated __init__ (its file is "<string>", which the
        # package-frame search takes for the user's), then the line that made the object
        warn_deprecated("moduleprofiler.memory.CallMemory", "read report.records: each call's "
                        "memory columns are in record.metrics", stacklevel=3)
