"""The result of :func:`~moduleprofiler.memory.measure_memory`: immutable, with a tidy view."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from moduleprofiler.records import CallPosition, CallRecord, ProfileData, display_path

Phase = Literal["forward", "backward"]
Method = Literal["operator", "allocator"]
PassKind = Literal["inference", "training"]


@dataclass(frozen=True)
class PeakCall:
    """Where a peak was reached: the module call that was running."""

    path: str | None
    """Module path (``""`` is the root); ``None``: outside every module call (e.g. the loss)."""
    call_number: int | None
    """0 for the module's first call, ...; ``None`` outside every module call."""
    index: int | None
    """Position of the call in :attr:`MemoryReport.calls`; ``None`` outside every call."""
    phase: Phase
    accumulating: bool = False
    """The peak was set while accumulating the gradient of a parameter of ``path`` (whose
    first call the accumulation belongs to)."""
    type_name: str | None = None
    """The module's type (filled in by :class:`MemoryReport` from its calls)."""
    calls: int | None = None
    """How many times the module was called in the pass (filled in as ``type_name``)."""

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

    @property
    def increase_bytes(self) -> int:
        """``peak_bytes - baseline_bytes``: what the pass needed on top of what was there."""
        return self.peak_bytes - self.baseline_bytes


@dataclass(frozen=True)
class CallMemory(CallPosition):
    """Memory of one module call (``None`` = not measured in that pass)."""

    output_bytes: int | None
    """New storages among the outputs (views, in-place results, aliases of inputs, parameters
    and buffers excluded), in the inference pass."""
    max_live_bytes: int | None
    """Highest live memory while the call (or anything inside it) ran, inference pass."""
    self_saved_bytes: int | None = None
    """Activation bytes saved for backward by the call's own operators (children excluded)."""
    saved_bytes: int | None = None
    """``self_saved_bytes`` plus the ``saved_bytes`` of the calls inside it."""
    self_saved_param_bytes: int | None = None
    """Parameter/buffer bytes first saved for backward by the call's own operators."""
    train_max_live_bytes: int | None = None
    """Highest live memory while the call ran in the training forward."""
    backward_max_live_bytes: int | None = None
    """Highest live memory while the backward of the call's own operators ran."""


PROFILE_COLUMNS = ("saved_bytes", "self_saved_bytes", "max_live_bytes")
"""The per-call columns of every memory profile."""
TRAINING_MAXIMA = ("train_max_live_bytes", "backward_max_live_bytes")
"""The training pass's live-memory columns, shown before the inference pass's
``max_live_bytes``: a view that must hide a column to fit hides the inference pass first."""


