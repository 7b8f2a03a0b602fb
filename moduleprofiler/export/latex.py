"""A view as a LaTeX booktabs ``table`` float through pandas ``Styler``.

Numbers reach ``Styler`` raw and are formatted by the column's formatter at the last step
(``1.82G``, ``12.3\\%``, ``250.0\\textmu{}s``) and right-aligned; text cells (names, types,
shapes) are escaped by ``Styler`` (``escape="latex"``); the caption is escaped here. Unknown
values print ``--``. By default the table fits ``\\linewidth`` of a one-column ``article``
(or ``\\textwidth`` of a two-column one for ``table*``): see
:mod:`moduleprofiler.export.latex_fit`. Preamble needed: ``\\usepackage{booktabs}``, and
``\\usepackage{graphicx}`` for a table that had to be scaled (it says so in a comment).
"""

from __future__ import annotations

import re
from typing import Any

from moduleprofiler.export.cells import LATEX, formatter
from moduleprofiler.export.latex_fit import LINEWIDTH_PT, MEASURE, WIDE_PT, Fit, fit_table
from moduleprofiler.export.names import elide_name
from moduleprofiler.export.view_data import ViewData

_LATEX_SPECIAL = {
    "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
    "~": r"\textasciitilde ", "^": r"\textasciicircum ", "\\": r"\textbackslash ",
}
_LABEL = re.compile(r"^[A-Za-z0-9:._\-/]+$")


def escape_latex(text: str) -> str:
    """Text that typesets literally (the characters ``& % $ # _ { } ~ ^ \\``)."""
    return "".join(_LATEX_SPECIAL.get(char, char) for char in text)


def _fit(view: ViewData, width: float) -> Fit:
    """Which columns and name lengths make ``view`` fit ``width`` points."""
    specs = view.specs(view.data_columns)
    cells = {name: [formatter(spec, MEASURE)(value) for value in view.frame[name]]
             for name, spec in specs.items()}
    names = [name for name, spec in specs.items() if spec.kind in ("name", "text")]
    return fit_table({name: spec.label for name, spec in specs.items()}, cells, width,
                     optional=view.optional, names=names)


def _scaled(text: str) -> str:
    """The ``tabular`` of ``text`` scaled to the line width (needs graphicx)."""
    text = text.replace("\\begin{tabular}", "% needs \\usepackage{graphicx}\n"
                        "\\resizebox{\\linewidth}{!}{%\n\\begin{tabular}", 1)
    return text.replace("\\end{tabular}\n", "\\end{tabular}}\n", 1)


def render_latex(view: ViewData, *, caption: str | None = None, label: str | None = None,
                 position: str | None = "htbp", environment: str | None = None,
                 escape_caption: bool = True, floating: bool = True, wide: bool = False,
                 fit: bool = True, width: float | None = None) -> str:
    """The view's shown columns as a booktabs ``table`` float with human units, or a bare
    ``tabular`` when ``floating`` is False (the 0.0.4 writers' form).

    ``wide=True`` (or ``environment="table*"``) makes a ``table*`` that spans both columns of
    a two-column document. With ``fit`` (the default) the table fits ``width`` points
    (default: 345, a one-column ``article``; 452 for ``table*``): long names are shortened
    in the middle, the view's optional columns left out (never the ones the caller named),
    and, last, the table scaled down. Raw views (the 0.0.4 writers) are never changed."""
    if label is not None and not _LABEL.match(label):
        raise ValueError(f"LaTeX label {label!r} may only use letters, digits and : . _ - /")
    if wide:
        if environment not in (None, "table*"):
            raise ValueError(f"wide=True makes a table*; it cannot be environment={environment!r}")
        environment = "table*"
    if width is not None and (isinstance(width, bool) or not isinstance(width, (int, float))
                              or not width > 0):
        raise ValueError(f"width must be a positive number of points, got {width!r}")
    specs = view.specs(view.data_columns)
    plan: Fit | None = None
    if fit and not view.raw:
        default = WIDE_PT if environment == "table*" else LINEWIDTH_PT
        plan = _fit(view, float(width) if width is not None else default)
        specs = {name: specs[name] for name in plan.columns}
    frame = view.frame.loc[:, list(specs)].copy()
    formatters: dict[str, Any] = {}
    for name, spec in specs.items():
        format_cell = formatter(spec, LATEX, raw=view.raw)
        if spec.numeric:
            formatters[spec.label] = format_cell
        else:
            texts = [format_cell(value) for value in frame[name]]
            if plan is not None and plan.name_limit is not None \
                    and spec.kind in ("name", "text"):
                texts = [elide_name(text, plan.name_limit) for text in texts]
            frame[name] = texts
    frame.columns = [spec.label for spec in specs.values()]
    styler = frame.style.format(formatters, escape="latex", na_rep=LATEX.missing)
    styler = styler.format(escape="latex", na_rep=LATEX.missing,
                           subset=[s.label for s in specs.values() if not s.numeric])
    styler = styler.format_index(escape="latex", axis=1).hide(axis="index")
    text_caption = escape_latex(caption) if caption is not None and escape_caption else caption
    floating = floating and environment in (None, "table", "table*")
    aligns = "".join("r" if spec.numeric else "l" for spec in specs.values())
    text = str(styler.to_latex(
        hrules=True,
        caption=text_caption,
        label=label,
        position=position if floating else None,
        position_float="centering" if floating else None,
        column_format=aligns if view.raw else f"@{{}}{aligns}@{{}}",
        environment=environment,
    ))
    if plan is not None and plan.scale and environment != "longtable":
        text = _scaled(text)
    return text
