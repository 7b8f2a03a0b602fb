"""A measured profile scaled from one device to another, the ratio column and the figure."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.prediction import Calibration, HostCosts, plot_prediction
from moduleprofiler.prediction.calibration import common_rows
from moduleprofiler.prediction.predict import measured_device
from moduleprofiler.timing.environment import capture_environment, get_hardware_specs

HOST = HostCosts("test cpu", {"view": 1.0, "unary": 4.0, "gemm": 11.0, "module_call": 2.0,
                              "cpu_op": 1.0})


def _device(name: str, gemm_us: float) -> Calibration:
    return Calibration(name, "test", 132, "x", "today", {"bf16": {"gemm": [[64, 64, 64, gemm_us]],
                       "mem_unary": [[1e3, 2.0], [1e9, 500.0]]}}, HOST)


def _measured(model: nn.Module, x: torch.Tensor, device_ms: float | None) -> Profile:
    counted = ModuleProfiler().profile(model, x)
    metrics = {} if device_ms is None else {"device_ms": device_ms}
    return dataclasses.replace(counted, records=tuple(
        dataclasses.replace(r, metrics={**r.metrics, **metrics}) for r in counted.records))


def test_a_measured_module_is_scaled_by_the_ratio_of_the_two_predictions() -> None:
    model, x = nn.Linear(64, 64), torch.randn(64, 64)
    # the Linear's only kernel is the 64 x 64 x 64 GEMM: 3 us on the source, 6 us on the
    # target (each its own measured shape), so the module scales by 6 / 3 = 2
    predicted = ModuleProfiler().predict(model, x, device=_device("A100 80GB SXM", 6.0),
                                         dtype="bf16", measured=_measured(model, x, 0.010),
                                         measured_on=_device("H100 SXM", 3.0))
    module = predicted.to_df("module").iloc[0]
    assert module["scaled_device_ms"] == pytest.approx(0.020, rel=0.01)
    assert module["device_ms"] == pytest.approx(0.010)  # the measured column, beside
    # per call: predicted 6 us over the measured 10 us
    assert predicted.to_df("call").iloc[0]["predicted_to_measured"] == pytest.approx(
        0.6, rel=0.01)
    assert predicted.predicted_for.startswith("A100 80GB SXM")
    # per module, beside the scaled time, as docs/prediction.md shows them: 6 us over 10 us
    assert module["predicted_to_measured"] == pytest.approx(0.6, rel=0.01)
    table = predicted.table(["device_ms", "scaled_device_ms", "predicted_device_ms",
                             "predicted_to_measured"]).df
    assert table.iloc[0]["predicted_to_measured"] == pytest.approx(0.6, rel=0.01)


def test_the_ratio_reads_only_the_shapes_both_devices_measured() -> None:
    model, x = nn.Linear(64, 64), torch.randn(64, 64)
    # the target measured the model's 64 x 64 x 64 GEMM itself (2 us) and a 128^3 one (8 us);
    # the source only the 128^3 one (8 us). Read from all its rows the target would say 2 us
    # and the source its estimate from 128^3: a ratio of two different models. From the rows
    # both measured (128^3, 8 us on each), both estimate the same: the ratio is 1 and the
    # measured 10 us stays 10 us
    rows = {"mem_unary": [[1e3, 2.0], [1e9, 500.0]]}
    target = Calibration("H100 SXM", "test", 132, "x", "today", {"bf16": {
        "gemm": [[64, 64, 64, 2.0], [128, 128, 128, 8.0]], **rows}}, HOST)
    source = Calibration("H100 SXM", "test", 132, "x", "today", {"bf16": {
        "gemm": [[128, 128, 128, 8.0]], **rows}}, HOST)
    predicted = ModuleProfiler().predict(model, x, device=target, dtype="bf16",
                                         measured=_measured(model, x, 0.010),
                                         measured_on=source)
    module = predicted.to_df("module").iloc[0]
    assert module["scaled_device_ms"] == pytest.approx(0.010, rel=1e-6)
    # the target's own prediction still reads all its rows: its measured 2 us
    assert module["predicted_device_ms"] == pytest.approx(0.002, rel=0.01)


def test_common_rows_keeps_the_shapes_both_measured() -> None:
    a = Calibration("a", "a", 1, "x", "today", {"bf16": {
        "gemm": [[1, 2, 3, 10.0], [4, 5, 6, 20.0]], "bmm": [[1, 1, 1, 1, 1.0]]}})
    b = Calibration("b", "b", 1, "x", "today", {"bf16": {"gemm": [[1, 2, 3, 7.0]]}})
    a_common, b_common = common_rows(a, b)
    # a's gemm keeps the one shape b measured (with a's own time); its bmm, which b lacks,
    # goes (both then price batched products by the same stand-in)
    assert a_common.tables["bf16"] == {"gemm": [[1, 2, 3, 10.0]]}
    assert b_common is b  # nothing of b's is missing from a: the same object


def test_common_rows_keeps_the_in_chain_costs_both_measured() -> None:
    rows = {"bf16": {"mem_unary": [[1e3, 2.0], [1e9, 500.0]]}}
    a = Calibration("a", "a", 1, "x", "today", rows,
                    in_chain={"bf16": {"mem_unary": 0.2, "mem_reduction": 0.5}})
    b = Calibration("b", "b", 1, "x", "today", rows, in_chain={"bf16": {"mem_unary": 0.1}})
    older = Calibration("c", "c", 1, "x", "today", rows)
    a_common, b_common = common_rows(a, b)
    # each keeps its own cost of the table both measured; a's reduction cost goes
    assert a_common.in_chain == {"bf16": {"mem_unary": 0.2}} and b_common is b
    # against a calibration without them, neither side adds any
    with_older, older_common = common_rows(a, older)
    assert with_older.in_chain == {} and older_common is older


def test_a_measurement_without_device_time_or_device_is_refused() -> None:
    model, x = nn.Linear(64, 64), torch.randn(64, 64)
    with pytest.raises(ValueError, match="measured: the profile has no 'device_ms'"):
        ModuleProfiler().predict(model, x, dtype="bf16", measured=_measured(model, x, None),
                                 measured_on="H100 SXM")
    with pytest.raises(ValueError, match="measured_on"):
        ModuleProfiler().predict(model, x, dtype="bf16", measured=_measured(model, x, 0.01))


def test_the_figure_puts_every_module_with_both_times(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    model, x = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64)), torch.randn(64, 64)
    predicted = ModuleProfiler().predict(model, x, device=_device("H100 SXM", 3.0),
                                         dtype="bf16").merge(_measured(model, x, 0.004))
    figure = plot_prediction(predicted, path=tmp_path / "p.png")  # type: ignore[arg-type]
    ax = figure.axes[0]
    # three modules (the Sequential and two Linears), each with both times
    assert len(ax.collections[-1].get_offsets()) == 3
    assert ax.get_xlabel() == "measured device time (ms)"
    assert "over 3 modules" in ax.get_title()
    assert (tmp_path / "p.png").stat().st_size > 0


def test_the_figures_names_are_shortened_and_stay_on_it() -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    model = nn.Sequential()
    for name in ("encoder_layer_with_a_very_long_descriptive_name_number_0",
                 "decoder_layer_with_a_very_long_descriptive_name_number_1"):
        model.add_module(name, nn.Linear(64, 64))
    x = torch.randn(64, 64)
    predicted = ModuleProfiler().predict(model, x, device=_device("H100 SXM", 3.0),
                                         dtype="bf16")
    # measured times for the two layers only: the slower one's point lies at the right edge
    measured = predicted.with_metrics({name: {"device_ms": 0.004 * (index + 1)}
                                       for index, (name, _) in enumerate(model.named_children())})
    figure = plot_prediction(measured)  # type: ignore[arg-type]
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    names = figure.axes[0].texts
    assert len(names) == 2 and all(len(name.get_text()) <= 28 for name in names)
    for name in names:  # in full, the slower layer's name ended at 643.5 px of 640
        box = name.get_window_extent(canvas.get_renderer())
        assert figure.bbox.x0 <= box.x0 and box.x1 <= figure.bbox.x1


def _timed_on_an_h200(monkeypatch: pytest.MonkeyPatch, model: nn.Module,
                      x: torch.Tensor) -> Any:
    """A ``time_modules`` result as a run on one H200 builds it: timed here on the CPU, then
    its environment and hardware captured by the functions ``time_modules`` calls, with CUDA
    reporting one H200 (``torch.cuda`` patched, nothing else), and the kernel clock's samples
    (``device_samples_ms``) taken from the wall clock's."""
    timing = ModuleProfiler().time_modules(model, x, num_iters=3)
    props = SimpleNamespace(name="NVIDIA H200", multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: props.name)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=None: props)
    environment = capture_environment(torch.device("cuda:0"))
    hardware = get_hardware_specs()
    monkeypatch.undo()
    records = tuple(dataclasses.replace(r, metrics={
        **r.metrics, "device_samples_ms": r.metrics["forward_samples_ms"],
        "self_device_samples_ms": r.metrics["self_forward_samples_ms"]})
        for r in timing.records)
    assert timing.facts is not None  # the pass's facts: one attachment
    return dataclasses.replace(timing, records=records, facts=dataclasses.replace(
        timing.facts, device="cuda:0", environment=environment, hardware=hardware))


