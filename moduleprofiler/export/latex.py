"""A view as a LaTeX booktabs ``table`` float through pandas ``Styler``.

Numbers reach ``Styler`` raw and are formatted by the column's formatter at the last step
(``1.82G``, ``12.3\\%``, ``250.0\\textmu{}s``) and right-aligned; text cells (names, types,
shapes) and the caption are escaped here (:func:`escape_latex`). Unknown
values print ``--``. By default the table fits ``\\linewidth`` of a one-column ``article``
(or ``\\textwidth`` of a two-column one for ``table*``), and one page: identical blocks are
folded, and a view of every module shows only the depths one page holds (a note line under the
table says what it left out); rows the caller chose that are taller than a page become a
``longtable``; see :mod:`moduleprofiler.export.latex_fit`. Preamble needed:
``\\usepackage{booktabs}``, ``\\usepackage{graphicx}`` for a table that had to be scaled and
``\\usepackage{longtable}`` for a longtable (each says so in a comment).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Literal

import pandas as pd

from moduleprofiler.export.cells import LATEX, formatter
from moduleprofiler.export.fold import fold_tree
from moduleprofiler.export.latex_fit import (
    LINEWIDTH_PT,
    MEASURE,
    NOTE_SCALE,
    TABCOLSEP_PT,
    TEXTHEIGHT_PT,
    WIDE_PT,
    Fit,
    fit_table,
    float_height,
    table_width,
    text_lines,
)
from moduleprofiler.export.names import elide_path
from moduleprofiler.export.view_data import ViewData
from moduleprofiler.validate import check_bool, check_str
from moduleprofiler.warn import warn

_LATEX_SPECIAL = {
    "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
    # the braces keep the space after a command (``a \ b`` typeset as ``a \b`` with
    # ``\textbackslash b``, the command eating the space)
    "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}",
    # in pdfLaTeX's default font encoding these three typeset as other glyphs (< as an
    # inverted exclamation mark)
    "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}",
}
_LABEL = re.compile(r"^[A-Za-z0-9:._\-/]+$")
_FOLDED = re.compile(r"^(.*?)(\d+)-(\d+)$")
"""The last part of a folded run's name (``h.0-11``: ``h.``, 0, 11)."""
_ENVIRONMENTS = (None, "table", "table*", "longtable")
HEADER_CHARS = 10
"""A 0.0.4 column name's header is stacked in lines of this many characters (or its longest
word): ``trainable_params_size_bits`` -> ``trainable / params / size bits``."""

Rows = Literal["page", "all"]
"""Which rows a LaTeX table of every module shows: ``"page"`` the depths one page holds,
``"all"`` every row (a ``longtable`` across pages when they do not fit one)."""


class LatexFitWarning(UserWarning):
    """A LaTeX table that will not fit: taller than a page in a float, taller than a page as a
    bare ``tabular`` (the 0.0.4 writers), or wider than the line as a ``longtable`` (which
    cannot be scaled). The table is written all the same."""


_LAST_TYPESET = 0x17F
"""The last code point pdfLaTeX typesets out of the box (UTF-8 input, OT1 or T1 fonts): Latin-1
and Latin Extended-A. Any other character (Greek, CJK, arrows, symbols) stops it with "Unicode
character ... not set up for use with LaTeX"."""


def typesettable(text: str) -> str:
    """``text`` with every character pdfLaTeX cannot typeset by default written as its code
    point (``∑`` -> ``[U+2211]``): a module name from a ``ModuleDict`` key may hold any."""
    if text.isascii():
        return text
    return "".join(char if ord(char) <= _LAST_TYPESET else f"[U+{ord(char):04X}]"
                   for char in text)


def escape_latex(text: str) -> str:
    """Text that typesets literally (the characters ``& % $ # _ { } ~ ^ \\ < > |``, and those
    pdfLaTeX cannot typeset by default: :func:`typesettable`)."""
    return "".join(_LATEX_SPECIAL.get(char, char) for char in typesettable(text))


