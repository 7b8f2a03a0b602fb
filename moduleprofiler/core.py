"""The core profiler: configuration plus the passes a new user needs, each a thin view over
the engines. ``moduleprofiler.ModuleProfiler`` is this class plus the compatibility face in
``moduleprofiler/compat/`` (older constructor keywords and methods); this module never imports
that package."""

from __future__ import annotations

import contextlib
import copy
import sys
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import pandas as pd
import torch
from torch import nn

# imported for what it registers: the formula families
import moduleprofiler.formulas  # noqa: F401
from moduleprofiler.collect import collect
from moduleprofiler.counting import FormulaMaps
from moduleprofiler.errors import ProfilingError
from moduleprofiler.export.profile import Profile
from moduleprofiler.forward_grad import without_gradients
from moduleprofiler.inputs import (
    InputSize,
    check_reusable,
    compiled_inside,
    explained_random_input,
    given_input,
    make_invocation,
    unwrap_compiled,
)
from moduleprofiler.memory import measure_memory, parameter_memory
from moduleprofiler.modules import held_values, walk_modules
from moduleprofiler.operators.registry import OperatorMap, live_operator_map
from moduleprofiler.prediction.predict import DEFAULT_HOST, DeviceSpec, HostSpec, PredictedProfile
from moduleprofiler.prediction.run import predict as run_prediction
from moduleprofiler.prediction.sweep import InputFn, PredictionSweep, sweep_predictions
from moduleprofiler.records import ProfileData, unknown_work
from moduleprofiler.registry import (
    FormulaMap,
    LiveFormulaMap,
    live_macs_map,
    live_ops_map,
)
from moduleprofiler.runner import Listener
from moduleprofiler.shapes import iter_tensors
from moduleprofiler.shards import communicates_gradients
from moduleprofiler.state import preserved_state
from moduleprofiler.timing import TimingOptions, benchmark, time_modules, train_step_times
from moduleprofiler.timing.device_trace import ClockName
from moduleprofiler.validate import (
    CheckedMaps,
    check_bool,
    check_exclusions,
    check_formula_map,
    check_listeners,
    check_operator_map,
    check_pass,
)

if TYPE_CHECKING:
    from moduleprofiler.memory import MemoryReport
    from moduleprofiler.timing import LatencyResult, ModuleTiming, TrainingTiming


