"""One module call of a pass: where it sits in the runtime call stack, and what listeners
wrote about it (the runner's unit; :mod:`moduleprofiler.runner`)."""

from __future__ import annotations

from typing import Any

from torch import nn


class Call:
    """One module call: where it sits in the runtime call stack, and what listeners wrote.

    ``values`` holds the per-call fields and columns listeners computed (``self_ops``,
    ``output_bytes``, ``forward_ms``, a custom listener's column); the records are built from
    it after the pass.
    """

    __slots__ = ("call_number", "depth", "failed", "index", "module", "outer_exception",
                 "parent", "path", "values")

    def __init__(self, index: int, parent: int | None, depth: int, module: nn.Module, path: str,
                 call_number: int, outer_exception: BaseException | None) -> None:
        self.index = index
        self.parent = parent
        self.depth = depth
        self.module = module
        self.path = path
        self.call_number = call_number
        self.outer_exception = outer_exception
        self.failed = False
        self.values: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Call(index={self.index}, path={self.path!r}, call_number={self.call_number})"
