"""Human units for single numbers: counts (K/M/G), bytes (KiB/MiB), times (ns/us/ms/s),
percentages, and shape trees (``1x3x224x224``).

Pure functions of one value; they never see a table. ``micro`` and ``percent`` let a caller
pick the glyphs of its target (``"us"`` for plain ASCII, ``"\\textmu{}"`` and ``"\\%"`` for
LaTeX).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_SI = ("", "K", "M", "G", "T", "P", "E", "Z", "Y")
_IEC = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
MISSING = "-"


def is_missing(value: Any) -> bool:
    """``None``, ``pd.NA`` and float NaN (unknown values; never shown as 0)."""
    if value is None:
        return True
    kind = type(value)
    if kind is int or kind is bool or kind is str:  # the usual values: never unknown
        return False
    if isinstance(value, float):
        return math.isnan(value)
    try:
        return bool(value != value)  # pd.NA != pd.NA is NA, which raises in bool()
    except TypeError:
        return True


def _scaled(value: float, base: float, units: tuple[str, ...], decimals: int) -> tuple[str, str]:
    """``(number, unit)`` with ``value`` scaled to the largest unit that keeps it >= 1,
    moving up one unit when rounding would print ``1000.00``."""
    magnitude = abs(value)
    index = 0
    while magnitude >= base and index < len(units) - 1:
        magnitude /= base
        index += 1
    if round(magnitude, decimals) >= base and index < len(units) - 1:
        magnitude /= base
        index += 1
    sign = "-" if value < 0 else ""
    return f"{sign}{magnitude:.{decimals}f}", units[index]


def human_count(value: float) -> str:
    """``950`` -> ``"950"``, ``1234`` -> ``"1.23K"``, ``3.64e9`` -> ``"3.64G"`` (SI, 1000)."""
    if abs(value) < 1000:
        if float(value).is_integer():
            return str(int(value))
        return f"{value:.3g}"
    number, unit = _scaled(float(value), 1000.0, _SI, 2)
    return number + unit


_PARAMS = ("", "K", "M", "B", "T")
"""Parameter counts in the units people write them in (a 6.74B model, not 6.74G)."""


def human_params(value: float) -> str:
    """A parameter count: ``124439808`` -> ``"124.44M"``, ``6.74e9`` -> ``"6.74B"``."""
    if abs(value) < 1000:
        return human_count(value)
    number, unit = _scaled(float(value), 1000.0, _PARAMS, 2)
    return number + unit


def human_bytes(value: float) -> str:
    """``512`` -> ``"512 B"``, ``1536`` -> ``"1.50 KiB"`` (IEC, 1024)."""
    if abs(value) < 1024:
        return f"{int(value)} B" if float(value).is_integer() else f"{value:.3g} B"
    number, unit = _scaled(float(value), 1024.0, _IEC, 2)
    return f"{number} {unit}"


def _four_digits(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 10:
        return f"{value:.2f}"
    return f"{value:.3f}"


def human_ms(value: float, micro: str = "µ") -> str:
    """A time given in milliseconds: ``0.0004`` -> ``"400.0 ns"``, ``0.25`` -> ``"250.0 µs"``,
    ``12.5`` -> ``"12.50 ms"``, ``1500`` -> ``"1.500 s"``."""
    magnitude = abs(value)
    if magnitude == 0:
        return "0 ms"
    if magnitude < 1e-3:
        return f"{_four_digits(value * 1e6)} ns"
    if magnitude < 1:
        return f"{_four_digits(value * 1e3)} {micro}s"
    if magnitude < 1000:
        return f"{_four_digits(value)} ms"
    return f"{_four_digits(value / 1000)} s"


def human_percent(value: float, percent: str = "%", less: str = "<") -> str:
    """A percentage (0-100): ``12.345`` -> ``"12.3%"``; tiny positive shares -> ``"<0.1%"``."""
    if 0 < value < 0.05:
        return f"{less}0.1{percent}"
    return f"{value:.1f}{percent}"


def yes_no(value: object) -> str:
    """A flag as every view writes it: ``"yes"`` or ``"no"``."""
    return "yes" if value else "no"


def human_number(value: float) -> str:
    """Any other number: integers as they are, floats with 4 significant digits."""
    if isinstance(value, bool):
        return yes_no(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def shape_text(tree: Any) -> str:
    """A shape tree as compact text: ``(1, 3, 224, 224)`` -> ``"1x3x224x224"``; a tuple of
    shapes -> ``"2x3, 2x5"``; a dict -> ``"{x: 2x3}"``; ``None`` -> ``"-"``.

    Values that hold no tensor (``None`` keyword arguments, flags left at their defaults: the
    shape tree records them all as ``None``) are left out of dicts, and trailing ones out of
    the argument tuple: ``(2x3, None, {mask: None})`` is ``"2x3"``. A ``None`` between two
    positional tensors stays, as ``-``, to keep the positions."""
    return _shape(_drop_empty(tree, top=True), top=True)


def _drop_empty(tree: Any, top: bool = False) -> Any:
    """``tree`` without the ``None`` entries of its dicts (and dicts left empty), and with
    the trailing ``None`` items of the top-level tuple removed."""
    if isinstance(tree, Mapping):
        kept = {key: _drop_empty(item) for key, item in tree.items()}
        return {key: item for key, item in kept.items() if item is not None} or None
    if isinstance(tree, tuple) and not _is_shape(tree):
        items = [_drop_empty(item) for item in tree]
        while top and items and items[-1] is None:
            items.pop()
        return tuple(items) if items or not top else None
    if isinstance(tree, list):
        return [_drop_empty(item) for item in tree]
    return tree


def _is_shape(value: Any) -> bool:
    return isinstance(value, tuple) and all(
        isinstance(item, int) and not isinstance(item, bool) for item in value
    )


def _shape(tree: Any, top: bool = False) -> str:
    if tree is None:
        return MISSING
    if _is_shape(tree):
        return "x".join(str(dim) for dim in tree) if tree else "()"
    if isinstance(tree, tuple):
        inner = ", ".join(_shape(item) for item in tree)
        return inner if top else f"({inner})"
    if isinstance(tree, list):
        return "[" + ", ".join(_shape(item) for item in tree) + "]"
    if isinstance(tree, Mapping):
        return "{" + ", ".join(f"{key}: {_shape(item)}" for key, item in tree.items()) + "}"
    return str(tree)


def dtype_text(value: Any) -> str:
    """A dtype or a tuple of dtype names: ``("float32", "int64")`` -> ``"float32, int64"``."""
    if value is None:
        return MISSING
    if isinstance(value, (tuple, list)):
        return ", ".join(str(item).removeprefix("torch.") for item in value) or MISSING
    return str(value).removeprefix("torch.")
