"""``moduleprofiler`` / ``python -m moduleprofiler``: profile a model from the command line.

The model is a factory called with no arguments: ``package.module:factory`` or
``path/to/file.py:factory`` (``weights=None`` is passed when the factory takes ``weights``,
and ``None`` for any ``weights_*`` keyword such as ``weights_backbone``, so nothing
downloads), or a module instance profiled as it is; a saved ``profile.json`` is accepted
too. Every error exits with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import importlib
import importlib.util
import inspect
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from moduleprofiler.cli_options import (  # the parser and checks: no torch (cli_options.py)
    FIGURE_METRICS,
    CliError,
    _is_figure,
    _items,
    factory_kwargs,
    is_saved_profile,
    parse_batch_sizes,
    parse_input_size,
)
from moduleprofiler.cli_options import build_parser as build_parser  # re-exported: their home
from moduleprofiler.cli_options import check_options as check_options  # was here until 0.1
from moduleprofiler.cli_options import main as main
from moduleprofiler.codepaths import CodePathWarning
from moduleprofiler.core import Profiler
from moduleprofiler.devices import unavailable
from moduleprofiler.efficiency import AmbiguousDeviceError
from moduleprofiler.errors import LossError
from moduleprofiler.export.columns import column_spec
from moduleprofiler.export.figures import FIGURE_SUFFIXES
from moduleprofiler.export.fit import terminal_width
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
from moduleprofiler.export.renamed import current_name, current_names
from moduleprofiler.export.select import WHAT_GROUPS, columns_for
from moduleprofiler.export.units import human_bytes
from moduleprofiler.inputs import wants_integers
from moduleprofiler.language.cache import config_dtype, predict_kv_cache_bytes
from moduleprofiler.language.generation import GenerationProfile, profile_generation
from moduleprofiler.language.models import (
    HF_PREFIX,
    ConfigFieldError,
    hf_config,
    hf_model,
    text_inputs,
)
from moduleprofiler.language.steps_text import render_steps
from moduleprofiler.memory import MemoryReport
from moduleprofiler.memory.report import peak_note
from moduleprofiler.operator_listener import OperatorListener
from moduleprofiler.prediction.meta_copy import meta_limit
from moduleprofiler.prediction.predict import DTYPE_NAMES, PredictedProfile, resolve_device
from moduleprofiler.prediction.sweep import PredictionSweep
from moduleprofiler.shapes import dtype_name, dtype_named
from moduleprofiler.state import preserved_rng
from moduleprofiler.timing import TimingOptions, TimingWarning

WHAT_SORTED = "params,io,ops"
"""The columns after the sort column of ``--sort`` without ``--what``."""


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
        _import_from_cwd()
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise CliError(f"cannot import {target!r}: {exc}") from exc
        except Exception as exc:
            raise CliError(f"importing {target!r} raised {type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            close = difflib.get_close_matches(part, [name for name in dir(obj)
                                                     if not name.startswith("_")], n=3)
            raise CliError(f"{target!r} has no attribute {attr!r}"
                           + (f" (close: {', '.join(close)})" if close else ""))
        obj = getattr(obj, part)
    if not callable(obj):
        raise CliError(f"{spec!r} is not callable")
    return obj  # type: ignore[no-any-return]


def _import_from_cwd() -> None:
    """Put the working directory on ``sys.path``, as ``python -m moduleprofiler`` has it: the
    console script's ``sys.path`` starts with its own directory instead, so
    ``moduleprofiler mymodels:build`` could not import the ``mymodels.py`` beside the user."""
    cwd = os.getcwd()
    if not any(isinstance(entry, str) and os.path.abspath(entry or os.curdir) == cwd
               for entry in sys.path):
        sys.path.insert(0, cwd)


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


def build_model(spec: str, kwargs: dict[str, Any], meta: bool) -> Any:
    """Call the factory (``weights=None`` added when it takes ``weights``, and ``None`` for
    each ``weights_*`` keyword, ``weights_backbone``, not given with ``--arg``)."""
    if spec.startswith(HF_PREFIX):  # a Transformers model from its configuration, no download
        with _hf_errors(spec, kwargs):
            return hf_model(spec, device="meta" if meta else "cpu", **kwargs)
    factory = load_factory(spec)
    if isinstance(factory, nn.Module):  # a model itself: calling it ran its forward with no input
        if kwargs:
            raise CliError(f"--arg {','.join(kwargs)}: {spec} is a module, not a factory to "
                           "pass arguments to")
        return factory.to("meta") if meta else factory
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        parameters = {}  # type: ignore[assignment]
    # pretrained weights are downloaded: torchvision's detection and segmentation builders
    # also default weights_backbone to ImageNet weights, fetched even with weights=None
    unset = {name: None for name in parameters
             if (name == "weights" or name.startswith("weights_")) and name not in kwargs}
    kwargs = {**kwargs, **unset}
    try:
        with torch.device("meta") if meta else contextlib.nullcontext():
            model = factory(**kwargs)
    except Exception as exc:
        raise CliError(f"{spec}() raised {type(exc).__name__}: {exc}"
                       + _missing_arguments_hint(exc, parameters, kwargs)) from exc
    if not isinstance(model, nn.Module):
        raise CliError(f"{spec}() returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _missing_arguments_hint(error: Exception, parameters: Any,
                             given: dict[str, Any]) -> str:
    """How to give the factory the arguments it was called without (``missing 1 required
    positional argument: 'width'`` named no option of the command line)."""
    missing = [name for name, parameter in parameters.items()
               if parameter.default is inspect.Parameter.empty and name not in given
               and parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                      inspect.Parameter.KEYWORD_ONLY)]
    if not isinstance(error, TypeError) or not missing:
        return ""
    return "; pass " + " ".join(f"--arg {name}=VALUE" for name in missing)


@contextlib.contextmanager
def _hf_errors(spec: str, overrides: dict[str, Any]) -> Iterator[None]:
    """An error building the configuration of ``spec`` (an ``hf:`` model) as one line: a typo
    in ``--arg`` names the flag and the key; an error the configuration raised of its own (a
    strict field's type check: ``--arg n_layer=x`` was a traceback) names ``--arg`` when
    there were ``overrides``."""
    try:
        yield
    except ConfigFieldError as exc:
        raise CliError(f"{spec}: --arg {','.join(exc.fields)}: {exc}") from exc
    except (ValueError, TypeError, OSError, ImportError) as exc:
        raise CliError(f"{spec}: {exc}") from exc
    except Exception as exc:  # the configuration's own validation (--arg n_layer=x)
        given = f" --arg {','.join(overrides)}:" if overrides else ""
        raise CliError(f"{spec}:{given} the configuration raised {type(exc).__name__}: "
                       f"{exc}") from exc


def parse_dtype(name: str, flag: str = "--dtype") -> Any:
    """``"float16"`` -> ``torch.float16`` (any ``torch`` dtype name, and the short names
    ``predict()`` and ``--batch`` take, :data:`~moduleprofiler.prediction.predict.DTYPE_NAMES`);
    an unknown name is an error naming ``flag``, the option it came from."""
    known = DTYPE_NAMES.get(name)
    if known is not None:
        return known
    dtype = dtype_named(name)
    if dtype is None:
        hint = " (a comma list of dtypes sweeps them with --predict GPU --batch SIZES)" \
            if "," in name else ""
        raise CliError(f"{flag}: unknown dtype {name!r} (e.g. float32, float16, bfloat16, "
                       f"bf16, int64){hint}")
    return dtype


def parse_device(name: str) -> torch.device:
    """``--device``'s device, refused when torch does not know it or when this process has
    none of it (``--device mps`` on a machine without one was torch's dispatcher error, some
    6,000 characters listing every backend, once the inputs were made on it)."""
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise CliError(f"bad --device {name!r}: {exc}") from exc
    reason = unavailable(device)
    if reason is not None:
        raise CliError(f"--device {name}: {reason}")
    return device


def make_inputs(sizes: Sequence[str], dtype: Any, device: Any) -> tuple[Any, ...]:
    """Random floating inputs (seed 0), zeros for integer and bool dtypes."""
    torch.manual_seed(0)
    inputs = []
    for text in sizes:
        shape, name = parse_input_size(text)
        kind = parse_dtype(name, f"--input-size {text}") if name else dtype
        make = torch.randn if kind.is_floating_point or kind.is_complex else torch.zeros
        inputs.append(make(shape, dtype=kind, device=device))
    return tuple(inputs)


def token_inputs(model: nn.Module, sizes: Sequence[str], labels: bool) -> dict[str, Any]:
    """``-i BATCHxTOKENS`` (default 1x128) for a model by name: its token inputs."""
    shape, named = parse_input_size(sizes[0]) if sizes else ((1, 128), None)
    if len(sizes) > 1 or len(shape) != 2 or 0 in shape:
        raise CliError("an hf: model takes one --input-size BATCHxTOKENS, e.g. 1x128")
    if named is not None and parse_dtype(named, f"--input-size {sizes[0]}") != torch.int64:
        # the ids were made int64 whatever the suffix said
        raise CliError(f"--input-size {sizes[0]}: an hf: model's token ids are int64, not "
                       f"{named}: give BATCHxTOKENS alone (--dtype sets the model's dtype)")
    main = getattr(model, "main_input_name", "input_ids")
    if main != "input_ids":
        raise CliError(f"{type(model).__name__} takes {main}, not the token ids "
                       "-i BATCHxTOKENS makes: profile it from Python with its own input")
    return text_inputs(model, shape[0], shape[1], labels=labels)


def run_profile(options: argparse.Namespace) -> Any:
    """Load or compute the profile the options ask for."""
    groups = set(_items(options.what or ""))
    if is_saved_profile(options.model):
        try:
            saved = Profile.from_json(options.model)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CliError(f"cannot read profile {options.model}: {exc}") from exc
        frame = module_frame(saved)
        for group in ("time", "memory"):
            if group in groups and not columns_for([group], frame):
                raise CliError(f"--what {group}: the saved profile {options.model} holds no "
                               f"{group} measurements (they are not computed from a saved "
                               f"profile): run the model with --what {group}")
        if asks_backward(groups) and not saved.backward:  # its columns would all read '-'
            raise CliError(f"--what backward: the saved profile {options.model} holds no "
                           "backward counts (they are not computed from a saved profile): run "
                           "the model with --what backward")
        if "time" in groups and isinstance(saved, PredictedProfile):
            # its predicted times were shown as --what time's measured ones
            raise CliError(f"--what time: {options.model} is a saved prediction, which holds "
                           "no measured times (its predicted ones are shown without --what "
                           "time): run the model with --what time")
        if options.by_operator is not None:
            try:
                saved.by_operator()
            except ValueError as exc:  # it named a Python keyword, listeners=
                raise CliError(f"--by-operator: the saved profile {options.model} holds no "
                               "per-operator tallies (they are not computed from a saved "
                               "profile): run the model with --by-operator") from exc
        if isinstance(saved, PredictedProfile):  # shown as when it was predicted
            shown_as_predicted(saved, options)
        return saved
    if options.predict:  # a device no prediction can be made for is said before any build
        try:
            resolve_device(options.predict)
        except AmbiguousDeviceError as exc:  # its example was Python's device='H100 SXM'
            raise CliError(f"--predict {options.predict}: could be any of "
                           f"{', '.join(exc.candidates)}, whose peaks differ: name the card "
                           f"(e.g. --predict \"{exc.candidates[0]}\")") from exc
        except (ValueError, TypeError, OSError) as exc:
            raise CliError(f"--predict {options.predict}: {exc}") from exc
    by_name = options.model.startswith(HF_PREFIX)
    built_on_meta = by_name and not options.meta and options.device is None  # not asked for
    options.meta = options.meta or built_on_meta or bool(options.predict)
    if not options.input_size and not by_name:
        raise CliError("missing --input-size (e.g. --input-size 1x3x224x224)")
    # a sweep casts to each of its dtypes itself: the model is built as it comes
    dtype = parse_dtype("float32" if options.batch else options.dtype or "float32")
    device = parse_device("meta" if options.meta else options.device or "cpu")
    options.meta = device.type == "meta"  # --device meta is --meta: built there, not timed
    try:
        inputs: Any = make_inputs([] if by_name else options.input_size, dtype, device)
    except (RuntimeError, AssertionError, TypeError) as exc:
        # the dispatcher's "Could not run ... from the 'XLA' backend" lists every backend
        said = str(exc).split(". This could be because", 1)[0]
        raise CliError(f"cannot create the inputs on {device}: {said}") from exc
    model = build_model(options.model, factory_kwargs(options.arg), options.meta)
    try:
        if not options.meta:
            model = model.to(device)
        if dtype.is_floating_point:
            model = model.to(dtype)
    except Exception as exc:
        raise CliError(f"cannot move the model to {device} / {dtype}: {exc}") from exc
    backward = asks_backward(groups)
    if by_name:  # token ids of the model's vocabulary (labels: the backward of a training step)
        inputs = token_inputs(model, options.input_size, labels=backward)
    profiler = Profiler()
    if options.predict and options.batch:
        return predicted_sweep(profiler, model, inputs, backward, options)
    if options.predict:
        return predicted_profile(profiler, model, inputs, backward, options)
    try:
        profile = profiler.profile(model, inputs, backward=backward, listeners=[
            OperatorListener()] if options.by_operator is not None else [])
        if "time" in groups:
            if options.meta:
                print("moduleprofiler: time: not measurable on the meta device" + (
                    ", where an hf: model is built unless --device names another (add "
                    "--device cpu or --device cuda to time it)" if built_on_meta else
                    " (drop --meta, or name a real --device, to time it)"),
                    file=sys.stderr)
            else:
                with warnings.catch_warnings():  # said below, with the other warnings
                    warnings.simplefilter("ignore", CodePathWarning)
                    warnings.simplefilter("ignore", TimingWarning)
                    timing = profiler.time_modules(model, inputs, TimingOptions(
                        num_iters=options.iters,
                        drop_first=None if options.iters is None else max(1, options.iters // 10)))
                for message in timing.warnings:
                    print(f"moduleprofiler: warning: {message}", file=sys.stderr)
                profile = profile.merge(timing)
        if "memory" in groups:
            memory = profiler.measure_memory(model, inputs, train=True)
            profile = profile.merge(memory)
            options.notes = memory_notes(memory)
    except Exception as exc:
        raise CliError(str(exc) + _meta_hint(exc, options) + _loss_hint(exc)
                       + _integer_hint(exc, options, dtype)) from exc
    return profile


def _integer_hint(error: BaseException, options: argparse.Namespace, dtype: Any) -> str:
    """What to do when an operator that takes integers (an embedding's token ids) got the
    random floating-point input an ``-i`` without a dtype makes: the ``:int64`` suffix, as
    Python's ``input_size=`` error says ``input=``."""
    floating = [size for size in options.input_size if not parse_input_size(size)[1]]
    if not dtype.is_floating_point or not floating or not wants_integers(error):
        return ""
    shown = " ".join(f"-i {size}" for size in floating)
    return (f"; hint: {shown} made random {dtype_name(dtype)} input; token ids (or other "
            f"integers) need an integer dtype, e.g. -i {floating[0]}:int64")


def _loss_hint(error: BaseException) -> str:
    """What to do when no loss can be derived: the message says ``pass loss_fn=``, a keyword
    the command line has not."""
    if not isinstance(error, LossError):
        return ""
    return ("; the command line has no loss_fn: --what backward and --what memory "
            "differentiate the default loss (the output's loss, else the sum of its floating "
            "outputs: docs/architecture.md), so drop them or profile "
            "this model from Python with loss_fn=")


def asks_backward(groups: set[str]) -> bool:
    """``--what`` names the backward group or a backward column: a backward pass is run."""
    return any(g == "backward" or g.startswith(
        ("backward_", "self_backward_", "inclusive_backward_")) for g in groups)


def _meta_hint(error: BaseException, options: argparse.Namespace) -> str:
    """What to do when the meta device the model was built on cannot run it."""
    if not options.meta or not meta_limit(error):
        return ""
    return ("; hint: the model ran on the meta device (no values; an hf: model without "
            "--device, --meta or --predict builds it there), which cannot run this: pass "
            "--device cpu to run it for real")


PREDICTED_WHAT = ("ops,predicted_device_ms,predicted_host_ms,predicted_device_ms_low,"
                  "predicted_device_ms_high")
"""The columns ``--predict`` shows when ``--what`` names none; the predicted ones are shown
beside those ``--what`` names (:func:`predicted_what`)."""


def predicted_what(predicted: PredictedProfile, what: str | None) -> str:
    """The ``--what`` of a prediction's view: ``what`` (default ``ops``) and the predicted
    columns; when the backward was predicted (``--what backward``) the backward's device and
    host time in place of the forward's error band (the notes give the pass's band); the
    host's only when a host was predicted."""
    named = PREDICTED_WHAT.split(",")[1:]
    if predicted.backward:
        named = ["predicted_device_ms", "predicted_host_ms", "predicted_backward_device_ms",
                 "predicted_backward_host_ms"]
    if predicted.predicted_host_ms is None:
        named = [name for name in named if not name.endswith("_host_ms")]
    given = _items(what) if what else ["ops"]
    return ",".join(dict.fromkeys([*given, *named]))


def predicted_profile(profiler: Profiler, model: Any, inputs: Any, backward: bool,
                      options: argparse.Namespace) -> Any:
    """``--predict GPU``: the prediction's profile, its latency and notes said under the view."""
    try:
        predicted = profiler.predict(model, inputs, device=options.predict,
                                     host=None if options.host == "none" else options.host,
                                     backward=backward, tf32=options.tf32)
    except Exception as exc:
        raise CliError(f"--predict {options.predict}: {exc}{_meta_hint(exc, options)}") from exc
    shown_as_predicted(predicted, options)
    return predicted


def shown_as_predicted(predicted: PredictedProfile, options: argparse.Namespace) -> None:
    """A prediction's view, made now or read from a file: the groups ``--what`` names and the
    predicted columns (:func:`predicted_what`), and the lines of :func:`prediction_lines`
    under it."""
    options.what = predicted_what(predicted, options.what)
    options.notes = prediction_lines(predicted)


def prediction_lines(predicted: PredictedProfile) -> tuple[str, str]:
    """The pass's predicted latency (or device time, without a host) and its expected error
    band, said under a prediction's view, made now or read from a file (its own notes are the
    view's, ``pass_notes``)."""
    regime = f" ({predicted.predicted_regime})" if predicted.predicted_regime else \
        " (a lower bound: some operators' device time is unknown)" \
        if predicted.predicted_device_lower_bound else ""
    said = (f"predicted latency on {predicted.predicted_for}: "
            f"{predicted.predicted_latency_ms:.3f} ms{regime}"
            if predicted.predicted_latency_ms is not None else  # --host none: no latency
            f"predicted device time on {predicted.predicted_for}: "
            f"{predicted.predicted_device_ms:.3f} ms")
    low, high = predicted.predicted_device_ms_low, predicted.predicted_device_ms_high
    band = (f"expected device time {low:.3f} to {high:.3f} ms (predicted "
            f"{predicted.predicted_device_ms:.3f} ms; the 10th to 90th percentile of its "
            "operators' held-out calibration residuals)" if low is not None and high is not None
            else "no expected error band: the calibration holds no held-out residuals")
    return said, band


def predicted_sweep(profiler: Profiler, model: Any, inputs: Any, backward: bool,
                    options: argparse.Namespace) -> PredictionSweep:
    """``--predict GPU --batch 1,8,64``: the prediction at each batch size and ``--dtype``."""
    dtypes = [item.strip() for item in (options.dtype or "bf16,fp32").split(",")
              if item.strip()]
    for name in dtypes:  # an unknown one is --dtype's error, before any prediction runs
        parse_dtype(name)
    try:
        return profiler.sweep(model, inputs, options.predict, parse_batch_sizes(options.batch),
                              dtypes, host=None if options.host == "none" else options.host,
                              backward=backward, tf32=options.tf32)
    except Exception as exc:
        raise CliError(f"--predict {options.predict} --batch {options.batch}: {exc}") from exc


def write_sweep(sweep: PredictionSweep, options: argparse.Namespace) -> None:
    """The sweep's table in the chosen format (JSON: :meth:`PredictionSweep.to_json`), or its
    figure for ``-o`` .png, .svg or .pdf."""
    if _is_figure(options):
        try:
            sweep.plot(path=options.output, title=options.title)
        except ImportError as exc:
            raise CliError(f"-o {options.output}: a figure needs matplotlib, the plot extra: "
                           "pip install matplotlib") from exc
        except OSError as exc:
            raise CliError(f"cannot write {options.output}: {exc.strerror or exc}") from exc
        print(f"moduleprofiler: wrote {options.output} (figure of the sweep)", file=sys.stderr)
        return
    fmt = _output_format(options)
    if fmt == "json":
        _emit(sweep.to_json(), options.output, fmt)
        return
    write_view(sweep.view(), options, fmt)


def memory_notes(memory: MemoryReport) -> tuple[str, ...]:
    """The peak of each measured pass and the module call that set it, training first (what
    ``--what memory`` promises); the columns' headers name the same passes."""
    return tuple(f"{peak_note(measured)} [columns: {columns}]" for measured, columns in (
        (memory.training, "saved, train fwd/bwd max live"), (memory.inference, "fwd max live"))
        if measured is not None)


def run_generation(options: argparse.Namespace) -> GenerationProfile:
    """``--generate N``: the model's ``generate`` profiled step by step."""
    if options.meta or options.device is None or options.device == "meta":
        raise CliError("--generate runs the model: name a real --device (e.g. --device cpu; "
                       "shrink a large configuration with --arg num_hidden_layers=2)")
    device = parse_device(options.device)
    dtype = parse_dtype(options.dtype) if options.dtype else None
    if dtype is not None and not dtype.is_floating_point:
        raise CliError(f"--dtype {options.dtype}: --generate casts the model's floating "
                       "parameters to it (the token ids stay integers): give a floating dtype "
                       "(e.g. bfloat16)")
    model = build_model(options.model, factory_kwargs(options.arg), False)
    try:  # --dtype was dropped: the model generated in float32, its cache too
        model = model.to(device) if dtype is None else model.to(device, dtype)
    except Exception as exc:  # no driver for the device, a cast it refuses: a traceback
        raise CliError(f"cannot move the model to {device}"
                       f"{'' if dtype is None else f' / {dtype}'}: {exc}") from exc
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
    token and for ``TOKENS`` tokens, as ``generate``'s cache holds them
    (:func:`~moduleprofiler.language.predict_kv_cache_bytes`)."""
    if not options.model.startswith(HF_PREFIX):
        raise CliError("--kv-cache needs an hf: model (its configuration gives the layers, "
                       "key/value heads and head size), e.g. hf:llama --kv-cache 4096")
    if options.generate is not None:
        raise CliError("--kv-cache predicts from the configuration; --generate measures a run: "
                       "use one of them")
    fmt = _output_format(options)
    if fmt != "text":  # the prediction is four lines of text
        raise CliError(f"--kv-cache writes text, not {fmt}")
    overrides = {k: v for k, v in factory_kwargs(options.arg).items() if k != "task"}
    with _hf_errors(options.model, overrides):
        config = hf_config(options.model, **overrides)
    named = config_dtype(config)
    if options.dtype is not None:
        dtype, said = parse_dtype(options.dtype), "--dtype"
    elif named is not None:
        dtype, said = named, "the configuration's"
    else:
        dtype, said = torch.float32, "assumed: the configuration names none; --dtype sets it"
    # an encoder-decoder's cross-attention part grows with the encoder's input, which the
    # command line is not given: said per encoder token, beside the decoder's own part
    cross = 0 if getattr(config, "is_encoder_decoder", False) else None
    try:
        per_token = predict_kv_cache_bytes(config, 1, dtype=dtype, encoder_tokens=cross)
        total = predict_kv_cache_bytes(config, options.kv_cache, dtype=dtype,
                                       encoder_tokens=cross)
        per_encoder_token = None if cross is None else predict_kv_cache_bytes(
            config, 0, dtype=dtype, encoder_tokens=1)
    except ValueError as exc:
        raise CliError(f"--kv-cache: {exc}") from exc
    name = dtype_name(dtype)
    text = (f"KV cache of {options.model} ({type(config).__name__}), one sequence\n"
            f"dtype: {name} ({said})\n"
            f"per token: {per_token:,} bytes ({human_bytes(per_token)})\n"
            f"{options.kv_cache:,} tokens: {total:,} bytes ({human_bytes(total)})\n")
    if total < per_token * options.kv_cache:  # the per-token line alone would mislead
        text += ("sliding-window layers hold at most their window: less than per token x "
                 "tokens\n")
    if per_encoder_token is not None:
        text += (f"plus cross-attention: {per_encoder_token:,} bytes "
                 f"({human_bytes(per_encoder_token)}) per encoder token\n")
    return text


def generation_format(options: argparse.Namespace) -> str:
    """The format of ``--generate``'s steps table: text, csv or json, refused before the
    generation runs (an html file was refused only once the model had generated)."""
    fmt = _output_format(options)
    if fmt not in ("text", "csv", "json"):
        raise CliError(f"--generate writes text, csv or json, not {fmt}")
    return fmt


def write_generation(generation: GenerationProfile, options: argparse.Namespace,
                     fmt: str) -> None:
    """The steps table in ``fmt`` (text, csv or json, :func:`generation_format`) and, in
    text, the run's totals per token."""
    # the steps table has no title, caption or label: refused, not dropped in silence
    _renderer_options({"title": options.title, "caption": options.caption,
                       "label": options.label}, None, fmt)
    if fmt == "text":
        text = render_steps(generation, terminal_width(options.width))
    elif fmt == "csv":
        text = generation.to_df().to_csv(index=False)
    else:
        text = json.dumps({"steps": json.loads(generation.to_df().to_json(orient="records")),
                           "summary": generation.totals()}, indent=2) + "\n"
    _emit(text, options.output, fmt)


# -- the output -------------------------------------------------------------------------------
def _columns(profile: Any, what: str) -> list[str]:
    items = current_names(_items(what))  # a name renamed in 0.2 warns once
    frame = module_frame(profile)
    unknown = [item for item in items if item not in WHAT_GROUPS and item not in frame
               and item.removesuffix("_pct") not in frame]
    for item in unknown:  # a real column of a pass not run: say which pass gives it
        needs = column_spec(item).needs  # "" for a name no column registers
        group = next((group for group, pass_name in (("time", "time_modules()"),
                                                     ("memory", "measure_memory()"))
                      if pass_name in needs), None)
        if group is not None:  # it was "unknown --what", though the glossary lists it
            raise CliError(f"--what {item} is a column of the {group} pass, which only "
                           f"--what {group} runs: e.g. --what {group},{item}")
    if unknown:
        raise CliError(f"unknown --what {','.join(unknown)} (choose from "
                       f"{','.join(WHAT_GROUPS)}, or name columns of the module table)")
    return columns_for(items, frame)


def make_view(profile: Any, options: argparse.Namespace) -> Any:
    """The tree (default), a flat table (``--sort``) or the top-k types (``--top``)."""
    # without --what, the view's own defaults: the same columns as Python's profile.tree()
    # and profile.table(), whose shapes a width-fitting format (text, LaTeX) leaves out first
    if options.by_operator is not None:
        with _said_as("--by-operator", options.by_operator):
            return profile.by_operator(options.by_operator or None)
    columns = _columns(profile, options.what or WHAT_SORTED)
    filters = {"max_depth": options.depth, "min_pct": options.min_pct,
               "include": options.include, "exclude": options.exclude}
    if options.top is not None:
        with _said_as("--sort", options.sort):
            return profile.top(options.top, by=options.sort or "ops", depth=options.depth)
    if options.sort is not None:
        with _said_as("--sort", options.sort):
            sort_by = current_name(options.sort)  # a name renamed in 0.2 warns once
            sort = [sort_by]
            if column_spec(sort_by).inclusive is not None:
                sort.append(f"{sort_by}_pct")
            shown = ["calls", *sort, *(c for c in columns if c not in sort)]
            return profile.table(shown, sort_by=sort_by, **filters)
    return profile.tree(columns if options.what else None, **filters)


@contextlib.contextmanager
def _said_as(flag: str, value: str | None) -> Iterator[None]:
    """A ``KeyError`` or ``ValueError`` of the view a ``flag`` picked (an unknown ``--sort``
    column, a ``--by-operator`` module of no profile) as the one-line error naming ``flag``:
    the view's message names its Python argument (``sort_by=``, ``module=``)."""
    try:
        yield
    except (KeyError, ValueError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        if not value or value not in str(message):  # not about the flag's value: another's
            raise
        raise CliError(f"{flag} {value}: {message}") from exc


def write_figure(profile: Any, options: argparse.Namespace) -> None:
    """``-o figure.png`` (or .svg, .pdf): the figure of the shown metric (``--sort``, else
    the one of :data:`FIGURE_METRICS` that ``--what`` names, else ``ops``): the ``--top``
    module types, else the modules at ``--depth`` (default 1, the top-level ones)."""
    named = [item for item in _items(options.what or "") if item in FIGURE_METRICS]
    metric = options.sort or (named[0] if named else "ops")
    if options.top is not None:
        kind, settings = "type", {"top": options.top}
    else:
        # --depth 0 (the root alone) drew depth 1
        kind, settings = "module", {"depth": 1 if options.depth is None else options.depth}
    try:
        with _said_as("--sort", options.sort):
            profile.plot(kind, metric, title=options.title, path=options.output, **settings)
    except ImportError as exc:
        raise CliError(f"-o {options.output}: a figure needs matplotlib, the plot extra: "
                       'pip install matplotlib (from a moduleprofiler checkout: '
                       'pip install ".[plot]")') from exc
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
    if options.per is not None:  # the frame, as Profile.save("x.csv", aggregate=per)
        _emit(export_profile(profile, "csv", aggregate=options.per) or "", options.output, fmt,
              f"one row per {options.per}, every column, as profile.save('x.csv', "
              f"aggregate={options.per!r})")
        return
    notes: tuple[str, ...] = getattr(options, "notes", ())
    document = profile_renderer(get_format(fmt))
    if document is not None:
        render = _renderer_options(_rendering(options), document, fmt)
        text = export_profile(profile, fmt, **render) or ""
        for note in notes:  # a whole-profile format has no place for them: said on stderr
            print(f"moduleprofiler: {note}", file=sys.stderr)
        _emit(text, options.output, fmt)
        return
    view = make_view(profile, options)
    view = dataclasses.replace(view, notes=(*notes, *view.notes))
    if fmt == "csv":  # raw data, no place for notes: said on stderr, as for JSON
        for note in view.notes:
            print(f"moduleprofiler: note: {note}", file=sys.stderr)
    write_view(view, options, fmt, "the table shown; --per call writes the per-call frame, "
                                   "as profile.save('x.csv')")


def _rendering(options: argparse.Namespace) -> dict[str, Any]:
    """The rendering options of the command line, by the renderers' keywords."""
    return {"title": options.title, "caption": options.caption, "label": options.label,
            "unicode": options.unicode, "width": options.width, "fold": not options.no_fold}


def write_view(view: Any, options: argparse.Namespace, fmt: str, what: str | None = None
               ) -> None:
    """A module view or a sweep's table printed to the terminal (text without ``-o``), else
    rendered in ``fmt`` and written by :func:`_emit` (``what``: what a CSV file holds)."""
    given, render = _rendering(options), get_format(fmt).render
    if fmt == "text" and options.output is None:
        _renderer_options(given, render, fmt)  # refuses a --caption it has no place for
        color = {"always": True, "never": False}.get(options.color)
        with _encodable(options.unicode):
            view.print(color=color, unicode=options.unicode, width=options.width,
                       fold=not options.no_fold)
        return
    if fmt == "latex":  # --width counts terminal columns; a LaTeX table fits the page
        given.pop("width")
    text = render_view(view, fmt, **_renderer_options(given, render, fmt)) or ""
    _emit(text, options.output, fmt, what)


def _renderer_options(given: dict[str, Any], render: Callable[..., Any] | None,
                      fmt: str) -> dict[str, Any]:
    """The options of ``given`` that ``render`` takes; a ``--title``, ``--caption`` or
    ``--label`` the format has no place for is refused, not dropped in silence (the built-in
    formats were checked before the model ran, ``cli_formats``; this holds for a format
    registered with ``register_format``)."""
    taken, dropped = split_options(given, render)
    refused = [f"--{name}" for name in ("title", "caption", "label")
               if dropped.get(name) is not None]
    if refused:
        raise CliError(f"{', '.join(refused)} {'does' if len(refused) == 1 else 'do'} not "
                       f"apply to the {fmt} format: it has no place for "
                       f"{' or '.join(name.removeprefix('--') for name in refused)}")
    return taken


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
        # -o also writes figures, which are not formats of the table: list both, each from
        # its own table, so that a format registered later is listed too
        figures = ", ".join(known.lstrip(".") for known in FIGURE_SUFFIXES)
        known = f"(known: {', '.join(known_formats())}; figures: {figures})"
        if not suffix:  # the message of Profile.save said "pass format=", a Python keyword
            raise CliError(f"-o {options.output} has no suffix to tell its format: add one or "
                           f"pass --format {known}") from exc
        raise CliError(f"unknown format {suffix!r} for -o {options.output} {known}") from exc


@contextlib.contextmanager
def _encodable(unicode: bool) -> Iterator[None]:
    """Writing to stdout, whose encoding (``PYTHONIOENCODING=ascii``, a Latin-1 terminal)
    may not hold every character of the text: the box lines of ``--unicode``, a module name
    from a ``ModuleDict`` key. The error named a codec and a position, not the option or what
    to do about it."""
    try:
        yield
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start]
        cure = "set PYTHONIOENCODING=utf-8, or write a file with -o"
        if unicode:
            cure = f"--unicode draws box lines: drop it, or {cure}"
        raise CliError(f"stdout's encoding ({exc.encoding}) cannot write {bad!r}: "
                       f"{cure}") from exc


def _emit(text: str, target: str | None, fmt: str, what: str | None = None) -> None:
    """``text`` (ending in one newline) to stdout, or written to ``target`` with a line on
    stderr saying so (and, for CSV, ``what`` it holds: the command line's CSV is the table
    shown, ``Profile.save``'s the per-call frame)."""
    text = text if text.endswith("\n") else text + "\n"
    if target is None:
        with _encodable(unicode=False):
            sys.stdout.write(text)
        return
    try:
        Path(target).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {target}: {exc.strerror or exc}") from exc
    holds = f": {what}" if fmt == "csv" and what else ""
    print(f"moduleprofiler: wrote {target} ({fmt}{holds})", file=sys.stderr)


def run(options: argparse.Namespace) -> None:
    """Run the command :func:`~moduleprofiler.cli_options.main` parsed and checked (errors
    are raised, and ``main`` prints them as one line). The random number generators are left
    as they were: the command seeds its inputs and the model it builds draws its weights, but
    a run inside a Python process (``main([...])``) must not shift the caller's draws."""
    with preserved_rng():
        if options.kv_cache is not None:
            _emit(kv_cache_text(options), options.output, "text")
            return
        if options.generate is not None:
            fmt = generation_format(options)  # a format it cannot write is refused before it runs
            write_generation(run_generation(options), options, fmt)
            return
        profile = run_profile(options)
        if isinstance(profile, PredictionSweep):
            write_sweep(profile, options)
            return
        write_output(profile, options)


if __name__ == "__main__":
    raise SystemExit(main())