def header_lines(name: str) -> list[str]:
    """A 0.0.4 column name as the lines of a human header: its words (split at ``_``), packed
    into lines of :data:`HEADER_CHARS` characters or its longest word."""
    words = [word for word in name.split("_") if word] or [name]
    room = max(HEADER_CHARS, *(len(word) for word in words))
    lines = [words[0]]
    for word in words[1:]:
        if len(lines[-1]) + 1 + len(word) <= room:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _stacked(lines: list[str], align: str) -> str:
    """Header lines as one cell (a nested ``tabular``, bottom-aligned with the other
    headers)."""
    if len(lines) == 1:
        return escape_latex(lines[0])
    body = r" \\ ".join(escape_latex(line) for line in lines)
    return rf"\begin{{tabular}}[b]{{@{{}}{align}@{{}}}}{body}\end{{tabular}}"


def _fit(view: ViewData, width: float) -> Fit:
    """Which columns and name lengths make ``view`` fit ``width`` points (a raw view: as it
    is or scaled; its values and columns stay, its headers are stacked)."""
    specs = view.specs(view.data_columns)
    cells = {name: [formatter(spec, MEASURE, raw=view.raw)(value)
                    for value in view.frame[name]] for name, spec in specs.items()}
    if view.raw:
        headers = {name: max(header_lines(str(name)), key=len) for name in specs}
        natural = table_width(headers, cells)
        return Fit(tuple(specs), None, natural > width, natural)
    names = [name for name, spec in specs.items() if spec.kind in ("name", "text")]
    return fit_table({name: spec.label for name, spec in specs.items()}, cells, width,
                     optional=view.optional, names=names)


def _scaled(text: str) -> str:
    """The ``tabular`` of ``text`` scaled to the line width (needs graphicx); not indented,
    which would push a bare one (the 0.0.4 writers') past the line by ``\\parindent``."""
    text = text.replace("\\begin{tabular}", "% needs \\usepackage{graphicx}\n"
                        "\\noindent\\resizebox{\\linewidth}{!}{%\n\\begin{tabular}", 1)
    return text.replace("\\end{tabular}\n", "\\end{tabular}}\n", 1)


# -- height: folding, depths, longtable --------------------------------------------------------
def _fold(view: ViewData) -> tuple[ViewData, dict[str, int]]:
    """``view`` with runs of identical blocks folded (:func:`fold_tree`, the terminal tree's
    folding), and the folded runs' names with how many blocks each holds."""
    if view.frame.empty or not (view.kind == "tree" or view.module_order):
        return view, {}
    frame = fold_tree(view.frame, view.blocks)
    if frame is view.frame:
        return view, {}
    before = set(map(str, view.frame["module"]))
    runs = {}
    for name in map(str, frame["module"]):
        match = _FOLDED.match(name.rpartition(".")[2])
        if match and name not in before:
            runs[name] = int(match.group(3)) - int(match.group(2)) + 1
    return replace(view, frame=frame.reset_index(drop=True)), runs


def _fold_note(runs: dict[str, int], frame: pd.DataFrame) -> str:
    """What the note says of the folded runs the rows show."""
    shown = [(name, blocks) for name, blocks in runs.items()
             if name in set(map(str, frame["module"]))]
    if not shown:
        return ""
    if len(shown) == 1:
        name, blocks = shown[0]
        return (f"{blocks} identical blocks folded into {name}, their numbers summed "
                "(fold=False shows each)")
    names = ", ".join(name for name, _ in shown)
    return f"identical blocks folded, their numbers summed: {names} (fold=False shows each)"


def _joined(*parts: str) -> str:
    """The note line: what the table folded or left out, then the view's notes (which of its
    numbers are lower bounds, what was not called...), each once."""
    return "; ".join(dict.fromkeys(part for part in parts if part))


