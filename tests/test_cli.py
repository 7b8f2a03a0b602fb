"""The command line: in-process runs of ``main`` for every option, and end-to-end runs of
``python -m moduleprofiler`` in a subprocess."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.cli import main, parse_input_size
from moduleprofiler.cli_options import CliError
from moduleprofiler.export.text import supports_color
from moduleprofiler.memory import measure_memory
from moduleprofiler.timing import environment
from tests.export.cli_models import tiny
from tests.fixtures.pyproject import read_pyproject

ROOT = Path(__file__).resolve().parent.parent
MODELS = "tests/export/cli_models.py"
TINY = f"{ROOT / MODELS}:tiny"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_tree_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, TINY, "-i", "2x4")
    assert status == 0 and err == ""
    lines = out.splitlines()
    # the columns of Python's profile.tree()
    assert lines[0].split() == ["module", "params", "output", "MACs", "ops", "ops", "%"]
    assert lines[2].startswith("__root__ (Sequential)") and "58" in lines[2]  # 4*8+8 + 8*2+2
    assert lines[3].startswith("|-- 0 (Linear)") and lines[-3].startswith("`-- 2 (Linear)")
    assert lines[-2] == "total: params 58, MACs 96, FLOPs (2xMACs) 192, ops 208"  # 2 * 96
    assert lines[-1] == "ops = multiplies + adds; MACs = multiply-accumulates; FLOPs = 2 x MACs"
    assert "\x1b[" not in out  # not a terminal: no colour


def test_depth_what_and_module_spec(capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    status, out, _ = run(capsys, "tests.export.cli_models:tiny", "--input-size", "2x4",
                         "--depth", "0", "--what", "params")
    assert status == 0
    assert out.splitlines()[0].split() == ["module", "params"]
    assert out.splitlines()[2].split() == ["__root__", "(Sequential)", "58"]


def test_factory_arguments_and_weights_none(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, TINY, "-i", "2x4", "--arg", "width=16", "--what", "params",
                         "--depth", "0")
    assert status == 0 and out.splitlines()[2].split() == ["__root__", "(Sequential)", "114"]
    status, _, err = run(capsys, f"{ROOT / MODELS}:with_weights", "-i", "2x4")
    assert status == 0, err
    # weights_backbone too (fcn_resnet50's default is ResNet-50's ImageNet weights, which it
    # downloaded although weights=None was passed); --arg still sets either
    status, _, err = run(capsys, f"{ROOT / MODELS}:with_backbone_weights", "-i", "2x4")
    assert status == 0, err
    status, _, err = run(capsys, f"{ROOT / MODELS}:with_backbone_weights", "-i", "2x4",
                         "--arg", "weights_backbone=imagenet")
    assert status == 2 and "weights_backbone='imagenet'" in err


def test_integer_and_several_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, f"{ROOT / MODELS}:embedder", "-i", "2x3:int64")
    assert status == 0, err
    assert "2x3x2" in out
    status, out, err = run(capsys, f"{ROOT / MODELS}:two_inputs", "-i", "2x4", "-i", "2x5",
                           "--what", "io", "--depth", "0")
    assert status == 0, err
    assert "2x4, 2x5" in out


def test_meta_device(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, TINY, "-i", "2x4", "--meta", "--depth", "0")
    assert status == 0, err
    assert out.splitlines()[2].split()[:3] == ["__root__", "(Sequential)", "58"]


def test_a_model_the_meta_device_cannot_run_is_told_to_run_for_real(
        capsys: pytest.CaptureFixture[str]) -> None:
    model = f"{ROOT / MODELS}:reads_values"
    status, _, err = run(capsys, model, "-i", "2x4", "--meta")
    assert status == 2
    assert "module '0' (ReadsValues)" in err and "meta tensors" in err
    assert "hint: the model ran on the meta device" in err and "--device cpu" in err
    status, out, err = run(capsys, model, "-i", "2x4", "--depth", "0")  # on the CPU it runs
    assert status == 0, err
    # the max of 8 values (7 comparisons), 1 comparison with 0, 2 x 4 = 8 multiplies
    assert "ops 16" in out


def test_a_float32_grouped_gemm_counts_on_the_meta_device_as_on_the_cpu(
        capsys: pytest.CaptureFixture[str]) -> None:
    # torch's meta kernel of the grouped product takes 16-bit inputs only; a GPU runs float32
    model = f"{ROOT / MODELS}:grouped_experts"
    status, on_meta, err = run(capsys, model, "-i", "4x16", "--meta", "--depth", "0")
    assert status == 0, err
    status, on_cpu, err = run(capsys, model, "-i", "4x16", "--depth", "0")
    assert status == 0, err
    # 2 experts x 16 x 8 parameters; 4 rows of 16 times a 16 x 8 weight: 4 x 16 x 8 = 512 MACs
    for out in (on_meta, on_cpu):
        assert "params 256" in out and "MACs 512" in out


def test_top_sort_and_filters(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, TINY, "-i", "2x4", "--top", "2")
    assert status == 0 and out.splitlines()[0].split()[:3] == ["type", "modules", "calls"]
    assert out.splitlines()[2].split()[:2] == ["Linear", "2"]
    status, out, _ = run(capsys, TINY, "-i", "2x4", "--sort", "self_ops", "--exclude", "ReLU")
    rows = [line.split()[0] for line in out.splitlines()[2:5]]
    assert rows == ["0", "2", "__root__"]  # 2*8*8 = 128 > 2*2*16 = 64 > 0 own ops
    status, out, _ = run(capsys, TINY, "-i", "2x4", "--min-pct", "50", "--include", "*")
    assert status == 0 and "(ReLU)" not in out and "0 (Linear)" in out


def test_time_and_memory_add_measured_columns(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, TINY, "-i", "2x4", "--what", "params,time,memory",
                           "--iters", "10", "--width", "0")
    assert status == 0, err
    header = out.splitlines()[0]
    for label in ("params", "time median", "self time median", "saved", "fwd max live"):
        assert label in header
    # every module row has a measured time with a unit
    rows = [line for line in out.splitlines()[2:]
            if not line.startswith(("total", "note", "ops = "))]
    assert rows and all(" us" in row or " ms" in row for row in rows)


def test_a_narrow_time_tree_keeps_each_flag_with_its_time(
        capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, TINY, "-i", "2x4", "--what", "time", "--iters", "4",
                           "--width", "60")
    assert status == 0, err
    # module 21 ("__root__ (Sequential)"), two times (11, 16), two flags (14, 19): 21 + 11
    # + 16 + 14 + 19 + 4 * 2 = 89 > 60; the self time goes first and its flag with it:
    # 21 + 11 + 14 + 2 * 2 = 50. The flags used to go first, text columns both
    assert out.splitlines()[0].split() == ["module", "time", "median", "low", "confidence"]
    assert "hidden to fit 60 columns: self time median, self low\n  confidence" in out


def test_memory_shows_the_training_step_and_its_peak(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, TINY, "-i", "2x4", "--what", "memory", "--width", "0")
    assert status == 0, err
    header = out.splitlines()[0]
    for label in ("saved", "fwd max live", "train fwd max live", "train bwd max live"):
        assert label in header
    # The numbers are measure_memory(train=True)'s: its training peak, with its call, and the
    # inference peak: parameters 58 * 4 = 232 B + the input 2*4*4 = 32 B, then the two
    # 2x8 float activations of 64 B each: 392 B = 392 B.
    memory = measure_memory(tiny(), torch.randn(2, 4), train=True)
    training = memory.training
    assert training is not None and training.baseline_bytes == 264
    peak = training.peak_bytes
    assert (f"note: training peak {peak} B (+{peak - 264} B above the parameters and inputs) "
            f"at {training.peak_call}") in out
    assert ("note: inference peak 392 B (+128 B above the parameters and inputs) at 1 (ReLU), "
            "call 1 of 1, forward") in out
    row = next(line for line in out.splitlines() if line.startswith("|-- 0 (Linear)"))
    assert f"{peak} B" in row  # that call's backward holds the peak


def test_memory_peaks_of_a_whole_profile_format_go_to_stderr(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = run(capsys, TINY, "-i", "2x4", "--what", "memory",
                         "-o", str(tmp_path / "p.json"))
    assert status == 0 and "moduleprofiler: training peak " in err
    assert "moduleprofiler: inference peak 392 B" in err


@pytest.mark.parametrize("meta", [["--meta"], ["--device", "meta"]], ids=["meta", "device"])
def test_time_is_not_measured_on_meta(capsys: pytest.CaptureFixture[str],
                                      meta: list[str]) -> None:
    status, out, err = run(capsys, TINY, "-i", "2x4", *meta, "--what", "params,time")
    assert status == 0
    # it said how to time it only for an hf: model built there unasked
    assert err == ("moduleprofiler: time: not measurable on the meta device (drop --meta, or "
                   "name a real --device, to time it)\n")
    assert out.splitlines()[0].split() == ["module", "params"]


def test_predict_has_pythons_default_host(capsys: pytest.CaptureFixture[str]) -> None:
    # one question, one answer: --predict and Python's predict() take the calibrated host
    # by default, and say the same latency for the same shapes (2 x 4 into tiny())
    python = ModuleProfiler().predict(tiny(), torch.randn(2, 4), device="H100 SXM")
    status, out, _ = run(capsys, TINY, "-i", "2x4", "--predict", "H100 SXM")
    assert status == 0
    assert f"predicted latency on {python.predicted_for}: " \
           f"{python.predicted_latency_ms:.3f} ms" in " ".join(out.split())


def test_predict_takes_the_short_dtype_names_of_python(
        capsys: pytest.CaptureFixture[str]) -> None:
    # --dtype bf16, as predict(dtype="bf16") and the sweep's --dtype bf16,fp32 take it
    python = ModuleProfiler().predict(tiny(), torch.randn(2, 4), device="H100 SXM",
                                      dtype="bf16")
    said = f"predicted latency on {python.predicted_for}: {python.predicted_latency_ms:.3f} ms"
    for name in ("bf16", "bfloat16"):
        status, out, _ = run(capsys, TINY, "-i", "2x4", "--predict", "H100 SXM", "--dtype", name)
        assert status == 0 and said in " ".join(out.split())
    # a comma list is a sweep's: the error says so
    status, _, err = run(capsys, TINY, "-i", "2x4", "--predict", "H100 SXM", "--dtype",
                         "bf16,fp32")
    assert status != 0 and "unknown dtype 'bf16,fp32'" in err and "--batch" in err


def test_a_saved_file_refuses_what_it_does_not_hold(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    # --what time showed a saved prediction's predicted times as if measured (a live
    # prediction refuses --what time); --by-operator on a file without operators asked for
    # listeners=, a Python keyword
    predicted, counted = tmp_path / "predicted.json", tmp_path / "counted.json"
    assert run(capsys, TINY, "-i", "2x4", "--predict", "H100 SXM", "-o", str(predicted))[0] == 0
    assert run(capsys, TINY, "-i", "2x4", "-o", str(counted))[0] == 0
    status, out, err = run(capsys, str(predicted), "--what", "time")
    assert status == 2 and out == ""
    assert f"--what time: {predicted} is a saved prediction, which holds no measured times" in err
    status, out, err = run(capsys, str(counted), "--by-operator")
    assert status == 2 and out == ""
    assert f"--by-operator: the saved profile {counted} holds no per-operator tallies" in err
    # a file saved with them shows them: the two addmm calls' ops, 2 x 8 x (2 x 4 - 1) + 16
    # (bias) = 128 and 2 x 2 x (2 x 8 - 1) + 4 = 64, together 192
    assert run(capsys, TINY, "-i", "2x4", "--by-operator", "-o", str(counted))[0] == 0
    status, out, _ = run(capsys, str(counted), "--by-operator")
    assert status == 0 and out.splitlines()[2].split()[:3] == ["aten.addmm", "2", "192"]


def test_a_saved_prediction_is_shown_as_it_was_predicted(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # the same columns, latency and band lines read back from the file as when predicted
    for host in ("calibrated", "none"):
        saved = tmp_path / f"predicted_{host}.json"
        status, live, _ = run(capsys, TINY, "-i", "2x4", "--predict", "H100 SXM", "--host", host)
        assert status == 0
        assert run(capsys, TINY, "-i", "2x4", "--predict", "H100 SXM", "--host", host, "-o",
                   str(saved))[0] == 0
        status, loaded, _ = run(capsys, str(saved))
        assert status == 0 and loaded == live
        said = " ".join(loaded.split())
        assert "predicted latency on" in said if host == "calibrated" else \
            "predicted device time on" in said
        assert "expected device time" in said


def test_predict_without_a_host_says_device_time(capsys: pytest.CaptureFixture[str]) -> None:
    python = ModuleProfiler().predict(tiny(), torch.randn(2, 4), device="H100 SXM", host=None)
    status, out, _ = run(capsys, TINY, "-i", "2x4", "--predict", "H100 SXM", "--host", "none")
    assert status == 0
    said = " ".join(out.split())
    # the device's time alone is never called a latency
    assert f"predicted device time on H100 SXM: {python.predicted_device_ms:.3f} ms" in said
    assert "predicted latency" not in said


def test_predict_shows_its_columns_beside_the_groups_what_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    # --what backward printed the backward counts and no predicted column at all
    python = ModuleProfiler().predict(tiny(), torch.randn(2, 4), device="H100 SXM",
                                      backward=True)
    status, out, _ = run(capsys, TINY, "-i", "2x4", "--predict", "H100 SXM", "--what",
                         "backward", "--width", "0")
    assert status == 0
    header = out.splitlines()[0]
    for name in ("backward MACs", "backward ops", "predicted device", "predicted host",
                 "backward predicted device", "backward predicted host"):
        assert name in header
    assert f"predicted latency on {python.predicted_for}: " \
           f"{python.predicted_latency_ms:.3f} ms" in " ".join(out.split())
    status, out, _ = run(capsys, TINY, "-i", "2x4", "--predict", "H100 SXM", "--what",
                         "params", "--width", "0")
    assert status == 0
    assert out.splitlines()[0].split()[:4] == ["module", "params", "predicted", "device"]


def test_predict_says_how_fp32_matmuls_run(capsys: pytest.CaptureFixture[str]) -> None:
    # tiny() is fp32: its Linears run at the plain FP32 peak unless TF32 is asked for, as in
    # a fresh process (torch's default matmul precision "highest")
    status, out, _ = run(capsys, TINY, "-i", "2x4", "--predict", "H100 SXM")
    said = " ".join(out.split())
    assert status == 0 and "fp32 matmuls on plain FP32, 67 TFLOP/s peak" in said
    status, out, _ = run(capsys, TINY, "-i", "2x4", "--predict", "H100 SXM", "--tf32")
    said = " ".join(out.split())
    assert status == 0 and "fp32 matmuls on TF32 tensor cores, 494.7 TFLOP/s peak" in said


@pytest.mark.parametrize("suffix", ["csv", "md", "tex", "txt", "json", "html"])
def test_output_file_format_from_suffix(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                        suffix: str) -> None:
    target = tmp_path / f"out.{suffix}"
    caption = ["--caption", "Tiny"] if suffix == "tex" else []  # only LaTeX has a caption
    status, out, err = run(capsys, TINY, "-i", "2x4", "-o", str(target), *caption)
    assert status == 0 and out == ""
    assert f"wrote {target}" in err
    text = target.read_text(encoding="utf-8")
    first = {"csv": "module,type,params", "md": "| module |", "tex": "\\begin{table}",
             "txt": "module", "json": "{", "html": "<!DOCTYPE html>"}[suffix]
    assert text.startswith(first)


def test_json_round_trip_and_rendering_a_saved_profile(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    saved = tmp_path / "tiny.json"
    assert main([TINY, "-i", "2x4", "-o", str(saved)]) == 0
    profile = Profile.from_json(saved)
    assert profile.total_params == 58 and json.loads(saved.read_text())["schema_version"] == 5
    capsys.readouterr()
    status, out, _ = run(capsys, str(saved), "--format", "markdown", "--depth", "1")
    assert status == 0 and out.startswith("| module | type |")


@pytest.mark.parametrize("group", ["time", "memory"])
def test_a_saved_profile_has_no_time_or_memory(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path, group: str) -> None:
    saved = tmp_path / "tiny.json"
    assert run(capsys, TINY, "-i", "2x4", "-o", str(saved))[0] == 0
    status, out, err = run(capsys, str(saved), "--what", f"params,{group}")
    assert status == 2 and out == ""
    assert f"--what {group}: the saved profile {saved} holds no {group} measurements" in err


def test_a_saved_profile_without_backward_refuses_backward_columns(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # they read '-' on every row, as if the backward had been run and counted nothing
    saved = tmp_path / "tiny.json"
    assert run(capsys, TINY, "-i", "2x4", "-o", str(saved))[0] == 0
    for what in ("backward", "params,backward_flops"):
        status, out, err = run(capsys, str(saved), "--what", what)
        assert status == 2 and out == ""
        assert f"--what backward: the saved profile {saved} holds no backward counts" in err
    # saved with its backward, it shows it
    assert run(capsys, TINY, "-i", "2x4", "--what", "backward", "-o", str(saved))[0] == 0
    status, out, _ = run(capsys, str(saved), "--what", "backward", "--depth", "0")
    assert status == 0 and "backward ops" in out.splitlines()[0]


@pytest.mark.parametrize("flags", [["-i", "8x4"], ["--dtype", "float16"], ["--device", "cpu"],
                                   ["--meta"], ["--arg", "width=3"],
                                   ["--predict", "H100 SXM"],
                                   ["--iters", "5", "--what", "time"]])  # --iters: dropped
def test_a_saved_profile_refuses_the_options_that_run_a_model(flags: list[str]) -> None:
    # they were ignored: -i 8x4 showed the batch of 2 it was saved with, --predict the
    # measured profile with no prediction in it
    from moduleprofiler.cli_options import parse_options

    with pytest.raises(CliError, match=f"profile.json is a saved profile, shown as it was "
                                       f"saved \\(nothing is run\\): {flags[0]} does not "
                                       "apply"):
        parse_options(["profile.json", *flags])


def test_a_saved_profile_keeps_memory_it_was_saved_with(capsys: pytest.CaptureFixture[str],
                                                       tmp_path: Path) -> None:
    saved = tmp_path / "tiny.json"
    assert run(capsys, TINY, "-i", "2x4", "--what", "memory", "-o", str(saved))[0] == 0
    status, out, _ = run(capsys, str(saved), "--what", "memory", "--width", "0")
    assert status == 0 and "fwd max live" in out.splitlines()[0]


def test_colour_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, TINY, "-i", "2x4", "--color", "always", "--unicode")
    assert status == 0 and "\x1b[1m" in out and "├─" in out


def test_colour_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert supports_color(Tty()) and not supports_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not supports_color(Tty())


@pytest.mark.parametrize(("argv", "message"), [
    (["nocolon", "-i", "2x4"], "must look like package.module:factory"),
    (["missing_file.py:f", "-i", "2x4"], "no such file"),
    (["no_such_package_xyz:f", "-i", "2x4"], "cannot import 'no_such_package_xyz'"),
    ([f"{ROOT / MODELS}:nope", "-i", "2x4"], "has no attribute 'nope'"),
    # a typo named no spelling that exists; a factory's own arguments named no --arg
    ([f"{ROOT / MODELS}:tinyy", "-i", "2x4"], "has no attribute 'tinyy' (close: tiny)"),
    (["torch.nn:Linear", "-i", "2x4"], "missing 2 required positional arguments: "
                                       "'in_features' and 'out_features'; pass --arg "
                                       "in_features=VALUE --arg out_features=VALUE"),
    ([TINY, "-i", "2xa"], "bad --input-size '2xa'"),
    ([TINY, "-i", "0x4"], "bad --input-size '0x4': every size must be at least 1"),
    # "-i/--input-size: expected one argument" (argparse took it for an option) and
    # "expected sizes joined by x", where the sizes were joined by x
    ([TINY, "-i", "-1x4"], "bad --input-size '-1x4': every size must be at least 1"),
    ([TINY, "-i", "2x-1"], "bad --input-size '2x-1': every size must be at least 1"),
    ([TINY], "missing --input-size"),
    ([TINY, "-i", "2x4", "--dtype", "float99"], "unknown dtype 'float99'"),
    # a sweep's list names the option too (it was the prediction's "dtype must be one of")
    ([TINY, "-i", "2x4", "--predict", "H100 SXM", "--batch", "1,8", "--dtype",
      "fp16,float17"], "--dtype: unknown dtype 'float17'"),
    ([TINY, "-i", "2x4", "--device", "bogus"], "bad --device 'bogus'"),
    ([TINY, "-i", "2x5"], "forward of module '0' (Linear) raised RuntimeError"),
    ([f"{ROOT / MODELS}:raises", "-i", "2x4"], "raised ValueError: boom"),
    ([f"{ROOT / MODELS}:broken", "-i", "2x4"], "raised RuntimeError: factory failed"),
    ([f"{ROOT / MODELS}:not_a_module", "-i", "2x4"], "returned int, not a torch.nn.Module"),
    ([TINY, "-i", "2x4", "--what", "flops,bogus"], "unknown --what bogus"),
    ([TINY, "-i", "2x4", "--format", "pdf"], "unknown format 'pdf'"),
    ([TINY, "-i", "2x4", "-o", "out.xyz"], "unknown format '.xyz'"),
    # every format of the format table and every figure -o writes, from their own tables
    ([TINY, "-i", "2x4", "-o", "out.xlsx"], "(known: csv, htm, html, json, latex, markdown, "
                                            "md, tex, text, txt; figures: png, svg, pdf)"),
    ([TINY, "-i", "2x4", "--sort", "nope"], "unknown column(s) ['nope']"),
    ([TINY, "-i", "2x4", "--top", "2", "--sort", "nope"], "unknown column 'nope'"),
    ([TINY, "-i", "2x4", "--bogus"], "unrecognized arguments: --bogus"),
    ([TINY, "-i", "2x4", "--depth", "-1"], "--depth must be at least 0, got -1"),
    ([TINY, "-i", "2x4", "--top", "0"], "--top must be at least 1, got 0"),
    ([TINY, "-i", "2x4", "--min-pct", "150"], "--min-pct must be a percentage from 0 to 100"),
    ([TINY, "-i", "2x4", "--min-pct", "-1"], "--min-pct must be a percentage from 0 to 100"),
    ([TINY, "-i", "2x4", "--iters", "1"], "--iters must be at least 2, got 1"),
    ([TINY, "-i", "2x4", "--width", "10"], "--width must be 0 (no limit) or at least 40"),
    ([TINY, "-i", "2x4", "--width", "-5"], "--width must be 0 (no limit) or at least 40"),
    ([TINY, "-i", "2x4", "--depth", "x"], "argument --depth: invalid int value: 'x'"),
    ([TINY, "-i", "2x4", "--include", ""], "--include '' is an empty pattern, which matches "
                                           "no module"),
    ([TINY, "-i", "2x4", "--exclude", "0", "--exclude", " "], "--exclude ' ' is an empty "
                                                               "pattern"),
    ([TINY, "-i", "2x4", "--predict", "H200 XYZ"], "--predict H200 XYZ: device 'H200 XYZ' is "
                                                   "not in the peak table (close: H200;"),
    # the example was Python's keyword, device='H100 SXM'
    ([TINY, "-i", "2x4", "--predict", "H100"], "--predict H100: could be any of H100 SXM, H100 "
                                               "PCIe, H100 NVL, whose peaks differ: name the "
                                               "card (e.g. --predict \"H100 SXM\")"),
    # an empty value was read as none given: no prediction, text, float32, the CPU
    ([TINY, "-i", "2x4", "--predict", ""], "--predict '' is empty: name a GPU"),
    ([TINY, "-i", "2x4", "--format", ""], "--format '' is empty: name a format"),
    ([TINY, "-i", "2x4", "-o", ""], "--output '' is empty: name a file"),  # "cannot write :"
    ([TINY, "-i", "2x4", "--dtype", " "], "--dtype ' ' is empty: name a dtype"),
    ([TINY, "-i", "2x4", "--device", ""], "--device '' is empty: name a device"),
    ([TINY, "-i", "2x4", "--sort", ""], "--sort '' is empty: name a column"),
    (["hf:", "-i", "1x8"], "model 'hf:' names no model type"),  # "no configuration file"
    # the token ids were int64 whatever the suffix said
    (["hf:gpt2", "-i", "1x8:float16", "--arg", "n_layer=1"], "--input-size 1x8:float16: an "
                                                             "hf: model's token ids are int64"),
    # the view's own argument was named (sort_by=, module=), not the option
    ([TINY, "-i", "2x4", "--sort", "nope"], "--sort nope: unknown column(s) ['nope']"),
    ([TINY, "-i", "2x4", "--top", "2", "--sort", "type"], "--sort type: top(by='type'): "
                                                          "'type' is not a numeric column"),
    ([TINY, "-i", "2x4", "--by-operator", "nope"], "--by-operator nope: module='nope' is not "
                                                   "a module of this profile"),
    ([TINY, "-i", "2x4", "--dtype", "fp8"], "--dtype: unknown dtype 'fp8'"),
    # only the tree folds: the flat tables printed the same with or without it
    ([TINY, "-i", "2x4", "--sort", "ops", "--no-fold"], "--no-fold unfolds the module tree's "
                                                        "repeated blocks: --sort shows a flat"),
    ([TINY, "-i", "2x4", "--top", "2", "--no-fold"], "--no-fold unfolds the module tree's "
                                                     "repeated blocks: --top shows a flat"),
    # a prediction runs on the meta device: --device cpu was dropped in silence
    ([TINY, "-i", "2x4", "--predict", "H100 SXM", "--device", "cpu"],
     "--predict predicts without running the model: --device cpu needs a measured run"),
    ([TINY, "-i", "2x4:float99"], "--input-size 2x4:float99: unknown dtype 'float99'"),
    ([TINY, "-i", "2x4:"], "bad --input-size '2x4:': no dtype after ':'"),  # was float32
    # dropped in silence: the types' table has its own columns, the figure drew ops
    ([TINY, "-i", "2x4", "--top", "2", "--what", "io"], "--top shows the module types' own "
                                                         "columns: --what io does not apply"),
    ([TINY, "-i", "2x4", "--what", "bogus", "-o", "f.png"], "-o f.png draws one metric (ops): "
                                                           "--what bogus does not apply"),
])
def test_errors_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str],
                                     message: str) -> None:
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("moduleprofiler: error: "), err
    assert message in err


def test_help_shows_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "torchvision.models:resnet18" in out and "--input-size" in out


def test_parse_input_size() -> None:
    assert parse_input_size("1x3x224x224") == ((1, 3, 224, 224), None)
    assert parse_input_size("8x128:int64") == ((8, 128), "int64")


# -- end to end, in a subprocess --------------------------------------------------------------
def _command(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "moduleprofiler", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "PYTHONPATH": str(ROOT)})


def test_python_dash_m_end_to_end(tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    result = _command("tests.export.cli_models:tiny", "--input-size", "2x4", "-o", str(report))
    assert result.returncode == 0, result.stderr
    assert result.stderr == f"moduleprofiler: wrote {report} (html)\n"
    assert report.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_python_dash_m_error_is_one_line_without_traceback() -> None:
    result = _command(f"{MODELS}:raises", "--input-size", "2x4")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "raised ValueError: boom" in result.stderr


def test_what_backward_and_column_names(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, TINY, "-i", "2x4", "--what", "backward,param_bytes,flops",
                           "--depth", "0")
    assert status == 0, err
    assert out.splitlines()[0].split() == ["module", "backward", "MACs", "backward", "ops",
                                           "param", "bytes", "FLOPs", "(2xMACs)"]
    root = out.splitlines()[2]
    # backward MACs: Linear(4, 8) weight grad 2 x 4 x 8 = 64 (the input needs none), Linear(8, 2)
    # input and weight grads 2 x 8 x 2 = 32 each: 128. Parameters: 58 float32 = 232 B.
    # FLOPs: 2 x (2 x 4 x 8 + 2 x 8 x 2) = 192
    assert root.split()[2] == "128" and "232 B" in root and root.split()[-1] == "192"


def test_width_and_no_fold(capsys: pytest.CaptureFixture[str]) -> None:
    # at 40 columns the shapes go, then numbers (the share last): no line is longer
    status, out, _ = run(capsys, TINY, "-i", "2x4", "--width", "40")
    assert status == 0 and max(len(line) for line in out.splitlines()) <= 40
    assert out.splitlines()[0].split() == ["module", "params", "ops", "%"]
    assert "note: hidden to fit 40 columns: output,\n  ops, MACs" in out
    status, wide, _ = run(capsys, TINY, "-i", "2x4", "--width", "0", "--what", "params,io")
    assert status == 0 and "input" in wide.splitlines()[0]
    status, folded, _ = run(capsys, f"{ROOT / MODELS}:repeated", "-i", "2x4")
    assert status == 0 and "`-- 0-2 (Linear) x3" in folded
    status, unfolded, _ = run(capsys, f"{ROOT / MODELS}:repeated", "-i", "2x4", "--no-fold")
    assert status == 0 and "|-- 1 (Linear)" in unfolded and "0-2" not in unfolded


def test_time_prints_the_timing_warnings(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # a load average far above the core count is what the Python API warns about
    monkeypatch.setattr(environment, "loadavg", lambda: 1000.0)
    status, _, err = run(capsys, TINY, "-i", "2x4", "--what", "time", "--iters", "4")
    assert status == 0
    warnings = [line for line in err.splitlines() if line.startswith("moduleprofiler: warning:")]
    assert any("load average 1000.00 exceeds" in line for line in warnings), err


def test_by_operator(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, TINY, "--input-size", "2x4", "--by-operator", "--width", "0")
    assert status == 0
    # tiny: Linear(4, 8) then Linear(8, 2) on 2 rows, both addmm with bias:
    # 2 x 8 x (2 x 4 - 1) + 16 = 128 ops and 2 x 2 x (2 x 8 - 1) + 4 = 64: 192 ops;
    # MACs 2 x 8 x 4 + 2 x 2 x 8 = 96; relu 16 ops; total 208
    addmm = next(line for line in out.splitlines() if line.startswith("aten.addmm"))
    assert addmm.split()[1:4] == ["2", "192", "96"]
    assert "total: ops 208, MACs 96" in out
    status, out, _ = run(capsys, TINY, "--input-size", "2x4", "--by-operator", "2")
    # module 2 alone: its addmm, 64 ops and 32 MACs
    addmm = next(line for line in out.splitlines() if line.startswith("aten.addmm"))
    assert status == 0 and addmm.split()[1:4] == ["1", "64", "32"]
    status, _, err = run(capsys, TINY, "--input-size", "2x4", "--by-operator", "--top", "3")
    assert status == 2 and "--by-operator shows one table of operators: --top" in err


# -- what the command answers before torch loads ------------------------------------------------
HEAVY = ("torch", "pandas", "jinja2", "matplotlib", "transformers")
"""Packages ``--version``, ``--help`` and argument errors must not import (they take
seconds each; ``benchmarks/cli_startup.py`` times it)."""


def _entry_points() -> list[list[str]]:
    """``python -m moduleprofiler`` and the console script's ``module:function``, called as the
    installed script calls it."""
    module, _, function = read_pyproject()["project"]["scripts"]["moduleprofiler"].partition(":")
    script = f"import sys; from {module} import {function}; sys.exit({function}())"
    return [["-m", "moduleprofiler"], ["-c", script]]


def _heavy_imports(entry: list[str], *argv: str) -> tuple[subprocess.CompletedProcess[str],
                                                          list[str]]:
    """Run the command with ``-X importtime``: its result and the heavy packages it imported."""
    result = subprocess.run([sys.executable, "-X", "importtime", *entry, *argv], cwd=ROOT,
                            capture_output=True, text=True, timeout=300,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    imported = {line.rpartition("|")[2].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    return result, [name for name in HEAVY if name in imported]


@pytest.mark.parametrize("entry", _entry_points(), ids=["dash-m", "script"])
@pytest.mark.parametrize(("argv", "status", "said"), [
    (["--version"], 0, "moduleprofiler "),
    (["--help"], 0, "examples:"),
    (["m:f", "--bogus"], 2, "unrecognized arguments: --bogus"),
    (["m:f", "--color", "purple"], 2, "argument --color: invalid choice: 'purple'"),
    (["m:f", "-i", "1x2", "--arg", "novalue"], 2, "--arg 'novalue' must look like KEY=VALUE"),
    (["m:f", "-i", "1xZ"], 2, "bad --input-size '1xZ'"),
    (["m:f", "-i", "1x2", "--width", "5"], 2, "--width must be 0 (no limit) or at least 40"),
    (["m:f", "-i", "1x2", "--by-operator", "-o", "x.png"], 2, "-o FIGURE cannot apply"),
    (["m:f", "-i", "1x2", "-o", "no_such_dir_xyz/x.csv"], 2, "no directory no_such_dir_xyz"),
], ids=["version", "help", "unknown-flag", "bad-choice", "bad-arg", "bad-input-size",
        "bad-width", "by-operator-figure", "output-folder"])
def test_answers_without_importing_torch(entry: list[str], argv: list[str], status: int,
                                         said: str) -> None:
    result, heavy = _heavy_imports(entry, *argv)
    assert result.returncode == status, result.stderr[-2000:]
    assert said in result.stdout + result.stderr
    assert heavy == []


def test_a_model_run_still_imports_what_it_needs() -> None:
    # the light front hands over to the rest: the same answer as before, torch and pandas loaded
    result, heavy = _heavy_imports(["-m", "moduleprofiler"], f"{MODELS}:tiny", "-i", "2x4",
                                   "--depth", "0", "--what", "params")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[2].split() == ["__root__", "(Sequential)", "58"]
    assert "torch" in heavy and "pandas" in heavy


def test_the_command_lines_default_host_is_pythons() -> None:
    # cli_options may not import the prediction package (torch): its default is a copy
    from moduleprofiler.cli_options import parse_options
    from moduleprofiler.prediction.predict import DEFAULT_HOST

    assert parse_options(["m:f"]).host == DEFAULT_HOST
    assert parse_options(["m:f", "--predict", "H100 SXM"]).host == DEFAULT_HOST


@pytest.mark.parametrize("flags", [["--host", "this"], ["--host", "none"], ["--tf32"],
                                   ["--no-tf32"]])
def test_prediction_flags_without_predict_are_refused(flags: list[str]) -> None:
    # they changed nothing without --predict: a measured run ignored them silently
    from moduleprofiler.cli_options import parse_options

    with pytest.raises(CliError, match=f"{flags[0]} only applies to a prediction"):
        parse_options(["m:f", *flags])


def test_the_command_lines_copies_of_export_constants_agree() -> None:
    # cli_options may not import the export package (pandas): it keeps copies of these two
    from moduleprofiler import cli_options
    from moduleprofiler.export.figures import FIGURE_SUFFIXES
    from moduleprofiler.export.fit import MIN_WIDTH

    assert cli_options.FIGURE_SUFFIXES == FIGURE_SUFFIXES
    assert cli_options.MIN_WIDTH == MIN_WIDTH


def test_a_caption_the_format_has_no_place_for_is_refused(capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    # CSV has no title, caption or label; LaTeX has a caption and a label but no title: they
    # were said ignored on stderr and the command succeeded without them
    status, out, err = run(capsys, TINY, "-i", "2x4", "--format", "csv", "--caption", "C",
                           "--label", "tab:c")
    assert status == 2 and out == ""
    assert "--caption, --label do not apply to --format csv" in err
    status, out, err = run(capsys, TINY, "-i", "2x4", "--format", "latex", "--caption", "C",
                           "--title", "T")
    assert status == 2 and "--title does not apply to --format latex" in err
    status, out, err = run(capsys, TINY, "-i", "2x4", "--format", "latex", "--caption", "C")
    assert status == 0 and r"\caption{C}" in out and err == ""


def test_a_caption_is_refused_on_the_terminal_too(capsys: pytest.CaptureFixture[str]) -> None:
    # the text table printed to stdout has no title, caption or label either
    status, out, err = run(capsys, TINY, "-i", "2x4", "--caption", "C", "--title", "T",
                           "--label", "tab:c")
    assert status == 2 and out == ""
    assert "--title, --caption, --label do not apply to the text on the terminal" in err
    status, out, err = run(capsys, TINY, "-i", "2x4")
    assert status == 0 and err == ""
    # the prediction sweep's table too
    status, out, err = run(capsys, TINY, "-i", "2x4", "--predict", "H100 SXM", "--batch", "1,2",
                           "--dtype", "fp32", "--caption", "C")
    assert status == 2 and "--caption does not apply to --batch (the text on the terminal)" in err


def test_a_pattern_that_matches_no_module_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    # "--exclude linear" (the type is Linear) printed the whole tree without a word
    status, out, err = run(capsys, TINY, "-i", "2x4", "--exclude", "linear", "--width", "0")
    assert status == 0 and "|-- 0 (Linear)" in out
    assert "note: the exclude pattern 'linear' matches no module path or type" in out
    status, out, err = run(capsys, TINY, "-i", "2x4", "--include", "nope", "-f", "csv")
    assert status == 0 and out == "module,type,params,output_shapes,macs,ops,ops_pct\n"
    assert err == ("moduleprofiler: note: the include pattern 'nope' matches no module path "
                   "or type (globs are case-sensitive: 'Conv*', 'layer1.*')\n")


@pytest.mark.parametrize("what", [",", "", " , "])
def test_a_what_that_names_nothing_is_refused(what: str) -> None:
    # "--what ," printed a table of module names without a single number, and "--what ''"
    # the default columns: neither is what was asked for
    from moduleprofiler.cli_options import parse_options

    with pytest.raises(CliError, match="names no column group or column"):
        parse_options(["m:f", "--what", what])


@pytest.mark.parametrize(("flags", "said"), [
    (["--what", "params,time"], "--what time"), (["--what", "memory"], "--what memory"),
    (["--by-operator"], "--by-operator")])
def test_a_prediction_refuses_what_only_a_measured_run_has(flags: list[str], said: str) -> None:
    # --what time and memory were dropped in silence (the predicted columns shown instead);
    # --by-operator failed after the prediction, asking for a Python listener
    from moduleprofiler.cli_options import parse_options

    with pytest.raises(CliError, match=f"--predict predicts without running the model: {said} "
                                       "needs a measured run"):
        parse_options(["m:f", "--predict", "H100 SXM", *flags])


@pytest.mark.parametrize("flags", [[], ["--what", "params,memory"],
                                   ["--what", "time", "--generate", "2"]])
def test_iters_without_the_module_timer_is_refused(flags: list[str]) -> None:
    # it changed nothing: no module timer ran (--generate times its steps with its own repeats)
    from moduleprofiler.cli_options import parse_options

    with pytest.raises(CliError, match="--iters sets the timed iterations of the module timer"):
        parse_options(["m:f", "--iters", "5", *flags])
    assert parse_options(["m:f", "--iters", "5", "--what", "params,time"]).iters == 5


def test_meta_and_another_device_are_refused() -> None:
    # --meta --device cuda:0 counted on the meta device and dropped --device in silence
    from moduleprofiler.cli_options import parse_options

    with pytest.raises(CliError, match="--meta and --device cuda:0 name two places to run"):
        parse_options(["m:f", "--meta", "--device", "cuda:0"])
    assert parse_options(["m:f", "--meta", "--device", "meta"]).meta


@pytest.mark.parametrize(("flags", "said"), [
    (["--top", "2", "--exclude", "Conv2d"], "--exclude filter the rows of the module tree and "
                                            "tables: --top"),
    (["--top", "2", "--include", "Lin*", "--min-pct", "5"], "--min-pct, --include filter"),
    (["-o", "flops.png", "--exclude", "Conv2d"], "--exclude filter the rows of the module "
                                                 "tree and tables: -o FIGURE")])
def test_row_filters_are_refused_where_they_filter_nothing(flags: list[str], said: str) -> None:
    # --top 2 --exclude Conv2d listed Conv2d first: the top types and the figures are drawn
    # from every module, the filters were dropped in silence
    from moduleprofiler.cli_options import parse_options

    with pytest.raises(CliError, match=re.escape(said)):
        parse_options(["m:f", *flags])
    assert parse_options(["m:f", "--sort", "ops", "--exclude", "Conv2d"]).exclude == ["Conv2d"]


def test_an_output_without_a_suffix_says_the_command_lines_option(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # it said "pass format=", the keyword of Profile.save, which the command line has not
    status, _, err = run(capsys, TINY, "-i", "2x4", "-o", str(tmp_path / "table"))
    assert status == 2
    assert f"-o {tmp_path / 'table'} has no suffix to tell its format: add one or pass " \
        "--format (known: csv," in err and "format=" not in err
    status, _, err = run(capsys, TINY, "-i", "2x4", "-o", str(tmp_path / "table"),
                           "--format", "csv")
    assert status == 0 and (tmp_path / "table").read_text().startswith("module,type")


def test_an_arg_given_twice_is_refused() -> None:
    # --arg width=3 --arg width=4 built width 4 in silence
    from moduleprofiler.cli_options import parse_options

    with pytest.raises(CliError, match=re.escape("--arg width is given twice (width=3 and "
                                                 "width=4)")):
        parse_options(["m:f", "--arg", "width=3", "--arg", "width=4"])


@pytest.mark.parametrize(("column", "group"), [("time_median_ms", "time"),
                                               ("max_live_bytes", "memory")])
def test_a_column_of_a_pass_not_run_names_the_group_that_runs_it(
        capsys: pytest.CaptureFixture[str], column: str, group: str) -> None:
    # it said "unknown --what time_median_ms", a column docs/glossary.md lists
    status, out, err = run(capsys, TINY, "-i", "2x4", "--what", column)
    assert status == 2 and out == ""
    assert f"--what {column} is a column of the {group} pass, which only --what {group} " \
        f"runs: e.g. --what {group},{column}" in err
    status, _, err = run(capsys, TINY, "-i", "2x4", "--what", "bogus_count")
    assert status == 2 and "unknown --what bogus_count" in err


def test_a_loss_error_says_what_the_command_line_can_do(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    # nn.ReLU has no parameter: its training-step memory pass finds nothing to differentiate,
    # and the error ended in "pass loss_fn=", a keyword the command line has not
    status, out, err = run(capsys, "torch.nn:ReLU", "-i", "2x4", "--what", "memory")
    assert status == 2 and out == ""
    assert err.rstrip().endswith("; the command line has no loss_fn: --what backward and "
                                 "--what memory differentiate the default loss (the output's "
                                 "loss, else the sum of its floating outputs: "
                                 "docs/architecture.md), so drop them or profile this model "
                                 "from Python with loss_fn=")


def test_per_call_writes_the_csv_profile_save_writes(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # -o x.csv wrote the tree shown (module, type, params, output_shapes, macs, ops, ops_pct:
    # one row per module) where profile.save("x.csv") writes the per-call frame with every
    # column, and nothing said so: --per call writes that very file, and the line on stderr
    # says which table a CSV file holds
    assert main([TINY, "-i", "2x4", "-o", str(tmp_path / "shown.csv")]) == 0
    assert "the table shown; --per call writes the per-call frame" in capsys.readouterr().err
    assert (tmp_path / "shown.csv").read_text().startswith(
        "module,type,params,output_shapes,macs,ops,ops_pct\n")
    for per in ("call", "module", "type"):
        assert main([TINY, "-i", "2x4", "-o", str(tmp_path / f"{per}.csv"), "--per", per]) == 0
        assert f"one row per {per}, every column" in capsys.readouterr().err
        saved = tmp_path / f"saved_{per}.csv"
        ModuleProfiler().profile(tiny(), torch.randn(2, 4)).save(saved, aggregate=per)
        assert (tmp_path / f"{per}.csv").read_text() == saved.read_text()
    # tiny: 1 root + 3 children = 4 calls, 4 modules; types Sequential, Linear, ReLU
    assert [len((tmp_path / f"{per}.csv").read_text().splitlines()) for per in
            ("call", "module", "type")] == [1 + 4, 1 + 4, 1 + 3]


@pytest.mark.parametrize(("extra", "message"), [
    (["-o", "x.md"], "--per call writes CSV"),
    (["--format", "json"], "--per call writes CSV"),
    (["--top", "2"], "--top does not apply"),
    (["--sort", "ops"], "--sort does not apply"),
    (["--depth", "1"], "--depth does not apply"),
    (["--by-operator"], "--by-operator does not apply"),
])
def test_per_refuses_what_it_would_drop(extra: list[str], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([TINY, "-i", "2x4", "--per", "call", *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_csv_tables_notes_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    # a CSV file has no place for notes: which totals are lower bounds is said on stderr
    status, out, err = run(capsys, f"{ROOT / MODELS}:opaque", "-i", "4x4", "-f", "csv")
    assert status == 0 and out.startswith("module,type,")
    assert "moduleprofiler: note: ops unknown or partial in 1 module(s): 1; ops, MACs and " \
           "FLOPs totals are lower bounds" in err
    assert "note: operators without a formula: aten.linalg_matrix_exp x1" in err
    # and the file itself says which rows are lower bounds, as a column pandas reads as flags:
    # Linear 4 rows x 4 outputs x 8 = 128 ops exact; the root's 128 a lower bound
    table = pd.read_csv(io.StringIO(out))
    assert list(table.columns[-2:]) == ["complete", "ops_complete"]
    assert table["complete"].dtype == bool
    assert table[["ops", "complete"]].values.tolist()[:2] == [[128, False], [128, True]]
    assert table["complete"].tolist() == [False, True, False]


def test_a_predict_device_of_no_card_is_refused_before_the_model_is_built(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # the name was checked once the model was built (an hf: model, a factory that takes
    # minutes): here the factory itself fails, and the error is still the device's
    spec = tmp_path / "broken.py"
    spec.write_text("def build():\n    raise RuntimeError('built')\n", encoding="utf-8")
    status, _, err = run(capsys, f"{spec}:build", "-i", "2x4", "--predict", "H200 XYZ")
    assert status == 2
    assert "--predict H200 XYZ: device 'H200 XYZ' is not in the peak table" in err
    assert "built" not in err
    status, _, err = run(capsys, f"{spec}:build", "-i", "2x4", "--predict", "H200")
    assert status == 2 and "raised RuntimeError: built" in err  # a known card: built next


def test_a_module_spec_imports_from_the_working_directory(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    # the console script's sys.path starts with its bin directory, not the working directory
    # that python -m puts first: `moduleprofiler mymodels:build` said "No module named"
    (tmp_path / "cwd_models_for_cli.py").write_text(
        "from torch import nn\n\ndef build():\n    return nn.Linear(4, 3)\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path
                                      if entry and Path(entry).resolve() != tmp_path.resolve()])
    monkeypatch.delitem(sys.modules, "cwd_models_for_cli", raising=False)
    status, out, err = run(capsys, "cwd_models_for_cli:build", "-i", "2x4", "--depth", "0",
                           "--what", "params")
    assert status == 0, err
    assert out.splitlines()[2].split() == ["__root__", "(Linear)", "15"]  # 4 * 3 + 3
    sys.modules.pop("cwd_models_for_cli", None)


def test_output_dash_is_standard_output(capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # "-o - --format csv" wrote a file named "-"; "-o -" alone said it had no suffix
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, TINY, "-i", "2x4", "-o", "-", "--format", "csv",
                           "--what", "params", "--depth", "0")
    assert status == 0 and err == "", err
    assert out == "module,type,params\n__root__,Sequential,58\n"  # 4 * 8 + 8 + 8 * 2 + 2
    status, out, err = run(capsys, TINY, "-i", "2x4", "-o", "-", "--what", "params",
                           "--depth", "0")
    assert status == 0 and err == "" and out.splitlines()[2].split()[-1] == "58"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("output", "said"), [
    ("missing_folder/out.csv", "-o {tmp}/missing_folder/out.csv: no directory "
                               "{tmp}/missing_folder to write it in (create it first)"),
    ("folder.csv", "-o {tmp}/folder.csv is a directory: name a file in it"),
])
def test_an_output_that_cannot_be_written_is_refused_before_the_model_is_built(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, output: str, said: str) -> None:
    # said only after the model had been built and run (a --what time run lost at the end);
    # the factory raises, so only a refusal before the build names the output
    (tmp_path / "folder.csv").mkdir()
    status, out, err = run(capsys, f"{ROOT / MODELS}:broken", "-i", "2x4", "-o",
                           str(tmp_path / output))
    assert status == 2 and out == ""
    assert err.startswith(f"moduleprofiler: error: {said.format(tmp=tmp_path)}")
    assert err.count("\n") == 1


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="an MPS device is here")
def test_a_device_this_machine_lacks_is_one_short_line(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    # it was torch's dispatcher error listing every backend: some 6,000 characters
    status, out, err = run(capsys, TINY, "-i", "2x4", "--device", "mps")
    assert status == 2 and out == ""
    assert err == ("moduleprofiler: error: --device mps: no mps device is available in this "
                   "process (torch.mps.is_available() is False)\n")


@pytest.mark.parametrize(("flags", "said"), [
    (["--unicode"], "cannot write '\u2500': --unicode draws box lines: drop it, or set "
                    "PYTHONIOENCODING=utf-8, or write a file with -o"),
    (["--format", "csv"], None),  # plain ASCII: written
])
def test_a_terminal_encoding_without_the_characters_is_said(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        flags: list[str], said: str | None) -> None:
    # PYTHONIOENCODING=ascii: "'ascii' codec can't encode characters in position 57-112"
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", stdout)
    status, _, err = run(capsys, TINY, "-i", "2x4", "--depth", "0", *flags)
    if said is None:
        stdout.flush()
        assert status == 0 and stdout.buffer.getvalue().startswith(b"module,type,params")
    else:
        assert status == 2
        assert err == f"moduleprofiler: error: stdout's encoding (ascii) {said}\n"


def test_floating_input_to_an_embedding_names_the_integer_dtype(
        capsys: pytest.CaptureFixture[str]) -> None:
    # torch's "Expected tensor for argument #1 'indices' ... Long, Int" said nothing of -i's
    # dtype suffix, as Python's input_size= error says what to pass
    status, out, err = run(capsys, f"{ROOT / MODELS}:embedder", "-i", "2x3")
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "forward of module '0' (Embedding) raised RuntimeError" in err
    assert err.endswith("; hint: -i 2x3 made random float32 input; token ids (or other "
                        "integers) need an integer dtype, e.g. -i 2x3:int64\n")
    status, _, err = run(capsys, TINY, "-i", "2x5")  # another error: no hint
    assert status == 2 and "hint" not in err


def test_a_spec_naming_a_module_instance_profiles_it(capsys: pytest.CaptureFixture[str]) -> None:
    # it was called as a factory: "model() raised TypeError: Sequential.forward() missing 1
    # required positional argument: 'input'"
    status, out, err = run(capsys, f"{ROOT / MODELS}:model", "-i", "2x4", "--depth", "0",
                           "--what", "params,ops")
    assert status == 0, err
    assert out.splitlines()[2].split() == ["__root__", "(Sequential)", "58", "96", "208",
                                           "100.0%"]  # as tiny(): 4*8+8 + 8*2+2; 2*(32+16)
    status, _, err = run(capsys, f"{ROOT / MODELS}:model", "-i", "2x4", "--arg", "width=3")
    assert status == 2 and "--arg width: " in err and "is a module, not a factory" in err
