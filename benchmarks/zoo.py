"""Zoo sweep: every timm model and every Hugging Face model type, profiled against the reference.

Each model is built on the meta device (the CPU only where meta cannot run it), fed a small input
and profiled with ``ModuleProfiler().profile(model, inputs)``; ``2 * total_macs`` is compared with
``torch.utils.flop_counter.FlopCounterMode`` run the way ``benchmarks/accuracy.py`` runs it (grad
enabled, math SDPA backend, oneDNN off) and ``total_params`` with ``sum(p.numel())`` (tied
weights once). Every model ends in one status:

* ``match``: FLOPs equal, parameters equal, the profile complete;
* ``close``: complete, parameters equal, FLOPs within 0.1 %;
* ``differs``: complete, but FLOPs or parameters differ; the reason says whose count is off:
  ``reference`` when the difference is exactly our count of operators FlopCounterMode has no
  formula for (it counts them as 0: ``aten._grouped_mm`` of mixture-of-experts layers, ...),
  ``ours`` otherwise;
* ``incomplete``: the profile lists operators without a formula (``Profile.unsupported_ops``)
  or modules whose work is unknown (``Profile.unsupported``);
* ``build`` / ``feed``: the model could not be built, or no input we tried ran through it (the
  reference forward failed): the error says why;
* ``error``: the reference ran but ``ModuleProfiler.profile`` raised (a moduleprofiler bug);
* ``timeout`` / ``crash``: over ``--timeout`` seconds, or the worker process died.

Timm: every ``timm.list_models()`` entry, ``pretrained=False``, batch 1 at the model's default
input size (``timm.data.resolve_data_config``). Hugging Face: every model type of
``transformers.CONFIG_MAPPING``, its config built with its defaults and shrunk (2 layers, or as
few as cover every layer type; hidden size 64 with 4 heads; experts at most 4, top-2), then, if
that config does not run, shrunk less (layers only), then not at all; ``input_ids`` of shape
(1, 16) (plus ``decoder_input_ids`` (1, 8) for encoder-decoders), ``pixel_values`` at the
config's image size, ``input_features`` / ``input_values`` for audio, time-series inputs from
the config. No network: ``HF_HUB_OFFLINE=1`` and ``TRANSFORMERS_OFFLINE=1`` are forced.

Results are appended to a JSONL file (``benchmarks/results/zoo.jsonl``, one line per model,
written as each model finishes); models already there are skipped, so an interrupted sweep
resumes where it stopped (``--fresh`` redoes the selected models). Each model runs in one of
``--jobs`` worker processes forked once with torch, timm and transformers imported, under a
``--timeout`` alarm (the worker is killed and replaced if the alarm cannot stop it).

    PYTHONPATH=. python3 benchmarks/zoo.py --jobs 14 --timeout 60 --fresh   # both zoos
    PYTHONPATH=. python3 benchmarks/zoo.py --source hf --filter 'mixtral|qwen' --fresh
    PYTHONPATH=. python3 benchmarks/zoo.py --limit 30 --jobs 2              # a sample
    python3 benchmarks/zoo.py --summary --source timm > benchmarks/results/zoo_timm.txt
    python3 benchmarks/zoo.py --summary --source hf > benchmarks/results/zoo_hf.txt
"""

from __future__ import annotations

import os

# Never touch the network; one thread per worker (workers run in parallel instead).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import contextlib
import importlib
import inspect
import io
import json
import math
import multiprocessing as mp
import re
import signal
import sys
import time
import traceback
import warnings
from collections import Counter, deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_OUT = RESULTS / "zoo.jsonl"
SOURCES = ("timm", "hf")
CLOSE = 1e-3  # "within 0.1 %"
CPU_FALLBACK_MAX_PARAMS = 200_000_000  # build on the CPU (meta cannot run it) only below this
GRACE_S = 20.0  # past --timeout, the worker is killed (the soft limit inside it failed)
STATUS_ORDER = ("match", "close", "differs", "incomplete", "build", "feed", "error", "timeout",
                "crash")


class ModelTimeout(BaseException):
    """Raised by the per-model alarm; a BaseException so models' ``except Exception`` don't
    swallow it."""


# --------------------------------------------------------------------------------------------
# Listing
# --------------------------------------------------------------------------------------------
def list_models(source: str) -> list[str]:
    if source == "timm":
        import timm

        return sorted(timm.list_models())
    from transformers import CONFIG_MAPPING

    return sorted(CONFIG_MAPPING.keys())


def select(source: str, pattern: str | None, limit: int | None) -> list[str]:
    names = list_models(source)
    if pattern:
        regex = re.compile(pattern, re.IGNORECASE)
        names = [name for name in names if regex.search(name)]
    return names[:limit] if limit else names


# --------------------------------------------------------------------------------------------
# Reference and comparison (run inside a worker)
# --------------------------------------------------------------------------------------------
def call(model: Any, inputs: Any) -> Any:
    return model(**inputs) if isinstance(inputs, dict) else model(inputs)


def _quiet() -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    return stack