class Profiler:
    """Profiles any ``nn.Module``: ops and shapes of every module call, time and memory.

    Args:
        ops_fn_map: module type -> ``(module, inputs, output) -> int | None``: this profiler's
            own entries (the map is kept, not copied). They win over the registered formulas
            (:func:`~moduleprofiler.register_ops`), which are looked up live beneath them: a
            formula registered after the profiler was made counts from then on.
        exclude_from_ops: module classes (and subclasses) or module instances whose ops are not
            counted; they are reported as excluded, not unknown.
        verbose: log each pass to stderr.
        macs_fn_map: module type -> multiply-accumulate formula: own entries over the live
            :func:`~moduleprofiler.register_macs` registry, as ``ops_fn_map``.
        operator_fn_map: aten operator -> ``(args, kwargs, out) -> (ops, macs)``, ``None`` for
            a free operator: own entries (copied) over the live operator registry.

    Each map is a :class:`~moduleprofiler.registry.LiveFormulaMap`: reading it sees the
    registry through the profiler's own entries, setting a key changes this profiler only, and
    deleting a key hides the registry's entry for this profiler. A plain dict assigned to the
    attribute later means the same (own entries over the live registry).

    Use :class:`moduleprofiler.ModuleProfiler`: it is this class, plus the older constructor
    keywords and methods of :mod:`moduleprofiler.compat`.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> profile = Profiler().profile(nn.Linear(5, 7), torch.randn(2, 3, 5))
        >>> profile.total_ops  # 2 * 3 rows * 7 outputs * (2 * 5 - 1 + 1 bias add)
        420
    """

    ts_fmt: str = "%Y-%m-%d %H:%M:%S"
    """Timestamp format of the ``verbose`` log lines."""

    _MAP_CHECKS: ClassVar[Mapping[str, Callable[[Any, str], None]]] = {
        "ops_fn_map": check_formula_map, "macs_fn_map": check_formula_map,
        "operator_fn_map": check_operator_map,
    }
    """The formula maps this profiler keeps as public attributes, with the check of each."""

    def __init__(
        self,
        *,
        ops_fn_map: FormulaMap | None = None,
        exclude_from_ops: Iterable[type[nn.Module] | nn.Module] | None = None,
        verbose: bool = False,
        macs_fn_map: FormulaMap | None = None,
        operator_fn_map: OperatorMap | None = None,
    ) -> None:
        check_bool(verbose, "verbose")
        given = {"ops_fn_map": ops_fn_map, "macs_fn_map": macs_fn_map,
                 "operator_fn_map": operator_fn_map}
        for name, table in given.items():
            if table is not None:
                self._MAP_CHECKS[name](table, name)
        self.ops_fn_map: MutableMapping[Any, Any] = live_ops_map(ops_fn_map)
        self.macs_fn_map: MutableMapping[Any, Any] = live_macs_map(macs_fn_map)
        self.operator_fn_map: MutableMapping[Any, Any] = live_operator_map(
            None if operator_fn_map is None else dict(operator_fn_map))
        checked = check_exclusions(exclude_from_ops)
        # a list given is kept, not copied, as the maps are (and as 0.0.4 kept it): classes
        # the caller appends to it later are excluded too; every pass checks it again
        self.exclude_from_ops: list[type[nn.Module] | nn.Module] = (
            exclude_from_ops if isinstance(exclude_from_ops, list) else checked)
        self.verbose = verbose
        self._checked = CheckedMaps()
        self._remember_maps()

    # -- the new entry point ---------------------------------------------------------------
    def profile(
        self, module: nn.Module, input: Any = None, pred_fn: Callable[..., Any] | None = None,
        eval: bool = True,
        *,
        operators: bool = True,
        strict: bool = False,
        backward: bool = False,
        loss_fn: Callable[[Any], torch.Tensor] | None = None,
        listeners: Sequence[Listener] = (),
        input_size: InputSize | None = None,
    ) -> Profile:
        """Run one hooked forward pass under ``torch.no_grad()`` (grad mode with
        ``backward=True``, or where the forward takes gradients itself,
        ``torch.autograd.grad``, and the caller's mode allows them) and return its
        :class:`Profile`. Python's cyclic garbage collector is paused while the pass runs and
        is recorded, and resumed (if it was running) after it, even when the forward raises.

        Args:
            module: the model. It is left exactly as it was: hooks released, every module's
                ``training`` flag restored, parameters, buffers and grads untouched.
            input: a tensor (``module(x)``), a tuple or list (``module(*input)``), a dict
                (``module(**input)``), or anything else (``module(input)``).
            input_size: instead of ``input``, a shape such as ``(1, 3, 224, 224)`` (or a list
                of shapes, one per argument): a random tensor of that shape, of the model's
                dtype and on its device (:func:`moduleprofiler.inputs.random_input`).
            pred_fn: a callable run instead of ``module`` with the same unpacking of ``input``
                (without ``input``: called with no argument when it takes none, else with
                ``None``); it must call ``module`` (the same instance) to be profiled.
            eval: put the model in eval mode for the pass.
            operators: count the aten operators that run where no module formula covers the
                work (custom modules, functional code in any forward: residual adds, ``@``,
                softmax, attention). Off, such work is unknown (``None``).
            strict: raise instead of returning a partial profile when some work could not be
                counted (a module or operator without a formula).
            backward: also run a backward pass (forward under grad mode, then the gradient of
                ``loss_fn(output)`` — by default the one default loss — with respect
                to every leaf that requires grad, as ``loss.backward()`` would: the trainable
                parameters, and input tensors that require grad, so a parameter-free loss or
                block is differentiated through its input) and attribute its operator counts
                to the module call whose forward created the work
                (``CallRecord.self_backward_ops``/``_macs``). Gradients are computed with
                ``torch.autograd.grad``: ``.grad`` is untouched.
            loss_fn: maps the model's output to a scalar for ``backward=True`` (default:
                :func:`moduleprofiler.loss.default_loss`).
            listeners: extra :class:`~moduleprofiler.runner.Listener` objects run in the same
                pass; what they write into ``call.values`` becomes columns of the records
                (``CallRecord.metrics``) and of every view.

        Raises:
            TypeError, ValueError: an argument is not what this method takes (the message
                names it).
            ProfilingError: the forward raised; the message names the module path whose
                forward failed and the original exception is chained.
            FormulaError: a formula raised or returned something that is not a count.
            LossError: ``backward=True`` and no loss can be derived from the output (pass
                ``loss_fn``), nothing in the pass requires grad (no parameter, no input), or
                the call runs under ``torch.inference_mode()``; the message says which.
            ProfilingError: with ``strict=True``, some work could not be counted.
        """
        check_pass(module, pred_fn=pred_fn, loss_fn=loss_fn, eval=eval, operators=operators,
                   strict=strict, backward=backward)
        listeners = check_listeners(listeners)
        if isinstance(module, torch.jit.ScriptModule):
            raise ProfilingError(
                f"{type(module).__name__} is a TorchScript module, which cannot carry Python "
                "hooks: profile the original nn.Module (count_params works on either)"
            )
        module = unwrap_compiled(module)
        input = given_input(module, input, input_size)
        self._log(f"Profiling {type(module).__name__}")
        invoke = make_invocation(module, input, pred_fn)
        # a DDP or FSDP2 backward is a real one (their gradient reductions run in its hooks):
        # its gradients, and those of input tensors that require grad, are set aside and put back
        real_backward = backward and communicates_gradients(module)
        walk = walk_modules(module)  # one walk of the tree: state kept, module scan, hooks
        # the modules' callable and generator attributes, swept once for both of their readers
        held = held_values(walk.modules)
        swept = [held.generators]  # the first run's; a second run (with gradients) sweeps again
        # a model with compiled code of its own (``model.compile()``, a compiled submodule) is
        # counted as its eager program: Dynamo would trace the pass's hooks into the compiled
        # one, break its graph at each and compile the pieces (the counting code's own
        # functions too, up to the recompile limit), a cache the user never asked for
        compiled = compiled_inside(module, walk.modules, held.callables)

        def counted(grad: bool) -> Profile:
            eager = torch.compiler.set_stance("force_eager") if compiled \
                else contextlib.nullcontext()
            with preserved_state(module, eval=eval, grads=real_backward,
                                 leaves=iter_tensors(input) if real_backward else (),
                                 modules=walk.modules, input=input,
                                 generators=swept.pop() if swept else None), \
                    torch.set_grad_enabled(grad), eager:
                if backward:
                    for rnn in _cudnn_rnns_in_eval(module):
                        rnn.training = True  # cuDNN has no RNN backward in eval mode
                return collect(module, self._formula_maps(operators), invoke,
                               backward=backward, loss_fn=loss_fn, listeners=listeners,
                               every_leaf=real_backward, walk=walk)

        # a forward that takes gradients itself is counted with them on (forward_grad)
        with explained_random_input(input_size):
            profile = counted(True) if backward else without_gradients(counted)
        if strict and not profile.complete:
            raise ProfilingError(f"strict=True and {unknown_work(profile)}")
        return profile

    # -- timing ----------------------------------------------------------------------------
    def benchmark(self, module: nn.Module, input: Any = None,
                  options: TimingOptions | None = None, *,
                  pred_fn: Callable[..., Any] | None = None, eval: bool = True,
                  device: str | torch.device | None = None, batch_size: int | None = None,
                  cold: bool = False, calls_per_sample: int = 1,
                  no_grad: bool = True) -> LatencyResult:
        """Whole-model latency and throughput with no hooks installed: warm-up by count and
        time, then fixed or adaptive iterations (95 % CI of the median within a target).
        ``options``: how long and how to measure (:class:`~moduleprofiler.timing.TimingOptions`,
        the one channel for the loop's settings); the keywords are those of
        :func:`moduleprofiler.timing.benchmark`."""
        self._log(f"Benchmarking {type(module).__name__}")
        return benchmark(module, input, pred_fn=pred_fn, eval=eval, device=device,
                         batch_size=batch_size, cold=cold,
                         calls_per_sample=calls_per_sample, no_grad=no_grad, options=options)

    def time_modules(self, module: nn.Module, input: Any = None,
                     options: TimingOptions | None = None, *,
                     pred_fn: Callable[..., Any] | None = None, eval: bool = True,
                     device: str | torch.device | None = None, clock: ClockName = "auto",
                     ranges: bool = False) -> ModuleTiming:
        """Per-module forward time (inclusive and self, per call) with the hooks' own cost
        measured and reported. ``options``: how long and how to measure
        (:class:`~moduleprofiler.timing.TimingOptions`); the keywords are those of
        :func:`moduleprofiler.timing.time_modules`."""
        self._log(f"Timing the modules of {type(module).__name__}")
        return time_modules(module, input, pred_fn=pred_fn, eval=eval, device=device,
                            clock=clock, ranges=ranges, options=options)

    def train_step_times(self, module: nn.Module, input: Any = None,
                         options: TimingOptions | None = None, *, target: Any = None,
                         loss_fn: Callable[..., torch.Tensor] | None = None,
                         pred_fn: Callable[..., Any] | None = None,
                         optimizer: torch.optim.Optimizer | None = None, train: bool = True,
                         restore: bool = True, device: str | torch.device | None = None,
                         clock: ClockName = "auto", ranges: bool = False) -> TrainingTiming:
        """Per-module forward and backward time of training steps. ``options``: how long and
        how to measure (:class:`~moduleprofiler.timing.TimingOptions`); the keywords are
        those of :func:`moduleprofiler.timing.train_step_times`."""
        self._log(f"Timing training steps of {type(module).__name__}")
        return train_step_times(module, input, target=target, loss_fn=loss_fn,
                                pred_fn=pred_fn, optimizer=optimizer, train=train,
                                restore=restore, device=device, clock=clock,
                                ranges=ranges, options=options)

    # -- memory ----------------------------------------------------------------------------
    def measure_memory(
        self, module: nn.Module, input: Any = None, pred_fn: Callable[..., Any] | None = None,
        *,
        train: bool = False,
        loss_fn: Callable[[Any], torch.Tensor] | None = None,
        device: str | torch.device | None = None,
        emulate: Literal["cuda"] | None = None,
        progress: bool | None = None,
        keep_output: bool = True,
    ) -> MemoryReport:
        """Parameter/buffer bytes, per-call output and saved-for-backward bytes, and the peak of
        inference (with ``train=True`` also of forward + backward) with the module call running
        at the peak. Works on CPU, CUDA and the meta device (see ``docs/memory.md`` and
        :func:`moduleprofiler.memory.measure_memory`; ``progress`` as for timing;
        ``keep_output``: the training step holds the model's output through its backward, as
        ``out = model(x); loss_fn(out).backward()`` does, or frees it first)."""
        self._log(f"Measuring memory of {type(module).__name__}")
        return measure_memory(module, input, pred_fn=pred_fn, train=train, loss_fn=loss_fn,
                              device=device, emulate=emulate, progress=progress,
                              keep_output=keep_output)

    # -- prediction ------------------------------------------------------------------------
    def predict(
        self,
        module: nn.Module,
        input: Any = None,
        device: DeviceSpec = "H100 SXM",
        host: HostSpec = DEFAULT_HOST,
        dtype: str | torch.dtype | None = None,
        backward: bool = False,
        *,
        eval: bool | None = None,
        loss_fn: Callable[[Any], torch.Tensor] | None = None,
        input_size: InputSize | None = None,
        measured: ProfileData | None = None,
        measured_on: DeviceSpec | None = None,
        tf32: bool | None = None,
    ) -> PredictedProfile:
        """Predict the latency of ``module`` on ``input`` for a GPU, module by module, without
        running it: the pass runs on the meta device (no memory, no computation), each aten
        operator is timed from a calibration of the device and the host that issues it, and
        the pass's latency combines the host chain and the device chain
        (``docs/prediction.md``).

        Args:
            module: the model; it is copied to the meta device (your model is not touched,
                nothing is allocated).
            input: as for :meth:`profile`, copied to the meta device.
            device: a calibrated device (``"H100 SXM"``), a device with datasheet peaks only
                (``"A100 80GB SXM"``: the reference calibration's achieved fractions on its
                peaks, said in the notes), a :class:`~moduleprofiler.prediction.Calibration` or
                its JSON path, or :class:`~moduleprofiler.efficiency.DevicePeaks`.
            host: ``"calibrated"`` (default, as ``--predict``): the CPU that drove the
                calibrated GPU; ``"this"``: this machine's CPU;
                :class:`~moduleprofiler.prediction.HostCosts`; or ``None``: the device's
                time alone (``predicted_device_ms``), a lower bound, and no latency.
            dtype: cast the model's floating parameters and inputs (``"bf16"``, ``"fp32"``).
            backward: predict forward and backward (the training step without the optimizer).
            eval: the model's mode for the pass (default: eval for a forward, train with
                ``backward=True``).
            loss_fn: as for :meth:`profile` with ``backward=True``.
            input_size: instead of ``input``, a shape, as for :meth:`profile`.
            measured: a :meth:`time_modules` profile of the same model and input measured on
                another CUDA device: each module gets ``scaled_device_ms``, its measured device
                time times the ratio of this device's prediction for it to that device's, and
                the measured columns are shown beside the predicted ones.
            measured_on: the device ``measured`` ran on (default: the one its hardware
                record names).
            tf32: fp32 matmuls and convolutions on TF32 tensor cores (``True``) or at the
                plain FP32 peak (``False``); default: as torch's settings say now, as a real
                run would (``torch.set_float32_matmul_precision``: ``"highest"``, torch's
                default, is plain FP32 for matmuls, ``"high"`` TF32; cuDNN convolutions
                default to TF32). The notes say which.

        Returns:
            A :class:`~moduleprofiler.prediction.predict.PredictedProfile`: every view shows
            ``predicted_device_ms``, ``predicted_host_ms`` and ``predicted_bound``;
            ``predicted_latency_ms`` is the whole pass (``None`` with ``host=None``).
        """
        check_reusable(input, "predict (a copy on the meta device, then the run)")
        return run_prediction(self.profile, module, input, device, host, dtype, backward,
                              eval=eval, loss_fn=loss_fn, input_size=input_size,
                              measured=measured, measured_on=measured_on, tf32=tf32,
                              log=self._log)

    def sweep(self, module: nn.Module, input: Any = None, device: DeviceSpec = "H100 SXM",
              batch_sizes: Iterable[int] | int = (1, 8, 64, 256),
              dtypes: Sequence[str | torch.dtype] | str | torch.dtype = ("bf16", "fp32"), *,
              input_fn: InputFn | None = None, host: HostSpec = DEFAULT_HOST,
              backward: bool = False, tf32: bool | None = None,
              memory_bytes: int | None = None) -> PredictionSweep:
        """What-if answers: :meth:`predict` at every batch size and dtype, with predicted
        peak memory, the batch at which the pass turns device-bound and the largest batch
        that fits the card (``docs/prediction.md``; the arguments are those of
        :func:`moduleprofiler.prediction.sweep.sweep_predictions`)."""
        check_reusable(input, "sweep (a prediction at every batch size and dtype)")
        return sweep_predictions(self.predict, module, input, device=device,
                                 batch_sizes=batch_sizes, dtypes=dtypes, input_fn=input_fn,
                                 host=host, backward=backward, tf32=tf32,
                                 memory_bytes=memory_bytes)

    def parameter_memory_df(self, module: nn.Module) -> pd.DataFrame:
        """Per module: parameter and buffer bytes, trainable and frozen, by dtype."""
        return parameter_memory(module)

    def __copy__(self) -> Profiler:
        """A profiler with copies of this one's formula maps and exclusions: an entry set on
        the copy (or here) changes that profiler only, as for two profilers made apart."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        for name in self._MAP_CHECKS:
            setattr(twin, name, copy.copy(getattr(self, name)))
        twin.exclude_from_ops = copy.copy(self.exclude_from_ops)
        twin._checked = CheckedMaps()  # its maps are checked again at its first pass
        return twin

    # -- helpers ---------------------------------------------------------------------------
    _LIVE: ClassVar[Mapping[str, Callable[[Any], LiveFormulaMap]]] = {
        "ops_fn_map": live_ops_map, "macs_fn_map": live_macs_map,
        "operator_fn_map": live_operator_map,
    }
    """How each map attribute is read: its own entries over the live registry."""

    def _remember_maps(self) -> None:
        """Mark the maps as checked (they were checked, or built here, at construction)."""
        for name in self._MAP_CHECKS:
            self._checked.remember(name, _own(getattr(self, name)))

    def _live(self, name: str) -> LiveFormulaMap:
        """The map attribute ``name``, checked, as own entries over the live registry (the
        registry's entries were checked when they were registered)."""
        table = getattr(self, name)
        self._checked.check(name, _own(table), self._MAP_CHECKS[name])
        return self._LIVE[name](table)

    def _io_size_fns(self) -> Mapping[Any, Callable[..., Any]]:
        """The io-size functions (``{}``: every call gets the default first-input/output
        shapes; :mod:`moduleprofiler.compat` passes its ``io_size_fn_map``)."""
        return {}

    def _formula_maps(self, operators: bool = True) -> FormulaMaps:
        # the maps and exclusions are public attributes users edit between passes
        ops, macs = self._live("ops_fn_map"), self._live("macs_fn_map")
        operator_map = self._live("operator_fn_map")
        io_size = self._io_size_fns()
        excluded = check_exclusions(self.exclude_from_ops)
        types = tuple(item for item in excluded if isinstance(item, type))
        ids = frozenset(id(item) for item in excluded if isinstance(item, nn.Module))
        return FormulaMaps(
            operators=operator_map,
            ops=ops,
            macs=macs,
            io_size=io_size,
            excluded_types=types,
            excluded_ids=ids,
            count_operators=operators,
        )

    def _log(self, message: str) -> None:
        if self.verbose:
            print(f"[{time.strftime(self.ts_fmt)}] {message}", file=sys.stderr)


def _own(table: object) -> Any:
    """The entries a profiler's map attribute holds itself: a live map's own entries, else the
    attribute as it is (a plain mapping, or something a check refuses)."""
    return table.own if isinstance(table, LiveFormulaMap) else table


def _cudnn_rnns_in_eval(root: nn.Module) -> list[nn.Module]:
    """RNN modules on CUDA in eval mode: cuDNN refuses their backward outside training mode.

    Their math is the same in training mode unless they have inter-layer dropout, so
    ``backward=True`` runs them in training mode (flags are restored afterwards)."""
    return [module for module in root.modules()
            if isinstance(module, nn.RNNBase) and not module.training
            and any(p.is_cuda for p in module.parameters(recurse=False))]
