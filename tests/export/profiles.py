"""Deterministic profiles built by hand (no forward pass, no formulas), so the golden files
change only when the export layer does. Inclusive counts and flags are derived here from
each call's own numbers, as the collector does."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from moduleprofiler import CallRecord, ModuleInfo, Profile


@dataclass(frozen=True)
class Call:
    path: str
    type_name: str
    parent: int | None
    ops: int | None
    macs: int | None
    inputs: Any
    output: Any
    source: str = "formula"


@dataclass(frozen=True)
class Module:
    path: str
    type_name: str
    params: int
    self_params: int
    buffers: int = 0
    frozen: int = 0


def _float32_bytes(tree: Any) -> int:
    if isinstance(tree, tuple) and all(isinstance(d, int) for d in tree):
        size = 4
        for dim in tree:
            size *= dim
        return size
    if isinstance(tree, (tuple, list)):
        return sum(_float32_bytes(item) for item in tree)
    if isinstance(tree, dict):
        return sum(_float32_bytes(item) for item in tree.values())
    return 0


def build(calls: Sequence[Call], modules: Sequence[Module], **extra: Any) -> Profile:
    """A consistent :class:`Profile` from per-call own numbers."""
    depth: list[int] = []
    for call in calls:
        depth.append(0 if call.parent is None else depth[call.parent] + 1)
    ops = [c.ops or 0 for c in calls]
    macs = [c.macs or 0 for c in calls]
    complete = [c.source in ("formula", "operator", "excluded") for c in calls]
    for index in range(len(calls) - 1, -1, -1):
        parent = calls[index].parent
        if parent is not None:
            ops[parent] += ops[index]
            macs[parent] += macs[index]
            complete[parent] = complete[parent] and complete[index]
    by_path = {m.path: m for m in modules}
    seen: dict[str, int] = {}
    records = []
    for index, call in enumerate(calls):
        info = by_path[call.path]
        number = seen.get(call.path, 0)
        seen[call.path] = number + 1
        first_input = call.inputs[0] if isinstance(call.inputs, tuple) and call.inputs else None
        values: dict[str, Any] = {
            "index": index, "parent": call.parent, "depth": depth[index], "path": call.path,
            "type_name": call.type_name, "call_number": number, "input_shapes": call.inputs,
            "input_dtypes": ("float32",), "output_shapes": call.output,
            "output_dtypes": ("float32",), "input_size": first_input, "output_size": call.output,
            "params": info.params, "self_params": info.self_params,
            "self_ops": call.ops, "self_macs": call.macs, "ops_source": call.source,
            "ops": ops[index],
            "macs": macs[index], "complete": complete[index],
        }
        values["output_bytes"] = _float32_bytes(call.output)
        names = {f.name for f in dataclasses.fields(CallRecord)}
        records.append(CallRecord(**{k: v for k, v in values.items() if k in names}))
    infos = tuple(
        ModuleInfo(path=m.path, type_name=m.type_name,
                   depth=0 if m.path == "" else m.path.count(".") + 1, params=m.params,
                   self_params=m.self_params, trainable_params=m.params - m.frozen,
                   buffers=m.buffers,
                   is_leaf=not any(o.path.startswith(m.path + ".") or (m.path == "" and o.path)
                                   for o in modules))
        for m in modules
    )
    return Profile(records=tuple(records), modules=infos,
                   total_params=modules[0].params if modules else 0,
                   total_buffers=sum(m.buffers for m in modules if m.path and "." not in m.path),
                   **extra)


def tiny() -> Profile:
    """A small CNN-like model: a shared ReLU called twice, an unknown custom leaf, an uncalled
    Linear, keyword inputs and a dict output."""
    x = (1, 3, 8, 8)
    calls = [
        Call("", "Net", None, 10, 0, (x, {"scale": None}), {"logits": (1, 10), "aux": None},
             "operator"),
        Call("conv", "Conv2d", 0, 7_776, 3_888, (x,), (1, 4, 6, 6)),
        Call("bn", "BatchNorm2d", 0, 576, 0, ((1, 4, 6, 6),), (1, 4, 6, 6)),
        Call("block", "Sequential", 0, 0, 0, ((1, 4, 6, 6),), (1, 10), "operator"),
        Call("block.act", "ReLU", 3, 144, 0, ((1, 4, 6, 6),), (1, 4, 6, 6)),
        Call("block.fc", "Linear", 3, 2_890, 1_440, ((1, 144),), (1, 10)),
        Call("block.act", "ReLU", 3, 10, 0, ((1, 10),), (1, 10)),
        Call("custom", "Custom", 0, None, None, ((1, 10),), (1, 10), "unknown"),
    ]
    modules = [
        Module("", "Net", 1_576, 0, buffers=9, frozen=8),
        Module("conv", "Conv2d", 112, 112),
        Module("bn", "BatchNorm2d", 8, 8, buffers=9, frozen=8),
        Module("block", "Sequential", 1_450, 0),
        Module("block.act", "ReLU", 0, 0),
        Module("block.fc", "Linear", 1_450, 1_450),
        Module("custom", "Custom", 0, 0),
        Module("unused", "Linear", 6, 6),
    ]
    return build(calls, modules, unsupported_ops={"aten.mul": 1})


SCRIPT = "<script>alert(1)</script>"
LATEX_SOUP = "a_b & c % d # e $ f { g } h \\ i ~ j ^ k"
IMG = "<img src=x onerror=alert(2)>"
EVIL_TYPE = "Evil<b>&Type</b>"
QUOTES = "q\"uo'te"


def hostile() -> Profile:
    """Every name and type a renderer could get wrong."""
    calls = [
        Call("", EVIL_TYPE, None, 0, 0, ((2, 4),), (2, 4), "operator"),
        Call(SCRIPT, "Linear", 0, 64, 32, ((2, 4),), (2, 4)),
        Call(f"{SCRIPT}.{IMG}", "T_&%$#{}~^\\", 1, 0, 0, ((2, 4),), (2, 4), "operator"),
        Call(LATEX_SOUP, "Linear", 0, 64, 32, ((2, 4),), (2, 4)),
        Call(QUOTES, "*md_[x]|`y`", 0, None, None, ({"k|ey": (2, 4)},), (2, 4), "unknown"),
    ]
    modules = [
        Module("", EVIL_TYPE, 40, 0),
        Module(SCRIPT, "Linear", 20, 20),
        Module(f"{SCRIPT}.{IMG}", "T_&%$#{}~^\\", 0, 0),
        Module(LATEX_SOUP, "Linear", 20, 20),
        Module(QUOTES, "*md_[x]|`y`", 0, 0),
    ]
    return build(calls, modules)


HOSTILE_NAMES = (SCRIPT, LATEX_SOUP, IMG, EVIL_TYPE, QUOTES)


def hostile_model() -> tuple[Any, Any]:
    """A real model whose module names and class name are hostile (for end-to-end runs)."""
    import torch
    from torch import nn

    evil = type(EVIL_TYPE, (nn.Sequential,), {})
    inner = type("T_&%$#{}~^\\", (nn.Sequential,), {})
    model = evil()
    block = inner()
    block.add_module(IMG, nn.ReLU())
    model.add_module(SCRIPT, nn.Linear(4, 4))
    model.add_module(QUOTES, block)
    model.add_module(LATEX_SOUP, nn.Linear(4, 2))
    return model, torch.randn(2, 4)
