"""``profile.to_tensorboard``: event files written by a real ``SummaryWriter`` and read back
with TensorBoard's own readers (``EventAccumulator``, and the data provider its scalar
dashboard queries): per-module scalars, totals, unknown values left out, the text tags as
TensorBoard's sanitized Markdown renders them, and the errors."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from tests.export.profiles import tiny

pytest.importorskip("tensorboard")
from tensorboard import context, plugin_util
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util
from torch.utils.tensorboard import SummaryWriter


def mlp_profile() -> Profile:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return ModuleProfiler().profile(model, torch.randn(3, 4))


def written(profile: Profile, logdir: Path, step: int = 0, **options: Any) -> EventAccumulator:
    with SummaryWriter(str(logdir)) as writer:
        profile.to_tensorboard(writer, step, **options)
    events = EventAccumulator(str(logdir))
    events.Reload()
    return events


def scalars(events: EventAccumulator) -> dict[str, tuple[int, float]]:
    """Every scalar tag -> (step, value); text tags left out."""
    out = {}
    for tag in events.Tags()["tensors"]:
        if not tag.endswith("/text_summary"):
            (event,) = events.Tensors(tag)
            out[tag] = (event.step, float(tensor_util.make_ndarray(event.tensor_proto)))
    return out


def text(events: EventAccumulator, tag: str) -> str:
    (event,) = events.Tensors(f"{tag}/text_summary")
    return str(event.tensor_proto.string_val[0].decode())


def test_per_module_scalars_and_totals(tmp_path: Path) -> None:
    # Linear(4, 8) on 3 rows: params 4*8 + 8 = 40, MACs 3*4*8 = 96, FLOPs 2*96 = 192,
    #   ops 3*8*(2*4 - 1) + 3*8 (bias) = 192
    # ReLU on 3x8: params 0, MACs 0, FLOPs 0, ops 24
    # Linear(8, 2): params 8*2 + 2 = 18, MACs 3*8*2 = 48, FLOPs 96, ops 3*2*(2*8 - 1) + 6 = 96
    # totals: params 58, MACs 144, FLOPs 288, ops 312
    values = {"0": (40, 96, 192, 192), "1": (0, 0, 0, 24), "2": (18, 48, 96, 96),
              "total": (58, 144, 288, 312)}
    columns = ("params", "macs", "flops", "ops")
    expected = {f"moduleprofiler/{module}/{column}": (7, float(value))
                for module, row in values.items() for column, value in zip(columns, row)}
    assert scalars(written(mlp_profile(), tmp_path, step=7)) == expected


def test_a_module_named_total_keeps_its_tags_and_the_totals_move(tmp_path: Path) -> None:
    # children "total" = Linear(4, 8) and "b" = Linear(8, 2) on 3 rows: "total" has
    # params 4*8 + 8 = 40, ops 3*8*(2*4 - 1) + 3*8 = 192; "b" 8*2 + 2 = 18, 3*2*(2*8 - 1) + 6
    # = 96; the model 58 and 288. Both 40 and 58 were written under moduleprofiler/total/params
    model = nn.Sequential()
    model.add_module("total", nn.Linear(4, 8))
    model.add_module("b", nn.Linear(8, 2))
    profile = ModuleProfiler().profile(model, torch.randn(3, 4))
    with pytest.warns(UserWarning, match=r"named 'total'.*'moduleprofiler/\.total/<column>'"):
        tags = scalars(written(profile, tmp_path, columns=["params", "ops"]))
    assert tags == {"moduleprofiler/total/params": (0, 40.0),
                    "moduleprofiler/total/ops": (0, 192.0),
                    "moduleprofiler/b/params": (0, 18.0), "moduleprofiler/b/ops": (0, 96.0),
                    "moduleprofiler/.total/params": (0, 58.0),
                    "moduleprofiler/.total/ops": (0, 288.0)}
    # at depth 0 (the root alone) no module written is "total": the totals keep their tags
    root = scalars(written(profile, tmp_path / "root", depth=0, columns=["params"]))
    assert root == {"moduleprofiler/__root__/params": (0, 58.0),
                    "moduleprofiler/total/params": (0, 58.0)}


def test_the_scalar_dashboard_reads_them(tmp_path: Path) -> None:
    """The data provider behind TensorBoard's scalar dashboard lists the 64-bit scalars."""
    written(mlp_profile(), tmp_path)
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(tmp_path))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(tmp_path))
    read = provider.read_scalars(context.RequestContext(), experiment_id="",
                                 plugin_name="scalars", downsample=10)
    (run,) = read.values()
    assert run["moduleprofiler/total/ops"][0].value == 312.0
    assert run["moduleprofiler/0/params"][0].value == 40.0


def test_unknown_values_are_skipped_never_zero(tmp_path: Path) -> None:
    # tiny(): "custom" has no formula (its ops and MACs unknown), 0 parameters (known); the
    # totals written are lower bounds, which no scalar can say: writing them says it once
    with pytest.warns(UserWarning, match=r"scalars under 'moduleprofiler' hold lower "
                                         r"bounds: the ops, macs, flops totals are lower "
                                         r"bounds: no formula for modules \['custom'\]"
                       ) as caught:
        tags = scalars(written(tiny(), tmp_path))
    assert len([w for w in caught if "lower bounds" in str(w.message)]) == 1
    assert caught[0].filename == __file__  # the user's line, not the package's
    assert tags["moduleprofiler/custom/params"] == (0, 0.0)
    assert "moduleprofiler/custom/macs" not in tags
    assert "moduleprofiler/custom/ops" not in tags
    # conv: 7,776 ops and 3,888 MACs (the fixture's counts); block: 144 + 2,890 + 10 ops
    assert tags["moduleprofiler/conv/macs"] == (0, 3_888.0)
    assert tags["moduleprofiler/block/ops"] == (0, 3_044.0)


