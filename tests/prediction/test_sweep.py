"""The what-if sweep: a model predicted over batch sizes and dtypes, the batch at which it turns
device-bound and the largest batch that fits the card, against a small calibration whose
numbers are known."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profiler, ProfilingError
from moduleprofiler.cli import main
from moduleprofiler.prediction import Calibration, HostCosts
from moduleprofiler.prediction.sweep import (
    DEVICE_MEMORY_MIB,
    SWEEP_COLUMNS,
    SweepInputError,
    batch_input,
)
from tests.export.cli_models import tiny

HOST = HostCosts("test cpu", {"view": 1.0, "unary": 4.0, "binary": 4.0, "gemm": 11.0,
                              "module_call": 2.0, "cpu_op": 1.0})
ROOT = Path(__file__).resolve().parents[2]
TINY = f"{ROOT / 'tests/export/cli_models.py'}:tiny"


def _calibration() -> Calibration:
    return Calibration("H100 SXM", "test", 132, "x", "today",
                       {"bf16": {"gemm": [[64, 64, 64, 3.0]],
                                 "mem_unary": [[1e3, 2.0], [1e9, 500.0]]}}, HOST)


def test_batch_input_resizes_every_tensors_first_dimension() -> None:
    example = {"ids": torch.zeros(2, 7, dtype=torch.int64), "scale": torch.tensor(0.5),
               "x": torch.randn(2, 3), "flag": True}
    resized = batch_input(example, 16)
    assert resized["ids"].shape == (16, 7) and resized["ids"].dtype == torch.int64
    assert resized["x"].shape == (16, 3) and resized["x"].device.type == "meta"
    assert resized["scale"] is example["scale"] and resized["flag"] is True  # kept as they are


@dataclasses.dataclass
class _Batch:
    x: torch.Tensor
    scale: float = 2.0


def test_batch_input_walks_a_batch_as_every_pass_does() -> None:
    # torch's pytree sees no tensor in a dataclass batch: the sweep said "no tensor with a
    # batch dimension to resize"; it now walks the input as the passes and predict do
    resized = batch_input(_Batch(torch.randn(2, 3)), 16)
    assert type(resized) is _Batch and resized.scale == 2.0
    assert resized.x.shape == (16, 3) and resized.x.device.type == "meta"


def test_an_input_whose_batch_is_unknown_raises_a_typed_error() -> None:
    with pytest.raises(SweepInputError, match=r"first dimensions differ \(\[2, 5\]\).*input_fn"):
        batch_input((torch.randn(2, 3), torch.randn(5, 3)), 8)
    with pytest.raises(SweepInputError, match="no tensor with a batch dimension"):
        batch_input(torch.tensor(1.0), 8)
    # refused before any pass runs, from the front door
    with pytest.raises(SweepInputError):
        Profiler().sweep(nn.Linear(3, 3), (torch.randn(2, 3), torch.randn(5, 3)),
                         _calibration(), (1, 2), "bf16")


def test_bad_arguments_raise_naming_them() -> None:
    model, x = nn.Linear(64, 64), torch.randn(2, 64)
    with pytest.raises(ValueError, match="batch_sizes must be positive ints"):
        Profiler().sweep(model, x, _calibration(), (0, 8), "bf16")
    with pytest.raises(ValueError, match="dtype must be one of"):
        Profiler().sweep(model, x, _calibration(), (1,), "int7")
    with pytest.raises(ValueError, match=r"dtypes: .*int64.* not a floating dtype"):
        Profiler().sweep(model, x, _calibration(), (1,), torch.int64)
    with pytest.raises(ValueError, match=r"input .* or input_fn"):
        Profiler().sweep(model, None, _calibration(), (1,), "bf16")
    with pytest.raises(ValueError, match="memory_bytes must be a positive int"):
        Profiler().sweep(model, x, _calibration(), (1,), "bf16", memory_bytes=0)


def test_a_linear_layer_swept_by_hand() -> None:
    model = nn.Linear(64, 64)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    # the largest batch b that fits: parameters (64 * 64 + 64) * 2 bytes = 8320 in bf16, the
    # input and the output 64 * 2 bytes a row each: 8320 + 256 * b <= 8320 + 256 * 100
    sweep = Profiler().sweep(model, torch.randn(2, 64), _calibration(), (8, 1, 8, 64), "bf16",
                             memory_bytes=8320 + 256 * 100)
    frame = sweep.frame
    assert tuple(frame.columns) == SWEEP_COLUMNS
    assert sweep.to_df().equals(frame) and sweep.to_df() is not frame  # a copy, as every to_df
    assert list(frame["batch_size"]) == [1, 8, 64]  # sorted, once each
    assert list(frame["dtype"]) == ["bf16"] * 3
    assert list(frame["predicted_peak_bytes"]) == [8320 + 256 * b for b in (1, 8, 64)]
    # batch 64 is the calibrated 64 x 64 x 64 GEMM: predict()'s hand-computed chain, host
    # 13 us (module call 2, view 1, addmm 10) times 0.95 inside a model = 12.35 us, the 3 us
    # GEMM from 12.35 + 2 us: 17.35 us in all
    row = frame.iloc[2]
    assert row["predicted_latency_ms"] == pytest.approx(0.01735, rel=1e-3)
    assert row["predicted_host_ms"] == pytest.approx(0.01235)
    assert row["predicted_throughput"] == pytest.approx(64 / 0.01735e-3, rel=1e-3)
    assert row["predicted_regime"] == "host-bound"
    assert sweep.largest_batch == {"bf16": 100}
    assert sweep.device_bound_from == {"bf16": None}  # 3 us of GEMM behind 12.35 us of host
    assert any("host-bound at every batch swept (up to 64)" in n for n in sweep.notes)
    # one byte less and batch 100 no longer fits
    tighter = Profiler().sweep(model, torch.randn(2, 64), _calibration(), 64, "bf16",
                               memory_bytes=8320 + 256 * 100 - 1)
    assert tighter.largest_batch == {"bf16": 99}
    assert all(torch.equal(before[name], p) and p.device.type == "cpu"
               and p.dtype == torch.float32 for name, p in model.named_parameters())
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_the_largest_batch_and_a_card_too_small() -> None:
    model = nn.Linear(64, 64)
    # batch 1 needs 8320 + 256 bytes
    sweep = Profiler().sweep(model, torch.randn(2, 64), _calibration(), (1, 8), "bf16",
                             memory_bytes=8320 + 255)
    assert sweep.largest_batch == {"bf16": 0}
    assert any("not even batch 1 fits" in note for note in sweep.notes)
    # a card whose memory is not known: no answer, and a note saying what to pass
    unknown = Profiler().sweep(model, torch.randn(2, 64), "B200", 1, "bf16")
    assert unknown.largest_batch == {"bf16": None} and unknown.memory_bytes is None
    assert any("pass memory_bytes" in note for note in unknown.notes)
    assert DEVICE_MEMORY_MIB["H100 SXM"] * 2 ** 20 == \
        Profiler().sweep(model, torch.randn(2, 64), _calibration(), 1, "bf16").memory_bytes


def _elementwise() -> nn.Module:
    return nn.Sequential(nn.ReLU())


def test_the_turning_batch_is_where_the_regime_changes() -> None:
    model, x = _elementwise(), torch.randn(1, 2 ** 16)
    sweep = Profiler().sweep(model, x, _calibration(), (1, 4096), "bf16")
    turn = sweep.device_bound_from["bf16"]
    assert list(sweep.frame["predicted_regime"]) == ["host-bound", "device-bound"]
    assert turn is not None and 1 < turn <= 4096

    def regime(batch: int) -> str | None:
        return ModuleProfiler().predict(model, torch.randn(batch, 2 ** 16), _calibration(),
                                        dtype="bf16").predicted_regime
    assert regime(turn) == "device-bound"
    assert regime(turn - 1) == "host-bound"
    # without a host there is no regime, and no turning batch
    alone = Profiler().sweep(model, x, _calibration(), (1, 4096), "bf16", host=None)
    assert alone.device_bound_from == {"bf16": None}
    assert alone.frame["predicted_latency_ms"].isna().all()
    assert alone.frame["predicted_throughput"].isna().all()


def test_input_fn_builds_every_batch() -> None:
    asked: list[int] = []

    def make(batch: int) -> torch.Tensor:
        asked.append(batch)
        return torch.randn(batch, 64)
    sweep = Profiler().sweep(nn.Linear(64, 64), None, _calibration(), (1, 8), "bf16",
                             input_fn=make, memory_bytes=8320 + 256 * 100)
    assert list(sweep.frame["predicted_peak_bytes"]) == [8320 + 256, 8320 + 256 * 8]
    assert {1, 8, 100, 101} <= set(asked)  # the rows, and the search's last two plans


def test_views_json_and_figure(tmp_path: Path) -> None:
    sweep = Profiler().sweep(nn.Linear(64, 64), torch.randn(2, 64), _calibration(), (1, 8),
                             "bf16", memory_bytes=8320 + 256 * 100)
    text = sweep.view().to_text(width=0) or ""
    assert "predicted latency" in text and "bf16: largest batch that fits" in text
    data = json.loads(sweep.to_json())
    assert [row["batch_size"] for row in data["rows"]] == [1, 8]
    assert data["largest_batch"] == {"bf16": 100}
    figure = sweep.plot(path=tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 0
    assert [ax.get_ylabel() for ax in figure.axes] == [
        "latency (ms)", "throughput (items/s)", "peak memory (GiB)"]


def test_the_command_line_sweep(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    python = Profiler().sweep(tiny(), torch.randn(2, 4), "H100 SXM", (1, 8), ("bf16", "fp32"))
    status = main([TINY, "-i", "2x4", "--predict", "H100 SXM", "--batch", "1,8", "--dtype",
                   "bf16,fp32", "-o", str(tmp_path / "sweep.json")])
    assert status == 0
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert [(r["batch_size"], r["dtype"]) for r in data["rows"]] == [
        (1, "bf16"), (8, "bf16"), (1, "fp32"), (8, "fp32")]
    assert [r["predicted_latency_ms"] for r in data["rows"]] == pytest.approx(
        list(python.frame["predicted_latency_ms"]))
    assert data["largest_batch"] == python.largest_batch
    status = main([TINY, "-i", "2x4", "--predict", "H100 SXM", "--batch", "1,8", "--width", "0"])
    out = capsys.readouterr().out
    assert status == 0 and "bf16: largest batch that fits 79.6 GiB" in out
    assert "fp32: largest batch that fits 79.6 GiB" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--batch", "1,8"], "add --predict GPU"),
    (["--batch", "0,8", "--predict", "H200"], "bad --batch '0,8'"),
    (["--batch", "1,x", "--predict", "H200"], "bad --batch '1,x'"),
    (["--batch", "1", "--predict", "H200", "--depth", "1"], "--depth does not apply"),
])
def test_command_line_sweep_errors(capsys: pytest.CaptureFixture[str], argv: list[str],
                                   message: str) -> None:
    assert main([TINY, "-i", "2x4", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_model_the_meta_device_cannot_run_is_told_to_predict_each_batch() -> None:
    from tests.prediction.test_run import ReadsItsData

    with pytest.raises(ProfilingError, match="meta tensors") as raised:
        Profiler().sweep(ReadsItsData(), torch.randn(2, 4), _calibration(), (1, 8), "bf16")
    assert any("a sweep runs the model on the meta device" in note and "predict()" in note
               for note in raised.value.__notes__)


class _Mismatched(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ x  # (batch, 8) @ (batch, 8): no device multiplies these either


def test_a_real_shape_error_is_not_blamed_on_the_meta_device() -> None:
    with pytest.raises(ProfilingError) as raised:
        Profiler().sweep(_Mismatched(), torch.randn(2, 8), _calibration(), (1, 8), "bf16")
    # the hint names the condition under which the meta device is to blame
    notes = [note for note in getattr(raised.value, "__notes__", ()) if "meta device" in note]
    assert notes and all("if the model runs on this input on a real device" in note
                         for note in notes)


def test_a_sweep_under_inference_mode_plans_the_memory_a_gpu_allocates() -> None:
    model, x = nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64)), torch.randn(2, 64)
    outside = Profiler().sweep(model, x, _calibration(), (1, 8), "bf16").frame
    with torch.inference_mode():
        inside = Profiler().sweep(model, x, _calibration(), (1, 8), "bf16").frame
    # a layer norm's kernel also writes each row's mean and rstd in fp32, 8 * batch bytes,
    # which the meta plan misses under inference mode (aten.layer_norm reaches it whole)
    assert list(inside["predicted_peak_bytes"]) == list(outside["predicted_peak_bytes"])
    assert inside["predicted_device_ms"].equals(outside["predicted_device_ms"])
