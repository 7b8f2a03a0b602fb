"""Every deprecated name warns once per use, names its replacement and its removal release."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.deprecation import REMOVAL_VERSION, warn_deprecated


def test_the_message_names_the_removal_release_and_the_caller() -> None:
    with pytest.warns(DeprecationWarning) as caught:
        warn_deprecated("old()", "use new()", stacklevel=1)  # 1: this line itself
    assert str(caught[0].message) == (
        f"old() is deprecated and will be removed in moduleprofiler {REMOVAL_VERSION}; "
        "use new()")
    assert caught[0].filename == __file__


def test_profile_with_timing_names_the_removal_release() -> None:
    profile = ModuleProfiler().profile(nn.Linear(2, 2), torch.randn(1, 2))
    with pytest.warns(DeprecationWarning, match=rf"removed in moduleprofiler {REMOVAL_VERSION}"
                      r"; use profile\.merge\(memory\)") as caught:
        profile.with_memory(profile)
    assert caught[0].filename == __file__


@pytest.mark.parametrize("name", ["moduleprofiler.legacy", "moduleprofiler.legacy_timing"])
def test_the_moved_modules_name_the_removal_release(name: str) -> None:
    sys.modules.pop(name, None)
    with pytest.warns(DeprecationWarning, match=rf"^{name} is deprecated and will be removed "
                      rf"in moduleprofiler {REMOVAL_VERSION}"):
        importlib.import_module(name)


def test_the_deprecated_per_call_memory_type_names_the_removal_release() -> None:
    # CallMemory was documented "Deprecated" and exported, but making one said nothing and
    # no release was named for its removal
    from moduleprofiler.memory import CallMemory

    with pytest.warns(DeprecationWarning, match=rf"^moduleprofiler\.memory\.CallMemory is "
                      rf"deprecated and will be removed in moduleprofiler {REMOVAL_VERSION}; "
                      r"read report\.records") as caught:
        CallMemory(index=0, parent=None, depth=0, path="", type_name="Linear", call_number=0,
                   output_bytes=8, max_live_bytes=16)
    assert caught[0].filename == __file__


def test_every_name_documented_as_deprecated_warns() -> None:
    # CallMemory's docstring said "Deprecated" while making one warned nothing: a function,
    # method or class documented so calls warn_deprecated (which names the removal release)
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent / "moduleprofiler"
    silent = []
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            doc = ast.get_docstring(node) or ""
            if not doc.startswith("Deprecated"):
                continue
            calls = {inner.func.id for inner in ast.walk(node) if isinstance(inner, ast.Call)
                     and isinstance(inner.func, ast.Name)}
            if "warn_deprecated" not in calls:
                silent.append(f"{path.relative_to(package)}:{node.name}")
    assert silent == []