def test_a_complete_profile_writes_without_a_word(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        written(mlp_profile(), tmp_path)


def test_counts_are_exact_beyond_float32(tmp_path: Path) -> None:
    # 2**24 + 1 = 16,777,217 is the first integer a 32-bit float cannot hold (it rounds to
    # 16,777,216); a listener's count column is written by default, as 64 bits
    profile = mlp_profile().with_metrics({"0": {"my_count": 16_777_217}})
    tags = scalars(written(profile, tmp_path))
    assert tags["moduleprofiler/0/my_count"] == (0, 16_777_217.0)
    assert tags["moduleprofiler/total/my_count"] == (0, 16_777_217.0)
    assert "moduleprofiler/1/my_count" not in tags  # unknown for the others


@pytest.mark.filterwarnings("ignore::moduleprofiler.timing.clock.TimingWarning")
def test_measured_times_are_written(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    profiler = ModuleProfiler()
    timed = profiler.profile(model, x).with_timing(
        profiler.time_modules(model, x, num_iters=3, drop_first=1, warmup_seconds=0.0))
    modules = timed.to_df("module").set_index("module")
    tags = scalars(written(timed, tmp_path))
    for module in ("0", "1", "2"):
        assert tags[f"moduleprofiler/{module}/time_median_ms"] == (
            0, float(modules.loc[module, "time_median_ms"]))
    assert tags["moduleprofiler/total/time_median_ms"] == (
        0, float(modules.loc["__root__", "time_median_ms"]))


def test_depth_prefix_and_columns(tmp_path: Path) -> None:
    tags = scalars(written(tiny(), tmp_path, depth=2, prefix="run/prof",
                           columns=["params", "ops"]))
    # depth 2: block.act and block.fc; "ops" (own) totals the sum of every module's own ops:
    # 10 + 7,776 + 576 + 0 + (144 + 10) + 2,890 = 11,406 (custom unknown)
    assert tags == {"run/prof/block.act/params": (0, 0.0), "run/prof/block.act/ops": (0, 154.0),
                    "run/prof/block.fc/params": (0, 1_450.0),
                    "run/prof/block.fc/ops": (0, 2_890.0),
                    "run/prof/total/params": (0, 1_576.0), "run/prof/total/ops": (0, 11_406.0)}
    root = scalars(written(mlp_profile(), tmp_path / "root", depth=0))
    assert root["moduleprofiler/__root__/ops"] == (0, 312.0)


def test_text_tags_render_in_tensorboard(tmp_path: Path) -> None:
    events = written(mlp_profile(), tmp_path)
    tree = plugin_util.markdown_to_safe_html(text(events, "moduleprofiler/tree"))
    assert tree.startswith("<pre><code>module ")  # preformatted: the columns stay aligned
    assert "|-- 0 (Linear)             40" in tree and "`-- 2 (Linear)" in tree
    report = plugin_util.markdown_to_safe_html(text(events, "moduleprofiler/report"))
    assert "<h3>Sequential profile</h3>" in report
    assert "<li><strong>parameters</strong>: 58</li>" in report
    assert "<th>module</th>" in report and "<td>__root__</td>" in report
    assert "&lt;" not in report  # nothing the sanitizer had to escape


def test_bad_arguments(tmp_path: Path) -> None:
    profile = mlp_profile()
    with SummaryWriter(str(tmp_path)) as writer:
        with pytest.raises(ValueError, match="columns: 'input_shapes' does not hold numbers"):
            profile.to_tensorboard(writer, columns=["input_shapes"])
        with pytest.raises(ValueError, match="columns: 'time_median_ms' is not a column"):
            profile.to_tensorboard(writer, columns=["time_median_ms"])
        with pytest.raises(TypeError, match="columns must be a list"):
            profile.to_tensorboard(writer, columns="params")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="depth must be at least 0"):
            profile.to_tensorboard(writer, depth=-1)
        with pytest.raises(ValueError, match="step must be at least 0"):
            profile.to_tensorboard(writer, -1)
        with pytest.raises(ValueError, match="prefix must be"):
            profile.to_tensorboard(writer, prefix="")
    with pytest.raises(TypeError, match=r"writer must be a torch\.utils\.tensorboard\."):
        profile.to_tensorboard(str(tmp_path))  # type: ignore[arg-type]


def test_without_tensorboard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ImportError,
                       match=r'pip install tensorboard .*pip install "\.\[tensorboard\]"'):
        mlp_profile().to_tensorboard(object())  # type: ignore[arg-type]


def test_importing_the_package_does_not_import_tensorboard() -> None:
    code = ("import sys, moduleprofiler, moduleprofiler.export.tensorboard; "
            "print(sorted(m for m in sys.modules if 'tensorboard' in m.split('.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "['moduleprofiler.export.tensorboard']"
