"""The counting listeners: module formulas and aten-operator accounting, forward and backward.

Forward (:class:`CountingListener`): a call whose module has a formula (or is excluded) is
counted by that formula alone; the runner's operator observer is off while such a call is the
innermost one, so its operators are never counted twice and cost nothing, while a child without
a formula (a custom block inside ``nn.Sequential``) is observed again. The exception is an ops
formula without a MACs formula: its calls' operators are observed for their MACs only. A
formula that returns ``None`` ("unknown") for a call it covers makes that call unknown
(``ops=None``, totals lower bounds), never 0; a formula that knows beforehand which modules it
cannot price says so with a ``covers(module)`` test (:data:`COVERS`), and those modules' operators
are observed and counted instead. Every call also gets its shapes, dtypes, 0.0.4 io sizes and
output bytes.

Backward (:class:`BackwardCountingListener`): every backward operator is booked to the forward
call that created the autograd node it runs for (:meth:`PassRunner.owner_of_node`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import Parameter

from moduleprofiler.call import Call
from moduleprofiler.errors import FormulaError
from moduleprofiler.export.columns import register_column
from moduleprofiler.inputs import formula_inputs
from moduleprofiler.operators.registry import MISSING, OperatorMap, PassFormulas, pass_formulas
from moduleprofiler.records import COUNTED_SOURCES, OpsSource, display_path, subtree_totals
from moduleprofiler.registry import (
    COVERS,
    bound_to,
    formula_fits,
    resolve_with_owner,
)
from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.shapes import (
    call_input_shapes,
    default_io_size,
    dtypes_of,
    one_dtype,
    shape_tree,
)
from moduleprofiler.shards import holds_dtensor, sharded_by
from moduleprofiler.storage import new_storage_bytes
from moduleprofiler.validate import (
    DEFAULT_KEY,
    EXCLUDED_KEY,
    count_value,
    formula_name,
    io_size_pair,
)
from moduleprofiler.vmapped import vmap_factor


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


@dataclass(frozen=True, slots=True)  # slots: read on every call, fewer cache lines
class _Resolved:
    ops: Callable[..., Any]
    macs: Callable[..., Any] | None
    io_size: Callable[..., Any]
    excluded: bool
    covered: bool
    """A formula (or an exclusion) accounts for everything inside this module's calls."""
    fallback: bool = False
    """The formula was registered for a base class (outside torch): the module's operators are
    observed too, and count instead of the formula if the formula fails on this module."""
    macs_from_operators: bool = False
    """An ops formula without a MACs formula: the call's MACs are those of the operators it
    runs (exact for the products they count), so its operators are observed for them, without
    listing those that have no formula as missing (the formula prices the ops)."""
    tested: bool = False
    """The ops formula carries a :data:`COVERS` test, asked of each module it is to price."""


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
        self.maps = maps
        """The tables this listener counts with."""
        self._excludes = bool(maps.excluded_ids or maps.excluded_types)
        self._resolved: dict[tuple[type, bool], _Resolved] = {}
        self._by_module: dict[int, _Resolved] = {}
        self._tallies: dict[int, _OperatorTally] = {}
        self._formulas = PassFormulas(maps.operators)
        self._macs_formulas = PassFormulas(maps.operators)
        """The operator formulas for the calls whose ops a formula gives and whose MACs their
        operators do (:attr:`_Resolved.macs_from_operators`): a missing one is not listed."""
        self._macs_only: set[int] = set()
        """Ids of the modules whose calls are observed for their MACs only."""
        self._shapes: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._input_shapes: dict[tuple[int, ...], tuple[tuple[int, ...]]] = {}
        self._pending: list[tuple[Any, ...]] = []
        """The facts of each one-tensor call of the forward, made into values by
        :meth:`finish`."""
        self.outside = _OperatorTally()
        """Operators that ran outside every module call (e.g. in a ``pred_fn``)."""
        self.unsupported_operators = self._formulas.missing
        self._hosts: frozenset[int] = frozenset()
        self._own_hooks: frozenset[int] = frozenset()
        self._per_module = False
        """Some module of the pass hosts unhooked children, has forward hooks of its own or
        the model holds DTensors: then each module is checked for them."""
        self._hooked: dict[int, _Resolved] = {}
        """Id -> formula of the modules with forward hooks of their own that a formula
        covers: counted by their operators (hooks included), by the formula where those
        are not all known (an opaque kernel the formula was registered for)."""
        self._paths: dict[int, str] = {}
        self._dtensor: type | None = None
        """``DTensor`` when the model holds one: operators are then counted on this rank's
        shards."""
        self.fallbacks: dict[str, str] = {}
        """Module path -> why its formula's count was not used: an inherited formula replaced
        by the module's operators, or a formula that returned ``None`` for a call whose
        operators were not observed (its ops are unknown)."""

    # -- listener --------------------------------------------------------------------------
    def start(self, runner: PassRunner) -> None:
        self._hosts = _hosts_of_unhooked(runner)
        self._own_hooks = runner.own_hooks
        self._paths = runner.paths
        # the module scan saw every parameter plain: none can be a DTensor
        self._dtensor = (None if runner.context.plain_parameters
                         else sharded_by(runner.modules))
        self._per_module = bool(self._hosts or self._own_hooks or self._dtensor is not None)
        self._formulas = pass_formulas(self.maps.operators, self._dtensor,
                                       self._formulas.missing)
        self._macs_formulas = pass_formulas(self.maps.operators, self._dtensor, {})

    def observe(self, module: nn.Module) -> bool:
        if not self.maps.count_operators:
            return False
        resolved = self._by_module.get(id(module))
        if resolved is None:
            resolved = self._resolve(module)
        return not resolved.covered or resolved.macs_from_operators

    def observe_outside(self) -> bool:
        return self.maps.count_operators

    def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
             output: Any) -> None:
        module = call.module
        resolved = self._by_module.get(id(module))
        if resolved is None:
            resolved = self._resolve(module)
        values = call.values
        if (not kwargs and len(args) == 1 and type(output) is Tensor
                and type(first := args[0]) is Tensor):
            try:
                output_size, input_size = output.shape, first.shape
            except RuntimeError:  # a strided nested tensor has no one shape: the general path
                output_size = None
            if output_size is not None:
                self._one_tensor_call(call, resolved, args, first, output, input_size,
                                      output_size)
                return
        inputs = formula_inputs(module, args, kwargs)
        ops, macs, source = self._own_counts(resolved, call, inputs, output)
        output_shapes = shape_tree(output)
        if resolved.io_size is default_io_size:  # the same trees: no need to walk them again
            values["input_size"] = shape_tree(inputs[0]) if inputs else None
            values["output_size"] = output_shapes
        else:
            values["input_size"], values["output_size"] = self._io_sizes(
                resolved, call, inputs, output)
        values["input_shapes"], values["input_dtypes"] = call_input_shapes(args, kwargs)
        values["output_shapes"] = output_shapes
        values["output_dtypes"] = dtypes_of(output)
        values["output_bytes"] = new_storage_bytes(
            output, args, kwargs, module._parameters.values(), module._buffers.values())
        values["self_ops"] = ops
        values["self_macs"] = macs
        values["ops_source"] = source

    def _io_sizes(self, resolved: _Resolved, call: Call, inputs: tuple[Any, ...],
                  output: Any) -> tuple[Any, Any]:
        """0.0.4's ``(input_size, output_size)`` from the io-size function of the module's type
        (the default trees where an inherited one fails on this module)."""
        try:
            return io_size_pair(resolved.io_size(call.module, inputs, output),
                                function=resolved.io_size, path=call.path, module=call.module)
        except Exception as exc:
            if resolved.fallback:
                return default_io_size(call.module, inputs, output)
            if isinstance(exc, FormulaError):  # it returned something that is not a pair
                raise
            raise self._formula_error(exc, call, "io-size function") from exc

    def _one_tensor_call(self, call: Call, resolved: _Resolved, args: tuple[Any, ...],
                         first: Tensor, output: Tensor, input_size: torch.Size,
                         output_size: torch.Size) -> None:
        """The common call, one plain tensor in (``args == (first,)``) and one out: the values
        of the general path in :meth:`exit`, without tree walks or signature binding. Only
        what needs the live tensors is read here (the counts, the ``torch.Size`` objects, the
        dtypes, the output bytes); the values are built from them after the pass
        (:meth:`_fill_one_tensor_calls`), when the code and data that takes is still in the
        caches, instead of between two convolutions, which evict them."""
        ops, macs, source = self._own_counts(resolved, call, args, output)
        io = (None if resolved.io_size is default_io_size
              else self._io_sizes(resolved, call, args, output))
        self._pending.append((call, ops, macs, source, input_size, output_size, first.dtype,
                              output.dtype, _new_bytes(call.module, first, output), io))

    def _fill_one_tensor_calls(self) -> None:
        """The values of the one-tensor calls (:meth:`_one_tensor_call`), from the facts read
        during the forward."""
        # one tuple per distinct shape in the pass (looked up by the ``torch.Size`` itself):
        # fewer objects kept
        shapes = self._shapes
        singles = self._input_shapes
        for (call, ops, macs, source, input_size, output_size, input_dtype, output_dtype,
             output_bytes, io) in self._pending:
            output_shape = shapes.get(output_size)
            if output_shape is None:
                output_shape = tuple(output_size)
                shapes[output_shape] = output_shape
            input_shape = shapes.get(input_size)
            if input_shape is None:
                input_shape = tuple(input_size)
                shapes[input_shape] = input_shape
            input_shapes = singles.get(input_shape)
            if input_shapes is None:
                input_shapes = singles[input_shape] = (input_shape,)
            values = call.values
            if io is None:
                values["input_size"] = input_shape
                values["output_size"] = output_shape
            else:
                values["input_size"], values["output_size"] = io
            values["input_shapes"] = input_shapes
            values["input_dtypes"] = one_dtype(input_dtype)
            values["output_shapes"] = output_shape
            values["output_dtypes"] = one_dtype(output_dtype)
            values["output_bytes"] = output_bytes
            values["self_ops"] = ops
            values["self_macs"] = macs
            values["ops_source"] = source
        self._pending = []

    def operator(self, call: Call | None, func: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        formulas = self._formulas
        if self._macs_only and call is not None and id(call.module) in self._macs_only:
            formulas = self._macs_formulas
        counts = formulas.count(func, args, kwargs, out, call)
        if counts is None:  # free: views, copies, allocations
            return
        tally = self.outside if call is None else self._tally(call)
        if counts is MISSING:
            tally.unsupported += 1
            return
        tally.ops += counts[0]
        tally.macs += counts[1]
        tally.counted += 1

    def finish(self, runner: PassRunner) -> None:
        """Inclusive ops and MACs, and completeness, from the parent links (children always
        start after their parent, so one reverse sweep adds each call into its parent)."""
        self._fill_one_tensor_calls()
        calls = runner.calls
        # each call's children's sums so far: ``None`` until some part of the subtree is
        # known (a sum of nothing known is unknown, never 0); a sum with unknown parts is a
        # lower bound (``complete`` False)
        ops: list[int | float | None] = [None] * len(calls)
        macs: list[int | float | None] = [None] * len(calls)
        complete = [True] * len(calls)
        for call in reversed(calls):
            values = call.values
            if call.failed or "self_ops" not in values:
                continue
            i = call.index
            total_ops, total_macs = ops[i], macs[i]
            own = values["self_ops"]
            if own is not None:
                total_ops = own if total_ops is None else total_ops + own
            own = values["self_macs"]
            if own is not None:
                total_macs = own if total_macs is None else total_macs + own
            # exact as Profile.macs_complete is: known ops, and known MACs where counted (a
            # call priced by an ops formula only can know its ops and not its MACs)
            source = values["ops_source"]
            whole = complete[i] and source in COUNTED_SOURCES and (
                values["self_macs"] is not None or source == "excluded")
            values["ops"] = total_ops
            values["macs"] = total_macs
            values["complete"] = whole
            parent = call.parent
            if parent is not None:
                if total_ops is not None:
                    above = ops[parent]
                    ops[parent] = total_ops if above is None else above + total_ops
                if total_macs is not None:
                    above = macs[parent]
                    macs[parent] = total_macs if above is None else above + total_macs
                if not whole:
                    complete[parent] = False
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
            return self._excluded_counts(resolved, call, inputs, output)
        # ``_count`` inlined for the common result (a non-negative int or None): this runs on
        # every call
        module = call.module
        try:
            ops = resolved.ops(module, inputs, output)
        except Exception as exc:
            if resolved.fallback:
                return self._fall_back(call, resolved.ops, exc)
            raise self._formula_error(
                exc, call, f"ops formula {formula_name(resolved.ops)!r}") from exc
        if ops is not None and (type(ops) is not int or ops < 0):
            ops = self._checked(ops, resolved.ops, call, "ops")
        if ops is not None:
            # a formula prices the one example a module sees inside torch.vmap; its operators
            # (MACs observed below) ran on the whole batch already
            factor = vmap_factor(output)
            if factor != 1:
                ops *= factor
            macs_fn = resolved.macs
            if macs_fn is None:
                return ops, self._operator_macs(call) if resolved.macs_from_operators else None, \
                    "formula"
            try:
                macs = macs_fn(module, inputs, output)
            except Exception as exc:
                if resolved.fallback:
                    return self._fall_back(call, macs_fn, exc)
                raise self._formula_error(
                    exc, call, f"macs formula {formula_name(macs_fn)!r}") from exc
            if macs is not None and (type(macs) is not int or macs < 0):
                macs = self._checked(macs, macs_fn, call, "macs")
            if macs is not None and factor != 1:
                macs *= factor
            return ops, macs, "formula"
        if resolved.covered:
            # the formula was trusted to price this call, so its operators were not counted
            # (at most observed for their MACs): its own work is unknown, not the 0 of a tally
            return self._declined(call, resolved.ops)
        counts = self._operator_counts(call)
        if self._hooked and counts[2] not in COUNTED_SOURCES:
            formula = self._hooked.get(id(module))
            if formula is not None:  # its operators are not all known: its formula's count
                return self._own_counts(formula, call, inputs, output)
        return counts

    def _operator_counts(self, call: Call
                         ) -> tuple[int | float | None, int | float | None, OpsSource]:
        """Own ops and macs from the operators the call ran (unknown without them)."""
        tally = self._tallies.get(call.index) or _EMPTY_TALLY
        if not self.maps.count_operators or (tally.unsupported and not tally.counted):
            return None, None, "unknown"
        source: OpsSource = "mixed" if tally.unsupported else "operator"
        return tally.ops, tally.macs, source

    def _operator_macs(self, call: Call) -> int | float | None:
        """The MACs of the operators the call ran (unknown when one of them has no formula)."""
        tally = self._tallies.get(call.index) or _EMPTY_TALLY
        return None if tally.unsupported else tally.macs

    def _fall_back(self, call: Call, fn: Callable[..., Any], exc: Exception
                   ) -> tuple[int | float | None, int | float | None, OpsSource]:
        """An inherited formula failed on this module: count its operators, and say so."""
        self.fallbacks.setdefault(
            call.path, f"{display_path(call.path)} ({type(call.module).__name__}): inherited "
            f"formula {formula_name(fn)!r} raised {type(exc).__name__}, counted by its operators")
        return self._operator_counts(call)

    def _declined(self, call: Call, fn: Callable[..., Any]
                  ) -> tuple[None, None, OpsSource]:
        """A formula returned ``None`` for a call it covers: unknown, and say why."""
        self.fallbacks.setdefault(
            call.path, f"{display_path(call.path)} ({type(call.module).__name__}): formula "
            f"{formula_name(fn)!r} returned None (unknown) and its operators were not counted, "
            f"so its ops are unknown; a {COVERS}(module) test on the formula has such modules "
            "counted by their operators instead")
        return None, None, "unknown"

    def _excluded_counts(self, resolved: _Resolved, call: Call, inputs: tuple[Any, ...],
                         output: Any) -> tuple[int | float | None, None, OpsSource]:
        """An excluded call's own ops: what the map's ``"excluded"`` function says (``None``,
        unknown, unless a 0.0.4 user replaced it, ``ops_fn_map["excluded"] = fn``); its
        operators are not counted."""
        try:
            ops = resolved.ops(call.module, inputs, output)
        except Exception as exc:
            raise self._formula_error(
                exc, call, f"ops formula {formula_name(resolved.ops)!r}") from exc
        if ops is not None and (type(ops) is not int or ops < 0):
            ops = self._checked(ops, resolved.ops, call, "ops")
        return ops, None, "excluded"

    def is_excluded(self, module: nn.Module) -> bool:
        """Whether ``module`` is excluded from ops counting."""
        return id(module) in self.maps.excluded_ids or (
            bool(self.maps.excluded_types) and isinstance(module, self.maps.excluded_types))

    def _resolve(self, module: nn.Module) -> _Resolved:
        """The formulas of ``module``'s calls in this pass, worked out on its first call (the
        callers looked in :attr:`_by_module` first)."""
        key = id(module)
        resolved = self._resolve_type(module)
        if resolved.excluded:
            pass
        elif self._per_module and (key in self._hosts or key in self._own_hooks or (
                self._dtensor is not None and holds_dtensor(module, self._dtensor))):
            # its unhooked TorchScript children run inside its call, its own forward hooks
            # do work the formula does not price (a weight_norm or pruning pre-hook
            # recomputing the weight), or its parameters are sharded (its attributes
            # describe the global layer): count its operators
            if resolved.covered and key in self._own_hooks:
                self._hooked[key] = resolved
            resolved = replace(resolved, ops=_unknown, covered=False)
        elif resolved.tested and resolved.covered and not _covers(
                resolved.ops, module, self._paths.get(key)):
            # the formula cannot price this instance (it returns None for it): observe
            # the module's operators so that they count instead
            resolved = replace(resolved, covered=False)
        if resolved.covered and resolved.macs_from_operators:
            self._macs_only.add(key)
        self._by_module[key] = resolved
        return resolved

    def _resolve_type(self, module: nn.Module) -> _Resolved:
        excluded = self._excludes and self.is_excluded(module)
        key = (type(module), excluded)
        resolved = self._resolved.get(key)
        if resolved is None:
            maps = self.maps
            cls = type(module)
            found = resolve_with_owner(maps.ops, cls)
            formula = found[0] if found is not None and formula_fits(cls, found[1]) else None
            # a formula inherited from a base class, outside torch's own subclasses
            fallback = (formula is not None and found is not None and found[1] is not cls
                        and not cls.__module__.startswith("torch."))
            ops_fn = (
                maps.ops.get(EXCLUDED_KEY) if excluded else formula
            ) or maps.ops.get(DEFAULT_KEY) or _unknown
            macs_fn = _fitting(maps.macs, cls) if formula is not None else None
            # a composite's parts priced with this pass's formulas for their layer types
            ops_fn = bound_to(ops_fn, maps.ops)
            macs_fn = None if macs_fn is None else bound_to(macs_fn, maps.macs)
            resolved = _Resolved(
                ops=ops_fn,
                macs=macs_fn,
                io_size=_fitting(maps.io_size, cls) or maps.io_size.get(DEFAULT_KEY)
                or default_io_size,
                excluded=excluded,
                covered=excluded or (formula is not None and not fallback),
                fallback=fallback and not excluded,
                macs_from_operators=(formula is not None and macs_fn is None and not excluded
                                     and maps.count_operators),
                tested=getattr(ops_fn, COVERS, None) is not None,
            )
            self._resolved[key] = resolved
        return resolved

    @staticmethod
    def _checked(value: Any, fn: Callable[..., Any], call: Call, what: str
                 ) -> int | float | None:
        """A formula result that is not a non-negative int, as a count (or FormulaError)."""
        return count_value(value, formula=f"{what} formula {formula_name(fn)!r}",
                           path=call.path, type_name=type(call.module).__name__)

    @staticmethod
    def _formula_error(exc: Exception, call: Call, what: str) -> FormulaError:
        return FormulaError(
            f"{what} for module {display_path(call.path)!r} ({type(call.module).__name__}) "
            f"raised {type(exc).__name__}: {exc}", call.path)


class BackwardCountingListener(Listener):
    """Ops and MACs of the backward, booked to the forward call that created each autograd
    node (``call.values["self_backward_ops"]`` / ``["self_backward_macs"]``). As in the forward,
    a call whose backward ran an operator without a formula keeps the part that is known (a
    lower bound), or is unknown (``None``) when no part is, and ``backward_complete`` is False
    for it and every call it ran inside."""

    wants_nodes = True
    columns = (
        register_column("backward_complete", "flag", "backward complete", aggregation="all",
                        description="whether the backward ops of the call and of every call "
                        "inside it are known (False: an operator of their backward has no "
                        "formula, and the backward counts that include it are lower bounds)"),
    )

    def __init__(self, operators: OperatorMap) -> None:
        self._operators = operators
        self._formulas = PassFormulas(operators)
        self._ops: dict[int, int | float] = {}
        self._macs: dict[int, int | float] = {}
        self.outside_ops: int | float = 0
        """Backward ops not created by any module call (the loss, gradient accumulation)."""
        self.outside_macs: int | float = 0
        self._unknown: set[int] = set()
        """The calls whose backward ran an operator without a formula."""
        self.unsupported = self._formulas.missing

    def start(self, runner: PassRunner) -> None:
        self._formulas = pass_formulas(self._operators,
                                       None if runner.context.plain_parameters
                                       else sharded_by(runner.modules),
                                       self.unsupported)

    def backward_operator(self, owner: Call | None, func: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any], out: Any) -> None:
        counts = self._formulas.count(func, args, kwargs, out, owner, backward=True)
        if counts is MISSING:
            if owner is not None:
                self._unknown.add(owner.index)
            return
        if counts is None:
            return
        ops, macs = counts
        if owner is None:
            self.outside_ops += ops
            self.outside_macs += macs
        else:
            self._ops[owner.index] = self._ops.get(owner.index, 0) + ops
            self._macs[owner.index] = self._macs.get(owner.index, 0) + macs

    def finish(self, runner: PassRunner) -> None:
        """Each call's own backward counts, and whether they and those of every call inside it
        are known (:func:`~moduleprofiler.records.subtree_totals` of the own flags)."""
        calls = runner.calls
        known = [call.index not in self._unknown for call in calls]
        complete = subtree_totals(known, [call.parent for call in calls], operator.and_)
        for call, own, whole in zip(calls, known, complete):
            i = call.index
            counted = own or i in self._ops  # a sum of nothing known is unknown, never 0
            call.values["self_backward_ops"] = self._ops.get(i, 0) if counted else None
            call.values["self_backward_macs"] = self._macs.get(i, 0) if counted else None
            call.values["backward_complete"] = whole


