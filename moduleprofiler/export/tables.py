"""Writing a DataFrame as CSV, HTML or LaTeX (the 0.0.4-compatible file forms used by the
``*_csv``/``*_html``/``*_latex`` methods in ``legacy.py``)."""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

PathLike = str | os.PathLike[str]


def with_suffix(file: PathLike, suffix: str) -> str:
    """``file`` with ``suffix`` appended unless it already ends with it.

    0.0.4 produced ``name..csv``; here ``"ops"`` -> ``"ops.csv"`` and ``"ops.csv"`` stays.
    """
    name = os.fspath(file)
    return name if name.lower().endswith(suffix) else name + suffix


def _cell(value: Any) -> Any:
    """Non-scalar cells (shape tuples, dtype tuples, ``torch.dtype``) as readable text."""
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    if value is pd.NA:
        return value
    return str(value)


def printable(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy whose object cells are scalars, ready for a text format."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object:
            out[column] = out[column].map(_cell)
    return out


def write_csv(frame: pd.DataFrame, file: PathLike) -> str:
    """Write ``frame`` to ``file`` (``.csv`` added if missing); unknown values are empty."""
    path = with_suffix(file, ".csv")
    frame.to_csv(path, index=False)
    return path


def html_table(frame: pd.DataFrame) -> str:
    """``frame`` as an HTML table through ``Styler``: every cell and header escaped, unknown
    values empty, no index."""
    styler = printable(frame).style.format(escape="html", na_rep="")
    styler = styler.format_index(escape="html", axis=1).hide(axis="index").set_uuid("table")
    return str(styler.to_html())


def write_html(frame: pd.DataFrame, file: PathLike) -> str:
    """Write ``frame`` as an HTML table (``.html`` added if missing); cells are escaped."""
    path = with_suffix(file, ".html")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(html_table(frame))
    return path


def latex_tabular(frame: pd.DataFrame, index: bool = False) -> str:
    """A booktabs ``tabular`` that compiles: names escaped, unknown values shown as ``--``."""
    styler = printable(frame).style.format(escape="latex", na_rep="--")
    styler = styler.format_index(escape="latex", axis=1)
    if index:
        styler = styler.format_index(escape="latex", axis=0)
    else:
        styler = styler.hide(axis="index")
    return str(styler.to_latex(hrules=True))