def test_a_timing_result_names_the_gpu_it_ran_on(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = nn.Linear(64, 64), torch.randn(64, 64)
    timing = _timed_on_an_h200(monkeypatch, model, x)
    # what a real run records: the timed device's name in the environment, every GPU's in
    # the hardware columns (0.0.4's "gpu"), no "device_name" among the hardware columns
    assert timing.environment["device_name"] == "NVIDIA H200"
    assert timing.hardware["gpu"] == ["NVIDIA H200"]
    assert measured_device(timing, None) == "H200"
    # the documented call, without measured_on: the H200 run scaled to the H100 SXM
    predicted = ModuleProfiler().predict(model, x, device="H100 SXM", host="calibrated",
                                         dtype="bf16", measured=timing)
    assert predicted.to_df("module").iloc[0]["scaled_device_ms"] > 0


def test_the_hardware_columns_name_the_gpu_without_an_environment() -> None:
    # a result with 0.0.4's hardware columns only (a latency result): its one GPU
    only_hardware = SimpleNamespace(hardware={"gpu": ["NVIDIA H100 80GB HBM3"]})
    assert measured_device(only_hardware, None) == "H100 SXM"
    # two different GPUs and no environment saying which one ran: not guessed
    two = SimpleNamespace(hardware={"gpu": ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]})
    with pytest.raises(ValueError, match="measured_on"):
        measured_device(two, None)
    # a name that does not say the card: measured_on is asked for, not a card guessed
    bare = SimpleNamespace(environment={"device": "cuda:0", "device_name": "NVIDIA H100"})
    with pytest.raises(ValueError, match=r"measured_on: .*H100 SXM, H100 PCIe, H100 NVL"):
        measured_device(bare, None)
    # a measured_on of no card is said as measured_on (it was said as device=)
    with pytest.raises(ValueError, match=r"measured_on 'H200 XYZ' is not in the peak table"):
        measured_device(bare, "H200 XYZ")
    assert measured_device(bare, "NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
    # a CPU timing names its processor, never a GPU
    cpu = SimpleNamespace(environment={"device": "cpu", "device_name": "x86_64"},
                          hardware={"gpu": "unavailable"})
    with pytest.raises(ValueError, match="measured_on"):
        measured_device(cpu, None)
