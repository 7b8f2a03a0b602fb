"""Every Python code block in README.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fixtures.pyproject import read_pyproject

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index: int) -> None:
    exec(compile(BLOCKS[index], f"README.md block {index}", "exec"), {"__name__": "__readme__"})


def test_readme_gives_exactly_the_ci_commands() -> None:
    setup = re.search(r"## Set up\n\n```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert setup is not None
    commands = [line for line in setup.group(1).splitlines() if line.strip()]
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert len(commands) == 2
    for command in commands:
        assert command in ci.splitlines()


def test_readme_command_lines_run(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    text = README.read_text(encoding="utf-8")
    commands = [line for block in re.findall(r"```bash\n(.*?)```", text, re.S)
                for line in block.splitlines() if line.startswith("moduleprofiler ")]
    assert commands
    for command in commands:
        argv = [sys.executable, "-m", "moduleprofiler", *command.split()[1:]]
        result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (command, result.stderr[-1000:])
    assert (tmp_path / "resnet18.html").exists()
    # the console script the README uses is installed beside the interpreter
    assert Path(sys.executable).with_name("moduleprofiler").exists() or shutil.which(
        "moduleprofiler")


def _install_line(text: str) -> str:
    lines = [line for block in re.findall(r"```bash\n(.*?)```", text, re.S)
             for line in block.splitlines() if line.startswith("pip install \".[")]
    assert len(lines) == 1, lines
    return lines[0]


def test_one_install_story() -> None:
    """README and docs/index.md give the same install command, and its extras bring in every
    package the examples of both pages import."""
    index = (README.parent / "docs" / "index.md").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    line = _install_line(readme)
    assert line == _install_line(index) == 'pip install ".[plot,progress,vision,language]"'
    project = read_pyproject()
    extras = project["project"]["optional-dependencies"]
    named = re.search(r"\[(.*)\]", line)
    assert named is not None
    installed = {"torch", "pandas", "jinja2", "moduleprofiler"}
    for extra in named.group(1).split(","):
        installed |= {re.split(r"[<>=\[ ]", requirement)[0] for requirement in extras[extra]}
    code = "\n".join(re.findall(r"```python\n(.*?)```", readme + index, re.S))
    imported = set(re.findall(r"^\s*(?:import|from) ([a-z_]+)", code, re.M))
    stdlib = {"math", "os", "sys", "json", "pathlib", "tempfile", "warnings", "io", "re",
              "contextlib", "dataclasses", "functools", "itertools", "collections", "typing"}
    assert "torchvision" in imported and "torchvision" in installed
    assert imported - stdlib <= installed
