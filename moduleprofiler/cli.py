"""``moduleprofiler`` / ``python -m moduleprofiler``: profile a model from the command line.

The model is a factory called with no arguments: ``package.module:factory`` or
``path/to/file.py:factory`` (``weights=None`` is passed when the factory takes ``weights``,
so nothing downloads); a saved ``profile.json`` is accepted too. Every error exits with
status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import importlib.util
import inspect
import json
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn

from moduleprofiler._version import __version__
from moduleprofiler.codepaths import CodePathWarning
from moduleprofiler.export.columns import column_spec
from moduleprofiler.export.figures import FIGURE_SUFFIXES
from moduleprofiler.export.fit import MIN_WIDTH, terminal_width
from moduleprofiler.export.format_table import (
    format_name,
    get_format,
    infer_format,
    known_formats,
    render_view,
    split_options,
)
from moduleprofiler.export.formats import export_profile, profile_renderer
from moduleprofiler.export.frame import module_frame
from moduleprofiler.export.profile import Profile
from moduleprofiler.export.select import WHAT_GROUPS, columns_for
from moduleprofiler.export.units import human_bytes
from moduleprofiler.language.cache import config_dtype, predict_kv_cache_bytes
from moduleprofiler.language.generation import GenerationProfile, profile_generation
from moduleprofiler.language.models import HF_PREFIX, hf_config, hf_model, text_inputs
from moduleprofiler.language.steps_text import render_steps
from moduleprofiler.memory import MemoryReport
from moduleprofiler.operator_listener import OperatorListener
from moduleprofiler.prediction.predict import DEFAULT_HOST
from moduleprofiler.profiler import ModuleProfiler
from moduleprofiler.timing import TimingWarning

EXAMPLES = """\
examples:
  moduleprofiler torchvision.models:resnet18 -i 1x3x224x224
  moduleprofiler torchvision.models:resnet18 -i 1x3x224x224 --depth 1 --what params,io,ops
  moduleprofiler torchvision.models:vit_b_16 -i 1x3x224x224 --meta --top 5 --depth 2
  moduleprofiler torchvision.models:resnet18 -i 1x3x224x224 --sort ops --min-pct 2
  moduleprofiler path/to/model.py:build -i 8x128:int64 --arg vocab=1000
  moduleprofiler hf:llama -i 1x2048 --arg num_hidden_layers=2 --depth 2
  moduleprofiler hf:path/to/config.json -i 4x512 --device cpu --what ops,time
  moduleprofiler hf:gpt2 -i 1x16 --arg n_layer=2 --device cpu --generate 8
  moduleprofiler torchvision.models:resnet18 -i 1x3x224x224 -o report.html
  moduleprofiler torchvision.models:resnet18 -i 1x3x224x224 -o resnet18.json
  moduleprofiler resnet18.json --depth 1 -o table.tex --caption "ResNet-18"
  moduleprofiler torchvision.models:resnet18 -i 1x3x224x224 --what flops -o flops.png

formats (--format, or from the suffix of -o): text, csv, json, markdown (.md), html, latex (.tex)
figures (-o with .png, .svg or .pdf; the plot extra): the shown metric (--sort, else the first of
  --what's ops, flops, params, time, memory, else ops) by top-level module (--depth: by module
  at that depth; --top K: the K module types)
columns (--what): params, io (input/output shapes), ops (macs, ops, % of ops), flops,
  backward (runs a backward pass), bytes (parameter, buffer and output bytes), time, memory,
  or any column name (e.g. backward_flops, ops_pct, output_bytes)
