"""LaTeX tables fit the page's height as well as its width: the default ``.tex`` of a large
model is folded and depth-limited to one page, every row asked for is a ``longtable`` that
breaks across pages, a table that cannot fit warns; names are shortened at dots only; the
0.0.4 ``*_latex`` writers fit the line. Proved with pdflatex where it is installed."""

from __future__ import annotations

import functools
import re
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.export.latex import LatexFitWarning, header_lines
from moduleprofiler.export.names import elide_path
from tests.export.test_latex_compile import compile_document, overfull

needs_pdflatex = pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="pdflatex not installed (apt-get install texlive-latex-recommended)")
PREAMBLE = "\\usepackage{booktabs}\n"
FLOAT_TOO_LARGE = re.compile(r"Float too large for page by ([\d.]+)pt")
PAGES = re.compile(r"Output written on doc\.pdf \((\d+) pages?")


@functools.cache
def resnet50() -> Profile:
    """ResNet-50 (torchvision) on the meta device: its real 151 modules and counts in about a
    second (random weights would take several to initialise and run)."""
    from torchvision.models import resnet50 as build

    with torch.device("meta"):
        model = build(weights=None)
    return ModuleProfiler().profile(model, torch.randn(1, 3, 224, 224, device="meta"))


@functools.cache
def gpt2_like() -> Profile:
    """GPT-2's structure at a small width: 12 identical blocks ``h.0`` ... ``h.11``."""
    from transformers import GPT2Config, GPT2Model
    from transformers.utils import logging

    logging.set_verbosity_error()  # the tiny vocabulary's bos/eos warnings
    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=12, n_embd=64, n_head=2, vocab_size=100)).eval()
    return ModuleProfiler().profile(model, torch.randint(0, 100, (1, 8)))


def rows(tex: str) -> list[str]:
    """The body rows of a table (after its header, or a longtable's last foot)."""
    if "\\endlastfoot\n" in tex:
        body = tex.split("\\endlastfoot\n")[1].split("\\end{longtable}")[0]
    else:
        body = tex.split("\\midrule\n", 1)[1].split("\\bottomrule")[0]
    return [line for line in body.splitlines() if line.endswith("\\\\")]


