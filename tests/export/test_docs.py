"""The examples of docs/exports.md and docs/cli.md run as written, and so do the scripts in
examples/ that belong to the export layer."""

from __future__ import annotations

import re
import runpy
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from moduleprofiler import cli
from moduleprofiler.cli import build_model, main
from tests.documented import assert_shown, run_page

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def blocks(name: str, language: str) -> list[str]:
    text = (DOCS / name).read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize(("name", "outputs"), [("exports.md", 6), ("cli.md", 0)])
def test_python_blocks_run_in_order(name: str, outputs: int, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples run in order, and each output shown is what they print now (in an
    80-column terminal)."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "80")
    namespace: dict[str, object] = {"__name__": f"__docs_{name}__"}
    assert blocks(name, "python"), f"{name} has no python examples"
    assert run_page(DOCS / name, f"docs/{name}", namespace) == outputs


def _console_examples() -> list[tuple[str, list[str]]]:
    """``(command, shown output lines)`` for every ``$ moduleprofiler`` line of cli.md."""
    examples = []
    for block in blocks("cli.md", "console"):
        lines = block.splitlines()
        for index, line in enumerate(lines):
            if line.startswith("$ moduleprofiler "):
                output = []
                for following in lines[index + 1:]:
                    if following.startswith("$ "):
                        break
                    output.append(following)
                examples.append((line[2:], output))
    return examples


_BUILT: dict[str, Any] = {}


def _cached_build(spec: str, kwargs: dict[str, Any], meta: bool) -> Any:
    """Build each documented model once for all the examples (the profiler leaves it as it
    was, so reusing it changes no number)."""
    key = f"{spec} {sorted(kwargs.items())} {meta}"
    if key not in _BUILT:
        _BUILT[key] = build_model(spec, kwargs, meta)
    return _BUILT[key]


@pytest.mark.parametrize(("command", "shown"), _console_examples(),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_cli_examples_run(command: str, shown: list[str], tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(cli, "build_model", _cached_build)
    argv = shlex.split(command)[1:]
    argv = [str(ROOT / arg) if arg.startswith("examples/") else arg for arg in argv]
    if argv[0] == "resnet18.json":  # made by the example before it
        assert main(["torchvision.models:resnet18", "-i", "1x3x224x224", "-o",
                     "resnet18.json", "--format", "json"]) == 0
    status = main(argv)
    out, err = capsys.readouterr()
    if shown and shown[0].startswith("moduleprofiler: error:"):
        assert status == 2
        assert err.split(" raised ")[0].rstrip("\n") == shown[0].split(" raised ")[0]
        return
    assert status == 0, err
    if shown:  # the output, every number included, is as documented
        assert_shown("\n".join(shown) + "\n", out, f"docs/cli.md: {command}")


def test_every_cli_option_is_documented() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    options = re.findall(r"--[a-z][a-z-]+", " ".join(
        " ".join(action.option_strings)
        for action in __import__("moduleprofiler.cli", fromlist=["x"]).build_parser()._actions))
    missing = [o for o in options if o not in text and o not in ("--help", "--version")]
    assert missing == []


@pytest.mark.parametrize("script", ["html_report.py", "latex_table.py"])
def test_examples_run(script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [script, str(tmp_path / "out.html")
                                      if script == "html_report.py" else str(tmp_path)])
    runpy.run_path(str(ROOT / "examples" / script), run_name="__main__")
    written = sorted(p.name for p in tmp_path.iterdir())
    expected = ["out.html"] if script == "html_report.py" else ["models.tex",
                                                                "resnet18_modules.tex"]
    assert written == expected
