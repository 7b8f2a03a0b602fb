"""The public surface: exact ``__all__`` and 0.0.4's import paths."""

from __future__ import annotations

import inspect

import moduleprofiler


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