"""

WHAT_SORTED = "params,io,ops"
"""The columns after the sort column of ``--sort`` without ``--what``."""


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (its ``--help`` ends with examples)."""
    parser = _Parser(
        prog="moduleprofiler",
        description="Profile a PyTorch model module by module: parameters, shapes, ops.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", help="package.module:factory, path/to/file.py:factory, "
                                      "hf:MODEL_TYPE or hf:path/to/config.json (a Transformers "
                                      "model, -i BATCHxTOKENS, --arg config overrides; --arg "
                                      "task=causal-lm|seq2seq-lm|base picks the head, default: "
                                      "the base model of an encoder-only type such as bert, "
                                      "else the first head the type has), "
                                      "or a profile saved as .json")
    parser.add_argument("-i", "--input-size", action="append", default=[], metavar="SHAPE",
                        help="input shape such as 1x3x224x224, optionally :DTYPE "
                             "(8x128:int64); repeat for several inputs")
    parser.add_argument("--dtype",
                        help="dtype of the model and of inputs without one (default float32; "
                             "for --kv-cache, the configuration's, else float32)")
    parser.add_argument("--device", help="device such as cpu (default) or cuda:0; an hf: "
                                         "model is built on meta unless a device is named")
    parser.add_argument("--meta", action="store_true",
                        help="build the model and inputs on the meta device (no memory, "
                             "no real compute)")
    parser.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                        help="keyword argument for the factory (a Python literal or a string)")
    parser.add_argument("--what",
                        help="column groups or column names, comma-separated (default: the "
                             "columns of Python's profile.tree(): params, output shape, ops; "
                             "shapes left out first to fit); backward runs a backward pass, time "
                             "per-module timing, memory a training-step memory pass")
    parser.add_argument("--generate", type=int, metavar="N",
                        help="profile generate() step by step for N new tokens (a Transformers "
                             "model on a real --device): one row per prefill/decode step; "
                             "--what time and memory add each step's time and live memory "
                             "(the module options --depth, --sort, --top, --min-pct, "
                             "--include, --exclude do not apply)")
    parser.add_argument("--iters", type=int, default=None,
                        help="timed iterations for --what time, a tenth dropped (default: "
                             "adaptive, as in Python: rounds until the median's 95%% CI is "
                             "within 1%%, at most 5 s)")
    parser.add_argument("--kv-cache", type=int, metavar="TOKENS",
                        help="an hf: model's predicted key/value cache: bytes per token and for "
                             "a context of TOKENS tokens (one sequence), in the configuration's "
                             "dtype or --dtype; nothing is built or run")
    parser.add_argument("--predict", metavar="GPU",
                        help="predict per-module latency for this GPU instead of measuring "
                             "(\"H100 SXM\"; a calibration .json; runs on the meta device)")
    parser.add_argument("--host", choices=("none", "calibrated", "this"), default=DEFAULT_HOST,
                        help="with --predict: the host issuing the launches (default, as in "
                             "Python: calibrated; none: the device's time alone, a lower "
                             "bound, not a latency)")
    parser.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=None,
                        help="with --predict: fp32 matmuls and convolutions on TF32 tensor "
                             "cores, or (--no-tf32) at the plain FP32 peak (default: torch's "
                             "settings: plain FP32 matmuls, TF32 convolutions); the notes say "
                             "which")
    parser.add_argument("-f", "--format", help="output format (default: from -o, else text)")
    parser.add_argument("-o", "--output", help="write to this file instead of stdout (.png, "
                                               ".svg, .pdf: a figure of the shown metric)")
    parser.add_argument("--depth", type=int, help="deepest module level shown (root = 0); "
                                                  "with --top, the level aggregated")
    parser.add_argument("--sort", metavar="COLUMN",
                        help="flat table sorted by COLUMN (e.g. ops, inclusive_ops, params); "
                             "with --top, the quantity ranked (ops, macs, params)")
    parser.add_argument("--top", type=int, metavar="K", help="the K module types with most ops")
    parser.add_argument("--by-operator", nargs="?", const="", metavar="MODULE",
                        help="one row per aten operator (calls, ops, MACs, FLOPs, bytes) of "
                             "the whole model, or of the calls inside MODULE")
    parser.add_argument("--min-pct", type=float, metavar="P",
                        help="only modules with at least P%% of the ops")
    parser.add_argument("--include", action="append", metavar="PATTERN",
                        help="only modules whose path or type matches the glob PATTERN")
    parser.add_argument("--exclude", action="append", metavar="PATTERN",
                        help="hide modules whose path or type matches the glob PATTERN")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour the terminal table (auto: a tty without NO_COLOR)")
    parser.add_argument("--width", type=int, metavar="N",
                        help="fit text to N columns (default: the terminal's, COLUMNS, else 80; "
                             "0: no limit): shapes shortened, columns hidden (named in a note), "
                             "names elided in the middle")
    parser.add_argument("--unicode", action="store_true", help="draw the tree with box lines")
    parser.add_argument("--no-fold", action="store_true",
                        help="show every block of the tree (default: identical numbered "
                             "sibling blocks such as h.0 ... h.11 fold into one row, summed)")
    parser.add_argument("--title", help="title of the HTML report or the figure")
    parser.add_argument("--caption", help="LaTeX table caption")
    parser.add_argument("--label", help="LaTeX table label")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


