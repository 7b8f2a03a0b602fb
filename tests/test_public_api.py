"""The public surface: exact ``__all__`` and 0.0.4's import paths."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

import moduleprofiler

ROOT = Path(__file__).resolve().parent.parent


def test_all_is_exact() -> None:
    assert sorted(moduleprofiler.__all__) == sorted([
        "Call", "CallRecord", "FormulaError", "Listener", "LossError", "ModuleInfo",
        "ModuleProfiler", "OperatorListener", "PassRunner", "Profile", "Profiler",
        "ProfilingError", "RegistryError", "TimingOptions", "TrainingProfiler", "__version__",
        "get_default_io_size_map",
        "get_default_macs_map", "get_default_ops_map", "register_io_size", "register_macs",
        "register_ops", "unregister_io_size", "unregister_ops",
    ])
    for name in moduleprofiler.__all__:
        assert hasattr(moduleprofiler, name)


def test_legacy_import_paths() -> None:
    from moduleprofiler import ModuleProfiler, get_default_io_size_map, get_default_ops_map
    from moduleprofiler.profiler import ModuleProfiler as Same
    from moduleprofiler.utils import get_hardware_specs, ops_to_flops, realtime_factor

    assert Same is ModuleProfiler
    assert callable(get_default_ops_map) and callable(get_default_io_size_map)
    assert callable(get_hardware_specs)
    assert ops_to_flops(1000, 16000, 160) == 100000.0
    # ((16000 - 512) / 256 + 1) * 1000 = 61.5 * 1000
    assert ops_to_flops(1000, 16000, 512, hop_size=256) == 61500.0
    # 100 frames/s * 2 ms = 200 ms busy per second -> 5x real time
    assert realtime_factor(2.0, 16000, 160) == 5.0
    assert realtime_factor(2.0, 16000, 160, inverse=True) == 0.2
    assert isinstance(moduleprofiler.__version__, str)


def test_constructor_keeps_the_legacy_keywords_and_defaults() -> None:
    parameters = inspect.signature(moduleprofiler.ModuleProfiler).parameters
    expected = {
        "input_size_attr": "__input_size__", "output_size_attr": "__output_size__",
        "ops_attr": "__ops__", "inference_start_attr": "__inference_start__",
        "inference_end_attr": "__inference_end__", "ts_fmt": "%Y-%m-%d %H:%M:%S",
        "verbose": False,
    }
    for name, default in expected.items():
        assert parameters[name].default == default
    assert list(parameters)[:10] == [
        "input_size_attr", "output_size_attr", "ops_attr", "inference_start_attr",
        "inference_end_attr", "io_size_fn_map", "ops_fn_map", "exclude_from_ops", "ts_fmt",
        "verbose",
    ]


def test_the_front_door_is_small() -> None:
    """``Profiler``: at most 10 public methods, at most 12 keywords each, the loop's settings
    through ``options`` only (the long keyword lists stay on the 0.0.4 ``ModuleProfiler``)."""
    from moduleprofiler import ModuleProfiler, Profiler

    methods = {name: member for name, member in vars(Profiler).items()
               if callable(member) and not name.startswith("_")}
    assert 1 <= len(methods) <= 10, sorted(methods)
    for name, method in methods.items():
        keywords = [p for p in inspect.signature(method).parameters.values()
                    if p.name not in ("self", "module", "input")]
        assert len(keywords) <= 12, (name, [p.name for p in keywords])
        assert all(p.kind is not p.VAR_KEYWORD for p in keywords), name
    assert issubclass(ModuleProfiler, Profiler)
    for name in ("benchmark", "time_modules", "train_step_times"):
        assert "options" in inspect.signature(getattr(Profiler, name)).parameters
        # the 0.0.4 face still takes every keyword of the timing functions
        assert any(p.kind is p.VAR_KEYWORD
                   for p in inspect.signature(getattr(ModuleProfiler, name)).parameters.values())


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={"PATH": "/usr/bin:/bin",
                                                         "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


def test_import_moduleprofiler_alone_imports_no_torch() -> None:
    # the command line's --version and argument errors rely on it
    assert _run("import sys, moduleprofiler; print(sorted({'torch', 'pandas'} & "
                "set(sys.modules)))") == "[]"
    assert _run("import sys, moduleprofiler; moduleprofiler.Profile; "
                "print('torch' in sys.modules)") == "True"


def test_public_names_load_from_the_modules_their_type_checking_imports_name() -> None:
    tree = ast.parse(Path(moduleprofiler.__file__).read_text(encoding="utf-8"))
    guarded = next(node for node in tree.body if isinstance(node, ast.If))
    declared = {alias.name: node.module for node in guarded.body
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert declared == moduleprofiler._EXPORTS
    assert {*declared, "__version__"} == set(moduleprofiler.__all__)


def test_a_saved_timing_profile_read_with_the_export_package_alone(tmp_path: Path) -> None:
    # its derived time columns are registered by the timing package, which the package's
    # eager __init__ used to import before anything else; load_json still loads it
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    inputs = torch.randn(2, 4)
    profiler = moduleprofiler.ModuleProfiler()
    saved = tmp_path / "timed.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a busy host's timing warnings say nothing here
        timing = profiler.time_modules(model, inputs, num_iters=4)
    profiler.profile(model, inputs).merge(timing).to_json(saved)
    shown = _run(f"import moduleprofiler.export as e; "
                 f"print(e.load_json({str(saved)!r}).tree(['time_median_ms']))")
    assert shown.splitlines()[0].split()[:2] == ["module", "time"]
