"""The counting listeners: module formulas and aten-operator accounting, forward and backward.

Forward (:class:`CountingListener`): a call whose module has a formula (or is excluded) is
counted by that formula alone; the runner's operator observer is off while such a call is the
innermost one, so its operators are never counted twice and cost nothing, while a child without
a formula (a custom block inside ``nn.Sequential``) is observed again. Every call also gets its
shapes, dtypes, 0.0.4 io sizes and output bytes.

Backward (:class:`BackwardCountingListener`): every backward operator is booked to the forward
call that created the autograd node it runs for (:meth:`PassRunner.owner_of_node`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from moduleprofiler.errors import FormulaError
from moduleprofiler.inputs import formula_inputs
from moduleprofiler.memory._storage import is_lazy, new_storage_bytes, own_nbytes
from moduleprofiler.operators.registry import MISSING, OperatorMap, lookup_in
from moduleprofiler.records import COUNTED_SOURCES, ModuleInfo, OpsSource, display_path
from moduleprofiler.registry import DEFAULT_KEY, EXCLUDED_KEY, resolve
from moduleprofiler.runner import Call, Listener, PassRunner
from moduleprofiler.shapes import default_io_size, dtypes_of, shape_tree
from moduleprofiler.tensors import module_tensors
from moduleprofiler.validate import count_value, formula_name, operator_counts


@dataclass(frozen=True)
class FormulaMaps:
    """The function tables a pass uses, plus what to exclude from ops counting."""

    ops: Mapping[Any, Callable[..., Any]]
    macs: Mapping[Any, Callable[..., Any]]
    io_size: Mapping[Any, Callable[..., Any]]
    operators: OperatorMap
    """aten operator -> formula (``None``: free); see :mod:`moduleprofiler.operators`."""
    excluded_types: tuple[type, ...] = ()
    excluded_ids: frozenset[int] = frozenset()
    count_operators: bool = True
    """Count aten operators where no module formula covers the work."""


@dataclass(frozen=True)
class _Resolved:
    ops: Callable[..., Any]
    macs: Callable[..., Any] | None
    io_size: Callable[..., Any]
    excluded: bool
    covered: bool
    """A formula (or an exclusion) accounts for everything inside this module's calls."""


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


class _OperatorTally:
    """Operator counts of one call's own work (or of the work outside every call)."""

    __slots__ = ("counted", "macs", "ops", "unsupported")

    def __init__(self) -> None:
        self.ops: int | float = 0
        self.macs: int | float = 0
        self.counted = 0
        self.unsupported = 0


