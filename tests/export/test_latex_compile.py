"""The LaTeX tables compile with pdflatex (skipped when it is not installed; Debian package
``texlive-latex-recommended``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from moduleprofiler import ModuleProfiler
from moduleprofiler.export import summary
from tests.export.profiles import hostile, hostile_model, tiny

PDFLATEX = shutil.which("pdflatex")
pytestmark = pytest.mark.skipif(
    PDFLATEX is None, reason="pdflatex not installed (apt-get install texlive-latex-recommended)")

PREAMBLE = {
    "t1": "\\usepackage[T1]{fontenc}\n\\usepackage{booktabs}\n\\usepackage{longtable}\n",
    "default": "\\usepackage{booktabs}\n\\usepackage{longtable}\n",
}


def tables() -> str:
    model, x = hostile_model()
    real = ModuleProfiler().profile(model, x)
    parts = [
        tiny().to_latex(caption="Tiny model, every module", label="tab:tiny"),
        hostile().to_latex(caption="Names: <script> & 100% {braces} _under_ \\ ~ ^ $ #",
                           label="tab:hostile"),
        real.to_latex(caption="A real model with hostile names", label="tab:real"),
        tiny().top(3, depth=1).to_latex(caption="Top module types at depth 1"),
        summary({"tiny_net": tiny(), "hostile & co": hostile(), "real": real}).to_latex(
            caption="One row per model", label="tab:summary"),
        tiny().table(max_depth=1).to_latex(environment="longtable", caption="Long table"),
    ]
    return "\n".join(str(part) for part in parts)


def compile_document(directory: Path, preamble: str, body: str) -> str:
    source = directory / "doc.tex"
    source.write_text(f"\\documentclass{{article}}\n{preamble}\\begin{{document}}\n{body}\n"
                      "\\end{document}\n", encoding="utf-8")
    result = subprocess.run(
        [str(PDFLATEX), "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape",
         "doc.tex"], cwd=directory, capture_output=True, text=True, timeout=120)
    log = (directory / "doc.log").read_text(encoding="utf-8", errors="replace")
    assert result.returncode == 0, log[-3000:]
    assert (directory / "doc.pdf").stat().st_size > 0
    return log


@pytest.mark.parametrize("preamble", list(PREAMBLE))
def test_tables_compile(tmp_path: Path, preamble: str) -> None:
    log = compile_document(tmp_path, PREAMBLE[preamble], tables())
    assert "Undefined control sequence" not in log
    if preamble == "t1":
        assert "Missing character" not in log