_MODULE_VIEW_FLAGS = ("--top", "--sort", "--depth", "--min-pct", "--include", "--exclude")
"""Options that shape the module views (a table of operators or of steps has no use for them)."""


def _given(options: argparse.Namespace, *flags: str) -> list[str]:
    """The ``flags`` set on the command line (``--min-pct`` is ``options.min_pct``)."""
    return [flag for flag in flags
            if getattr(options, flag.removeprefix("--").replace("-", "_")) is not None]


def check_options(options: argparse.Namespace) -> None:
    """Refuse option values that cannot mean anything (``--depth -1``, ``--top 0``)."""
    limits = (("--depth", options.depth, 0), ("--top", options.top, 1),
              ("--iters", options.iters, 2), ("--generate", options.generate, 1),
              ("--kv-cache", options.kv_cache, 1))
    for flag, value, least in limits:
        if value is not None and value < least:
            raise CliError(f"{flag} must be at least {least}, got {value}")
    if options.min_pct is not None and not 0 <= options.min_pct <= 100:
        raise CliError(f"--min-pct must be a percentage from 0 to 100, got {options.min_pct:g}")
    if options.width is not None and (options.width < 0 or 0 < options.width < MIN_WIDTH):
        raise CliError(f"--width must be 0 (no limit) or at least {MIN_WIDTH}, "
                       f"got {options.width}")
    if options.by_operator is not None:
        given = _given(options, *_MODULE_VIEW_FLAGS, "--what", "--generate", "--kv-cache")
        given += ["-o FIGURE"] if _is_figure(options) else []
        if given:
            raise CliError(f"--by-operator shows one table of operators: {', '.join(given)} "
                           "cannot apply to it")


