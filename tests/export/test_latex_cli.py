"""The command line's LaTeX is Python's: the same default columns, the same fitting, and a
table that needs a package besides booktabs says so in a comment line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.cli import main

# Every package a LaTeX output may use, with the control sequences it defines beyond the
# kernel: booktabs' rules, graphicx' \resizebox.
_NEEDS = {"graphicx": (r"\resizebox",)}


def wide() -> nn.Module:
    """Long module names and wide shapes: the shape columns do not fit a one-column page."""
    inner = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
    return nn.Sequential(nn.Sequential(inner, nn.Linear(64, 10)))


def _cli_latex(tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    target = tmp_path / "cli.tex"
    assert main([*argv, "-o", str(target)]) == 0, capsys.readouterr().err
    return target.read_text(encoding="utf-8")


def test_cli_latex_of_a_saved_profile_is_pythons(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    profile = ModuleProfiler().profile(wide(), torch.randn(512, 3, 17, 64))
    saved = tmp_path / "wide.json"
    profile.save(saved)
    cli = _cli_latex(tmp_path, capsys, str(saved), "--caption", "Wide", "--label", "tab:w")
    python = Profile.from_json(saved).tree().to_latex(caption="Wide", label="tab:w")
    assert cli.rstrip("\n") == python.rstrip("\n")
    # the default columns are Python's: the output shape is left out to fit, not scaled
    assert "output" not in cli and r"\resizebox" not in cli and "MACs" in cli
    for depth in ("0", "1"):
        python = Profile.from_json(saved).tree(max_depth=int(depth)).to_latex()
        assert _cli_latex(tmp_path, capsys, str(saved), "--depth", depth).rstrip("\n") == \
            python.rstrip("\n")


def test_every_package_a_latex_output_needs_is_named(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    profile = ModuleProfiler().profile(wide(), torch.randn(512, 3, 17, 64))
    saved = tmp_path / "wide.json"
    profile.save(saved)
    # columns the caller names are never left out: this table is scaled to fit
    outputs = [_cli_latex(tmp_path, capsys, str(saved), "--what", "params,io,ops"),
               _cli_latex(tmp_path, capsys, str(saved)),
               profile.to_latex() or "", profile.tree().to_latex()]
    assert r"\resizebox" in outputs[0]
    for text in outputs:
        for package, commands in _NEEDS.items():
            if any(command in text for command in commands):
                assert re.search(rf"^% needs \\usepackage{{{package}}}$", text, re.M), text
