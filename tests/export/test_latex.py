"""LaTeX tables that fit a width: the width estimate, the order of the fitting steps, the
options, and the tables that must not change (raw 0.0.4 views)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from moduleprofiler.export.latex_fit import LINEWIDTH_PT, TABCOLSEP_PT, fit_table, text_width
from moduleprofiler.export.names import elide_name
from moduleprofiler.export.tables import frame_text
from tests.export.profiles import hostile, tiny


def test_text_width_in_computer_modern_points() -> None:
    # cmr10: digits 5 pt, "." 2.78 pt, "M" 9.17 pt: "11.69M" = 4 x 5 + 2.78 + 9.17
    assert text_width("11.69M") == pytest.approx(4 * 5 + 2.78 + 9.17)
    assert text_width("☃") == 10.0  # unknown characters count as one em


def test_fit_steps_in_order() -> None:
    headers = {"module": "module", "output": "output", "ops": "ops"}
    cells = {"module": ["encoder.layers.encoder_layer_11.mlp"], "output": ["1x197x768"],
             "ops": ["1.23G"]}
    natural = fit_table(headers, cells, 1000.0, optional=["output"], names=["module"])
    assert natural.columns == ("module", "output", "ops") and natural.name_limit is None
    assert not natural.scale
    # the widths of the three columns and two gaps of 2 x 6 pt, with the 2 % margin
    parts = [text_width("encoder.layers.encoder_layer_11.mlp"), text_width("1x197x768"),
             text_width("1.23G")]
    assert natural.width == pytest.approx((sum(parts) + 2 * 2 * TABCOLSEP_PT) * 1.02)
    # names shortened to 30 characters first, then the optional column left out
    shorter = fit_table(headers, cells, natural.width - 1, optional=["output"],
                        names=["module"])
    assert shorter.columns == natural.columns and shorter.name_limit == 30
    dropped = fit_table(headers, cells, shorter.width - 1, optional=["output"],
                        names=["module"])
    assert dropped.columns == ("module", "ops") and dropped.name_limit == 30
    scaled = fit_table(headers, cells, 10.0, optional=["output"], names=["module"])
    assert scaled.scale and scaled.columns == ("module", "ops")


def test_elide_name_keeps_the_ends() -> None:
    assert elide_name("encoder.layers.encoder_layer_11.mlp", 30) == \
        "encoder...encoder_layer_11.mlp"
    assert elide_name("encoder.layers.encoder_layer_11.self_attention", 30) == \
        "encode...yer_11.self_attention"  # 6 of 27 characters from the start, 21 from the end
    assert elide_name("short", 30) == "short"


def test_elide_name_keeps_the_block_index_that_tells_rows_apart() -> None:
    # "transformer...mlp.c_fc" (22 characters) was h.10's and h.11's name alike; the 11
    # characters from the index on stay whole, the start gets the other 22 - 3 - 11 = 8
    assert elide_name("transformer.h.10.mlp.c_fc", 22) == "transfor...10.mlp.c_fc"
    assert elide_name("transformer.h.11.mlp.c_fc", 22) == "transfor...11.mlp.c_fc"
    assert elide_name("transformer.h.11.mlp.c_fc", 16) == "tr...11.mlp.c_fc"
    # a kept tail that already holds the index is left as it was
    assert elide_name("model.layers.3.self_attn.q_proj", 30) == "model...3.self_attn.q_proj"
    assert all(len(elide_name("x" * 50, limit)) == limit for limit in (5, 12, 30))


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="wide"):
        tiny().to_latex(wide=True, environment="longtable")
    with pytest.raises(ValueError, match="width"):
        tiny().to_latex(width=0)
    with pytest.raises(ValueError, match="width"):
        tiny().to_latex(width="345pt")  # type: ignore[arg-type]


@pytest.mark.parametrize(("option", "value", "message"), [
    ("caption", 5, "caption must be a str, got int 5"),  # was AttributeError: no 'isascii'
    ("label", 5, "label must be a str, got int 5"),  # was 'expected string or bytes-like'
    ("position", 5, "position must be a str, got int 5"),  # was written as [5]
    ("environment", 5, "environment must be a str, got int 5"),
    ("wide", "no", "wide must be True or False, got str 'no'"),  # was a table*
    ("fit", "no", "fit must be True or False, got str 'no'"),
    ("escape_caption", "no", "escape_caption must be True or False, got str 'no'"),
])
def test_option_types_are_checked_by_name(option: str, value: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        tiny().to_latex(**{option: value})


def test_options_reach_the_renderer_through_save(tmp_path: Path) -> None:
    tiny().save(tmp_path / "wide.tex", wide=True, max_depth=1)
    text = (tmp_path / "wide.tex").read_text()
    assert text.startswith("\\begin{table*}") and "\\{logits: 1x10" in text  # every column
    narrow = tiny().to_latex(max_depth=1, width=150)
    assert "logits" not in narrow  # the output shapes left out first
    assert tiny().to_latex(max_depth=1, fit=False).count("&") > narrow.count("&")


def test_chosen_columns_stay_and_raw_tables_keep_their_values() -> None:
    chosen = hostile().to_latex(columns=["type", "output_shapes", "params"])
    assert "output" in chosen and "type" in chosen
    frame = pd.DataFrame({"module": ["a" * 80], "ops": [1]})
    raw = frame_text(frame, "latex")  # the 0.0.4 writers' bare tabular
    # its value stays whole and its columns as 0.0.4 wrote them; too wide, it is scaled
    assert "a" * 80 in raw and "@{}" not in raw.replace("[b]{@{}", "")
    assert "\\resizebox{\\linewidth}" in raw and "\\begin{tabular}{lr}" in raw
    narrow = frame_text(pd.DataFrame({"module": ["a"], "ops": [1]}), "latex")
    assert "resizebox" not in narrow and narrow.startswith("\\begin{tabular}{lr}")
    assert LINEWIDTH_PT == 345.0