def _fit_height(view: ViewData, environment: str | None, rows: Rows, runs: dict[str, int],
                caption: str | None, width: float, height: float
                ) -> tuple[ViewData, str | None, str]:
    """The rows a table shows, its environment and its note line, to fit one page ``height``
    points tall: every row when it fits or the caller chose the rows (a ``longtable`` when
    they are taller than a page and no float was asked for); for a view of every module with
    ``rows="page"``, the deepest depth that fits. A :class:`LatexFitWarning` when nothing
    fits."""
    caption_lines = text_lines(f"Table 10: {caption}", width) if caption else 0

    def fits(frame: pd.DataFrame, note: str) -> bool:
        return float_height(len(frame), caption_lines=caption_lines,
                            note_lines=text_lines(note, width, NOTE_SCALE)) <= height

    note = _joined(_fold_note(runs, view.frame), *view.notes)
    if environment == "longtable" or fits(view.frame, note):
        return view, environment, note
    cut = rows == "page" and view.all_rows and "depth" in view.frame
    if cut:
        depths = pd.to_numeric(view.frame["depth"])
        for depth in range(max(int(depths.max()) - 1, 1), 0, -1):
            kept = view.frame[depths <= depth].reset_index(drop=True)
            hidden = len(view.frame) - len(kept)
            note = _joined(
                f"modules to depth {depth} shown, {hidden} deeper rows hidden to fit the page "
                "(rows='all' shows every row)" if hidden else "",
                _fold_note(runs, kept), *view.notes)
            if fits(kept, note):
                return replace(view, frame=kept), environment, note
        view = replace(view, frame=kept)  # depth 1, the least a table of modules says
    limit = f"{len(view.frame)} rows do not fit one page ({height:g} pt)"
    if environment is None:
        if cut:
            warn(f"{limit} even at depth 1: written as a longtable across pages "
                          "(needs \\usepackage{longtable})", LatexFitWarning)
        return view, "longtable", note
    warn(f"{limit}: a {environment} float that tall is dropped by LaTeX (\"Float "
                  "too large\"); pass environment='longtable', or max_depth=", LatexFitWarning)
    return view, environment, note


def _with_note(text: str, note: str, environment: str | None) -> str:
    """``text`` with the note line under its table (inside the float)."""
    if not note:
        return text
    # a module path breaks after its dots, so a long one cannot push the note past the line
    text_note = re.sub(r"\.(?=\S)", r".\\allowbreak{}", escape_latex(note))
    line = f"{{\\footnotesize\\raggedright {text_note}\\par}}\n"
    if environment == "longtable":
        return text + ("" if text.endswith("\n") else "\n") + "\\smallskip\\noindent" + line
    end = f"\\end{{{environment or 'table'}}}"
    head, _, tail = text.rpartition(end)
    return f"{head}\\par\\smallskip\n{line}{end}{tail}"


def _check(label: str | None, environment: str | None, wide: bool, width: float | None,
           height: float | None, rows: Rows, texts: dict[str, object],
           flags: dict[str, object]) -> str | None:
    """The options checked (``texts``: the other ones that are a str or None, ``flags``: the
    on/off ones); returns the environment (``table*`` for ``wide``)."""
    for name, value in {**texts, "label": label, "environment": environment}.items():
        if value is not None:
            check_str(value, name)
    for name, value in flags.items():
        check_bool(value, name)
    if label is not None and not _LABEL.match(label):
        raise ValueError(f"LaTeX label {label!r} may only use letters, digits and : . _ - /")
    if wide:
        if environment not in (None, "table*"):
            raise ValueError(f"wide=True makes a table*; it cannot be environment={environment!r}")
        environment = "table*"
    for name, value in (("width", width), ("height", height)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not value > 0):
            raise ValueError(f"{name} must be a positive number of points, got {value!r}")
    if rows not in ("page", "all"):
        raise ValueError(f"rows must be 'page' or 'all', got {rows!r}")
    return environment


