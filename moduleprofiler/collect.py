"""The collector: one hooked forward pass that produces a :class:`~moduleprofiler.Profile`.

Hooks go on every module (``with_kwargs=True``; the post-hook with ``always_call=True`` so the
runtime call stack unwinds when a forward raises), all inside one ``ExitStack``. Nothing is
written onto the user's modules and torch is never patched.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from moduleprofiler.backward import BackwardAttributor, LossFn
from moduleprofiler.dispatch import OperatorObserver
from moduleprofiler.errors import FormulaError, ProfilingError
from moduleprofiler.inputs import formula_inputs
from moduleprofiler.memory._storage import is_lazy, new_storage_bytes, own_nbytes
from moduleprofiler.operators.registry import MISSING, lookup
from moduleprofiler.records import CallRecord, ModuleInfo, OpsSource, Profile
from moduleprofiler.registry import DEFAULT_KEY, EXCLUDED_KEY, resolve
from moduleprofiler.shapes import default_io_size, dtypes_of, shape_tree
from moduleprofiler.tensors import module_tensors


def display_path(path: str) -> str:
    """How a module path is named in messages (the root's path is the empty string)."""
    return "<root>" if path == "" else path


@dataclass(frozen=True)
class FormulaMaps:
    """The three function tables a pass uses, plus what to exclude from ops counting."""

    ops: Mapping[Any, Callable[..., Any]]
    macs: Mapping[Any, Callable[..., Any]]
    io_size: Mapping[Any, Callable[..., Any]]
    excluded_types: tuple[type, ...] = ()
    excluded_ids: frozenset[int] = frozenset()
    operators: bool = True
    """Count aten operators where no module formula covers the work."""


@dataclass(frozen=True)
class _Resolved:
    ops: Callable[..., Any]
    macs: Callable[..., Any] | None
    io_size: Callable[..., Any]
    excluded: bool
    covered: bool
    """A formula (or an exclusion) accounts for everything inside this module's calls."""


class _Frame:
    __slots__ = (
        "boundary",
        "child_complete",
        "child_macs",
        "child_ops",
        "counted_operators",
        "covered",
        "depth",
        "index",
        "module",
        "operator_macs",
        "operator_ops",
        "outer_exception",
        "parent",
        "unsupported_operators",
    )

    def __init__(self, index: int, parent: int | None, depth: int, module: nn.Module,
                 outer_exception: BaseException | None) -> None:
        self.index = index
        self.parent = parent
        self.depth = depth
        self.module = module
        self.outer_exception = outer_exception
        self.child_ops: int | float = 0
        self.child_macs: int | float = 0
        self.child_complete = True
        self.covered = False
        self.operator_ops = 0
        self.operator_macs = 0
        self.unsupported_operators = 0
        self.counted_operators = 0
        self.boundary: set[Any] = set()


def _numel(tensor: torch.Tensor) -> int:
    # A lazy module's parameters have no shape until its first forward.
    return 0 if is_lazy(tensor) else tensor.numel()


def module_infos(root: nn.Module) -> tuple[ModuleInfo, ...]:
    """Static parameter/buffer facts for every module, in ``named_modules()`` order (a tensor
    shared between submodules counts once per module)."""
    params, buffers = module_tensors(root)
    infos = []
    for path, module in root.named_modules():
        module_params = params[id(module)].values()
        module_buffers = buffers[id(module)].values()
        infos.append(
            ModuleInfo(
                path=path,
                type_name=type(module).__name__,
                depth=0 if path == "" else path.count(".") + 1,
                params=sum(_numel(p) for p in module_params),
                own_params=sum(
                    _numel(p) for p in {id(p): p for p in module._parameters.values()
                                        if p is not None}.values()
                ),
                trainable_params=sum(_numel(p) for p in module_params if p.requires_grad),
                buffers=sum(_numel(b) for b in module_buffers),
                param_bytes=sum(own_nbytes(p) for p in module_params),
                buffer_bytes=sum(own_nbytes(b) for b in module_buffers),
                is_leaf=not any(child is not None for child in module._modules.values()),
            )
        )
    return tuple(infos)


class Collector:
    """Runs one hooked forward pass and builds the per-call records.

    With operator accounting on, an :class:`OperatorObserver` sees every aten operator and
    attributes it to the innermost module call that is running. A call whose module has a formula
    (or is excluded) is counted by that formula alone: the observer is off while such a call is
    the innermost one, so its operators are never counted twice and cost nothing, while a child
    without a formula (a custom block inside ``nn.Sequential``) is observed again.
    """

    def __init__(self, root: nn.Module, maps: FormulaMaps, backward: bool = False,
                 loss_fn: LossFn | None = None) -> None:
        self._root = root
        self._backward = BackwardAttributor() if backward else None
        self._loss_fn = loss_fn
        self._maps = maps
        self._paths: dict[int, str] = {}
        self._modules: list[nn.Module] = []
        for path, module in root.named_modules():
            self._paths[id(module)] = path
            self._modules.append(module)
        self._infos = module_infos(root)
        self._has_lazy = any(t is not None and is_lazy(t)
                             for module in self._modules
                             for t in (*module._parameters.values(), *module._buffers.values()))
        self._info_by_path = {info.path: info for info in self._infos}
        self._resolved: dict[tuple[type, bool], _Resolved] = {}
        self._by_module: dict[int, _Resolved] = {}
        self._stack: list[_Frame] = []
        self._records: list[CallRecord | None] = []
        self._call_counts: dict[int, int] = {}
        self._tensors: dict[int, list[torch.Tensor]] = {}
        self._failed_path: str | None = None
        self._formula_error: FormulaError | None = None
        self._observer = OperatorObserver(self._on_operator) if maps.operators else None
        # Work done by operators outside every module call (e.g. in a ``pred_fn``).
        self._outside = _Frame(-1, None, -1, root, None)
        self._unsupported_operators: dict[str, int] = {}
        self._operator_formulas: dict[Any, Any] = {}  # lookups cached for this pass

    # -- public ----------------------------------------------------------------------------
    def run(self, invoke: Callable[[], Any]) -> Profile:
        """Install the hooks, call ``invoke()`` once, release the hooks, return the profile."""
        with ExitStack() as cleanup:
            for module in self._modules:
                try:
                    cleanup.enter_context(
                        module.register_forward_pre_hook(self._enter, with_kwargs=True)
                    )
                    cleanup.enter_context(
                        module.register_forward_hook(self._exit, with_kwargs=True, always_call=True)
                    )
                except Exception as exc:  # e.g. TorchScript modules refuse Python hooks
                    path = display_path(self._paths[id(module)])
                    raise ProfilingError(
                        f"cannot hook module {path!r} ({type(module).__name__}): {exc}", path
                    ) from exc
            if self._observer is not None:
                self._observer.start()
                cleanup.callback(self._observer.stop)
            try:
                output = invoke()
            except Exception as exc:
                raise self._error_for(exc) from (
                    self._formula_error.__cause__ if self._formula_error else exc
                )
        records = tuple(record for record in self._records if record is not None)
        if self._backward is not None:
            records = self._run_backward(output, records)
        if self._has_lazy:
            # Lazy modules materialised their parameters during the forward: count them now.
            self._infos = module_infos(self._root)
            by_path = {info.path: info for info in self._infos}
            records = tuple(
                dataclasses.replace(record, params=by_path[record.path].params,
                                    own_params=by_path[record.path].own_params)
                for record in records
            )
        return Profile(
            records=records,
            modules=self._infos,
            excluded=tuple(
                path for path, module in zip(self._paths.values(), self._modules)
                if self._is_excluded(module)
            ),
            total_params=self._infos[0].params,
            total_buffers=self._infos[0].buffers,
            unsupported_ops=dict(self._unsupported_operators),
            outside_ops=self._outside.operator_ops,
            outside_macs=self._outside.operator_macs,
            backward=self._backward is not None,
            backward_unsupported_ops=dict(self._backward.unsupported) if self._backward else {},
            backward_outside_ops=self._backward.outside_ops if self._backward else 0,
            backward_outside_macs=self._backward.outside_macs if self._backward else 0,
        )

    def _run_backward(self, output: Any, records: tuple[CallRecord, ...]
                      ) -> tuple[CallRecord, ...]:
        """Run the backward pass (hooks already released) and attach per-call counts."""
        assert self._backward is not None
        try:
            self._backward.run(output, self._loss_fn, list(self._root.parameters()))
        except Exception as exc:
            raise ProfilingError(
                f"the backward pass raised {type(exc).__name__}: {exc}"
            ) from exc
        backward = self._backward
        return tuple(
            dataclasses.replace(
                record,
                backward_ops=backward.ops.get(record.index, 0),
                backward_macs=backward.macs.get(record.index, 0),
            )
            for record in records
        )

    # -- hooks -----------------------------------------------------------------------------
    def _enter(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        parent = self._stack[-1] if self._stack else None
        frame = _Frame(
            index=len(self._records),
            parent=parent.index if parent else None,
            depth=parent.depth + 1 if parent else 0,
            module=module,
            outer_exception=sys.exc_info()[1],
        )
        frame.covered = self._resolve(module).covered
        if self._backward is not None:
            frame.boundary = self._backward.boundary(args, kwargs)
        self._records.append(None)
        self._stack.append(frame)
        self._sync_observer()

    def _exit(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
              output: Any) -> None:
        frame = self._pop(module)
        if frame is None:
            return
        if self._observer is not None:
            self._observer.stop()  # tensor work done by formulas is never observed
        try:
            self._finish(frame, module, args, kwargs, output)
        finally:
            self._sync_observer()

    def _finish(self, frame: _Frame, module: nn.Module, args: tuple[Any, ...],
                kwargs: dict[str, Any], output: Any) -> None:
        path = self._paths[id(module)]
        exception = sys.exc_info()[1]
        if exception is not None and exception is not frame.outer_exception:
            # Called from ``_call_impl``'s exception handler: this forward raised. The first
            # module to get here is the innermost one, the one whose forward failed.
            if self._failed_path is None:
                self._failed_path = path
            return

        self._record(frame, module, path, args, kwargs, output)

    def _record(self, frame: _Frame, module: nn.Module, path: str, args: tuple[Any, ...],
                kwargs: dict[str, Any], output: Any) -> None:
        call_number = self._call_counts.get(id(module), 0)
        self._call_counts[id(module)] = call_number + 1
        resolved = self._resolve(module)
        inputs = formula_inputs(module, args, kwargs)
        ops, macs, source = self._own_counts(resolved, frame, module, path, inputs, output)
        input_shapes = shape_tree(args)
        output_shapes = shape_tree(output)
        if resolved.io_size is default_io_size:  # the same trees: no need to walk them again
            input_size = shape_tree(inputs[0]) if inputs else None
            output_size = output_shapes
        else:
            try:
                input_size, output_size = resolved.io_size(module, inputs, output)
            except Exception as exc:
                self._fail_formula(exc, path, module, "io-size function")

        complete = frame.child_complete and source in ("formula", "operator", "excluded")
        inclusive_ops = frame.child_ops + (ops or 0)
        inclusive_macs = frame.child_macs + (macs or 0)
        if self._stack:
            parent = self._stack[-1]
            parent.child_ops += inclusive_ops
            parent.child_macs += inclusive_macs
            parent.child_complete = parent.child_complete and complete

        if kwargs:
            input_shapes = (*input_shapes, shape_tree(kwargs))
        if self._backward is not None:
            self._backward.claim(frame.index, output, frame.boundary)
        info = self._info_by_path[path]
        self._records[frame.index] = CallRecord(
            index=frame.index,
            parent=frame.parent,
            depth=frame.depth,
            path=path,
            type_name=info.type_name,
            call_number=call_number,
            input_shapes=input_shapes,
            input_dtypes=dtypes_of((args, kwargs)) if kwargs else dtypes_of(args),
            output_shapes=output_shapes,
            output_dtypes=dtypes_of(output),
            output_bytes=new_storage_bytes(output, args, kwargs, self._own_tensors(module)),
            input_size=input_size,
            output_size=output_size,
            params=info.params,
            own_params=info.own_params,
            ops=ops,
            macs=macs,
            ops_source=source,
            inclusive_ops=inclusive_ops,
            inclusive_macs=inclusive_macs,
            complete=complete,
        )

    def _own_counts(self, resolved: _Resolved, frame: _Frame, module: nn.Module, path: str,
                    inputs: tuple[Any, ...], output: Any
                    ) -> tuple[int | float | None, int | float | None, OpsSource]:
        """Own ops, macs and their source: the formula if there is one, else the operators
        observed in the module's own forward, else unknown."""
        if resolved.excluded:
            return None, None, "excluded"
        ops = self._count(resolved.ops, module, path, inputs, output, "ops")
        if ops is not None:
            macs = (
                self._count(resolved.macs, module, path, inputs, output, "macs")
                if resolved.macs is not None else None
            )
            return ops, macs, "formula"
        if self._observer is None or (frame.unsupported_operators and not frame.counted_operators):
            return None, None, "unknown"
        source: OpsSource = "mixed" if frame.unsupported_operators else "operator"
        return frame.operator_ops, frame.operator_macs, source

    def _on_operator(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                     out: Any) -> None:
        frame = self._stack[-1] if self._stack else self._outside
        formula = self._operator_formulas.get(func, _NOT_LOOKED_UP)
        if formula is _NOT_LOOKED_UP:
            formula = self._operator_formulas[func] = lookup(func)
        if formula is None:  # free: views, copies, allocations
            return
        if formula is MISSING:
            name = str(func.overloadpacket)
            self._unsupported_operators[name] = self._unsupported_operators.get(name, 0) + 1
            frame.unsupported_operators += 1
            return
        try:
            ops, macs = formula(args, kwargs, out)  # type: ignore[operator]
        except Exception as exc:
            path = self._paths.get(id(frame.module), "")
            self._fail_formula(exc, path, frame.module, f"operator formula for {func}")
        frame.operator_ops += ops
        frame.operator_macs += macs
        frame.counted_operators += 1

    # -- helpers ---------------------------------------------------------------------------
    def _pop(self, module: nn.Module) -> _Frame | None:
        # The top frame belongs to this module unless a hook of someone else's raised between
        # our pre-hook and the forward; unwind to the module's frame in that case.
        while self._stack:
            frame = self._stack.pop()
            if frame.module is module:
                return frame
        return None

    def _sync_observer(self) -> None:
        """Observe operators exactly when the innermost running call is not covered by a
        formula (a container's formula covers its own work, not its children's)."""
        if self._observer is not None:
            self._observer.set_active(not (self._stack and self._stack[-1].covered))

    def _own_tensors(self, module: nn.Module) -> list[torch.Tensor]:
        # Direct parameters and buffers only: an output aliasing them (``return self.weight``)
        # is not new memory; a descendant's tensors are checked at the descendant's call.
        tensors = self._tensors.get(id(module))
        if tensors is None:
            tensors = [t for t in (*module._parameters.values(), *module._buffers.values())
                       if t is not None]
            self._tensors[id(module)] = tensors
        return tensors

    def _is_excluded(self, module: nn.Module) -> bool:
        return id(module) in self._maps.excluded_ids or (
            bool(self._maps.excluded_types) and isinstance(module, self._maps.excluded_types)
        )

    def _resolve(self, module: nn.Module) -> _Resolved:
        resolved = self._by_module.get(id(module))
        if resolved is None:
            resolved = self._by_module[id(module)] = self._resolve_type(module)
        return resolved

    def _resolve_type(self, module: nn.Module) -> _Resolved:
        excluded = self._is_excluded(module)
        key = (type(module), excluded)
        resolved = self._resolved.get(key)
        if resolved is None:
            maps = self._maps
            cls = type(module)
            formula = resolve(maps.ops, cls)
            ops_fn = (
                maps.ops.get(EXCLUDED_KEY) if excluded else formula
            ) or maps.ops.get(DEFAULT_KEY) or _unknown
            resolved = _Resolved(
                ops=ops_fn,
                macs=resolve(maps.macs, cls),
                io_size=resolve(maps.io_size, cls) or maps.io_size.get(DEFAULT_KEY)
                or default_io_size,
                excluded=excluded,
                covered=excluded or formula is not None,
            )
            self._resolved[key] = resolved
        return resolved

    def _count(self, fn: Callable[..., Any], module: nn.Module, path: str,
               inputs: tuple[Any, ...], output: Any, what: str) -> int | float | None:
        try:
            value = fn(module, inputs, output)
        except Exception as exc:
            self._fail_formula(exc, path, module, f"{what} formula {fn.__name__!r}")
        if value is None or isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value) if value.is_integer() else value
        try:  # 0-dim tensors, numpy scalars
            return int(value)
        except (TypeError, ValueError):
            pass
        error = FormulaError(
            f"{what} formula {fn.__name__!r} for module {display_path(path)!r} "
            f"({type(module).__name__}) returned {type(value).__name__}, not a number or None",
            path,
        )
        self._formula_error = error
        raise error

    def _fail_formula(self, exc: Exception, path: str, module: nn.Module, what: str) -> Any:
        error = FormulaError(
            f"{what} for module {display_path(path)!r} ({type(module).__name__}) raised "
            f"{type(exc).__name__}: {exc}",
            path,
        )
        error.__cause__ = exc
        self._formula_error = error
        raise error

    def _error_for(self, exc: Exception) -> ProfilingError:
        if self._formula_error is not None:
            return self._formula_error
        if self._failed_path is None:
            return ProfilingError(
                f"the profiled call raised {type(exc).__name__} outside any module's forward: "
                f"{exc}"
            )
        path = self._failed_path
        module = self._modules[list(self._paths.values()).index(path)]
        return ProfilingError(
            f"forward of module {display_path(path)!r} ({type(module).__name__}) raised "
            f"{type(exc).__name__}: {exc}",
            path,
        )


_NOT_LOOKED_UP = object()


def _unknown(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
    return None