# -- the model --------------------------------------------------------------------------------
def load_factory(spec: str) -> Callable[..., Any]:
    """The callable named by ``package.module:attr`` or ``path/to/file.py:attr``."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise CliError(f"model {spec!r} must look like package.module:factory or "
                       "path/to/file.py:factory")
    if target.endswith(".py") or "/" in target or os.sep in target:
        module = _import_file(Path(target))
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise CliError(f"cannot import {target!r}: {exc}") from exc
        except Exception as exc:
            raise CliError(f"importing {target!r} raised {type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CliError(f"{target!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise CliError(f"{spec!r} is not callable")
    return obj  # type: ignore[no-any-return]


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise CliError(f"no such file: {path}")
    name = f"_moduleprofiler_model_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise CliError(f"importing {path} raised {type(exc).__name__}: {exc}") from exc
    return module


def factory_kwargs(args: Sequence[str]) -> dict[str, Any]:
    """``["depth=3", "name=tiny"]`` -> ``{"depth": 3, "name": "tiny"}``."""
    out: dict[str, Any] = {}
    for item in args:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise CliError(f"--arg {item!r} must look like KEY=VALUE")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def build_model(spec: str, kwargs: dict[str, Any], meta: bool) -> Any:
    """Call the factory (``weights=None`` added when it takes ``weights``)."""
    if spec.startswith(HF_PREFIX):  # a Transformers model from its configuration, no download
        try:
            return hf_model(spec, device="meta" if meta else "cpu", **kwargs)
        except (ValueError, TypeError, OSError, ImportError) as exc:
            raise CliError(f"{spec}: {exc}") from exc
    factory = load_factory(spec)
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        parameters = {}  # type: ignore[assignment]
    if "weights" in parameters and "weights" not in kwargs:
        kwargs = {**kwargs, "weights": None}
    try:
        if meta:
            with torch.device("meta"):
                model = factory(**kwargs)
        else:
            model = factory(**kwargs)
    except Exception as exc:
        raise CliError(f"{spec}() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise CliError(f"{spec}() returned {type(model).__name__}, not a torch.nn.Module")
    return model


def parse_dtype(name: str) -> Any:
    """``"float16"`` -> ``torch.float16`` (any ``torch`` dtype name)."""
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise CliError(f"unknown dtype {name!r} (e.g. float32, float16, bfloat16, int64)")
    return dtype


def parse_input_size(text: str) -> tuple[tuple[int, ...], str | None]:
    """``"1x3x224x224"`` -> ``((1, 3, 224, 224), None)``; ``"8x128:int64"`` -> dtype too."""
    shape_text, _, dtype = text.partition(":")
    parts = shape_text.lower().replace("×", "x").replace(",", "x").split("x")
    try:
        shape = tuple(int(part) for part in parts)
    except ValueError:
        shape = ()
    if not shape or any(dim < 0 for dim in shape):
        raise CliError(f"bad --input-size {text!r}: expected sizes joined by x, "
                       "e.g. 1x3x224x224 or 8x128:int64")
    if 0 in shape:  # a tensor without elements runs no work: a 0-op profile answers nothing
        raise CliError(f"bad --input-size {text!r}: every size must be at least 1")
    return shape, dtype or None


def make_inputs(sizes: Sequence[str], dtype: Any, device: Any) -> tuple[Any, ...]:
    """Random floating inputs (seed 0), zeros for integer and bool dtypes."""
    torch.manual_seed(0)
    inputs = []
    for text in sizes:
        shape, name = parse_input_size(text)
        kind = parse_dtype(name) if name else dtype
        if kind.is_floating_point or kind.is_complex:
            inputs.append(torch.randn(shape, dtype=kind, device=device))
        else:
            inputs.append(torch.zeros(shape, dtype=kind, device=device))
    return tuple(inputs)


def token_inputs(model: nn.Module, sizes: Sequence[str], labels: bool) -> dict[str, Any]:
    """``-i BATCHxTOKENS`` (default 1x128) for a model by name: its token inputs."""
    shape = parse_input_size(sizes[0])[0] if sizes else (1, 128)
    if len(sizes) > 1 or len(shape) != 2 or 0 in shape:
        raise CliError("an hf: model takes one --input-size BATCHxTOKENS, e.g. 1x128")
    return text_inputs(model, shape[0], shape[1], labels=labels)


def run_profile(options: argparse.Namespace) -> Any:
    """Load or compute the profile the options ask for."""
    if options.model.endswith(".json") and ":" not in options.model:
        try:
            saved = Profile.from_json(options.model)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CliError(f"cannot read profile {options.model}: {exc}") from exc
        frame = module_frame(saved)
        for group in ("time", "memory"):
            if group in _items(options.what or "") and not columns_for([group], frame):
                raise CliError(f"--what {group}: the saved profile {options.model} holds no "
                               f"{group} measurements (they are not computed from a saved "
                               f"profile): run the model with --what {group}")
        return saved
    by_name = options.model.startswith(HF_PREFIX)
    options.meta = options.meta or (by_name and options.device is None) or bool(options.predict)
    if not options.input_size and not by_name:
        raise CliError("missing --input-size (e.g. --input-size 1x3x224x224)")
    dtype = parse_dtype(options.dtype or "float32")
    try:
        device = torch.device("meta" if options.meta else options.device or "cpu")
    except RuntimeError as exc:
        raise CliError(f"bad --device {options.device!r}: {exc}") from exc
    try:
        inputs: Any = make_inputs([] if by_name else options.input_size, dtype, device)
    except (RuntimeError, AssertionError, TypeError) as exc:
        raise CliError(f"cannot create the inputs on {device}: {exc}") from exc
    model = build_model(options.model, factory_kwargs(options.arg), options.meta)
    try:
        if not options.meta:
            model = model.to(device)
        if dtype.is_floating_point:
            model = model.to(dtype)
    except Exception as exc:
        raise CliError(f"cannot move the model to {device} / {dtype}: {exc}") from exc
    groups = set(_items(options.what or ""))
    backward = any(g == "backward" or g.startswith(("backward_", "inclusive_backward_"))
                   for g in groups)
    if by_name:  # token ids of the model's vocabulary (labels: the backward of a training step)
        inputs = token_inputs(model, options.input_size, labels=backward)
    profiler = ModuleProfiler()
    if options.predict:
        return predicted_profile(profiler, model, inputs, backward, options)
    try:
        profile = profiler.profile(model, inputs, backward=backward, listeners=[
            OperatorListener(profiler.operator_fn_map)] if options.by_operator is not None
            else [])
        if "time" in groups:
            if options.meta:
                print("moduleprofiler: time: not measurable on the meta device", file=sys.stderr)
            else:
                with warnings.catch_warnings():  # said below, with the other warnings
                    warnings.simplefilter("ignore", CodePathWarning)
                    warnings.simplefilter("ignore", TimingWarning)
                    timing = profiler.time_modules(
                        model, inputs, num_iters=options.iters,
                        drop_first=None if options.iters is None else max(1, options.iters // 10))
                for message in timing.warnings:
                    print(f"moduleprofiler: warning: {message}", file=sys.stderr)
                profile = profile.merge(timing)
        if "memory" in groups:
            memory = profiler.measure_memory(model, inputs, train=True)
            profile = profile.merge(memory)
            options.notes = memory_notes(memory)
    except Exception as exc:
        raise CliError(str(exc)) from exc
    return profile


PREDICTED_WHAT = "ops,predicted_device_ms,predicted_host_ms"
"""The columns ``--predict`` shows unless ``--what`` names others."""


def predicted_profile(profiler: ModuleProfiler, model: Any, inputs: Any, backward: bool,
                      options: argparse.Namespace) -> Any:
    """``--predict GPU``: the prediction's profile, its latency and notes said under the view."""
    try:
        predicted = profiler.predict(model, inputs, device=options.predict,
                                     host=None if options.host == "none" else options.host,
                                     backward=backward, tf32=options.tf32)
    except Exception as exc:
        raise CliError(f"--predict {options.predict}: {exc}") from exc
    if not options.what:
        options.what = PREDICTED_WHAT if options.host != "none" else \
            "ops,predicted_device_ms"
    regime = f" ({predicted.predicted_regime})" if predicted.predicted_regime else ""
    said = (f"predicted latency on {predicted.predicted_for}: "
            f"{predicted.predicted_latency_ms:.3f} ms{regime}"
            if predicted.predicted_latency_ms is not None else  # --host none: no latency
            f"predicted device time on {predicted.predicted_for}: "
            f"{predicted.predicted_device_ms:.3f} ms")
    options.notes = (said, *predicted.prediction_notes)
    return predicted


