"""The 0.0.4 face lives in ``moduleprofiler.compat``; its old paths keep working."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

import moduleprofiler
import moduleprofiler.compat.profiler as compat_profiler
import moduleprofiler.compat.timing as compat_timing
import moduleprofiler.compat.utils as compat_utils


def _fresh_import(name: str) -> object:
    sys.modules.pop(name, None)
    return importlib.import_module(name)


@pytest.mark.parametrize(("old", "new"), [
    ("moduleprofiler.legacy", compat_profiler),
    ("moduleprofiler.legacy_timing", compat_timing),
])
def test_our_own_old_paths_warn_and_re_export(old: str, new: object) -> None:
    with pytest.warns(DeprecationWarning, match=new.__name__):  # type: ignore[attr-defined]
        module = _fresh_import(old)
    for name in module.__all__:  # type: ignore[attr-defined]
        assert getattr(module, name) is getattr(new, name, getattr(module, name))
    if old == "moduleprofiler.legacy":
        assert module.LegacyPasses is moduleprofiler.ModuleProfiler  # type: ignore[attr-defined]
        assert module.dict_to_frame is compat_profiler.dict_to_frame  # type: ignore[attr-defined]


def test_0_0_4_paths_work_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        utils = _fresh_import("moduleprofiler.utils")
        profiler = _fresh_import("moduleprofiler.profiler")
    for name in utils.__all__:  # type: ignore[attr-defined]
        assert getattr(utils, name) is getattr(compat_utils, name)
    assert profiler.ModuleProfiler is moduleprofiler.ModuleProfiler  # type: ignore[attr-defined]
    assert moduleprofiler.ModuleProfiler is compat_profiler.ModuleProfiler


def test_a_writer_given_the_model_first_says_to_swap_them(tmp_path) -> None:
    import pytest
    from torch import nn

    from moduleprofiler import ModuleProfiler

    model = nn.Linear(3, 2)
    path = str(tmp_path / "params")
    with pytest.raises(TypeError, match=r"file must be a path, got the model Linear \(swap "
                                        r"them: count_params_csv\(file, module"):
        ModuleProfiler().count_params_csv(model, path)
    ModuleProfiler().count_params_csv(path, model)  # 0.0.4's order: file, then the model
    assert (tmp_path / "params.csv").read_text().startswith("module")