def reference(model: Any, inputs: Any, *, blind: bool = False) -> tuple[int, dict[str, int],
                                                                         dict[str, int]]:
    """FlopCounterMode FLOPs of one forward on the decomposed path, as benchmarks/accuracy.py
    runs it, with its per-operator FLOPs. With ``blind``, also our operator formulas' FLOPs
    (2 x MACs) of every operator FlopCounterMode executed but has no formula for (it counts
    those as 0), by operator."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    uncounted: Counter[str] = Counter()

    class Uncounted(TorchDispatchMode):
        # Entered before (below) FlopCounterMode: it sees exactly the operators that
        # FlopCounterMode executes after its own decompositions.
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = getattr(func, "overloadpacket", None)
            if packet is not None and packet not in counter.flop_registry:
                from moduleprofiler.operators import MISSING, lookup

                formula = lookup(func)
                if formula is not None and formula is not MISSING:
                    try:
                        macs = formula(args, kwargs, out)[1]  # type: ignore[operator]
                    except Exception:
                        macs = 0
                    if macs:
                        uncounted[str(packet)] += 2 * int(macs)
            return out

    with _quiet(), contextlib.ExitStack() as stack:
        stack.enter_context(torch.enable_grad())
        stack.enter_context(sdpa_kernel(SDPBackend.MATH))
        stack.enter_context(torch.backends.mkldnn.flags(enabled=False))
        if blind:
            stack.enter_context(Uncounted())
        stack.enter_context(counter)
        call(model, inputs)
    per_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    return int(counter.get_total_flops()), per_op, dict(uncounted)


def compare(model: Any, inputs: Any, ref_flops: int) -> dict[str, Any]:
    """Profile ``model`` on ``inputs`` and classify against the reference's ``ref_flops``."""
    from moduleprofiler import ModuleProfiler

    with _quiet():
        profile = ModuleProfiler().profile(model, inputs)
    ours = profile.total_flops
    ours = int(ours) if float(ours).is_integer() else float(ours)
    params = int(profile.total_params)
    ref_params = sum(p.numel() for p in model.parameters())
    ratio = ours / ref_flops if ref_flops else (1.0 if ours == 0 else math.inf)
    row: dict[str, Any] = {
        "ref_flops": ref_flops, "our_flops": ours, "ratio": ratio,
        "params": params, "ref_params": ref_params, "params_ok": params == ref_params,
    }
    if not profile.complete:
        row["status"] = "incomplete"
        row["unsupported_ops"] = {str(op): n for op, n in profile.unsupported_ops.items()}
        row["unsupported"] = list(profile.unsupported)[:8]
        row["unsupported_types"] = list(profile.unsupported_types)
        row["reason"] = _incomplete_reason(row)
        return row
    if params != ref_params:
        row.update(status="differs", who="ours",
                   reason=f"parameters: ours {params:,} vs sum(p.numel()) {ref_params:,}")
        return row
    if ours == ref_flops:
        row["status"] = "match"
        return row
    _, per_op, blind = reference(model, inputs, blind=True)
    row["ref_per_op"] = per_op
    row["blind"] = blind
    difference = ours - ref_flops
    blind_total = sum(blind.values())
    if blind_total and difference == blind_total:
        row.update(status="differs", who="reference",
                   reason="reference counts 0 for " + ", ".join(sorted(blind)))
    elif abs(ratio - 1) <= CLOSE:
        row.update(status="close", reason=f"ours - reference = {difference:+,} FLOPs")
    else:
        row.update(status="differs", who="ours",
                   reason=f"ours - reference = {difference:+,} FLOPs"
                   + (f" ({blind_total:+,} of it in {', '.join(sorted(blind))}, which the "
                      "reference counts as 0)" if blind_total else ""))
    return row


def _incomplete_reason(row: dict[str, Any]) -> str:
    ops = row.get("unsupported_ops") or {}
    if ops:
        return "no formula: " + ", ".join(f"{op} x{n}" for op, n in sorted(ops.items()))
    types = row.get("unsupported_types") or []
    return "unknown work in modules: " + ", ".join(types[:6])


