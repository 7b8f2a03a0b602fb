"""Operator-level accounting: formulas for aten operators (placeholder until the families land)."""

from moduleprofiler.operators.registry import (
    register_free,
    register_operator,
    unregister_operator,
)

__all__ = ["register_free", "register_operator", "unregister_operator"]
