"""Mixture of experts: how many tokens each expert received, per MoE layer, from the router's
assignments, and the parameters a token really uses.

A Transformers (>= 5) MoE layer routes with a router module and runs its experts in one
*experts* module that holds every expert's weights stacked in 3-D tensors and is called with
the router's choice, ``experts(hidden_states, top_k_index, top_k_weights)``. The
:class:`ExpertLoad` listener reads ``top_k_index`` as the call starts: the number of times each
expert index occurs is the number of tokens that expert processes. Indices ``>= num_experts``
(expert-parallel padding) are left out. Older designs with an ``experts`` ``nn.ModuleList``
count in :func:`moe_parameters` but their routing is not read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd
import torch
from torch import Tensor, nn

from moduleprofiler.call import Call
from moduleprofiler.export.columns import ColumnSpec, register_column
from moduleprofiler.export.renamed import renamed_columns
from moduleprofiler.language.cache import check_count
from moduleprofiler.runner import Listener, PassRunner

_TOP_K_NAMES = ("num_experts_per_tok", "moe_topk", "top_k", "num_selected_experts")


class ExpertLoad(Listener):
    """Per-expert token counts of every MoE experts call of a pass.

    Pass it to :meth:`Profiler.profile` (or ``profile_generation``) in ``listeners``;
    afterwards :meth:`to_df` has one row per (layer, expert) and :meth:`balance` one row per
    layer. On the meta device the router's choice has no values: the counts are unknown and
    the layers are listed in :attr:`unknown`.
    """

    frame_columns: ClassVar[tuple[ColumnSpec, ...]] = (
        register_column("expert", "int", "expert", aggregation="none",
                        description="an expert's index in its MoE layer (ExpertLoad.to_df(): "
                        "one row per experts module and expert)"),
        register_column("tokens", "int", "tokens", aggregation="none",
                        description="tokens the router sent to the expert over the pass's "
                        "calls of its layer (ExpertLoad.to_df())"),
        register_column("tokens_share", "fraction", "tokens share", aggregation="none",
                        description="the expert's tokens over its layer's assignments, 0-1 "
                        "(ExpertLoad.to_df())"),
        register_column("num_experts", "int", "experts", aggregation="none",
                        description="routed experts of an MoE layer (ExpertLoad.balance(); "
                        "MoEParameters.num_experts is the largest layer's)"),
        register_column("top_k", "int", "top-k", aggregation="none",
                        description="experts the router sends each token to "
                        "(ExpertLoad.balance(), MoEParameters.top_k)"),
        register_column("assignments", "int", "assignments", aggregation="none",
                        description="(token, expert) pairs of an MoE layer over the pass: its "
                        "tokens times top_k (ExpertLoad.balance())"),
        register_column("min_tokens", "int", "min tokens", aggregation="none",
                        description="fewest tokens an expert of the layer received "
                        "(ExpertLoad.balance())"),
        register_column("max_tokens", "int", "max tokens", aggregation="none",
                        description="most tokens an expert of the layer received "
                        "(ExpertLoad.balance())"),
        register_column("mean_tokens", "number", "mean tokens", aggregation="none",
                        description="the layer's assignments over its experts "
                        "(ExpertLoad.balance())"),
        register_column("max_over_mean", "ratio", "max/mean", aggregation="none",
                        description="max_tokens over mean_tokens: 1.0 for a perfectly balanced "
                        "layer (ExpertLoad.balance())"),
        register_column("cv", "number", "CV", aggregation="none",
                        description="coefficient of variation of the experts' tokens: their "
                        "standard deviation (population) over their mean (ExpertLoad.balance())"),
        register_column("unused", "int", "unused", aggregation="none",
                        description="experts of the layer that received no token "
                        "(ExpertLoad.balance())"),
    )
    """The columns of :meth:`to_df` and :meth:`balance` besides ``module`` (the experts
    module's path), declared with the listener that writes them."""

    RENAMED: ClassVar[dict[str, str]] = {"layer": "module", "experts": "num_experts",
                                         "share": "tokens_share"}
    """Old column name -> new one: ``layer`` held the experts module's path, which every
    table calls ``module``; ``experts`` the count :attr:`MoEParameters.num_experts` names;
    ``share`` read as the whole-subtree twin of ``self_share`` (a module's self time over its
    time). The old names still select their column, with a ``DeprecationWarning``, until
    0.3.0."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}
        """Experts module path -> tokens per expert, summed over its calls."""
        self.top_k: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.unknown: list[str] = []
        """Paths of expert modules whose routing could not be read (meta tensors)."""
        self._experts: dict[int, int] = {}  # id(module) -> num_experts of the expert modules

    def start(self, runner: PassRunner) -> None:
        self._experts = {id(module): count for module, count in _expert_modules(runner.root)}

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        experts = self._experts.get(id(call.module))
        if experts is None:
            return
        index = _routing(args, kwargs)
        if index is None:
            return
        self.calls[call.path] = self.calls.get(call.path, 0) + 1
        self.top_k[call.path] = int(index.shape[-1]) if index.dim() > 1 else 1
        if index.device.type == "meta":
            if call.path not in self.unknown:
                self.unknown.append(call.path)
            return
        flat = index.detach().reshape(-1).to("cpu", torch.long)
        flat = flat[(flat >= 0) & (flat < experts)]
        counts = torch.bincount(flat, minlength=experts).tolist()
        total = self.counts.setdefault(call.path, [0] * experts)
        for expert, tokens in enumerate(counts):
            total[expert] += tokens

    def to_df(self) -> pd.DataFrame:
        """One row per layer and expert: ``module`` (the experts module's path; was
        ``layer``), ``expert``, ``tokens`` (assignments received) and ``tokens_share`` (of
        the layer's assignments, 0-1; was ``share``)."""
        rows: list[dict[str, Any]] = []
        for path, counts in self.counts.items():
            total = sum(counts)
            rows.extend({"module": path, "expert": expert, "tokens": tokens,
                         "tokens_share": tokens / total if total else None}
                        for expert, tokens in enumerate(counts))
        return renamed_columns(pd.DataFrame(rows, columns=["module", "expert", "tokens",
                                                           "tokens_share"]),
                               self.RENAMED, "ExpertLoad.to_df()")

    def balance(self) -> pd.DataFrame:
        """One row per layer: ``module`` (was ``layer``), ``num_experts`` (was ``experts``),
        ``top_k``, ``assignments`` (tokens x top-k), ``min_tokens``, ``max_tokens``,
        ``mean_tokens``, ``max_over_mean`` (1.0 = perfectly balanced), ``cv`` (standard
        deviation over mean) and ``unused`` experts."""
        rows = []
        for path, counts in self.counts.items():
            values = torch.tensor(counts, dtype=torch.float64)
            mean = float(values.mean())
            rows.append({
                "module": path, "num_experts": len(counts), "top_k": self.top_k.get(path),
                "assignments": int(values.sum()), "min_tokens": min(counts),
                "max_tokens": max(counts), "mean_tokens": mean,
                "max_over_mean": max(counts) / mean if mean else None,
                "cv": float(values.std(unbiased=False)) / mean if mean else None,
                "unused": sum(1 for count in counts if count == 0)})
        return renamed_columns(pd.DataFrame(rows, columns=[
            "module", "num_experts", "top_k", "assignments", "min_tokens", "max_tokens",
            "mean_tokens", "max_over_mean", "cv", "unused"]), self.RENAMED,
            "ExpertLoad.balance()")


@dataclass(frozen=True)
class MoEParameters:
    """Parameters of a mixture-of-experts model, total and used per token."""

    total: int
    """Every parameter of the model (each tensor once)."""
    expert: int
    """Of ``total``, the routed experts' parameters."""
    layers: int
    """MoE layers (expert modules)."""
    num_experts: int
    """Experts per layer (the largest, if layers differ)."""
    top_k: int | None
    """Experts each token is routed to (``None``: unknown)."""
    active: int | None
    """Parameters one token uses: everything but the routed experts, plus ``top_k`` experts
    of each layer (``None`` when ``top_k`` is unknown)."""


def moe_parameters(model: nn.Module, top_k: int | None = None) -> MoEParameters:
    """Total and active parameters of a mixture-of-experts ``model``: ``active = total -
    expert + sum over layers of top_k x (layer's expert parameters / num_experts)``.

    ``top_k`` defaults to the model config's ``num_experts_per_tok`` (or ``moe_topk``,
    ``top_k``). Shared (always-on) experts are plain modules and count as active. Works on
    the meta device.

    Raises:
        ValueError: ``top_k`` is not a positive int.
    """
    if top_k is not None:
        check_count(top_k, "top_k", 1)
    else:
        config: Any = getattr(model, "config", None)
        text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") \
            else config
        found = (getattr(text, name, None) for name in _TOP_K_NAMES)
        top_k = next((value for value in found if isinstance(value, int) and value > 0), None)
    total = sum(parameter.numel() for parameter in model.parameters())  # each tensor once
    expert = active_experts = 0
    layers = largest = 0
    for module, count in _expert_modules(model):
        numel = sum(p.numel() for p in _expert_tensors(module))
        expert += numel
        layers += 1
        largest = max(largest, count)
        if top_k is not None:
            active_experts += numel * min(top_k, count) // count
    active = None if top_k is None else total - expert + active_experts
    return MoEParameters(total=total, expert=expert, layers=layers, num_experts=largest,
                         top_k=top_k, active=active)


# -- recognising the experts -------------------------------------------------------------------
def _expert_modules(root: nn.Module) -> Iterator[tuple[nn.Module, int]]:
    """``(module, num_experts)`` for every module holding routed experts: stacked 3-D weights
    with ``num_experts`` as first dimension, or an ``nn.ModuleList`` named ``experts``."""
    for name, module in root.named_modules():
        count = getattr(module, "num_experts", None)
        if isinstance(count, int) and count > 0 and any(
                p.dim() == 3 and p.shape[0] == count for p in module.parameters(recurse=False)):
            yield module, count
        elif isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] == "experts" \
                and len(module) > 0:
            yield module, len(module)


def _expert_tensors(module: nn.Module) -> Iterator[Tensor]:
    if isinstance(module, nn.ModuleList):
        yield from module.parameters()
    else:
        count = module.num_experts
        yield from (p for p in module.parameters(recurse=False)
                    if p.dim() >= 1 and p.shape[0] == count)


def _routing(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor | None:
    """The router's expert indices among a call's arguments: ``top_k_index`` by name, else
    the first integer tensor."""
    named = kwargs.get("top_k_index")
    if isinstance(named, Tensor):
        return named
    for value in (*args, *kwargs.values()):
        if isinstance(value, Tensor) and not value.is_floating_point() \
                and not value.is_complex() and value.dtype != torch.bool:
            return value
    return None