def render_latex(view: ViewData, *, caption: str | None = None, label: str | None = None,
                 position: str | None = "htbp", environment: str | None = None,
                 escape_caption: bool = True, floating: bool = True, wide: bool = False,
                 fit: bool = True, width: float | None = None, height: float | None = None,
                 rows: Rows = "page", fold: bool = True) -> str:
    """The view's shown columns as a booktabs ``table`` float with human units, or a bare
    ``tabular`` when ``floating`` is False (the 0.0.4 writers' form).

    ``wide=True`` (or ``environment="table*"``) makes a ``table*`` that spans both columns of
    a two-column document. With ``fit`` (the default) the table fits ``width`` points
    (default: 345, a one-column ``article``; 452 for ``table*``): long names are shortened
    at dots, the view's optional columns left out (never the ones the caller named), and,
    last, the table scaled down. It fits ``height`` points too (default: 550, the text
    height of an ``article``): runs of identical blocks are folded (``fold=False``: each
    shown); a view of every module shows the deepest depth one page holds (``rows="all"``:
    every row); rows taller than a page become a ``longtable`` unless a float
    (``environment=``) was asked for. A note line under the table says what was folded or
    left out; a :class:`LatexFitWarning` when the table does not fit. Raw views (the 0.0.4
    writers) keep their rows, columns and values: their headers are stacked in short lines,
    and the table is scaled when it is still too wide."""
    environment = _check(label, environment, wide, width, height, rows,
                         texts={"caption": caption, "position": position},
                         flags={"escape_caption": escape_caption, "floating": floating,
                                "wide": wide, "fit": fit, "fold": fold})
    boxed = floating and environment in _ENVIRONMENTS  # a float or a longtable of ours
    line = float(width) if width is not None else \
        WIDE_PT if environment == "table*" else LINEWIDTH_PT
    page = float(height) if height is not None else TEXTHEIGHT_PT
    # the view's notes say which numbers are lower bounds: a pasted table keeps them (the
    # 0.0.4 writers' raw tables stay as they were)
    note = "" if view.raw else _joined(*view.notes)
    if fit and not view.raw:
        view, runs = _fold(view) if fold else (view, {})
        if boxed:
            view, environment, note = _fit_height(view, environment, rows, runs, caption,
                                                  line, page)
    specs = view.specs(view.data_columns)
    plan: Fit | None = None
    if fit:
        # 0.0.4's tabular has no @{} at its ends: two more column gaps
        plan = _fit(view, line - 2 * TABCOLSEP_PT if view.raw else line)
        specs = {name: specs[name] for name in plan.columns}
    frame = view.frame.loc[:, list(specs)].copy()
    formatters: dict[str, Any] = {}
    for name, spec in specs.items():
        format_cell = formatter(spec, LATEX, raw=view.raw)
        if spec.numeric:
            formatters[spec.label] = format_cell
        else:
            texts = [typesettable(format_cell(value)) for value in frame[name]]
            if plan is not None and plan.name_limit is not None \
                    and spec.kind in ("name", "text"):
                texts = [elide_path(text, plan.name_limit) for text in texts]
            # escaped here, not by Styler: its "latex" escape leaves < > |, which pdfLaTeX's
            # default font encoding typesets as other glyphs (<script> as ¡script¿)
            frame[name] = [escape_latex(text) for text in texts]
    aligns = "".join("r" if spec.numeric else "l" for spec in specs.values())
    frame.columns = [spec.label for spec in specs.values()]
    styler = frame.style.format(formatters, escape="latex", na_rep=LATEX.missing)
    styler = styler.format(escape=None, na_rep=LATEX.missing,
                           subset=[s.label for s in specs.values() if not s.numeric])
    stacked = {spec.label: _stacked(header_lines(spec.label), align)
               for spec, align in zip(specs.values(), aligns)} if view.raw and fit else {}
    if stacked:  # escaped line by line in _stacked; the nested tabular must stay as it is
        styler = styler.format_index(lambda name: stacked.get(name, name), axis=1)
    else:
        styler = styler.format_index(escape="latex", axis=1)
    styler = styler.hide(axis="index")
    text_caption = escape_latex(caption) if caption is not None and escape_caption else caption
    floating = floating and environment in (None, "table", "table*")
    text = str(styler.to_latex(
        hrules=True,
        caption=text_caption,
        label=label,
        position=position if floating else None,
        position_float="centering" if floating else None,
        column_format=aligns if view.raw else f"@{{}}{aligns}@{{}}",
        environment=environment,
    ))
    if plan is not None and plan.scale:
        if environment == "longtable":
            warn(f"the longtable is {plan.width - line:.0f} pt wider than the line "
                          f"({line:g} pt) and a longtable cannot be scaled: pass columns= or "
                          "max_depth=", LatexFitWarning)
        else:
            text = _scaled(text)
    if view.raw and fit and not boxed:
        header = max((len(header_lines(str(name))) for name in specs), default=1)
        if float_height(len(frame), header_lines=header) > page:
            warn(f"the tabular's {len(frame)} rows are taller than a page "
                          f"({page:g} pt) and a tabular does not break across pages: "
                          "profile.to_latex() fits a page", LatexFitWarning)
    if environment == "longtable":
        text = "% needs \\usepackage{longtable} (and booktabs)\n" + text
    if not boxed:  # a bare tabular goes into the caller's own float: the notes as comments
        return "".join(f"% note: {line}\n" for line in view.notes if not view.raw) + text
    return _with_note(text, note, environment)
