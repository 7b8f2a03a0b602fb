"""A view as CSV: the shown columns with raw numbers (unknown values are empty cells; shape
trees and dtypes as Python literals such as ``(1, 3, 224, 224)``)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from moduleprofiler.export.view_data import ViewData


def _cell(value: Any) -> Any:
    """Non-scalar cells (shape tuples, dtype tuples, ``torch.dtype``) as readable text."""
    if value is None or value is pd.NA or isinstance(value, (int, float, str, bool)):
        return value
    return str(value)


def render_csv(view: ViewData) -> str:
    """The view's shown columns as CSV, one header row of column names, then the flags that
    say which rows hold lower bounds (:attr:`ViewData.df`,
    :func:`~moduleprofiler.export.view_data.bound_flags`)."""
    frame = view.df  # a new frame: its object cells become scalars
    for column in frame.columns:
        if frame[column].dtype == object:
            frame[column] = frame[column].map(_cell)
    return str(frame.to_csv(index=False))