_EMPTY_TALLY = _OperatorTally()


def _no_count(key: int) -> int:
    return -1  # this torch does not say: never taken for a lone holder


_use_count: Callable[[int], int] = getattr(torch._C, "_storage_Use_Count", _no_count)


def _lone_holder_count() -> int | None:
    """What ``_storage_Use_Count`` says of a storage that one tensor holds, read while its
    Python storage object is alive (as :func:`_new_bytes` reads it); ``None`` where that count
    does not rise by one for another tensor on the same storage (whether the storage object
    is new or kept from an earlier read), or the function is missing: then every tensor is
    compared."""
    try:
        tensor = torch.empty(1)
        storage = tensor.untyped_storage()
        lone = _use_count(storage._cdata)
        del storage
        storage = tensor.untyped_storage()  # kept from the first read, or made again
        again = _use_count(storage._cdata)
        sharer = tensor.detach()  # a second tensor on the same storage
        shared = _use_count(storage._cdata)
        del sharer
    except Exception:  # an internal function: any failure means it cannot be relied on
        return None
    return lone if again == lone and shared == lone + 1 else None


_LONE_HOLDER = _lone_holder_count()


def _new_bytes(module: nn.Module, first: Tensor, output: Tensor) -> int:
    """:func:`~moduleprofiler.storage.new_storage_bytes` of a one-tensor call, inlined for
    plain tensors (a quarter of its cost): 0 when the output shares its storage with the input
    or with one of the module's direct parameters and buffers (``return self.weight``; a
    descendant's are checked at the descendant's call)."""
    try:
        storage = output.untyped_storage()
        key = storage._cdata
        if output is not first and _LONE_HOLDER is not None and _use_count(key) <= _LONE_HOLDER:
            # the output is the only tensor on its storage, so no input, parameter or buffer
            # shares it unless it is the output itself (``return self.running_mean``): one
            # count read instead of a storage per tensor, and no tensor of the module touched
            for table in (module._parameters, module._buffers):
                for tensor in table.values():
                    if tensor is output:
                        return 0
            return int(storage.nbytes())
        if key == first.untyped_storage()._cdata:
            return 0
        for table in (module._parameters, module._buffers):
            for tensor in table.values():
                if type(tensor) is Parameter or type(tensor) is Tensor:  # neither is lazy
                    if tensor.untyped_storage()._cdata == key:
                        return 0
                elif tensor is not None:  # a subclass (lazy, sharded): the general path
                    raise TypeError
        return int(storage.nbytes())
    except (RuntimeError, NotImplementedError, TypeError):
        return new_storage_bytes(output, (first,), module._parameters.values(),
                                 module._buffers.values())


def _fitting(table: Mapping[Any, Callable[..., Any]], cls: type) -> Callable[..., Any] | None:
    """The function of ``table`` for ``cls`` along its MRO, unless it was registered for a base
    class whose ``forward`` a subclass replaces (:func:`~moduleprofiler.registry.formula_fits`):
    such a module is counted by its operators instead."""
    found = resolve_with_owner(table, cls)
    if found is None or not formula_fits(cls, found[1]):
        return None
    return found[0]


def _covers(formula: Callable[..., Any], module: nn.Module, path: str | None) -> bool:
    """Whether ``formula`` prices ``module`` (its :data:`COVERS` test; True without one)."""
    test = getattr(formula, COVERS, None)
    if test is None:
        return True
    try:
        return bool(test(module))
    except Exception as exc:
        where = "" if path is None else f"module {display_path(path)!r} "
        raise FormulaError(
            f"{COVERS} test of formula {formula_name(formula)!r} for {where}"
            f"({type(module).__name__}) raised {type(exc).__name__}: {exc}", path) from exc


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
