"""The collector: one hooked forward pass that produces a :class:`~moduleprofiler.Profile`.

Hooks go on every module (``with_kwargs=True``; the post-hook with ``always_call=True`` so the
runtime call stack unwinds when a forward raises), all inside one ``ExitStack``. Nothing is
written onto the user's modules and torch is never patched.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from torch import nn

from moduleprofiler.errors import FormulaError, ProfilingError
from moduleprofiler.inputs import formula_inputs
from moduleprofiler.records import CallRecord, ModuleInfo, OpsSource, Profile
from moduleprofiler.registry import DEFAULT_KEY, EXCLUDED_KEY, resolve
from moduleprofiler.shapes import default_io_size, dtypes_of, shape_tree


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


@dataclass(frozen=True)
class _Resolved:
    ops: Callable[..., Any]
    macs: Callable[..., Any] | None
    io_size: Callable[..., Any]
    excluded: bool


class _Frame:
    __slots__ = ("index", "parent", "depth", "module", "outer_exception", "child_ops",
                 "child_macs", "child_complete")

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


def module_infos(root: nn.Module) -> tuple[ModuleInfo, ...]:
    """Static parameter/buffer facts for every module, in ``named_modules()`` order."""
    infos = []
    for path, module in root.named_modules():
        params = list(module.parameters())
        infos.append(
            ModuleInfo(
                path=path,
                type_name=type(module).__name__,
                depth=0 if path == "" else path.count(".") + 1,
                params=sum(p.numel() for p in params),
                own_params=sum(p.numel() for p in module.parameters(recurse=False)),
                trainable_params=sum(p.numel() for p in params if p.requires_grad),
                buffers=sum(b.numel() for b in module.buffers()),
                is_leaf=next(iter(module.children()), None) is None,
            )
        )
    return tuple(infos)


class Collector:
    """Runs one hooked forward pass and builds the per-call records."""

    def __init__(self, root: nn.Module, maps: FormulaMaps) -> None:
        self._root = root
        self._maps = maps
        self._paths: dict[int, str] = {}
        self._modules: list[nn.Module] = []
        for path, module in root.named_modules():
            self._paths[id(module)] = path
            self._modules.append(module)
        self._infos = module_infos(root)
        self._info_by_path = {info.path: info for info in self._infos}
        self._resolved: dict[int, _Resolved] = {}
        self._stack: list[_Frame] = []
        self._records: list[CallRecord | None] = []
        self._call_counts: dict[int, int] = {}
        self._failed_path: str | None = None
        self._formula_error: FormulaError | None = None

    # -- public ----------------------------------------------------------------------------
    def run(self, invoke: Callable[[], Any]) -> Profile:
        """Install the hooks, call ``invoke()`` once, release the hooks, return the profile."""
        with ExitStack() as hooks:
            for module in self._modules:
                try:
                    hooks.enter_context(
                        module.register_forward_pre_hook(self._enter, with_kwargs=True)
                    )
                    hooks.enter_context(
                        module.register_forward_hook(self._exit, with_kwargs=True, always_call=True)
                    )
                except Exception as exc:  # e.g. TorchScript modules refuse Python hooks
                    path = display_path(self._paths[id(module)])
                    raise ProfilingError(
                        f"cannot hook module {path!r} ({type(module).__name__}): {exc}", path
                    ) from exc
            try:
                invoke()
            except Exception as exc:
                raise self._error_for(exc) from (
                    self._formula_error.__cause__ if self._formula_error else exc
                )
        records = tuple(record for record in self._records if record is not None)
        return Profile(
            records=records,
            modules=self._infos,
            excluded=tuple(
                path for path, module in zip(self._paths.values(), self._modules)
                if self._is_excluded(module)
            ),
            total_params=sum(p.numel() for p in self._root.parameters()),
            total_buffers=sum(b.numel() for b in self._root.buffers()),
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
        self._records.append(None)
        self._stack.append(frame)

    def _exit(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
              output: Any) -> None:
        frame = self._pop(module)
        if frame is None:
            return
        path = self._paths[id(module)]
        exception = sys.exc_info()[1]
        if exception is not None and exception is not frame.outer_exception:
            # Called from ``_call_impl``'s exception handler: this forward raised. The first
            # module to get here is the innermost one, the one whose forward failed.
            if self._failed_path is None:
                self._failed_path = path
            return

        call_number = self._call_counts.get(id(module), 0)
        self._call_counts[id(module)] = call_number + 1
        resolved = self._resolve(module)
        inputs = formula_inputs(module, args, kwargs)
        ops = self._count(resolved.ops, module, path, inputs, output, "ops")
        source: OpsSource
        if resolved.excluded:
            source, ops, macs = "excluded", None, None
        elif ops is None:
            source, macs = "unknown", None
        else:
            source = "formula"
            macs = (
                self._count(resolved.macs, module, path, inputs, output, "macs")
                if resolved.macs is not None else None
            )
        try:
            input_size, output_size = resolved.io_size(module, inputs, output)
        except Exception as exc:
            self._fail_formula(exc, path, module, "io-size function")

        complete = frame.child_complete and source != "unknown"
        inclusive_ops = frame.child_ops + (ops or 0)
        inclusive_macs = frame.child_macs + (macs or 0)
        if self._stack:
            parent = self._stack[-1]
            parent.child_ops += inclusive_ops
            parent.child_macs += inclusive_macs
            parent.child_complete = parent.child_complete and complete

        input_shapes = shape_tree(args)
        if kwargs:
            input_shapes = (*input_shapes, shape_tree(kwargs))
        info = self._info_by_path[path]
        self._records[frame.index] = CallRecord(
            index=frame.index,
            parent=frame.parent,
            depth=frame.depth,
            path=path,
            type_name=info.type_name,
            call_number=call_number,
            input_shapes=input_shapes,
            input_dtypes=dtypes_of((args, kwargs)),
            output_shapes=shape_tree(output),
            output_dtypes=dtypes_of(output),
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

    # -- helpers ---------------------------------------------------------------------------
    def _pop(self, module: nn.Module) -> _Frame | None:
        # The top frame belongs to this module unless a hook of someone else's raised between
        # our pre-hook and the forward; unwind to the module's frame in that case.
        while self._stack:
            frame = self._stack.pop()
            if frame.module is module:
                return frame
        return None

    def _is_excluded(self, module: nn.Module) -> bool:
        return id(module) in self._maps.excluded_ids or (
            bool(self._maps.excluded_types) and isinstance(module, self._maps.excluded_types)
        )

    def _resolve(self, module: nn.Module) -> _Resolved:
        resolved = self._resolved.get(id(module))
        if resolved is None:
            maps = self._maps
            cls = type(module)
            excluded = self._is_excluded(module)
            ops_fn = (
                maps.ops.get(EXCLUDED_KEY) if excluded else resolve(maps.ops, cls)
            ) or maps.ops.get(DEFAULT_KEY) or _unknown
            resolved = _Resolved(
                ops=ops_fn,
                macs=resolve(maps.macs, cls),
                io_size=resolve(maps.io_size, cls) or maps.io_size.get(DEFAULT_KEY)
                or default_io_size,
                excluded=excluded,
            )
            self._resolved[id(module)] = resolved
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


def _unknown(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
    return None
