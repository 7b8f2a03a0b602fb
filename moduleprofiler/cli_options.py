"""The command line's front door: its options, the checks that need no model, and ``main``.

Everything here imports the standard library only, so ``--version``, ``--help`` and an
argument error (an unknown flag, a bad choice, a malformed ``--arg`` or ``--input-size``, an
out-of-range number) are answered in the time Python takes to start, not the seconds torch,
pandas and Transformers take to import (``benchmarks/cli_startup.py`` times it).
``main`` then hands the checked options to :func:`moduleprofiler.cli.run`, which imports them.
The console script and ``python -m moduleprofiler`` both enter here.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from moduleprofiler._version import __version__
from moduleprofiler.cli_formats import WHOLE_PROFILE, builtin_format, refusal, render_flags_taken

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
  moduleprofiler torchvision.models:resnet50 -i 1x3x224x224 --predict H200 --batch 1,8,64

formats (--format, or from the suffix of -o): text, csv, json, markdown (.md), html, latex (.tex)
figures (-o with .png, .svg or .pdf; the plot extra): the shown metric (--sort, else the one of
  --what's ops, flops, params, time, memory, else ops) by top-level module (--depth: by module
  at that depth; --top K: the K module types)
columns (--what): params, io (input/output shapes), ops (macs, ops, % of ops), flops,
  backward (runs a backward pass), bytes (parameter, buffer and output bytes), time, memory,
  or any column name (e.g. self_backward_flops, ops_pct, output_bytes)
"""