def test_resnet50_default_tex_is_folded_and_cut_to_the_depth_one_page_holds(
        tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", LatexFitWarning)  # it fits: no warning
        resnet50().save(tmp_path / "resnet50.tex")
    tex = (tmp_path / "resnet50.tex").read_text()
    assert tex.startswith("\\begin{table}[htbp]")  # a float, no longtable needed
    # root, its 10 children, and each stage's first block and its folded twins: 19 rows
    assert len(rows(tex)) == 19
    assert "layer3.1-5 & Bottleneck" in tex and "layer3.0.conv1" not in tex
    # 151 modules, less 8 twin blocks of 8 rows folded into the others, less the 19 shown
    assert "modules to depth 2 shown, 68 deeper rows hidden" in tex
    note = tex.split("\\par")[-2]  # the line under the table
    assert "rows='all' shows every row" in note and "layer3.\\allowbreak{}1-5" in note


@needs_pdflatex
def test_default_tables_of_large_models_fit_one_page_in_pdflatex(tmp_path: Path) -> None:
    # before: "Float too large for page by 1285pt" (ResNet-50), most rows lost
    tables = [resnet50().to_latex(caption="ResNet-50", label="tab:r50"),
              gpt2_like().to_latex(caption="GPT-2")]
    log = compile_document(tmp_path, PREAMBLE, "\n".join(str(t) for t in tables))
    assert FLOAT_TOO_LARGE.findall(log) == [] and overfull(log) == []


def test_gpt2_blocks_are_folded_as_in_the_terminal() -> None:
    tex = str(gpt2_like().to_latex())
    # the folded table has every depth and fits: 1 + 5 + 1 + 4 + 4 + 4 rows
    assert len(rows(tex)) == 19 and "h.0-11.mlp.c\\_fc" in tex and "h.3" not in tex
    assert "12 identical blocks folded into h.\\allowbreak{}0-11" in tex
    assert "deeper rows" not in tex
    unfolded = str(gpt2_like().to_latex(fold=False, rows="all"))
    assert "h.3.mlp.c\\_fc" in unfolded and "folded" not in unfolded


@needs_pdflatex
def test_every_row_asked_for_is_a_longtable_across_pages(tmp_path: Path) -> None:
    every = str(gpt2_like().to_latex(rows="all", fold=False, caption="Every module"))
    deep = str(resnet50().to_latex(max_depth=3))  # rows the caller chose are never cut
    for tex in (every, deep):
        assert tex.startswith("% needs \\usepackage{longtable}")
        assert "\\begin{longtable}" in tex and "deeper rows" not in tex
    assert len(rows(every)) == len(gpt2_like().modules) == 162
    log = compile_document(tmp_path, PREAMBLE + "\\usepackage{longtable}\n",
                           every + "\n" + deep)
    pages = PAGES.search(log)
    assert pages is not None and int(pages.group(1)) >= 3  # 162 + 79 rows break across pages
    assert FLOAT_TOO_LARGE.findall(log) == [] and overfull(log) == []


def test_a_table_that_cannot_fit_warns() -> None:
    # 60 top-level modules, no two alike side by side: nothing folds, depth 1 is 61 rows
    model = nn.Sequential(*(nn.Linear(4, 4) if i % 2 else nn.ReLU() for i in range(60)))
    profile = ModuleProfiler().profile(model, torch.randn(1, 4))
    with pytest.warns(LatexFitWarning, match="61 rows do not fit one page.*longtable"):
        tex = str(profile.to_latex())
    assert "\\begin{longtable}" in tex and len(rows(tex)) == 61
    with pytest.warns(LatexFitWarning, match="Float too large"):
        profile.to_latex(environment="table")
    with pytest.warns(LatexFitWarning, match="cannot be scaled"):
        profile.to_latex(environment="longtable", width=40)


def test_names_are_shortened_at_dots_never_mid_word() -> None:
    assert elide_path("encoder.layers.encoder_layer_11.mlp", 30) == \
        "encoder...encoder_layer_11.mlp"
    # the block index tells h.10 and h.11 apart: kept before the first part
    assert elide_path("transformer.h.10.mlp.c_fc", 22) == "...h.10.mlp.c_fc"
    assert elide_path("transformer.h.0-11.attn.c_attn", 20) == "...0-11.attn.c_attn"
    # nothing to drop at a dot: over the limit rather than a word cut
    assert elide_path("NonDynamicallyQuantizableLinear", 12) == \
        "NonDynamicallyQuantizableLinear"
    assert elide_path("layer4.1.downsample.0", 12) == "...1.downsample.0"
    narrow = str(gpt2_like().to_latex(width=150, rows="all", fold=False))
    names = [row.split(" & ")[0].replace("\\_", "_") for row in rows(narrow)]
    paths = {name for name in map(str, gpt2_like().to_df("module")["module"])}
    for name in names:  # every shown name is a path, or the whole last parts of one
        assert name in paths or any(path.endswith("." + name.split("...")[1])
                                    for path in paths), name


def test_legacy_latex_has_human_headers_and_fits_the_line(tmp_path: Path) -> None:
    from torchvision.models import resnet18

    assert header_lines("trainable_params_size_bits") == ["trainable", "params", "size bits"]
    with pytest.warns(LatexFitWarning, match="68 rows are taller than a page"):
        tex = ModuleProfiler().count_params_latex(resnet18(weights=None))
    # 0.0.4's shape: a bare tabular, its 12 columns, one row per module, raw values
    assert "\\begin{tabular}{llrlrrlrrrrr}" in tex and "\\begin{table}" not in tex
    assert len(rows(tex)) == 68 and "11689512 & torch.float32" in tex
    assert "trainable\\_params" not in tex and "trainable \\\\ params" in tex
    if shutil.which("pdflatex"):  # before: 960 pt too wide
        log = compile_document(tmp_path, PREAMBLE + "\\usepackage{graphicx}\n",
                               "\\begin{table}\n" + tex + "\\end{table}\n")
        assert overfull(log) == []


def test_legacy_latex_writes_a_file_when_given_one(tmp_path: Path) -> None:
    profiler, model = ModuleProfiler(), nn.Linear(3, 2)
    text = profiler.count_params_latex(model, file=tmp_path / "params")
    assert (tmp_path / "params.tex").read_text(encoding="utf-8") == text
    ops = profiler.estimate_ops_latex(model, torch.randn(1, 3), file=str(tmp_path / "ops.tex"))
    assert (tmp_path / "ops.tex").read_text(encoding="utf-8") == ops
    assert profiler.count_params_latex(model) == text  # no file: only the string