def _error(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    if len(message) > 300:
        message = message[:297] + "..."
    return f"{type(exc).__name__}: {message}"


def _meta_only(exc: BaseException) -> bool:
    """Whether the error is the meta device's (data-dependent code), so the CPU may run it."""
    from moduleprofiler.errors import error_chain

    text = " ".join(str(e) for e in error_chain(exc)).lower()
    return "meta" in text or "data-dependent" in text or "data dependent" in text


def _on_cpu(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        if value.device.type != "meta":
            return value
        if value.is_floating_point():
            return torch.randn(value.shape, dtype=value.dtype)
        return torch.zeros(value.shape, dtype=value.dtype)
    if isinstance(value, dict):
        return {key: _on_cpu(item) for key, item in value.items()}
    return value


def _to_bf16(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(torch.bfloat16) if value.is_floating_point() else value
    if isinstance(value, dict):
        return {key: _to_bf16(item) for key, item in value.items()}
    return value


class Attempt:
    """Builds a model and tries inputs until the reference runs, then compares: on the meta
    device first (in bf16 where the meta kernels want it), then on the CPU for the inputs that
    failed only because of the meta device (data-dependent code: ``.item()``, ``nonzero``)."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []  # (stage, "[setup input] error")
        self.built: set[str] = set()  # labels whose model was built

    def run(self, label: str, make_model: Callable[[], Any],
            candidates: Callable[[Any], list[Any]]) -> dict[str, Any] | None:
        import torch

        try:
            with _quiet(), torch.device("meta"):
                model = make_model()
            model.eval()
        except ModelTimeout:
            raise
        except Exception as exc:
            self.errors.append(("build", f"[{label}/meta] {_error(exc)}"))
            if not _meta_only(exc):  # the CPU would fail alike
                return None
            model = None
        retry: list[int] | None = None  # candidates for the CPU; None: all of them
        meta_error = ""
        if model is not None:
            self.built.add(label)
            if type(model).forward is torch.nn.Module.forward:
                self.errors.append(("feed", f"[{label}] {type(model).__name__} has no forward() "
                                    "(generate/encode/decode only)"))
                return None
            inputs = candidates(model)
            row, retry, bf16 = self._feed(model, inputs, f"{label}/meta")
            if row is not None:
                return row
            if bf16:
                # the meta kernel of aten._grouped_mm (mixture of experts) wants bf16, as CUDA's
                model = model.to(torch.bfloat16)
                row, retry, _ = self._feed(model, [_to_bf16(c) for c in inputs],
                                           f"{label}/meta-bf16")
                if row is not None:
                    return row
            if not retry:
                return None
            meta_error = next(m for _, m in self.errors if m.startswith(f"[{label}/meta"))
            numel = sum(p.numel() for p in model.parameters())
            if numel > CPU_FALLBACK_MAX_PARAMS:
                self.errors.append(("feed", f"[{label}/cpu] not tried: {numel:,} parameters"))
                return None
        try:
            with _quiet():
                model = make_model()
            model.eval()
        except ModelTimeout:
            raise
        except Exception as exc:
            self.errors.append(("build", f"[{label}/cpu] {_error(exc)}"))
            return None
        self.built.add(label)
        inputs = [_on_cpu(c) for c in candidates(model)]
        if retry is not None:
            inputs = [inputs[i] for i in retry if i < len(inputs)]
        row, _, _ = self._feed(model, inputs, f"{label}/cpu")
        if row is not None and meta_error:
            row["meta_error"] = meta_error
        return row

    def _feed(self, model: Any, candidates: list[Any], setup: str
              ) -> tuple[dict[str, Any] | None, list[int], bool]:
        """The first input the reference runs on, compared; else the indices of the inputs
        that failed because of the meta device, and whether one wanted bf16."""
        meta_only: list[int] = []
        for index, inputs in enumerate(candidates):
            try:
                ref_flops, _, _ = reference(model, inputs)
            except ModelTimeout:
                raise
            except Exception as exc:
                self.errors.append(("feed", f"[{setup} {describe(inputs)}] {_error(exc)}"))
                if "BFloat16" in str(exc):  # every input fails alike: the bf16 retry is next
                    return None, meta_only, True
                if _meta_only(exc):
                    meta_only.append(index)
                continue
            row: dict[str, Any] = {"setup": setup, "input": describe(inputs)}
            try:
                row.update(compare(model, inputs, ref_flops))
            except ModelTimeout:
                raise
            except Exception as exc:
                row.update(status="error", stage="ours", ref_flops=ref_flops,
                           error=_error(exc), where=_where(exc))
            return row, [], False
        return None, meta_only, False


def _where(exc: BaseException) -> str:
    """The innermost moduleprofiler frame of the traceback (where a package bug sits)."""
    from moduleprofiler.errors import error_chain

    frames = [f for e in error_chain(exc) for f in traceback.extract_tb(e.__traceback__)]
    ours = [f for f in frames if "moduleprofiler" in f.filename.replace("\\", "/")]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return ""
    return f"{Path(frame.filename).name}:{frame.lineno} {frame.name}"


def describe(inputs: Any) -> str:
    import torch

    if isinstance(inputs, torch.Tensor):
        return "x" + str(tuple(inputs.shape)).replace(" ", "")
    return "+".join(f"{key}{tuple(value.shape)}".replace(" ", "") if isinstance(
        value, torch.Tensor) else f"{key}={value}" for key, value in inputs.items())


# --------------------------------------------------------------------------------------------
# timm
# --------------------------------------------------------------------------------------------
def run_timm(name: str) -> dict[str, Any]:
    import timm
    import timm.data
    import torch

    def make() -> Any:
        return timm.create_model(name, pretrained=False)

    def candidates(model: Any) -> list[Any]:
        config = timm.data.resolve_data_config({}, model=model)
        device = next(iter(model.parameters()), torch.empty(0)).device
        return [torch.zeros((1, *config["input_size"]), device=device)]

    attempt = Attempt()
    row = attempt.run("default", make, candidates)
    return row if row is not None else _failed(attempt)


def _failed(attempt: Attempt) -> dict[str, Any]:
    stages = [stage for stage, _ in attempt.errors]
    status = "feed" if "feed" in stages else "build"
    # The first error of the final status (the most-shrunk, meta-device attempt's), passing
    # over "wrong arguments" when a fuller input got further.
    errors = [message for stage, message in attempt.errors if stage == status]
    telling = [m for m in errors if not re.search(
        r"TypeError: .*(missing \d+ required|unexpected keyword|_forward_unimplemented)", m)]
    error = (telling or errors)[0]
    return {"status": status, "error": error, "errors": [m for _, m in attempt.errors][:16]}


# --------------------------------------------------------------------------------------------
# Hugging Face
# --------------------------------------------------------------------------------------------
LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers",
              "decoder_layers", "num_encoder_layers", "num_decoder_layers", "depth")
WIDTH_KEYS = ("hidden_size", "d_model", "n_embd", "embed_dim")
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
             "decoder_attention_heads")
KV_KEYS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num")
HEAD_DIM_KEYS = ("head_dim", "d_kv", "kv_channels", "attention_head_dim")
FFN_KEYS = ("intermediate_size", "d_ff", "n_inner", "ffn_dim", "encoder_ffn_dim",
            "decoder_ffn_dim", "ffn_hidden_size")
SMALL_FFN_KEYS = ("moe_intermediate_size", "shared_expert_intermediate_size",
                  "expert_intermediate_size")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "num_selected_experts")
# Layer-pattern settings: the few layers must reach past them to cover every kind of layer.
PERIOD_KEYS = ("attn_layer_period", "expert_layer_period", "full_attention_interval",
               "sliding_window_pattern", "decoder_sparse_step", "moe_layer_freq",
               "interleave_moe_layer_step")
OFFSET_KEYS = ("attn_layer_offset", "expert_layer_offset", "first_k_dense_replace")
MAX_LAYERS = 12
REQUIRED_SETTINGS = {"prediction_length": 8}


def _configs(config: Any) -> Iterator[Any]:
    """``config`` and every sub-config inside it (text_config, vision_config, encoder, ...)."""
    from transformers import PretrainedConfig

    seen: set[int] = set()
    stack = [config]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for value in list(vars(current).values()):
            if isinstance(value, PretrainedConfig):
                stack.append(value)


def _get(config: Any, key: str) -> Any:
    """``getattr`` that never raises (some configs raise for per-layer attributes)."""
    try:
        return getattr(config, key, None)
    except Exception:
        return None


def _set(config: Any, key: str, value: Any) -> None:
    with contextlib.suppress(Exception):
        setattr(config, key, value)


def _ints(config: Any, keys: tuple[str, ...]) -> list[tuple[str, int]]:
    found = []
    for key in keys:
        value = vars(config).get(key, _get(config, key) if key in (
            _get(config, "attribute_map") or {}) else None)
        if isinstance(value, int) and not isinstance(value, bool):
            found.append((key, value))
    return found


def shrink_layers(config: Any) -> None:
    for sub in _configs(config):
        for key, count in _ints(sub, LAYER_KEYS):
            if count <= 2:
                continue
            target = 2
            # per-layer lists (layer_types, ...) must keep every kind of layer they name
            per_layer = {name: value for name, value in vars(sub).items()
                         if isinstance(value, (list, tuple)) and len(value) == count}
            if isinstance(_get(sub, "hybrid_override_pattern"), str) and len(
                    sub.hybrid_override_pattern) == count:
                per_layer["hybrid_override_pattern"] = sub.hybrid_override_pattern
            for value in per_layer.values():
                kinds = [item for item in value if isinstance(item, (str, bool))]
                if len(kinds) == len(value) and kinds:
                    distinct = set(kinds)
                    prefix = next(i + 1 for i in range(len(kinds))
                                  if set(kinds[: i + 1]) == distinct)
                    target = max(target, prefix)
            for _, period in _ints(sub, PERIOD_KEYS):
                target = max(target, period)
            for _, offset in _ints(sub, OFFSET_KEYS):
                target = max(target, offset + 1)
            for name, value in vars(sub).items():  # attn_layer_indices, full_attn_idxs, ...
                if (re.search(r"(attn|attention).*(indices|idxs|idx|layers)$", name)
                        and isinstance(value, (list, tuple)) and value
                        and all(isinstance(v, int) and 0 <= v < count for v in value)):
                    target = max(target, min(value) + 1)
            target = min(count, max(2, min(target, MAX_LAYERS)))
            if target == count:
                continue
            _set(sub, key, target)
            for name, value in per_layer.items():
                _set(sub, name, type(value)(value[:target]) if not isinstance(value, str)
                     else value[:target])


MAMBA_KEYS = (("mamba_n_heads", "mamba_d_head", "mamba_expand", "mamba_n_groups"),
              ("mamba_num_heads", "mamba_head_dim", "mamba_expand", "mamba_n_groups"),
              ("num_heads", "head_dim", "expand", "n_groups"))


def _mamba_shape(config: Any, width: int) -> tuple[str, str, int, str | None] | None:
    """The (heads, head size, expand, groups) keys of a state-space mixer whose heads x head
    size equals expand x width, with the expand factor."""
    for heads_key, dim_key, expand_key, groups_key in MAMBA_KEYS:
        values = [_get(config, key) for key in (heads_key, dim_key, expand_key)]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            heads, dim, expand = values
            if heads * dim == expand * width:
                return heads_key, dim_key, expand, (groups_key if isinstance(
                    _get(config, groups_key), int) else None)
    return None


def shrink_width(config: Any) -> None:
    for sub in _configs(config):
        widths = _ints(sub, WIDTH_KEYS)
        heads = _ints(sub, HEAD_KEYS)
        if widths and heads and max(w for _, w in widths) > 64:
            width, head_count = max(w for _, w in widths), max(h for _, h in heads)
            mamba = _mamba_shape(sub, width)
            for key, value in _ints(sub, HEAD_DIM_KEYS):
                if value * head_count == width:  # derived from the width: keep it so
                    _set(sub, key, 64 // min(head_count, 4))
            for key, _ in widths:
                _set(sub, key, 64)
            for key, value in heads:
                if value > 4:
                    _set(sub, key, 4)
            for key, value in _ints(sub, KV_KEYS):  # as many as the heads, or 2 (or 1)
                _set(sub, key, min(head_count, 4) if value == head_count else min(value, 2))
            for key, value in _ints(sub, FFN_KEYS):
                if value > 128:
                    _set(sub, key, 128)
            for key, value in _ints(sub, SMALL_FFN_KEYS):
                if value > 64:
                    _set(sub, key, 64)
            if mamba is not None:  # state-space heads x head size = expand x width, again
                heads_key, dim_key, expand, groups_key = mamba
                dim = _get(sub, dim_key)
                _set(sub, heads_key, max(1, expand * 64 // dim))
                if groups_key:
                    _set(sub, groups_key, 1)
        for key, value in _ints(sub, EXPERT_KEYS):
            if value > 4:
                _set(sub, key, 4)
        for key, value in _ints(sub, TOPK_KEYS):
            if value > 2:
                _set(sub, key, 2)


def hf_config(model_type: str, level: str) -> Any:
    from transformers import CONFIG_MAPPING

    config_cls = CONFIG_MAPPING[model_type]
    try:
        config = config_cls()
    except Exception:
        config = None
    if config is None or any(key in vars(config) and vars(config)[key] is None
                             for key in REQUIRED_SETTINGS):
        # settings some configs require (time-series models: the forecast horizon)
        config = config_cls(**REQUIRED_SETTINGS)
    for sub in _configs(config):
        if _get(sub, "use_pretrained_backbone"):
            _set(sub, "use_pretrained_backbone", False)
        if _ints(sub, EXPERT_KEYS):  # experts but no top-k by default (DeepSeek-V2)
            for key in TOPK_KEYS:
                if key in vars(sub) and vars(sub)[key] is None:
                    _set(sub, key, 2)
    if level in ("small", "layers"):
        shrink_layers(config)
    if level == "small":
        shrink_width(config)
    return config


_MAPPING_ORDER = ("MODEL_MAPPING_NAMES", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
                  "MODEL_FOR_PRETRAINING_MAPPING_NAMES", "MODEL_FOR_IMAGE_MAPPING_NAMES",
                  "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
                  "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
                  "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
                  "MODEL_FOR_BACKBONE_MAPPING_NAMES")


def hf_model_class(model_type: str, config: Any) -> Any:
    """AutoModel's class for the type, else the first auto mapping that has it, else the
    modeling module's model class whose ``config_class`` is the config's class."""
    import transformers
    import transformers.models.auto.modeling_auto as auto

    mappings = list(_MAPPING_ORDER) + sorted(
        name for name in dir(auto) if name.endswith("_MAPPING_NAMES")
        and name not in _MAPPING_ORDER and name != "CONFIG_MAPPING_NAMES")
    for mapping in mappings:
        names = getattr(auto, mapping, {}).get(model_type)
        for name in ([names] if isinstance(names, str) else list(names or [])):
            cls = getattr(transformers, name, None)
            if cls is not None:
                return cls
    config_cls = type(config)
    base = config_cls.__name__.removesuffix("Config")
    cls = getattr(transformers, base + "Model", None)
    if cls is not None:
        return cls
    module = importlib.import_module(config_cls.__module__.replace(".configuration_",
                                                                   ".modeling_"))
    options = [obj for obj in vars(module).values()
               if inspect.isclass(obj) and issubclass(obj, transformers.PreTrainedModel)
               and getattr(obj, "config_class", None) is config_cls
               and not obj.__name__.endswith("PreTrainedModel")]
    if not options:
        raise LookupError(f"no model class for {config_cls.__name__}")
    return min(options, key=lambda c: (not c.__name__.endswith("Model"), len(c.__name__)))


def _special_ids(config: Any) -> set[int]:
    ids: set[int] = set()
    for sub in _configs(config):
        for key, value in vars(sub).items():
            if key.endswith(("_token_id", "_token_index", "_token_ids", "_id")):
                values = value if isinstance(value, (list, tuple)) else [value]
                ids.update(v for v in values if isinstance(v, int))
    return ids


def _first(config: Any, keys: tuple[str, ...], default: Any = None) -> Any:
    for sub in _configs(config):
        for key in keys:
            value = _get(sub, key)
            if value is not None and not isinstance(value, bool):
                return value
    return default


def _size(value: Any, default: int) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) >= 2:
        return int(value[-2]), int(value[-1])
    if isinstance(value, dict):
        height = value.get("height") or value.get("shortest_edge")
        width = value.get("width") or value.get("shortest_edge")
        if height and width:
            return int(height), int(width)
    return default, default


MODALITIES = ("input_ids", "pixel_values", "pixel_values_videos", "input_features",
              "input_values", "bbox")


def hf_candidates(model: Any, model_type: str) -> list[dict[str, Any]]:
    """Input dicts to try, most likely first: the main input alone, then with the required
    arguments filled, then with every modality the forward takes (dual models: CLIP, CLAP),
    then with an attention mask or without the cache; ``decoder_input_ids`` first for
    encoder-decoders."""
    import torch

    config = model.config
    device = next(iter(model.parameters()), torch.empty(0)).device
    try:
        signature = dict(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        signature = {}
    params = set(signature)
    required = [name for name, p in signature.items() if p.default is p.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    main = getattr(model, "main_input_name", "input_ids") or "input_ids"
    if isinstance(main, (list, tuple)):  # OneFormer names two: the first is the tensor input
        main = main[0]
    vocab = _first(config, ("vocab_size",), 100)
    vocab = vocab if isinstance(vocab, int) and vocab > 0 else 100
    specials = _special_ids(config)
    pool = [i for i in range(min(vocab, 4096)) if i not in specials and i >= min(4, vocab - 1)]
    pool = pool or list(range(vocab))
    hidden = _first(config, WIDTH_KEYS, 64)
    hidden = hidden if isinstance(hidden, int) else 64

    def ids(length: int) -> torch.Tensor:
        values = [pool[i % len(pool)] for i in range(length)]
        return torch.tensor([values], dtype=torch.long, device=device)

    channels = _first(config, ("num_channels", "in_channels", "in_chans"), 3)
    channels = channels if isinstance(channels, int) else 3
    height, width = _size(_first(config, ("image_size", "img_size", "input_size"), 224), 224)
    frames = _first(config, ("num_frames", "frames_per_clip"), None)
    frames = frames if isinstance(frames, int) else None
    mels = _first(config, ("num_mel_bins", "feature_size", "input_feat_per_channel", "n_mels",
                           "num_mel_filters"), 80)
    mels = mels if isinstance(mels, int) else 80
    positions = _first(config, ("max_source_positions",), None)
    lengths = [2 * positions] if isinstance(positions, int) else []
    lengths += [length for length in (64, 3000) if length not in lengths]
    max_length = _first(config, ("max_length",), 1024)
    max_length = max_length if isinstance(max_length, int) else 1024

    def zeros(*shape: int, dtype: Any = None) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype, device=device)

    def options(name: str) -> list[torch.Tensor]:
        if name == "input_ids":
            return [ids(16)]
        if name == "decoder_input_ids":
            return [ids(8)]
        if name in ("pixel_values", "image", "images"):
            return [zeros(1, channels, height, width)] + (
                [zeros(1, frames, channels, height, width)] if frames else [])
        if name == "pixel_values_videos":
            return [zeros(1, frames or 8, channels, height, width)]
        if name == "input_features":
            return [t for n in lengths for t in (zeros(1, mels, n), zeros(1, n, mels))]
        if name == "input_values":
            return [zeros(1, 16000), zeros(1, 1, 16000), zeros(1, max_length, mels)]
        if name == "bbox":
            return [zeros(1, 16, 4, dtype=torch.long)]
        if name.endswith("_embeds") or name in ("hidden_states", "encoder_hidden_states"):
            return [zeros(1, 16, hidden)]
        return []

    if main == "past_values" or "past_values" in params:
        mains = _time_series(config, params, device)
    else:
        key = main if options(main) else "input_ids"
        mains = [{key: tensor} for tensor in options(key)]
    candidates: list[dict[str, Any]] = list(mains)
    for base in mains[:1]:
        fill = {name: options(name)[0] for name in required
                if name not in base and options(name)}
        if fill:
            candidates.append({**base, **fill})
        both = {name: options(name)[0] for name in MODALITIES
                if name in params and name not in base and options(name)}
        if both:
            candidates.append({**base, **fill, **both})
    masks = [key for key in ("input_features_mask", "feature_attention_mask") if key in params]
    if masks:  # audio encoders that want the frames' mask
        candidates = [variant for c in candidates for variant in (
            [c, {**c, masks[0]: torch.ones(1, max(c["input_features"].shape[1:]),
                                           dtype=torch.long, device=device)}]
            if "input_features" in c else [c])]
    texts = [c for c in candidates if "input_ids" in c]
    candidates += [{**c, "input_ids": ids(64)} for c in texts[:1]]
    if "attention_mask" in params:
        candidates += [{**c, "attention_mask": torch.ones_like(c["input_ids"])} for c in texts]
    if "use_cache" in params:
        # (without a cache nor a mask, HF looks for packed sequences in the positions: data-
        # dependent, which the meta device cannot run; so the cache stays on unless this)
        candidates += [{**c, "use_cache": False} for c in texts]
    if _get(config, "is_encoder_decoder") and "decoder_input_ids" in params:
        candidates = [{**c, "decoder_input_ids": ids(8)} for c in candidates] + candidates
    unique: dict[str, dict[str, Any]] = {}
    for c in candidates:
        unique.setdefault(describe(c), c)
    return list(unique.values())


def _time_series(config: Any, params: set[str], device: Any) -> list[dict[str, Any]]:
    import torch

    context = _first(config, ("context_length",), 32)
    lags = _first(config, ("lags_sequence",), [0])
    history = context + (max(lags) if isinstance(lags, (list, tuple)) and lags else 0)
    channels = _first(config, ("input_size", "num_input_channels"), 1)
    features = _first(config, ("num_time_features",), 0)
    prediction = _first(config, ("prediction_length",), 8)

    out: list[dict[str, Any]] = []
    for squeeze in ((True, False) if channels == 1 else (False,)):
        def series(length: int, squeeze: bool = squeeze) -> torch.Tensor:
            shape = (1, length) if squeeze else (1, length, channels)
            return torch.zeros(shape, device=device)

        base: dict[str, Any] = {"past_values": series(history)}
        if "past_time_features" in params:
            base["past_time_features"] = torch.zeros(1, history, features, device=device)
        if "past_observed_mask" in params:
            base["past_observed_mask"] = torch.ones_like(base["past_values"])
        full = dict(base)
        if "future_values" in params:
            full["future_values"] = series(prediction)
        if "future_time_features" in params:
            full["future_time_features"] = torch.zeros(1, prediction, features,
                                                       device=device)
        out += [full, base, {"past_values": series(context)}]
    return out


def run_hf(model_type: str) -> dict[str, Any]:
    attempt = Attempt()
    for level in ("small", "layers", "default"):
        if level == "default" and "layers" in attempt.built:
            break  # built with fewer layers but no input ran: more layers will not help
        try:
            config = hf_config(model_type, level)
            cls = hf_model_class(model_type, config)
        except ModelTimeout:
            raise
        except Exception as exc:
            attempt.errors.append(("build", f"[{level}] {_error(exc)}"))
            continue

        def make(cls: Any = cls, level: str = level) -> Any:
            # a fresh config each time: building may write into it
            return cls._from_config(hf_config(model_type, level))

        row = attempt.run(level, make, lambda model: hf_candidates(model, model_type))
        if row is not None:
            row["class"] = cls.__name__
            return row
    return _failed(attempt)


# --------------------------------------------------------------------------------------------
# Worker processes
# --------------------------------------------------------------------------------------------
def _alarm(signum: int, frame: Any) -> None:
    raise ModelTimeout()


def run_model(source: str, name: str, timeout: float) -> dict[str, Any]:
    start = time.perf_counter()
    sink = io.StringIO()
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            row = run_timm(name) if source == "timm" else run_hf(name)
    except ModelTimeout:
        row = {"status": "timeout", "error": f"over {timeout:g} s"}
    except Exception as exc:  # a bug of this script: keep going
        row = {"status": "crash", "error": _error(exc), "where": _where(exc)}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return {"source": source, "model": name, **row,
            "seconds": round(time.perf_counter() - start, 2), "env": environment()}


def environment() -> str:
    import torch

    versions = [f"torch {torch.__version__}"]
    for package in ("timm", "transformers"):
        with contextlib.suppress(ImportError):
            versions.append(f"{package} {importlib.import_module(package).__version__}")
    return ", ".join(versions)


def worker(conn: Any) -> None:
    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    with contextlib.suppress(Exception):
        import transformers

        transformers.logging.set_verbosity_error()
    while True:
        task = conn.recv()
        if task is None:
            return
        source, name, timeout = task
        conn.send(run_model(source, name, timeout))


def _preload() -> None:
    """Import what every model needs once, before the workers fork."""
    import torch  # noqa: F401
    from torch.utils import flop_counter  # noqa: F401

    import moduleprofiler  # noqa: F401

    with contextlib.suppress(ImportError):
        import timm
        import timm.data  # noqa: F401
    with contextlib.suppress(ImportError):
        import transformers

        transformers.PreTrainedModel  # noqa: B018  (loads modeling_utils)
        transformers.logging.set_verbosity_error()


class Worker:
    def __init__(self, context: Any) -> None:
        self.context = context
        self.start()

    def start(self) -> None:
        self.conn, child = self.context.Pipe()
        self.process = self.context.Process(target=worker, args=(child,), daemon=True)
        self.process.start()
        child.close()

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.process.kill()
        self.process.join(5)
        self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.send(None)
        self.process.join(5)
        if self.process.is_alive():
            self.kill()


def sweep(tasks: list[tuple[str, str]], jobs: int, timeout: float,
          done: Callable[[dict[str, Any]], None]) -> None:
    _preload()
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    context = mp.get_context(method)
    pending = deque(tasks)
    workers = [Worker(context) for _ in range(max(1, min(jobs, len(tasks))))]
    running: dict[Worker, tuple[tuple[str, str], float]] = {}
    try:
        while pending or running:
            for w in workers:
                if w not in running and pending:
                    task = pending.popleft()
                    w.conn.send((*task, timeout))
                    running[w] = (task, time.monotonic())
            by_conn = {w.conn: w for w in running}
            for conn in wait_for(list(by_conn), timeout=1.0):
                w = by_conn[conn]  # type: ignore[index]
                (source, name), started = running.pop(w)
                try:
                    row = conn.recv()  # type: ignore[union-attr]
                except (EOFError, OSError):
                    code = w.process.exitcode
                    w.kill()
                    w.start()
                    row = {"source": source, "model": name, "status": "crash",
                           "error": f"worker died (exit code {code})",
                           "seconds": round(time.monotonic() - started, 2)}
                done(row)
            now = time.monotonic()
            for w, ((source, name), started) in list(running.items()):
                if now - started > timeout + GRACE_S:
                    running.pop(w)
                    w.kill()
                    w.start()
                    done({"source": source, "model": name, "status": "timeout",
                          "error": f"over {timeout:g} s (killed)",
                          "seconds": round(now - started, 2)})
    finally:
        for w in workers:
            if w in running:
                w.kill()
            else:
                w.stop()


# --------------------------------------------------------------------------------------------
# Results: JSONL, table, summary
# --------------------------------------------------------------------------------------------
def load(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError, KeyError):
                row = json.loads(line)
                rows[(row["source"], row["model"])] = row
    return rows


def rewrite(path: Path, rows: dict[tuple[str, str], dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows.values()))
    tmp.replace(path)


def note(row: dict[str, Any]) -> str:
    status = row["status"]
    if status == "match":
        return ""
    if status in ("differs", "close", "incomplete"):
        prefix = f"[{row['who']}] " if row.get("who") else ""
        text = prefix + row.get("reason", "")
        if status == "incomplete" and row.get("ratio") not in (None, 1.0):
            text += f" (ours/reference {row['ratio']:.4f} so far)"
        return text
    where = f" @ {row['where']}" if row.get("where") else ""
    return (row.get("error") or "") + where


def _flops(value: Any) -> str:
    return f"{value:,}" if isinstance(value, (int, float)) else "-"


def table(rows: list[dict[str, Any]]) -> str:
    width = min(80, max([len(row.get("input", "")) for row in rows] + [5]))
    lines = [f"{'source':<6} {'model':<52} {'status':<10} {'reference FLOPs':>22} "
             f"{'ours/ref':>8} {'params':>6} {'setup':<16} {'input':<{width}} note"]
    order = {status: i for i, status in enumerate(STATUS_ORDER)}
    for row in sorted(rows, key=lambda r: (r["source"], order.get(r["status"], 99),
                                           r["model"])):
        ratio = row.get("ratio")
        params = ("" if "params_ok" not in row else "exact" if row["params_ok"] else "WRONG")
        lines.append(
            f"{row['source']:<6} {row['model']:<52} {row['status']:<10} "
            f"{_flops(row.get('ref_flops')):>22} "
            f"{(f'{ratio:.4f}' if isinstance(ratio, (int, float)) else '-'):>8} "
            f"{params:>6} {row.get('setup', ''):<16} {row.get('input', '')[:width]:<{width}} "
            f"{note(row)}".rstrip())
    return "\n".join(lines)


def summary(source: str, rows: list[dict[str, Any]], total: int | None) -> list[str]:
    counts = Counter(row["status"] for row in rows)
    who = Counter(row.get("who") for row in rows if row["status"] == "differs")
    swept = f"{len(rows)}/{total}" if total is not None else f"{len(rows)}"
    line = (f"{source}: {swept} swept: {counts['match']} matched, {counts['close']} within "
            f"0.1 %, {counts['differs']} differ ({who['reference']} reference blind spot, "
            f"{who['ours']} ours), {counts['incomplete']} incomplete, "
            f"{counts['build'] + counts['feed']} could not build or feed "
            f"({counts['build']} build, {counts['feed']} feed), {counts['error']} "
            f"moduleprofiler errors, {counts['timeout']} timed out, {counts['crash']} crashed")
    lines = [line]
    blind: Counter[str] = Counter()
    for row in rows:
        if row.get("who") == "reference":
            blind.update(row.get("blind", {}).keys())
    if blind:
        lines.append("  reference blind spots (models): "
                     + ", ".join(f"{op} x{n}" for op, n in blind.most_common()))
    missing: Counter[str] = Counter()
    for row in rows:
        if row["status"] == "incomplete":
            missing.update((row.get("unsupported_ops") or {}).keys())
            if not row.get("unsupported_ops"):
                missing.update(f"module {t}" for t in row.get("unsupported_types", []))
    if missing:
        lines.append("  incomplete for (models): "
                     + ", ".join(f"{op} x{n}" for op, n in missing.most_common()))
    why: Counter[str] = Counter()
    for row in rows:
        if row["status"] in ("build", "feed", "error", "crash"):
            error = row.get("error") or ""
            error = re.sub(r"^\[[^\]]*\]\s*", "", error)
            error = re.sub(r"^\w+ has no forward\(\).*", "no forward()", error)
            why[f"{row['status']}: {error.split(':')[0]}"] += 1
    if why:
        lines.append("  failures by kind: "
                     + ", ".join(f"{kind} x{n}" for kind, n in why.most_common(12)))
    return lines


def report(rows: dict[tuple[str, str], dict[str, Any]], sources: tuple[str, ...],
           pattern: str | None, problems: bool) -> str:
    regex = re.compile(pattern, re.IGNORECASE) if pattern else None
    selected = [row for (source, name), row in rows.items() if source in sources
                and (regex is None or regex.search(name))]
    shown = [row for row in selected if not problems or row["status"] != "match"]
    envs = Counter(row.get("env", "?") for row in selected)
    out = [f"# {len(selected)} models, run with " + "; ".join(
        f"{env} ({n})" if len(envs) > 1 else env for env, n in envs.most_common()), "",
        table(shown), ""]
    everything: list[dict[str, Any]] = []
    for source in sources:
        part = [row for row in selected if row["source"] == source]
        if not part:
            continue
        total = None
        if regex is None:
            with contextlib.suppress(Exception):
                total = len(list_models(source))
        out += summary(source, part, total)
        everything += part
    if len(sources) > 1 and everything:
        out.append(summary("all", everything, None)[0])
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=("timm", "hf", "all"), default="all")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes in parallel")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per model")
    parser.add_argument("--limit", type=int, help="the first K models of each source")
    parser.add_argument("--filter", dest="pattern", metavar="PATTERN",
                        help="regular expression searched in the model name")
    parser.add_argument("--fresh", action="store_true",
                        help="redo the selected models (drop their earlier results)")
    parser.add_argument("--summary", action="store_true",
                        help="only read the results and print the table and summary")
    parser.add_argument("--problems", action="store_true",
                        help="table rows for every status but match only")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSONL results file")
    args = parser.parse_args()
    sources = SOURCES if args.source == "all" else (args.source,)
    rows = load(args.out)
    if args.summary:
        print(report(rows, sources, args.pattern, args.problems))
        return

    tasks = [(source, name) for source in sources
             for name in select(source, args.pattern, args.limit)]
    if args.fresh:
        for task in tasks:
            rows.pop(task, None)
        rewrite(args.out, rows)
    todo = [task for task in tasks if task not in rows]
    print(f"{len(tasks)} selected, {len(tasks) - len(todo)} already in {args.out}, "
          f"{len(todo)} to run with {args.jobs} job(s), {args.timeout:g} s each", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with args.out.open("a") as sink:
        finished = 0

        def done(row: dict[str, Any]) -> None:
            nonlocal finished
            finished += 1
            rows[(row["source"], row["model"])] = row
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            print(f"[{finished:>5}/{len(todo)}] {row['source']:<4} {row['model']:<52} "
                  f"{row['status']:<10} {row.get('seconds', 0):6.1f}s  {note(row)[:120]}",
                  flush=True)

        if todo:
            sweep(todo, args.jobs, args.timeout, done)
    print(f"\nran {len(todo)} models in {time.monotonic() - start:.0f} s\n")
    selected = {task: rows[task] for task in tasks if task in rows}
    print(report(selected, sources, args.pattern, args.problems))


if __name__ == "__main__":
    sys.exit(main())