MIN_WIDTH = 40
"""The narrowest ``--width`` (``moduleprofiler.export.fit.MIN_WIDTH``, repeated here so that
checking ``--width`` imports no pandas; tests/test_cli.py holds the two equal)."""

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")
"""Output suffixes that ask for a figure (``moduleprofiler.export.figures.FIGURE_SUFFIXES``,
repeated here for the same reason; held equal by the same test)."""


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
                                      "the seq2seq head of an encoder-decoder such as bart, "
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
    # no default here, so that --host without --predict is refused (check_options); the
    # default it then gets is prediction.predict.DEFAULT_HOST (a test holds them equal): that
    # module imports torch, which this one must not
    parser.add_argument("--host", choices=("none", "calibrated", "this"),
                        help="with --predict: the host issuing the launches (default, as in "
                             "Python: calibrated; none: the device's time alone, a lower "
                             "bound, not a latency)")
    parser.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=None,
                        help="with --predict: fp32 matmuls and convolutions on TF32 tensor "
                             "cores, or (--no-tf32) at the plain FP32 peak (default: torch's "
                             "settings: plain FP32 matmuls, TF32 convolutions); the notes say "
                             "which")
    parser.add_argument("--batch", metavar="SIZES",
                        help="with --predict: predict at each of these batch sizes (1,8,64,256)"
                             " and each --dtype of a comma list (default bf16,fp32): a table "
                             "of latency, device time, throughput, peak memory and regime, the "
                             "batch at which the pass turns device-bound and the largest that "
                             "fits the card; -i is the example input, its first dimension "
                             "resized; -o .png draws them")
    parser.add_argument("-f", "--format", help="output format (default: from -o, else text)")
    parser.add_argument("-o", "--output", help="write to this file instead of stdout (.png, "
                                               ".svg, .pdf: a figure of the shown metric)")
    parser.add_argument("--per", choices=("call", "module", "type"),
                        help="CSV of the tidy frame, one row per call, module or module type "
                             "with every column: the file profile.save('x.csv', "
                             "aggregate=...) writes (without it, CSV holds the table shown: "
                             "the tree, --sort's table, --top's types, --what's columns)")
    parser.add_argument("--depth", type=int, help="deepest module level shown (root = 0); "
                                                  "with --top, the level aggregated")
    parser.add_argument("--sort", metavar="COLUMN",
                        help="flat table sorted by COLUMN (e.g. ops, ops, params); "
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
    # no default: a --color given with a file or another format is refused (check_options)
    parser.add_argument("--color", choices=("auto", "always", "never"),
                        help="colour the terminal table (default auto: a tty without "
                             "NO_COLOR)")
    parser.add_argument("--width", type=int, metavar="N",
                        help="fit text to N columns (default: the terminal's, COLUMNS, else 80; "
                             "0: no limit): shapes shortened, columns hidden (named in a note), "
                             "names elided in the middle")
    parser.add_argument("--unicode", action="store_true", help="draw the tree with box lines")
    parser.add_argument("--no-fold", action="store_true",
                        help="show every block of the tree (default: identical numbered "
                             "sibling blocks such as h.0 ... h.11 fold into one row, summed)")
    parser.add_argument("--title", help="title of the HTML report or the figure "
                                        "(LaTeX: --caption, --label)")
    parser.add_argument("--caption", help="LaTeX table caption")
    parser.add_argument("--label", help="LaTeX table label")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


_MODULE_VIEW_FLAGS = ("--top", "--sort", "--depth", "--min-pct", "--include", "--exclude")
"""Options that shape the module views (a table of operators or of steps has no use for them)."""


def _given(options: argparse.Namespace, *flags: str) -> list[str]:
    """The ``flags`` set on the command line (``--min-pct`` is ``options.min_pct``), and
    ``"-o FIGURE"`` among them when ``-o`` names a figure."""
    return [flag for flag in flags if (_is_figure(options) if flag == "-o FIGURE" else getattr(
        options, flag.removeprefix("--").replace("-", "_")) is not None)]


EMPTY_HINTS = {
    "--predict": "name a GPU (\"H100 SXM\") or a calibration .json",
    "--format": "name a format (csv, json, markdown, html, latex, text)",
    "--output": "name a file (e.g. -o report.html)",
    "--dtype": "name a dtype (e.g. float32, bf16)",
    "--device": "name a device (e.g. cpu, cuda:0)",
    "--sort": "name a column (e.g. ops, params)",
}
"""The options whose empty value (``--predict ''``) was read as not given: no prediction, the
text format, float32, the CPU, each in silence; what to give instead."""


def check_options(options: argparse.Namespace) -> None:
    """Refuse option values that cannot mean anything (``--depth -1``, ``--top 0``)."""
    for flag, hint in EMPTY_HINTS.items():
        value = getattr(options, flag.removeprefix("--"))
        if value is not None and not value.strip():
            raise CliError(f"{flag} {value!r} is empty: {hint}")
    if options.model.strip() == "hf:":  # read as a configuration file named config.json
        raise CliError("model 'hf:' names no model type: e.g. hf:gpt2 or "
                       "hf:path/to/config.json")
    limits = (("--depth", options.depth, 0), ("--top", options.top, 1),
              ("--iters", options.iters, 2), ("--generate", options.generate, 1),
              ("--kv-cache", options.kv_cache, 1))
    for flag, value, least in limits:
        if value is not None and value < least:
            raise CliError(f"{flag} must be at least {least}, got {value}")
    if options.what is not None and not _items(options.what):  # "--what ," showed no column
        raise CliError(f"--what {options.what!r} names no column group or column (e.g. "
                       "--what params,ops)")
    if options.min_pct is not None and not 0 <= options.min_pct <= 100:
        raise CliError(f"--min-pct must be a percentage from 0 to 100, got {options.min_pct:g}")
    if options.width is not None and (options.width < 0 or 0 < options.width < MIN_WIDTH):
        raise CliError(f"--width must be 0 (no limit) or at least {MIN_WIDTH}, "
                       f"got {options.width}")
    if options.by_operator is not None:
        given = _given(options, *_MODULE_VIEW_FLAGS, "--what", "--generate", "--kv-cache",
                       "-o FIGURE")
        if given:
            raise CliError(f"--by-operator shows one table of operators: {', '.join(given)} "
                           "cannot apply to it")
    if options.per is not None:
        check_per_options(options)
    if options.generate is not None:
        check_generation_options(options)
    if options.kv_cache is not None:
        check_kv_cache_options(options)
    if is_saved_profile(options.model):
        check_saved_profile_options(options)
    if options.batch is not None:
        check_sweep_options(options)
    filters = _given(options, "--min-pct", "--include", "--exclude")
    if filters and (options.top is not None or _is_figure(options)):
        # they filter the module rows of the tree and the tables (the checks above refused
        # them for the other tables): the module types of --top and a figure's bars were
        # drawn from every module regardless
        shown = "--top (module types over every module)" if options.top is not None \
            else "-o FIGURE (drawn from every module)"
        raise CliError(f"{', '.join(filters)} filter the rows of the module tree and tables: "
                       f"{shown} does not take them")
    if options.no_fold and not _is_figure(options):
        flat = _given(options, "--sort", "--top")  # --by-operator: check_output_options
        if flat:  # only the tree folds repeated blocks: --sort ops --no-fold changed nothing
            raise CliError(f"--no-fold unfolds the module tree's repeated blocks: {flat[0]} "
                           "shows a flat table, which folds nothing")
    if options.top is not None and not _is_figure(options) and column_items(options.what):
        # the types' table has its own columns: --what io showed them as ever
        raise CliError(f"--top shows the module types' own columns: --what "
                       f"{','.join(column_items(options.what))} does not apply (--what "
                       f"{', '.join(PASS_WHAT)} add their passes' columns)")
    if options.iters is not None and ("time" not in _items(options.what or "")
                                      or options.generate is not None):
        raise CliError("--iters sets the timed iterations of the module timer: it only "
                       "applies with --what time (and without --generate)")
    if options.meta and options.device not in (None, "meta"):
        # --meta won: the model was built and counted on the meta device, --device dropped
        raise CliError(f"--meta and --device {options.device} name two places to run: --meta "
                       "counts on the meta device (nothing computed, nothing timed), --device "
                       f"{options.device} runs there; give one")
    if options.predict:
        measured = [item for item in _items(options.what or "") if item in ("time", "memory")]
        given = [f"--what {','.join(measured)}"] if measured else []
        given += _given(options, "--by-operator")
        # the prediction runs on the meta device: --device cpu was dropped in silence
        given += [f"--device {options.device}"] if options.device not in (None, "meta") else []
        if given:
            raise CliError(f"--predict predicts without running the model: {', '.join(given)} "
                           "needs a measured run (drop --predict)")
    if not options.predict:
        given = _given(options, "--host") + \
            ([] if options.tf32 is None else ["--tf32" if options.tf32 else "--no-tf32"])
        if given:
            raise CliError(f"{', '.join(given)} only applies to a prediction: add --predict "
                           "GPU (e.g. --predict \"H100 SXM\")")
    if _is_figure(options) and options.batch is None:
        check_figure_options(options)
    check_patterns(options)
    check_output_options(options)
    if options.host is None:
        options.host = DEFAULT_HOST


FIGURE_METRICS = ("ops", "flops", "macs", "params", "time", "memory")
"""The ``--what`` items a figure (``-o figure.png``) can draw; without ``--sort`` the one
named is drawn, else ``ops``."""


def check_figure_options(options: argparse.Namespace) -> None:
    """A module figure draws one metric, by module at ``--depth`` or by ``--top``'s types
    over every module: refuse the ``--what`` items it would not draw (``--what flops,params``
    drew flops, ``--what io`` ops) and ``--depth`` beside ``--top``; the passes ``--what``
    runs (time, memory, backward) stay."""
    items = _items(options.what or "")
    passes = set(items) - set(column_items(options.what))
    metrics = [item for item in items if item in FIGURE_METRICS]
    drawn = options.sort or (metrics[0] if metrics else "ops")
    ignored = [item for item in items if item != drawn and item not in passes]
    if ignored:
        raise CliError(f"-o {options.output} draws one metric ({drawn}): --what "
                       f"{','.join(ignored)} does not apply (--sort COLUMN or one --what item "
                       f"of {', '.join(FIGURE_METRICS)} picks the metric)")
    if options.top is not None and options.depth is not None:
        raise CliError(f"-o {options.output} draws --top's module types over every module: "
                       "--depth does not apply (without --top it draws the modules at --depth)")


def check_patterns(options: argparse.Namespace) -> None:
    """Refuse an empty ``--include`` or ``--exclude`` pattern: it matched no module, and the
    table said nothing of why (a pattern that matches nothing is said in the table's notes)."""
    for flag, patterns in (("--include", options.include), ("--exclude", options.exclude)):
        for pattern in patterns or ():
            if not pattern.strip():
                raise CliError(f"{flag} {pattern!r} is an empty pattern, which matches no "
                               f"module: give a glob of module paths or types (e.g. {flag} "
                               "'Conv*' or 'layer1.*')")


PASS_WHAT = ("time", "memory", "backward")
"""The ``--what`` groups that pick a pass to run (not columns to show): what a whole-profile
file or ``--per``'s frame takes of ``--what``, since they hold every column."""


def column_items(what: str | None) -> list[str]:
    """The items of ``--what`` that only pick columns (not a pass: :data:`PASS_WHAT` and the
    backward columns, which run the backward)."""
    return [item for item in _items(what or "") if item not in PASS_WHAT and not item.startswith(
        ("backward_", "self_backward_", "inclusive_backward_"))]


def _written(options: argparse.Namespace) -> str:
    """What the command writes: a module ``view`` (the tree, a table), the ``operators``
    table, a prediction ``sweep``, the ``generate`` steps, the ``kv-cache`` lines or
    ``per``'s frame."""
    if options.kv_cache is not None:
        return "kv-cache"
    if options.generate is not None:
        return "generate"
    if options.per is not None:
        return "per"
    if options.batch is not None:
        return "sweep"
    return "view" if options.by_operator is None else "operators"


def check_output_options(options: argparse.Namespace) -> None:
    """Refuse the options the chosen output has no place for, naming both (they were dropped
    in silence, or said ignored on stderr): a rendering option of another format (``--title``
    in CSV, ``--width`` in LaTeX, ``--color`` in a file), and the options that shape a view
    in a file of the whole profile (``--sort`` in JSON, ``--depth`` in the HTML report)."""
    written = _written(options)
    if _is_figure(options):
        fmt: str | None = "figure"
    else:
        named = options.format or (os.path.splitext(options.output)[1] if options.output
                                   else "csv" if written == "per" else "text")
        fmt = builtin_format(named) if named else None
    if fmt is None:  # not a built-in format: the format table answers when the command runs
        return
    if written == "operators" and fmt in WHOLE_PROFILE:  # the whole profile, not its table
        written = "view"
    target = (f"--format {options.format}" if options.format
              else f"-o {options.output}" if options.output else "the text on the terminal")
    target = {"kv-cache": "--kv-cache", "per": f"--per {options.per}",
              "generate": f"--generate ({target})", "sweep": f"--batch ({target})"
              }.get(written, target)
    values = {"--title": options.title, "--caption": options.caption,
              "--label": options.label, "--width": options.width,
              "--unicode": options.unicode or None, "--no-fold": options.no_fold or None,
              "--color": options.color}
    taken = render_flags_taken(written, fmt, stdout=options.output is None)
    refused = [flag for flag, value in values.items() if value is not None and flag not in taken]
    if refused:
        raise CliError(refusal(refused, target))
    if written != "per" and (written != "view" or fmt not in WHOLE_PROFILE):
        return  # a table: the options that shape it apply
    columns = column_items(options.what)
    given = [f"--what {','.join(columns)}"] if columns else []
    if written == "view":  # --per refused the rest (check_per_options)
        given += _given(options, *_MODULE_VIEW_FLAGS)
        if options.by_operator:  # the JSON holds every operator, the report none
            given.append(f"--by-operator {options.by_operator}")
        elif options.by_operator is not None and fmt == "html":
            given.append("--by-operator")
    if given:
        holds = {"json": "the whole profile (every column, reloadable)",
                 "html": "the whole profile's report"}.get(fmt, "every column")
        raise CliError(f"{target} writes {holds}, not a table: {', '.join(given)} "
                       f"{'does' if len(given) == 1 else 'do'} not apply (--what "
                       f"{', '.join(PASS_WHAT)} pick the passes it holds)")


def check_per_options(options: argparse.Namespace) -> None:
    """``--per`` writes a whole frame in CSV: refuse what shapes a view (it would be dropped)
    and the tables that are no module frame. ``--what`` stays: it picks the passes (time,
    memory, backward) whose columns the frame holds."""
    given = _given(options, *_MODULE_VIEW_FLAGS, "--by-operator", "--generate", "--kv-cache",
                   "--batch", "-o FIGURE")
    if given:
        raise CliError(f"--per {options.per} writes the whole per-{options.per} frame: "
                       f"{', '.join(given)} does not apply to it")
    suffix = os.path.splitext(options.output or "")[1].lower()
    fmt = options.format or (suffix.lstrip(".") if options.output else "csv")
    if fmt.lower() != "csv":
        raise CliError(f"--per {options.per} writes CSV (the frame profile.save('x.csv', "
                       f"aggregate={options.per!r}) writes), not {fmt or 'a file without a '}"
                       f"{'' if fmt else 'suffix'}: use -o FILE.csv or --format csv")


def parse_batch_sizes(text: str) -> list[int]:
    """``"1,8,64"`` -> ``[1, 8, 64]`` (``--batch``)."""
    try:
        sizes = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        sizes = []
    if not sizes or any(size < 1 for size in sizes):
        raise CliError(f"bad --batch {text!r}: expected positive batch sizes joined by commas, "
                       "e.g. 1,8,64,256")
    return sizes


def check_sweep_options(options: argparse.Namespace) -> None:
    """``--batch`` predicts: it needs ``--predict`` and has no use for the module views."""
    parse_batch_sizes(options.batch)
    if not options.predict:
        raise CliError("--batch sweeps a prediction: add --predict GPU (e.g. --predict "
                       "\"H100 SXM\")")
    given = _given(options, *_MODULE_VIEW_FLAGS, "--what", "--by-operator", "--generate",
                   "--kv-cache")
    if given:
        raise CliError(f"--batch prints one row per batch size and dtype, not modules: "
                       f"{', '.join(given)} does not apply")


DEFAULT_HOST = "calibrated"
"""``--host`` when not given: ``moduleprofiler.prediction.predict.DEFAULT_HOST``'s copy."""

GENERATE_WHAT = ("time", "memory")
"""The ``--what`` groups ``--generate`` adds to its steps table."""


def check_generation_options(options: argparse.Namespace) -> None:
    """Refuse the options ``--generate`` would otherwise ignore: the module views' filters
    and ``--what`` groups other than time and memory."""
    if options.predict:
        raise CliError("--generate measures a run; --predict predicts one without running: "
                       "use one of them")
    given = _given(options, *_MODULE_VIEW_FLAGS, "-o FIGURE")
    if given:
        raise CliError(f"--generate prints one row per generation step, not modules: "
                       f"{', '.join(given)} does not apply (drop --generate for the module "
                       f"tree)")
    other = [item for item in _items(options.what or "") if item not in GENERATE_WHAT]
    if other:
        raise CliError(f"--generate --what takes {' and/or '.join(GENERATE_WHAT)} (each "
                       f"step's time and live memory; every step shows its MACs and FLOPs), "
                       f"not {','.join(other)}")


def check_kv_cache_options(options: argparse.Namespace) -> None:
    """Refuse the options ``--kv-cache`` would otherwise ignore: it reads one sequence's cache
    from the configuration, so inputs (their batch too), a device, columns, the module views,
    a prediction and a figure have no meaning for it."""
    given = (["-i"] if options.input_size else []) + (["--meta"] if options.meta else []) \
        + _given(options, "--what", *_MODULE_VIEW_FLAGS, "--predict", "--device", "-o FIGURE")
    if given:
        raise CliError(f"--kv-cache predicts one sequence's cache from the configuration alone "
                       f"(nothing is built or run): {', '.join(given)} does not apply")


def is_saved_profile(model: str) -> bool:
    """The model argument names a profile saved as JSON (``-o profile.json``), not a factory."""
    return model.endswith(".json") and ":" not in model


def check_saved_profile_options(options: argparse.Namespace) -> None:
    """A saved profile is shown as it was saved: refuse the options that build or run a model
    (they were ignored, and the saved numbers shown as if they answered them)."""
    given = (["-i"] if options.input_size else []) + (["--arg"] if options.arg else []) + (
        ["--meta"] if options.meta else []) + _given(options, "--dtype", "--device",
                                                      "--predict", "--generate", "--iters")
    if given:
        raise CliError(f"{options.model} is a saved profile, shown as it was saved (nothing "
                       f"is run): {', '.join(given)} does not apply; run the model itself "
                       "(package.module:factory) to change them")


def factory_kwargs(args: Sequence[str]) -> dict[str, Any]:
    """``["depth=3", "name=tiny"]`` -> ``{"depth": 3, "name": "tiny"}``."""
    out: dict[str, Any] = {}
    for item in args:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise CliError(f"--arg {item!r} must look like KEY=VALUE")
        if key in out:  # the last one won in silence
            raise CliError(f"--arg {key} is given twice ({key}={out[key]!r} and {item})")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def parse_input_size(text: str) -> tuple[tuple[int, ...], str | None]:
    """``"1x3x224x224"`` -> ``((1, 3, 224, 224), None)``; ``"8x128:int64"`` -> dtype too."""
    shape_text, colon, dtype = text.partition(":")
    if colon and not dtype.strip():  # "2x4:" was read as no dtype: the default in silence
        raise CliError(f"bad --input-size {text!r}: no dtype after ':' (e.g. 8x128:int64)")
    parts = shape_text.lower().replace("×", "x").replace(",", "x").split("x")
    try:
        shape = tuple(int(part) for part in parts)
    except ValueError:
        shape = ()
    if not shape:
        raise CliError(f"bad --input-size {text!r}: expected sizes joined by x, "
                       "e.g. 1x3x224x224 or 8x128:int64")
    if any(dim < 1 for dim in shape):  # a tensor without elements runs no work: 0 ops
        raise CliError(f"bad --input-size {text!r}: every size must be at least 1")
    return shape, dtype or None


def _items(what: str) -> list[str]:
    """The comma-separated items of ``--what``."""
    return [item.strip() for item in what.split(",") if item.strip()]


def _is_figure(options: argparse.Namespace) -> bool:
    """``-o`` names a figure file (.png, .svg, .pdf) and no ``--format`` says otherwise."""
    suffix = os.path.splitext(options.output or "")[1].lower()
    return not options.format and suffix in FIGURE_SUFFIXES


STDOUT = "-"
"""``-o -``: write to standard output, as without ``-o`` (it wrote a file named ``-``)."""


def check_output_path(output: str | None) -> None:
    """Refuse an ``-o`` file that cannot be written before anything runs: one in a directory
    that does not exist, one naming a directory, one in a directory not writable (each was
    said only once the model had been built, run and timed, the run lost)."""
    if output is None:
        return
    folder = os.path.dirname(output) or os.curdir
    if os.path.isdir(output):
        raise CliError(f"-o {output} is a directory: name a file in it (e.g. -o "
                       f"{os.path.join(output, 'profile.html')})")
    if not os.path.isdir(folder):
        raise CliError(f"-o {output}: no directory {folder} to write it in (create it first)")
    if not os.access(folder, os.W_OK) or (os.path.exists(output)
                                          and not os.access(output, os.W_OK)):
        raise CliError(f"-o {output}: permission denied (cannot write "
                       f"{output if os.path.exists(output) else 'in ' + folder})")


_SHAPE_FLAGS = ("-i", "--input-size")


def _shapes_attached(argv: list[str]) -> list[str]:
    """``-i -1x4`` as ``-i=-1x4``: argparse takes a value that starts with a dash and is no
    plain negative number for an option, and answered "-i/--input-size: expected one
    argument" where the size itself is what is wrong."""
    out: list[str] = []
    for item in argv:
        if out and out[-1] in _SHAPE_FLAGS and item[:1] == "-" and item[1:2].isdigit():
            out[-1] = f"{out[-1]}={item}"
        else:
            out.append(item)
    return out


def parse_options(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line parsed and checked: every error that needs no model or torch
    (``--dtype`` and ``--device`` names are torch's, checked when the command runs)."""
    options = build_parser().parse_args(_shapes_attached(sys.argv[1:] if argv is None
                                                         else list(argv)))
    if options.output == STDOUT:  # the usual spelling of standard output: no file named "-"
        options.output = None
    check_options(options)
    check_output_path(options.output)
    factory_kwargs(options.arg)
    for size in options.input_size:
        parse_input_size(size)
    return options


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (0, or 2 after a one-line error)."""
    try:
        options = parse_options(argv)
        # imported only now (the one import inside a function, tests/test_architecture.py):
        # the options are fine, so the command needs torch, pandas and the rest
        from moduleprofiler.cli import run

        run(options)
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