@dataclass(frozen=True, repr=False, kw_only=True)
class MemoryReport(ProfileData):
    """Static and measured memory of one model on one input: the profile data of the measured
    passes (``Profile.merge`` takes it), one record per call of the inference pass with its
    memory columns (:data:`PROFILE_COLUMNS`, and from a training pass
    :data:`TRAINING_MAXIMA`), and the passes' evidence: the peaks and the calls that set them.
    Counts are not measured here (``merge`` it into a counted profile to see both)."""

    device: str
    param_bytes: int
    buffer_bytes: int
    trainable_param_bytes: int
    inference: PassMemory
    training: PassMemory | None
    # the report's name for its calls (a profile's calls(path) is its records of one module)
    calls: tuple[CallMemory, ...]  # type: ignore[assignment]

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.calls and not self.records:
            self._set_records()
        # the peaks name their module's type and call count, which only the calls know
        types = {call.path: call.type_name for call in self.calls}
        counts: dict[str, int] = {}
        for call in self.calls:
            counts[call.path] = counts.get(call.path, 0) + 1
        for name in ("inference", "training"):
            measured: PassMemory | None = getattr(self, name)
            peak = measured.peak_call if measured is not None else None
            if measured is None or peak is None or peak.path not in types:
                continue
            peak = dataclasses.replace(peak, type_name=types[peak.path],
                                       calls=counts[peak.path])
            object.__setattr__(self, name, dataclasses.replace(measured, peak_call=peak))

    def _set_records(self) -> None:
        """The profile's records and per-module columns, from :attr:`calls`."""
        names = (*PROFILE_COLUMNS[:2], *(TRAINING_MAXIMA if self.training else ()),
                 PROFILE_COLUMNS[2])
        infos = {info.path: info for info in self.modules}
        records = tuple(CallRecord(
            index=c.index, parent=c.parent, depth=c.depth, path=c.path, type_name=c.type_name,
            call_number=c.call_number, input_shapes=None, input_dtypes=(), output_shapes=None,
            output_dtypes=(), output_bytes=c.output_bytes,  # type: ignore[arg-type]
            input_size=None, output_size=None,
            params=infos[c.path].params if c.path in infos else 0,
            own_params=infos[c.path].own_params if c.path in infos else 0, ops=None,
            macs=None, ops_source="unknown", inclusive_ops=0, inclusive_macs=0, complete=False,
            metrics={name: getattr(c, name) for name in names}) for c in self.calls)
        modules = self.module_columns()
        if self.training is not None:  # the maxima of its calls, before the inference one
            for path, row in modules.items():
                largest = row.pop("max_live_bytes")
                for name in TRAINING_MAXIMA:
                    row[name] = max((v for c in self.calls if c.path == path
                                     and (v := getattr(c, name)) is not None), default=None)
                row["max_live_bytes"] = largest
        root = self.modules[0] if self.modules else None
        for name, value in (("records", records), ("module_metrics", modules),
                            ("total_params", root.params if root else 0),
                            ("total_buffers", root.buffers if root else 0)):
            object.__setattr__(self, name, value)

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

    def call_columns(self) -> dict[tuple[str, int], dict[str, int | None]]:
        """Per call ``(path, call_number)``: the columns a profile's records take
        (:data:`PROFILE_COLUMNS`)."""
        return {(call.path, call.call_number): {name: getattr(call, name)
                                                for name in PROFILE_COLUMNS}
                for call in self.calls}

    def module_columns(self) -> dict[str, dict[str, int | None]]:
        """Per module path, its calls combined: ``saved_bytes`` and ``self_saved_bytes``
        summed, ``max_live_bytes`` the largest (``None`` where no call measured it)."""
        columns: dict[str, dict[str, int | None]] = {}
        for call in self.calls:
            row = columns.setdefault(call.path, dict.fromkeys(PROFILE_COLUMNS))
            for name in PROFILE_COLUMNS:
                value, known = getattr(call, name), row[name]
                if value is not None:
                    row[name] = value if known is None else (
                        max(known, value) if name == "max_live_bytes" else known + value)
        return columns

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

    def to_df(self) -> pd.DataFrame:
        """One row per call, in execution order: ``call``, ``parent``, ``depth``, ``module``
        (the root named ``__root__``), ``type``, ``call_number`` and the byte columns of
        :class:`CallMemory` (nullable integers; ``<NA>`` = not measured)."""
        names = {"index": "call", "path": "module", "type_name": "type"}
        fields = [f.name for f in dataclasses.fields(CallMemory)]
        frame = pd.DataFrame(
            {names.get(name, name): [getattr(call, name) for call in self.calls]
             for name in fields}
        )
        for name in fields:
            if name in ("parent",) or name.endswith("_bytes"):
                frame[name] = frame[name].astype("Int64")
        frame["module"] = frame["module"].map(display_path)
        return frame

    def to_dict(self) -> dict[str, Any]:
        """The report as plain Python: device, static bytes, both passes and every call."""
        return {"device": self.device, "param_bytes": self.param_bytes,
                "buffer_bytes": self.buffer_bytes,
                "trainable_param_bytes": self.trainable_param_bytes,
                "inference": dataclasses.asdict(self.inference),
                "training": None if self.training is None else dataclasses.asdict(self.training),
                "calls": [dataclasses.asdict(call) for call in self.calls]}

    def __str__(self) -> str:
        def mib(value: int | None) -> str:
            return "n/a" if value is None else f"{value / 2**20:.1f} MiB"

        lines = [
            f"device {self.device}: parameters {mib(self.param_bytes)}, "
            f"buffers {mib(self.buffer_bytes)}",
            f"inference peak {mib(self.inference.peak_bytes)} "
            f"(+{mib(self.inference.increase_bytes)}) at {self.inference.peak_call}",
        ]
        if self.training is not None:
            lines.append(
                f"training peak {mib(self.training.peak_bytes)} "
                f"(+{mib(self.training.increase_bytes)}) at {self.training.peak_call}; "
                f"saved for backward {mib(self.training.saved_bytes)}, "
                f"grads {mib(self.training.grad_bytes)}; the model's output "
                + ("kept through the backward" if self.training.output_kept
                   else "freed before the backward")
            )
        return "\n".join(lines)