class CountingListener(Listener):
    """Own ops and MACs of every call, from module formulas or from the operators it ran, plus
    shapes, dtypes, io sizes and output bytes (``call.values``)."""

    def __init__(self, maps: FormulaMaps) -> None:
        self._maps = maps
        self._resolved: dict[tuple[type, bool], _Resolved] = {}
        self._by_module: dict[int, _Resolved] = {}
        self._own_tensors: dict[int, list[torch.Tensor]] = {}
        self._tallies: dict[int, _OperatorTally] = {}
        self._formulas: dict[Any, Any] = {}  # operator lookups cached for this pass
        self.outside = _OperatorTally()
        """Operators that ran outside every module call (e.g. in a ``pred_fn``)."""
        self.unsupported_operators: dict[str, int] = {}
        self._hosts: frozenset[int] = frozenset()

    # -- listener --------------------------------------------------------------------------
    def start(self, runner: PassRunner) -> None:
        self._hosts = _hosts_of_unhooked(runner)

    def observe(self, module: nn.Module) -> bool:
        return self._maps.count_operators and not self._resolve(module).covered

    def observe_outside(self) -> bool:
        return self._maps.count_operators

    def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
             output: Any) -> None:
        module = call.module
        resolved = self._resolve(module)
        inputs = formula_inputs(module, args, kwargs)
        values = call.values
        ops, macs, source = self._own_counts(resolved, call, inputs, output)
        output_shapes = shape_tree(output)
        if resolved.io_size is default_io_size:  # the same trees: no need to walk them again
            values["input_size"] = shape_tree(inputs[0]) if inputs else None
            values["output_size"] = output_shapes
        else:
            try:
                values["input_size"], values["output_size"] = resolved.io_size(
                    module, inputs, output)
            except Exception as exc:
                raise self._formula_error(exc, call, "io-size function") from exc
        input_shapes = shape_tree(args)
        if kwargs:
            input_shapes = (*input_shapes, shape_tree(kwargs))
        values["input_shapes"] = input_shapes
        values["input_dtypes"] = dtypes_of((args, kwargs)) if kwargs else dtypes_of(args)
        values["output_shapes"] = output_shapes
        values["output_dtypes"] = dtypes_of(output)
        values["output_bytes"] = new_storage_bytes(output, args, kwargs, self._tensors_of(module))
        values["ops"] = ops
        values["macs"] = macs
        values["ops_source"] = source

    def operator(self, call: Call | None, func: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        formula = self._formulas.get(func, _NOT_LOOKED_UP)
        if formula is _NOT_LOOKED_UP:
            formula = self._formulas[func] = lookup_in(self._maps.operators, func)
        if formula is None:  # free: views, copies, allocations
            return
        tally = self.outside if call is None else self._tally(call)
        if formula is MISSING:
            name = str(func.overloadpacket)
            self.unsupported_operators[name] = self.unsupported_operators.get(name, 0) + 1
            tally.unsupported += 1
            return
        try:
            ops, macs = formula(args, kwargs, out)
        except Exception as exc:
            where = "outside every module call" if call is None else (
                f"in module {display_path(call.path)!r} ({type(call.module).__name__})")
            raise FormulaError(
                f"operator formula for {func} {where} raised {type(exc).__name__}: {exc}",
                None if call is None else call.path) from exc
        if not (type(ops) is int and type(macs) is int and ops >= 0 and macs >= 0):
            ops, macs = operator_counts(ops, macs, func, call)
        tally.ops += ops
        tally.macs += macs
        tally.counted += 1

    def finish(self, runner: PassRunner) -> None:
        """Inclusive ops and MACs, and completeness, from the parent links (children always
        start after their parent, so one reverse sweep adds each call into its parent)."""
        calls = runner.calls
        inclusive_ops: list[int | float] = [0] * len(calls)
        inclusive_macs: list[int | float] = [0] * len(calls)
        complete = [True] * len(calls)
        for call in reversed(calls):
            values = call.values
            if call.failed or "ops" not in values:
                continue
            i = call.index
            inclusive_ops[i] += values["ops"] or 0
            inclusive_macs[i] += values["macs"] or 0
            complete[i] = complete[i] and values["ops_source"] in COUNTED_SOURCES
            values["inclusive_ops"] = inclusive_ops[i]
            values["inclusive_macs"] = inclusive_macs[i]
            values["complete"] = complete[i]
            if call.parent is not None:
                inclusive_ops[call.parent] += inclusive_ops[i]
                inclusive_macs[call.parent] += inclusive_macs[i]
                complete[call.parent] = complete[call.parent] and complete[i]
        self._own_tensors.clear()
        self._tallies.clear()

    # -- helpers ---------------------------------------------------------------------------
    def _tally(self, call: Call) -> _OperatorTally:
        tally = self._tallies.get(call.index)
        if tally is None:
            tally = self._tallies[call.index] = _OperatorTally()
        return tally

    def _own_counts(self, resolved: _Resolved, call: Call, inputs: tuple[Any, ...], output: Any
                    ) -> tuple[int | float | None, int | float | None, OpsSource]:
        """Own ops, macs and their source: the formula if there is one, else the operators
        observed in the module's own forward, else unknown."""
        if resolved.excluded:
            return None, None, "excluded"
        ops = self._count(resolved.ops, call, inputs, output, "ops")
        if ops is not None:
            macs = (self._count(resolved.macs, call, inputs, output, "macs")
                    if resolved.macs is not None else None)
            return ops, macs, "formula"
        tally = self._tallies.get(call.index) or _EMPTY_TALLY
        if not self._maps.count_operators or (tally.unsupported and not tally.counted):
            return None, None, "unknown"
        source: OpsSource = "mixed" if tally.unsupported else "operator"
        return tally.ops, tally.macs, source

    def _tensors_of(self, module: nn.Module) -> list[torch.Tensor]:
        # Direct parameters and buffers only: an output aliasing them (``return self.weight``)
        # is not new memory; a descendant's tensors are checked at the descendant's call.
        tensors = self._own_tensors.get(id(module))
        if tensors is None:
            tensors = [t for t in (*module._parameters.values(), *module._buffers.values())
                       if t is not None]
            self._own_tensors[id(module)] = tensors
        return tensors

    def _is_excluded(self, module: nn.Module) -> bool:
        return id(module) in self._maps.excluded_ids or (
            bool(self._maps.excluded_types) and isinstance(module, self._maps.excluded_types))

    def is_excluded(self, module: nn.Module) -> bool:
        """Whether ``module`` is excluded from ops counting."""
        return self._is_excluded(module)

    def _resolve(self, module: nn.Module) -> _Resolved:
        resolved = self._by_module.get(id(module))
        if resolved is None:
            resolved = self._resolve_type(module)
            if id(module) in self._hosts and not resolved.excluded:
                # its unhooked TorchScript children run inside its call: count its operators
                resolved = replace(resolved, ops=_unknown, covered=False)
            self._by_module[id(module)] = resolved
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

    def _count(self, fn: Callable[..., Any], call: Call, inputs: tuple[Any, ...], output: Any,
               what: str) -> int | float | None:
        try:
            value = fn(call.module, inputs, output)
        except Exception as exc:
            raise self._formula_error(exc, call, f"{what} formula {formula_name(fn)!r}") from exc
        if value is None or (type(value) is int and value >= 0):
            return value
        return count_value(value, formula=f"{what} formula {formula_name(fn)!r}",
                           path=call.path, type_name=type(call.module).__name__)

    @staticmethod
    def _formula_error(exc: Exception, call: Call, what: str) -> FormulaError:
        return FormulaError(
            f"{what} for module {display_path(call.path)!r} ({type(call.module).__name__}) "
            f"raised {type(exc).__name__}: {exc}", call.path)


class BackwardCountingListener(Listener):
    """Ops and MACs of the backward, booked to the forward call that created each autograd
    node (``call.values["backward_ops"]`` / ``["backward_macs"]``)."""

    wants_nodes = True

    def __init__(self, operators: OperatorMap) -> None:
        self._operators = operators
        self._formulas: dict[Any, Any] = {}
        self._ops: dict[int, int | float] = {}
        self._macs: dict[int, int | float] = {}
        self.outside_ops: int | float = 0
        """Backward ops not created by any module call (the loss, gradient accumulation)."""
        self.outside_macs: int | float = 0
        self.unsupported: dict[str, int] = {}

    def backward_operator(self, owner: Call | None, func: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any], out: Any) -> None:
        formula = self._formulas.get(func, _NOT_LOOKED_UP)
        if formula is _NOT_LOOKED_UP:
            formula = self._formulas[func] = lookup_in(self._operators, func)
        if formula is None:
            return
        if formula is MISSING:
            name = str(func.overloadpacket)
            self.unsupported[name] = self.unsupported.get(name, 0) + 1
            return
        ops, macs = formula(args, kwargs, out)
        if not (type(ops) is int and type(macs) is int and ops >= 0 and macs >= 0):
            ops, macs = operator_counts(ops, macs, func, owner, backward=True)
        if owner is None:
            self.outside_ops += ops
            self.outside_macs += macs
        else:
            self._ops[owner.index] = self._ops.get(owner.index, 0) + ops
            self._macs[owner.index] = self._macs.get(owner.index, 0) + macs

    def finish(self, runner: PassRunner) -> None:
        for call in runner.calls:
            call.values["backward_ops"] = self._ops.get(call.index, 0)
            call.values["backward_macs"] = self._macs.get(call.index, 0)


_NOT_LOOKED_UP = object()
_EMPTY_TALLY = _OperatorTally()


def _unknown(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
    return None


def _hosts_of_unhooked(runner: PassRunner) -> frozenset[int]:
    """Ids of the hooked modules inside whose calls unhooked (TorchScript) modules run: the
    nearest hooked ancestor of each."""
    unhooked = set(runner.unhooked)
    if not unhooked:
        return frozenset()
    by_path = {runner.paths[id(module)]: module for module in runner.modules}
    hosts = set()
    for path in unhooked:
        parent = path
        while parent in unhooked:
            parent = parent.rpartition(".")[0]
        hosts.add(id(by_path[parent]))
    return frozenset(hosts)