def memory_notes(memory: MemoryReport) -> tuple[str, ...]:
    """The peak of each measured pass and the module call that set it, training first (what
    ``--what memory`` promises); the columns' headers name the same passes."""
    notes = []
    for name, columns, measured in (
            ("training", "saved, train fwd/bwd max live", memory.training),
            ("inference", "fwd max live", memory.inference)):
        if measured is not None:
            notes.append(f"{name} peak {human_bytes(measured.peak_bytes)} "
                         f"(+{human_bytes(measured.increase_bytes)} above the parameters and "
                         f"inputs) at {measured.peak_call or 'no module call'} "
                         f"[columns: {columns}]")
    return tuple(notes)


GENERATE_WHAT = ("time", "memory")
"""The ``--what`` groups ``--generate`` adds to its steps table."""


def check_generation_options(options: argparse.Namespace) -> None:
    """Refuse the options ``--generate`` would otherwise ignore: the module views' filters
    and ``--what`` groups other than time and memory."""
    given = _given(options, *_MODULE_VIEW_FLAGS)
    if given:
        raise CliError(f"--generate prints one row per generation step, not modules: "
                       f"{', '.join(given)} does not apply (drop --generate for the module "
                       f"tree)")
    other = [item for item in _items(options.what or "") if item not in GENERATE_WHAT]
    if other:
        raise CliError(f"--generate --what takes {' and/or '.join(GENERATE_WHAT)} (each "
                       f"step's time and live memory; every step shows its MACs and FLOPs), "
                       f"not {','.join(other)}")


