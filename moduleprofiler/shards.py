"""What ``torch.distributed`` changes about a pass: sharded tensors (``DTensor``), wrappers that
communicate gradients in their hooks (DDP, FSDP2), and the process's rank.

Nothing here imports torch's parallel APIs (``torch.distributed.tensor`` and
``torch.distributed.fsdp`` take about a second to import): a class that was never imported
cannot be in use, so each is looked up in ``sys.modules`` and ``None`` means "not in use".
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.nn import Parameter

from moduleprofiler.errors import ProfilingError


def loaded_class(module: str, name: str) -> type | None:
    """The class ``module.name`` if ``module`` has been imported, else ``None``."""
    found = getattr(sys.modules.get(module), name, None)
    return found if isinstance(found, type) else None


def dtensor_class() -> type | None:
    """``torch.distributed.tensor.DTensor`` when some code imported it (else no DTensor
    exists in this process)."""
    return loaded_class("torch.distributed.tensor", "DTensor")


def sharded_by(modules: Iterable[nn.Module]) -> type | None:
    """``DTensor`` if one of ``modules`` holds a ``DTensor`` parameter, else ``None``: only
    then do operators need counting on local shards (Transformers imports DTensor in every
    process, so that it is loaded says nothing about the model)."""
    dtensor = dtensor_class()
    if dtensor is None:
        return None
    for module in modules:
        if holds_dtensor(module, dtensor):
            return dtensor
    return None


def holds_dtensor(module: nn.Module, dtensor: type) -> bool:
    """Whether one of ``module``'s own parameters is a ``DTensor`` (tensor parallelism, or an
    FSDP2 unit outside its forward): its module attributes (``in_features``) then describe the
    global tensor, not the work this rank does."""
    # a plain loop, a plain parameter skipped by its type: it runs for every module on every
    # pass (a generator per module cost 70 us a pass on ResNet-50)
    for parameter in module._parameters.values():
        if type(parameter) is not Parameter and isinstance(parameter, dtensor):
            return True
    return False


def local(value: Any, dtensor: type) -> Any:
    """``value`` with every ``DTensor`` (also inside tuples, lists and dicts) replaced by the
    shard this rank holds."""
    if isinstance(value, dtensor):
        return value._local_tensor  # type: ignore[attr-defined]
    if type(value) in (tuple, list):
        return type(value)(local(item, dtensor) for item in value)
    if type(value) is dict:
        return {key: local(item, dtensor) for key, item in value.items()}
    return value


def on_local_shards(formula: Callable[..., Any], dtensor: type) -> Callable[..., Any]:
    """An operator formula ``(args, kwargs, out) -> (ops, macs)`` evaluated on the local shards
    of its ``DTensor`` arguments and result: the work this rank runs.

    NB: exact when the operator runs on the shards as they are (the sharding strategies of
    matmuls, linear layers and elementwise operators on column- or row-sharded weights); an
    operator whose inputs DTensor first redistributes is counted on the shards it was given.
    """

    def local_formula(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
        return formula(local(args, dtensor), local(kwargs, dtensor), local(out, dtensor))

    return local_formula


def communicates_gradients(root: nn.Module) -> bool:
    """Whether ``root`` holds a wrapper that reduces gradients inside the backward's own hooks
    (``DistributedDataParallel``, an FSDP2 ``fully_shard`` module): a profiled backward of it
    must be a real one (``loss.backward()``), or those hooks never run."""
    fsdp = loaded_class("torch.distributed.fsdp", "FSDPModule")
    wrappers = tuple(cls for cls in (nn.parallel.DistributedDataParallel, fsdp) if cls)
    return any(isinstance(module, wrappers) for module in root.modules())


def process_rank() -> tuple[int | None, int | None]:
    """``(rank, world_size)`` of this process in the default process group, ``(None, None)``
    outside a ``torch.distributed`` program."""
    distributed = torch.distributed
    if not (distributed.is_available() and distributed.is_initialized()):
        return None, None
    return distributed.get_rank(), distributed.get_world_size()


_FAILED = "moduleprofiler/failed/"
"""Prefix of the keys under which a rank whose pass raised leaves its error in the default
group's store, for its partners to name: ``<prefix><rank>``."""


def shared_failure(error: ProfilingError, root: nn.Module,
                   modules: Iterable[nn.Module]) -> ProfilingError:
    """``error``, the failure of a pass on ``root`` on this rank, shared with its partners.

    A rank whose pass raised inside a model that communicates (DDP, FSDP2, ``DTensor``
    parameters) leaves its partners waiting in the model's collectives; their wait ends with
    an error of the transport ("Connection closed by peer", at once when the failed process
    exits, as under ``torchrun``; else at the group's timeout) that names no module. So the
    first rank to fail writes its error to the default group's store, and a partner whose
    pass then fails adds it to its own: ``rank 1 failed first: forward of module '2' ...``.
    Outside a distributed program, or for a model that does not communicate, ``error`` is
    returned as it is.
    """
    distributed = torch.distributed
    if not (distributed.is_available() and distributed.is_initialized()) or not (
            communicates_gradients(root) or sharded_by(modules) is not None):
        return error
    try:
        store = distributed.distributed_c10d._get_default_store()
        rank = distributed.get_rank()
        for other in range(distributed.get_world_size()):
            key = f"{_FAILED}{other}"
            if other != rank and store.check([key]):
                return ProfilingError(f"{error}; rank {other} failed first: "
                                      f"{store.get(key).decode()}", error.path)
        store.set(f"{_FAILED}{rank}", str(error))
    except (AttributeError, RuntimeError, ValueError):
        # no store to share it through (or a torch without the default store's getter): this
        # rank's own error
        pass
    return error
