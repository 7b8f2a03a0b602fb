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
    say which rows hold lower bounds (:func:`bound_flags`)."""
    frame = view.df  # a new frame: its object cells become scalars
    for name, flags in bound_flags(view).items():
        frame[name] = flags
    for column in frame.columns:
        if frame[column].dtype == object:
            frame[column] = frame[column].map(_cell)
    return str(frame.to_csv(index=False))


def bound_flags(view: ViewData) -> dict[str, pd.Series]:
    """The view's :attr:`~ViewData.exact_flags` it does not show, where some row written is
    False: a file holds no notes, and a comment line or a ``>=`` mark in a cell would break
    ``pandas.read_csv`` or turn a column of numbers into text, so which rows hold lower
    bounds (the notes of the other formats) travels as the row's own flag column, False
    there. A view whose rows are all exact gets none; the 0.0.4 raw tables stay bare."""
    if view.raw:
        return {}
    shown = set(view.data_columns)
    return {name: view.frame[name].reset_index(drop=True) for name in view.exact_flags
            if name in view.frame and name not in shown
            and bool(view.frame[name].eq(False).any())}