def run_generation(options: argparse.Namespace) -> GenerationProfile:
    """``--generate N``: the model's ``generate`` profiled step by step."""
    check_generation_options(options)
    if options.meta or options.device is None or options.device == "meta":
        raise CliError("--generate runs the model: name a real --device (e.g. --device cpu; "
                       "shrink a large configuration with --arg num_hidden_layers=2)")
    device = torch.device(options.device)
    model = build_model(options.model, factory_kwargs(options.arg), False).to(device)
    if not callable(getattr(model, "generate", None)):
        raise CliError(f"--generate needs a model with generate(); {type(model).__name__} has "
                       "none")
    groups = set(_items(options.what or ""))
    # the prompt only: an encoder-decoder's decoder starts from its start token
    inputs = {name: value for name, value in
              token_inputs(model, options.input_size, labels=False).items()
              if not name.startswith("decoder_")}
    try:
        return profile_generation(model, inputs, max_new_tokens=options.generate,
                                  min_new_tokens=options.generate, time="time" in groups,
                                  memory="memory" in groups, **_decoder_start(model))
    except Exception as exc:
        raise CliError(str(exc)) from exc


def _decoder_start(model: nn.Module) -> dict[str, Any]:
    """``decoder_start_token_id`` for an encoder-decoder whose built-in configuration names
    none (T5's starts from its padding token): the padding token, else the first token."""
    config = getattr(model, "config", None)
    generation = getattr(model, "generation_config", None)
    if not getattr(config, "is_encoder_decoder", False) or (
            getattr(generation, "decoder_start_token_id", None) is not None
            or getattr(config, "decoder_start_token_id", None) is not None):
        return {}
    for source, name in ((generation, "pad_token_id"), (config, "pad_token_id"),
                         (generation, "bos_token_id"), (config, "bos_token_id")):
        token = getattr(source, name, None)
        if token is not None:
            return {"decoder_start_token_id": token}
    return {}


def kv_cache_text(options: argparse.Namespace) -> str:
    """``--kv-cache TOKENS``: the predicted key/value cache of an ``hf:`` configuration, per
    token and for ``TOKENS`` tokens (:func:`~moduleprofiler.language.predict_kv_cache_bytes`:
    full attention in every layer)."""
    if not options.model.startswith(HF_PREFIX):
        raise CliError("--kv-cache needs an hf: model (its configuration gives the layers, "
                       "key/value heads and head size), e.g. hf:llama --kv-cache 4096")
    if options.generate is not None:
        raise CliError("--kv-cache predicts from the configuration; --generate measures a run: "
                       "use one of them")
    overrides = {k: v for k, v in factory_kwargs(options.arg).items() if k != "task"}
    try:
        config = hf_config(options.model, **overrides)
    except (ValueError, TypeError, OSError, ImportError) as exc:
        raise CliError(f"{options.model}: {exc}") from exc
    named = config_dtype(config)
    if options.dtype is not None:
        dtype, said = parse_dtype(options.dtype), "--dtype"
    elif named is not None:
        dtype, said = named, "the configuration's"
    else:
        dtype, said = torch.float32, "assumed: the configuration names none; --dtype sets it"
    try:
        per_token = predict_kv_cache_bytes(config, 1, dtype=dtype)
        total = predict_kv_cache_bytes(config, options.kv_cache, dtype=dtype)
    except ValueError as exc:
        raise CliError(f"--kv-cache: {exc}") from exc
    name = str(dtype).removeprefix("torch.")
    return (f"KV cache of {options.model} ({type(config).__name__}), one sequence, full "
            f"attention in every layer\n"
            f"dtype: {name} ({said})\n"
            f"per token: {per_token:,} bytes ({human_bytes(per_token)})\n"
            f"{options.kv_cache:,} tokens: {total:,} bytes ({human_bytes(total)})\n")


