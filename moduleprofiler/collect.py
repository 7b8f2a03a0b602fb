"""One profiled pass, from the runner's calls to a :class:`~moduleprofiler.Profile`.

The counting listeners (and any extra listeners the caller adds) run on one
:class:`~moduleprofiler.runner.PassRunner`; afterwards every call's ``values`` become one
:class:`~moduleprofiler.records.CallRecord`: the fields the record declares are filled from
them, every other value is a column in ``CallRecord.metrics``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from moduleprofiler.call import Call
from moduleprofiler.counting import (
    BackwardCountingListener,
    CountingListener,
    FormulaMaps,
)
from moduleprofiler.export.profile import Profile
from moduleprofiler.garbage import collector_paused
from moduleprofiler.loss import LossFn
from moduleprofiler.modules import ModuleWalk, module_infos, scan_modules
from moduleprofiler.records import CallRecord, ModuleInfo, filling_class
from moduleprofiler.runner import Listener, PassContext, PassRunner
from moduleprofiler.shards import process_rank

_RECORD_FIELDS = frozenset(field.name for field in dataclasses.fields(CallRecord))
_FROM_CALL = ("index", "parent", "depth", "path", "call_number")
_FROM_INFO = ("type_name", "params", "self_params")
_OPTIONAL = {field.name: field.default for field in dataclasses.fields(CallRecord)
             if field.default is not dataclasses.MISSING}
"""Fields the listeners may leave out, with their defaults (``metrics`` is set apart)."""
_FROM_VALUES = tuple(name for name in (field.name for field in dataclasses.fields(CallRecord))
                     if name not in (*_FROM_CALL, *_FROM_INFO, "metrics"))
_REQUIRED = frozenset(name for name in _FROM_VALUES if name not in _OPTIONAL)
_FILLING_RECORD: Any = filling_class(CallRecord)
_new_record = object.__new__


def _only_fields(values: dict[str, Any]) -> bool:
    """Whether ``values`` holds record fields only, every required one among them."""
    # key views compare with the field sets directly (``issubset`` of a dict would first copy
    # its keys into a new set)
    return values.keys() <= _RECORD_FIELDS and values.keys() >= _REQUIRED


def build_record(call: Call, info: ModuleInfo,
                 layouts: dict[tuple[str, ...], bool] | None = None) -> CallRecord:
    """The record of one finished call: the runner's facts, the module's parameter counts and
    everything the listeners wrote (declared fields by name, the rest as ``metrics``).
    ``layouts``: a dict the caller keeps for the calls of one pass, which remembers
    :func:`_only_fields` by the keys of ``values`` in their order (the listeners of one pass
    write the same keys in the same order on nearly every call: the two set comparisons, a
    third of a record's cost, are made once per such layout)."""
    values = call.values
    if layouts is None:
        plain = _only_fields(values)
    else:
        keys = tuple(values)
        known = layouts.get(keys)
        if known is None:
            known = layouts[keys] = _only_fields(values)
        plain = known
    if plain:  # only the fields: nothing to split
        fields, metrics = values, {}
    else:
        fields = {name: value for name, value in values.items() if name in _RECORD_FIELDS}
        metrics = {name: value for name, value in values.items() if name not in _RECORD_FIELDS}
    if not plain and not fields.keys() >= _REQUIRED:  # the constructor names what is missing
        return CallRecord(index=call.index, parent=call.parent, depth=call.depth,
                          path=call.path, type_name=info.type_name,
                          call_number=call.call_number, params=info.params,
                          self_params=info.self_params, metrics=metrics, **fields)
    # every field, in the dataclass's order, stored into the slots of a filling record
    # (:func:`~moduleprofiler.records.filling_class`: a fifth of the constructor's cost)
    record = _new_record(_FILLING_RECORD)
    record.index = call.index
    record.parent = call.parent
    record.depth = call.depth
    record.path = call.path
    record.type_name = info.type_name
    record.call_number = call.call_number
    record.input_shapes = fields["input_shapes"]
    record.input_dtypes = fields["input_dtypes"]
    record.output_shapes = fields["output_shapes"]
    record.output_dtypes = fields["output_dtypes"]
    record.output_bytes = fields["output_bytes"]
    record.input_size = fields["input_size"]
    record.output_size = fields["output_size"]
    record.params = info.params
    record.self_params = info.self_params
    record.self_ops = fields["self_ops"]
    record.self_macs = fields["self_macs"]
    record.ops_source = fields["ops_source"]
    record.ops = fields["ops"]
    record.macs = fields["macs"]
    record.complete = fields["complete"]
    get = fields.get  # the optional fields: their default (None) when no listener wrote them
    record.self_backward_ops = get("self_backward_ops")
    record.self_backward_macs = get("self_backward_macs")
    record.metrics = metrics
    record.__class__ = CallRecord
    return record  # type: ignore[no-any-return]


def collect(root: nn.Module, maps: FormulaMaps, invoke: Callable[[], Any], *,
            backward: bool = False, loss_fn: LossFn | None = None,
            listeners: Sequence[Listener] = (), every_leaf: bool = False,
            walk: ModuleWalk) -> Profile:
    """Run ``invoke()`` (which calls ``root``) once under the counting listeners, optionally
    followed by a counted backward, and return its :class:`Profile`.

    ``every_leaf``: the backward is a real ``loss.backward()`` (DDP and FSDP2 reduce gradients
    in the backward's own hooks, which only a real backward runs); the caller sets the
    gradients aside. ``walk``: the caller's :func:`~moduleprofiler.modules.walk_modules` of
    ``root``, shared by the module scan and the runner.

    Raises:
        ProfilingError: the forward or the backward raised (the message names the module whose
            forward failed), or no loss could be derived for ``backward=True``.
        FormulaError: a formula raised or returned something that is not a count.
    """
    infos, lazy, plain = scan_modules(root, walk)
    counting = CountingListener(maps)
    backward_counting = BackwardCountingListener(maps.operators) if backward else None
    runner = PassRunner(root, [counting, *([backward_counting] if backward_counting else []),
                               *listeners], walk=walk,
                        context=PassContext(operators=maps.operators,
                                            plain_parameters=plain))
    with collector_paused():  # the calls and records only grow until the pass is recorded
        output = runner.forward(invoke)
        if backward:
            runner.backward(output, loss_fn, every_leaf=every_leaf)
        del output
        runner.finish()
        # the observer refers back to the runner: without it, the runner, its calls and their
        # values are freed with the last reference here, not left for the garbage collector
        runner.release()
        if lazy:  # lazy modules materialised their parameters during the forward
            infos = module_infos(root)
        by_path = {info.path: info for info in infos}
        layouts: dict[tuple[str, ...], bool] = {}
        records = tuple([build_record(call, by_path[call.path], layouts)
                         for call in runner.calls if not call.failed and call.path in by_path])
    rank, world_size = process_rank()
    return Profile(
        records=records,
        modules=infos,
        excluded=tuple(runner.paths[id(module)] for module in runner.modules
                       if counting.is_excluded(module)) if maps.excluded_ids
        or maps.excluded_types else (),
        total_params=infos[0].params,
        total_buffers=infos[0].buffers,
        unsupported_ops=dict(counting.unsupported_operators),
        outside_ops=counting.outside.ops,
        outside_macs=counting.outside.macs,
        backward=backward,
        backward_unsupported_ops=dict(backward_counting.unsupported) if backward_counting
        else {},
        backward_outside_ops=backward_counting.outside_ops if backward_counting else 0,
        backward_outside_macs=backward_counting.outside_macs if backward_counting else 0,
        unhooked=runner.unhooked,
        formula_fallbacks=tuple(counting.fallbacks.values()),
        rank=rank,
        world_size=world_size,
    )
