"""Human units and the column registry."""

from __future__ import annotations

import pandas as pd
import pytest

from moduleprofiler.export import column_spec, register_column
from moduleprofiler.export.cells import ASCII, LATEX, UNICODE, formatter
from moduleprofiler.export.units import (
    human_bytes,
    human_count,
    human_ms,
    human_percent,
    shape_text,
)


@pytest.mark.parametrize(("value", "text"), [
    (0, "0"), (950, "950"), (1_000, "1.00K"), (1_234, "1.23K"), (999_995, "1.00M"),
    (11_689_512, "11.69M"), (3_640_000_000, "3.64G"), (-2_500, "-2.50K"), (0.5, "0.5"),
    (2.0, "2"), (1.5e15, "1.50P"),
])
def test_human_count(value: float, text: str) -> None:
    assert human_count(value) == text


def test_units_go_past_exa_and_pebibytes() -> None:
    # a Linear(10**7, 10**7) on 10**7 meta rows: 10**21 MACs, 1 ZMAC (was "1000.00E");
    # 2**60 bytes is 1 EiB (was "1024.00 PiB")
    assert human_count(10**21) == "1.00Z" and human_count(999_995 * 10**15) == "1.00Z"
    assert human_count(2 * 10**24) == "2.00Y" and human_count(10**27) == "1000.00Y"
    assert human_bytes(2**60) == "1.00 EiB" and human_bytes(3 * 2**70) == "3.00 ZiB"
    assert human_bytes(2**80) == "1.00 YiB"


def test_human_bytes_ms_percent() -> None:
    assert human_bytes(512) == "512 B" and human_bytes(1536) == "1.50 KiB"
    assert human_bytes(44.59 * 2**20) == "44.59 MiB"
    assert human_ms(0.0004) == "400.0 ns" and human_ms(0.25) == "250.0 µs"
    assert human_ms(0.25, micro="u") == "250.0 us" and human_ms(12.5) == "12.50 ms"
    assert human_ms(1500) == "1.500 s" and human_ms(0) == "0 ms"
    assert human_percent(12.345) == "12.3%" and human_percent(0.01) == "<0.1%"
    assert human_percent(0) == "0.0%"


def test_shape_text() -> None:
    assert shape_text((1, 3, 224, 224)) == "1x3x224x224"
    assert shape_text(((2, 3), (2, 5))) == "2x3, 2x5"
    assert shape_text(((2, 3), {"mask": (2, 3)})) == "2x3, {mask: 2x3}"
    assert shape_text([(1,), None]) == "[1, -]" and shape_text(()) == "()"
    assert shape_text(None) == "-"


def test_shape_text_hides_arguments_without_tensors() -> None:
    # None keyword arguments and trailing None positionals (defaults, flags) are left out;
    # a None between two tensors keeps its place
    assert shape_text(((2, 3), {"mask": None})) == "2x3"
    assert shape_text(((1, 16, 768), None, None, {"cache": None, "mask": (1, 16)})) \
        == "1x16x768, -, -, {mask: 1x16}"
    assert shape_text({"last_hidden_state": (1, 16, 768), "cache": None}) \
        == "{last_hidden_state: 1x16x768}"
    assert shape_text(((2, 3), None, (4,))) == "2x3, -, 4"
    assert shape_text((None, {"a": None})) == "-"


def test_missing_values_per_target() -> None:
    ops = formatter(column_spec("ops"))
    assert ops(None) == "-" and ops(pd.NA) == "-" and ops(float("nan")) == "-"
    assert formatter(column_spec("ops"), LATEX)(pd.NA) == "--"
    assert formatter(column_spec("module"), ASCII)("") == "__root__"
    assert formatter(column_spec("x_pct"), LATEX)(12.0) == "12.0\\%"
    assert formatter(column_spec("t_ms"), LATEX)(0.5) == "500.0 \\textmu{}s"
    assert formatter(column_spec("t_ms"), UNICODE)(0.5) == "500.0 µs"


@pytest.mark.parametrize(("name", "kind", "inclusive"), [
    ("params", "count", True), ("self_params", "count", False), ("self_ops", "count", False),
    ("ops", "count", True), ("forward_median_ms", "time", True),
    ("forward_self_median_ms", "time", False), ("forward_p95_ms", "time", None),
    ("peak_bytes", "bytes", True), ("ops_pct", "percent", None),
    ("output_shapes", "shape", None), ("weird_column", "text", None),
])
def test_column_kinds_from_names(name: str, kind: str, inclusive: bool | None) -> None:
    spec = column_spec(name)
    assert (spec.kind, spec.inclusive) == (kind, inclusive)


def test_register_column_overrides_the_guess() -> None:
    spec = register_column("backward_total_ms_test", "time", "backward", inclusive=False)
    assert column_spec("backward_total_ms_test") == spec and spec.label == "backward"
    with pytest.raises(ValueError, match="unknown column kind"):
        register_column("x", "furlongs")  # type: ignore[arg-type]


def test_parameter_counts_read_as_people_write_them() -> None:
    from moduleprofiler.export.units import human_params

    # Llama-2-7B: 6,738,415,616 parameters: "6.74B" (SI's G is for ops and FLOPs)
    assert human_params(6_738_415_616) == "6.74B"
    assert human_params(124_439_808) == "124.44M"
    assert human_params(1_500_000_000_000) == "1.50T"
    assert human_params(999) == "999"
    assert formatter(column_spec("params"))(6_738_415_616) == "6.74B"
    assert formatter(column_spec("ops"))(6_738_415_616) == "6.74G"


def test_a_yes_no_in_a_text_column_reads_as_a_flag() -> None:
    import numpy as np

    from moduleprofiler.export.cells import formatter
    from moduleprofiler.export.columns import column_spec

    # a time's low confidence is a text column holding bools (None where unknown): its
    # cells read yes/no as a flag column's (`complete`) do, not Python's True/False
    low = formatter(column_spec("low_confidence"))
    assert [low(v) for v in (True, False, np.True_, "1.rare")] == ["yes", "no", "yes", "1.rare"]
    assert formatter(column_spec("complete"))(False) == "no"