def write_generation(generation: GenerationProfile, options: argparse.Namespace) -> None:
    """The steps table (text, csv or json) and, in text, the run's totals per token."""
    fmt = _output_format(options)
    if fmt == "text":
        text = render_steps(generation, terminal_width(options.width))
    elif fmt == "csv":
        text = generation.to_df().to_csv(index=False)
    elif fmt == "json":
        text = json.dumps({"steps": json.loads(generation.to_df().to_json(orient="records")),
                           "summary": generation.summary()}, indent=2) + "\n"
    else:
        raise CliError(f"--generate writes text, csv or json, not {fmt}")
    _emit(text, options.output, fmt)


# -- the output -------------------------------------------------------------------------------
def _items(what: str) -> list[str]:
    """The comma-separated items of ``--what``."""
    return [item.strip() for item in what.split(",") if item.strip()]


def _columns(profile: Any, what: str) -> list[str]:
    items = _items(what)
    frame = module_frame(profile)
    unknown = [item for item in items if item not in WHAT_GROUPS and item not in frame
               and item.removesuffix("_pct") not in frame]
    if unknown:
        raise CliError(f"unknown --what {','.join(unknown)} (choose from "
                       f"{','.join(WHAT_GROUPS)}, or name columns of the module table)")
    return columns_for(items, frame)


def make_view(profile: Any, options: argparse.Namespace) -> Any:
    """The tree (default), a flat table (``--sort``) or the top-k types (``--top``)."""
    # without --what, the view's own defaults: the same columns as Python's profile.tree()
    # and profile.table(), whose shapes a width-fitting format (text, LaTeX) leaves out first
    if options.by_operator is not None:
        return profile.by_operator(options.by_operator or None)
    columns = _columns(profile, options.what or WHAT_SORTED)
    filters = {"max_depth": options.depth, "min_pct": options.min_pct,
               "include": options.include, "exclude": options.exclude}
    if options.top is not None:
        return profile.top(options.top, by=options.sort or "ops", depth=options.depth)
    if options.sort is not None:
        sort = [options.sort]
        if column_spec(options.sort).inclusive is not None:
            sort.append(f"{options.sort}_pct")
        shown = ["calls", *sort, *(c for c in columns if c not in sort)]
        return profile.table(shown, sort_by=options.sort, **filters)
    return profile.tree(columns if options.what else None, **filters)


FIGURE_METRICS = ("ops", "flops", "macs", "params", "time", "memory")
"""The ``--what`` items a figure (``-o figure.png``) can draw; without ``--sort`` the first one
named is drawn, else ``ops``."""


def _is_figure(options: argparse.Namespace) -> bool:
    """``-o`` names a figure file (.png, .svg, .pdf) and no ``--format`` says otherwise."""
    suffix = os.path.splitext(options.output or "")[1].lower()
    return not options.format and suffix in FIGURE_SUFFIXES


