"""The model-level summary table (one row): :func:`moduleprofiler.summary_row.model_summary`,
kept at this import path."""

from moduleprofiler.summary_row import SUMMARY_COLUMNS, model_summary

__all__ = ["SUMMARY_COLUMNS", "model_summary"]
