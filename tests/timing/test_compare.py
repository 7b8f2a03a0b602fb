"""compare_compiled: one call gives each module's eager time, compiled time and speed-up, and
which modules' work the compiled program fused (on the CPU, Inductor's kernel ranges)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from moduleprofiler.compiled import compare_compiled
from moduleprofiler.timing import TimingOptions
from tests.timing.helpers import residual_model

QUICK = TimingOptions(num_iters=4, drop_first=1, warmup_seconds=0.0, progress=False,
                      measure_overhead=False)


@pytest.fixture(scope="module")
def compared():
    return compare_compiled(torch.compile(residual_model()), torch.randn(8, 16), QUICK)


def test_each_module_has_its_eager_and_compiled_time_and_speedup(compared):
    frame = compared.to_df("module").set_index("module")
    assert compared.clock == "compiled-kernels"
    assert frame["eager_ms"].notna().all() and (frame["eager_ms"] > 0).all()
    for path, row in frame.iterrows():
        if row["device_ms"] > 0:
            assert row["compile_speedup"] == pytest.approx(row["eager_ms"] / row["device_ms"])
        else:  # its work is in an ancestor's fused kernel: no speed-up of its own
            assert pd.isna(row["compile_speedup"]), path
    # 0.act and the LayerNorm have no kernel of their own once compiled
    assert frame.loc["0.act", "device_ms"] == 0 and frame.loc["1", "device_ms"] == 0


def test_the_modules_fused_together_are_named_where_the_kernel_is_booked(compared):
    frame = compared.to_df("module").set_index("module")
    # the first block's ReLU and residual add run in one kernel with the LayerNorm: the root's
    assert frame.loc["__root__", "self_fused_kernels"] >= 1
    assert {"0.act", "1"} <= set(frame.loc["__root__", "fused_across"].split(", "))
    assert any("eager_ms: the eager module's time_median_ms" in note
               for note in compared.warnings)


def test_a_model_compiled_in_place_is_refused():
    model = residual_model()
    model.compile()
    with pytest.raises(ValueError, match=r"compiled in\s+place"):
        compare_compiled(model, torch.randn(8, 16), QUICK)


def test_a_model_with_a_compiled_submodule_is_refused_naming_it():
    # its "eager" run would otherwise time the partly compiled program
    model = residual_model()
    model[2] = torch.compile(model[2])
    with pytest.raises(ValueError, match="submodule '2' is compiled"):
        compare_compiled(model, torch.randn(8, 16), QUICK)