def write_figure(profile: Any, options: argparse.Namespace) -> None:
    """``-o figure.png`` (or .svg, .pdf): the figure of the shown metric (``--sort``, else
    the first of :data:`FIGURE_METRICS` that ``--what`` names, else ``ops``): the ``--top``
    module types, else the modules at ``--depth`` (default 1, the top-level ones)."""
    named = [item for item in _items(options.what or "") if item in FIGURE_METRICS]
    metric = options.sort or (named[0] if named else "ops")
    if options.top is not None:
        kind, settings = "type", {"top": options.top}
    else:
        kind, settings = "module", {"depth": options.depth or 1}
    try:
        profile.plot(kind, metric, title=options.title, path=options.output, **settings)
    except ImportError as exc:
        raise CliError(f"-o {options.output}: a figure needs matplotlib, the plot extra: "
                       'pip install "moduleprofiler[plot]"') from exc
    except OSError as exc:
        raise CliError(f"cannot write {options.output}: {exc.strerror or exc}") from exc
    print(f"moduleprofiler: wrote {options.output} (figure of {metric} by {kind})",
          file=sys.stderr)


def write_output(profile: Any, options: argparse.Namespace) -> None:
    """Render in the chosen format to ``-o`` or stdout: formats that hold a whole profile
    (JSON, the HTML report) render it, a figure file gets the figure of the shown metric
    (:func:`write_figure`), the others render the chosen view."""
    if _is_figure(options):
        write_figure(profile, options)
        return
    fmt = _output_format(options)
    target = options.output
    entry = get_format(fmt)
    given = {"title": options.title, "caption": options.caption, "label": options.label,
             "unicode": options.unicode, "width": options.width, "fold": not options.no_fold}
    notes: tuple[str, ...] = getattr(options, "notes", ())
    document = profile_renderer(entry)
    if document is not None:
        render, _ = split_options(given, document)
        text = export_profile(profile, fmt, **render) or ""
        for note in notes:  # a whole-profile format has no place for them: said on stderr
            print(f"moduleprofiler: {note}", file=sys.stderr)
    else:
        view = make_view(profile, options)
        view = dataclasses.replace(view, notes=(*notes, *view.notes))
        if fmt == "text" and target is None:
            color = {"always": True, "never": False}.get(options.color)
            view.print(color=color, unicode=options.unicode, width=options.width,
                       fold=not options.no_fold)
            return
        if fmt == "latex":  # --width counts terminal columns; a LaTeX table fits the page
            given.pop("width")
        render, _ = split_options(given, entry.render)
        text = render_view(view, fmt, **render) or ""
    _emit(text, target, fmt)


def _output_format(options: argparse.Namespace) -> str:
    """``--format``, else the one ``-o``'s suffix names, else text."""
    if options.format:
        return format_name(options.format)
    if not options.output:
        return "text"
    suffix = os.path.splitext(options.output)[1]
    try:
        return infer_format(options.output)
    except ValueError as exc:
        if not suffix:
            raise
        # -o also writes figures, which are not formats of the table: list both, each from
        # its own table, so that a format registered later is listed too
        figures = ", ".join(known.lstrip(".") for known in FIGURE_SUFFIXES)
        raise CliError(f"unknown format {suffix!r} for -o {options.output} (known: "
                       f"{', '.join(known_formats())}; figures: {figures})") from exc


def _emit(text: str, target: str | None, fmt: str) -> None:
    """``text`` (ending in one newline) to stdout, or written to ``target`` with a line on
    stderr saying so."""
    text = text if text.endswith("\n") else text + "\n"
    if target is None:
        sys.stdout.write(text)
        return
    try:
        Path(target).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {target}: {exc.strerror or exc}") from exc
    print(f"moduleprofiler: wrote {target} ({fmt})", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (0, or 2 after a one-line error)."""
    try:
        options = build_parser().parse_args(argv)
        check_options(options)
        if options.kv_cache is not None:
            _emit(kv_cache_text(options), options.output, "text")
            return 0
        if options.generate is not None:
            write_generation(run_generation(options), options)
            return 0
        profile = run_profile(options)
        write_output(profile, options)
    except (CliError, ValueError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        text = " ".join(str(message).split())
        print(f"moduleprofiler: error: {text}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
