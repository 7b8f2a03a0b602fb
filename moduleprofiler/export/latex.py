"""A view as a LaTeX booktabs ``table`` float through pandas ``Styler``.

Numbers reach ``Styler`` raw and are formatted by the column's formatter at the last step
(``1.82G``, ``12.3\\%``, ``250.0\\textmu{}s``); text cells (names, types, shapes) are escaped
by ``Styler`` (``escape="latex"``); the caption is escaped here. Unknown values print ``--``.
Preamble needed: ``\\usepackage{booktabs}``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from moduleprofiler.export.cells import LATEX, formatter

if TYPE_CHECKING:
    from moduleprofiler.export.view import View

_LATEX_SPECIAL = {
    "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
    "~": r"\textasciitilde ", "^": r"\textasciicircum ", "\\": r"\textbackslash ",
}
_LABEL = re.compile(r"^[A-Za-z0-9:._\-/]+$")


def escape_latex(text: str) -> str:
    """Text that typesets literally (the characters ``& % $ # _ { } ~ ^ \\``)."""
    return "".join(_LATEX_SPECIAL.get(char, char) for char in text)


def render_latex(view: View, *, caption: str | None = None, label: str | None = None,
                 position: str | None = "htbp", environment: str | None = None,
                 escape_caption: bool = True, floating: bool = True) -> str:
    """The view's shown columns as a booktabs ``table`` float with human units, or a bare
    ``tabular`` when ``floating`` is False (the 0.0.4 writers' form)."""
    if label is not None and not _LABEL.match(label):
        raise ValueError(f"LaTeX label {label!r} may only use letters, digits and : . _ - /")
    specs = view.specs(view.data_columns)
    frame = view.frame.loc[:, list(specs)].copy()
    formatters: dict[str, Any] = {}
    for name, spec in specs.items():
        format_cell = formatter(spec, LATEX, raw=view.raw)
        if spec.numeric:
            formatters[spec.label] = format_cell
        else:
            frame[name] = [format_cell(value) for value in frame[name]]
    frame.columns = [spec.label for spec in specs.values()]
    styler = frame.style.format(formatters, escape="latex", na_rep=LATEX.missing)
    styler = styler.format(escape="latex", na_rep=LATEX.missing,
                           subset=[s.label for s in specs.values() if not s.numeric])
    styler = styler.format_index(escape="latex", axis=1).hide(axis="index")
    text_caption = escape_latex(caption) if caption is not None and escape_caption else caption
    floating = floating and environment in (None, "table", "table*")
    return str(styler.to_latex(
        hrules=True,
        caption=text_caption,
        label=label,
        position=position if floating else None,
        position_float="centering" if floating else None,
        column_format="".join("r" if spec.numeric else "l" for spec in specs.values()),
        environment=environment,
    ))
