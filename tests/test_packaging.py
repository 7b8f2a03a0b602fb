"""What an installed copy of the package carries besides its modules: the marker that tells
type checkers to read the package's annotations (PEP 561) and the device calibrations the
predictor loads. Each must exist in the source tree and be named in ``pyproject.toml``'s
package data, or a wheel leaves it out."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from tests.fixtures.pyproject import read_pyproject

ROOT = Path(__file__).resolve().parent.parent


def _package_data() -> dict[str, list[str]]:
    return read_pyproject()["tool"]["setuptools"]["package-data"]


def test_the_package_is_marked_typed() -> None:
    assert resources.files("moduleprofiler").joinpath("py.typed").is_file()
    assert "py.typed" in _package_data()["moduleprofiler"]


def test_every_data_file_is_named_in_the_package_data() -> None:
    data = _package_data()
    for path in (ROOT / "moduleprofiler").rglob("*"):
        if path.is_dir() or path.suffix in {".py", ".pyc"} or "__pycache__" in path.parts:
            continue
        package = ".".join(path.parent.relative_to(ROOT).parts)
        assert any(path.match(pattern) for pattern in data.get(package, [])), (
            f"{path.relative_to(ROOT)} is not in [tool.setuptools.package-data]")
