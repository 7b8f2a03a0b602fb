"""The LaTeX tables compile with pdflatex (skipped when it is not installed; Debian package
``texlive-latex-recommended``), and the tables of real models fit the page: no
``Overfull \\hbox`` in the log."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from moduleprofiler import ModuleProfiler
from moduleprofiler.export import summary
from tests.export import real_profiles
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


def compile_document(directory: Path, preamble: str, body: str,
                     options: str = "") -> str:
    source = directory / "doc.tex"
    source.write_text(f"\\documentclass[{options}]{{article}}\n{preamble}"
                      f"\\begin{{document}}\n{body}\n"
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


OVERFULL = re.compile(r"Overfull \\hbox \(([\d.]+)pt too wide\)")
FIT_PREAMBLE = "\\usepackage{booktabs}\n\\usepackage{longtable}\n\\usepackage{graphicx}\n"


def overfull(log: str) -> list[float]:
    """How many points each overfull line of the log is too wide."""
    return [float(points) for points in OVERFULL.findall(log)]


def test_real_tables_overflow_without_fitting(tmp_path: Path) -> None:
    # the check below can fail: ResNet-18's full default table is wider than the text block
    table = real_profiles.resnet18().to_latex(max_depth=1, fit=False)
    assert overfull(compile_document(tmp_path, FIT_PREAMBLE, str(table))) != []


def test_real_tables_fit_one_column(tmp_path: Path) -> None:
    resnet, vit, gpt2 = (real_profiles.resnet18(), real_profiles.vit_b_16(),
                         real_profiles.gpt2())
    tables = [
        resnet.to_latex(max_depth=1, caption="ResNet-18", label="tab:resnet"),
        vit.to_latex(max_depth=2, caption="ViT-B/16"),
        vit.to_latex(max_depth=4, environment="longtable", caption="ViT-B/16, deep paths"),
        gpt2.to_latex(max_depth=2, caption="GPT-2 small"),
        gpt2.to_latex(max_depth=3, environment="longtable", caption="GPT-2 small, depth 3"),
        resnet.top(5).to_latex(caption="ResNet-18 module types"),
        # named columns are never left out: this one has to be scaled down
        gpt2.to_latex(columns=["type", "calls", "params", "output_shapes", "macs",
                       "flops", "ops", "ops_pct",
                       "param_bytes"], max_depth=2, caption="Every column"),
    ]
    texts = [str(table) for table in tables]
    log = compile_document(tmp_path, FIT_PREAMBLE, "\n\\clearpage\n".join(texts))
    assert overfull(log) == []
    first = texts[0].split("\\toprule\n")[1].split(" \\\\")[0]
    assert first == "module & type & params & MACs & ops & ops \\%"  # shapes, calls left out
    assert "\\resizebox" not in "".join(texts[:-1]) and "\\resizebox" in texts[-1]
    assert "output" in texts[-1] and "param bytes" in texts[-1]


def test_real_tables_fit_two_columns(tmp_path: Path) -> None:
    resnet, vit, gpt2 = (real_profiles.resnet18(), real_profiles.vit_b_16(),
                         real_profiles.gpt2())
    tables = [
        resnet.to_latex(max_depth=1, wide=True, caption="ResNet-18, across the page"),
        vit.to_latex(max_depth=2, wide=True, caption="ViT-B/16, across the page"),
        gpt2.to_latex(max_depth=2, wide=True, caption="GPT-2, across the page"),
        # one column of the two-column page: (452 - 10) / 2 = 221 pt
        resnet.to_latex(max_depth=1, width=221, caption="ResNet-18 in one column"),
        gpt2.to_latex(max_depth=1, width=221, caption="GPT-2 in one column"),
    ]
    texts = [str(table) for table in tables]
    assert all(text.startswith("\\begin{table*}") for text in texts[:3])
    assert "output" in texts[0]  # the wide ResNet-18 table keeps every default column
    log = compile_document(tmp_path, FIT_PREAMBLE, "\n\\clearpage\n".join(texts),
                           options="twocolumn,a4paper")
    assert overfull(log) == []


DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img" / "latex-tables.png"


@pytest.mark.skipif(not os.environ.get("UPDATE_SCREENSHOT") or not shutil.which("pdftoppm"),
                    reason="set UPDATE_SCREENSHOT=1 (and install pdftoppm) to refresh "
                           "docs/img/latex-tables.png")
def test_docs_page_image(tmp_path: Path) -> None:
    resnet = real_profiles.resnet18()
    text = ("The tables below are what \\texttt{to\\_latex} writes by default: each fits the "
            "text block of a plain one-column \\texttt{article}. ") * 3
    body = "\n".join([
        text,
        str(resnet.to_latex(max_depth=1, caption="ResNet-18 by top-level module",
                            label="tab:resnet18", position="h")),
        str(resnet.top(4).to_latex(caption="ResNet-18: top module types", position="h")),
    ])
    log = compile_document(tmp_path, PREAMBLE["t1"], body)
    assert overfull(log) == []
    # the text block of page 1 at 100 dpi
    subprocess.run(["pdftoppm", "-png", "-r", "100", "-f", "1", "-l", "1", "-singlefile",
                    "-x", "150", "-y", "120", "-W", "560", "-H", "600", "doc.pdf", "page"],
                   cwd=tmp_path, check=True, timeout=60)
    DOCS_IMG.write_bytes((tmp_path / "page.png").read_bytes())


def _unicode_names_table() -> str:
    import torch
    from torch import nn

    class Named(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # ModuleDict keys are any text: Latin-1 typesets, the rest is written as code points
            self.parts = nn.ModuleDict({"résumé": nn.Linear(4, 4), "∑→α": nn.ReLU(),
                                        "模型": nn.Linear(4, 2)})

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for part in self.parts.values():
                x = part(x)
            return x

    return str(ModuleProfiler().profile(Named(), torch.randn(2, 4)).to_latex(
        caption="Names beyond Latin-1: ∑"))


@pytest.mark.parametrize("preamble", sorted(PREAMBLE))
def test_names_beyond_latin_1_compile(tmp_path: Path, preamble: str) -> None:
    table = _unicode_names_table()
    assert "parts.résumé" in table
    assert "[U+2211][U+2192][U+03B1]" in table and "[U+6A21][U+578B]" in table
    compile_document(tmp_path, PREAMBLE[preamble], table)
