"""The Lightning callback in real ``Trainer.fit`` runs on CPU: one process, and two DDP ranks."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

L = pytest.importorskip("lightning")
pl = pytest.importorskip("pytorch_lightning")

from lightning.pytorch.loggers import CSVLogger  # noqa: E402

from moduleprofiler import Profile  # noqa: E402
from moduleprofiler.distributed import DistributedProfile  # noqa: E402
from moduleprofiler.integrations import PROFILE_NAME, REPORT_NAME  # noqa: E402
from moduleprofiler.integrations.lightning import (  # noqa: E402
    ModuleProfilerCallback,
    first_item,
)
from moduleprofiler.integrations.window import WindowWarning  # noqa: E402
from tests.integrations.lightning_models import Tiny  # noqa: E402
from tests.integrations.test_window import misnamed  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _process_settings_restored() -> Any:
    # Trainer(deterministic=True) switches torch's deterministic algorithms on for the whole
    # process and leaves them on: later tests (quantized kernels) would fail for it
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def _fit(tmp_path: Path, callback: ModuleProfilerCallback | None,
         max_steps: int = 5, module: type[Tiny] = Tiny, **settings: Any) -> tuple[Tiny, Any]:
    L.seed_everything(0)
    model = module()
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", logger=CSVLogger(tmp_path),
                        callbacks=[callback] if callback is not None else [],
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, deterministic=True, **settings)
    trainer.fit(model)
    return model, trainer


def _metrics(trainer: Any) -> list[dict[str, str]]:
    with open(Path(trainer.log_dir) / "metrics.csv", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_logged_keys_and_files(tmp_path: Path) -> None:
    callback = ModuleProfilerCallback(start_step=2, num_steps=2)
    _, trainer = _fit(tmp_path, callback)
    rows = _metrics(trainer)
    times = ("time_median_ms", "backward_time_median_ms")  # the CPU clock's
    counts = ("params", "ops", "flops", "backward_flops")
    expected = {"moduleprofiler/step_ms"} | {f"moduleprofiler/net/{c}" for c in times + counts}
    assert expected <= set(rows[0]) and "moduleprofiler/mfu" not in rows[0]  # no CPU peak
    (row,) = [row for row in rows if row["moduleprofiler/step_ms"]]
    # logged once, at the end of the window's last batch (index 3): 4 optimizer steps done
    assert row["step"] == "4"
    # net on 8 rows: params 4 * 8 + 8 + 8 * 2 + 2 = 58; ops Linear(4, 8) 8 * 8 * 7 + 64 = 512,
    # ReLU 64, Dropout 3 per element 192, Linear(8, 2) 8 * 2 * 15 + 16 = 256: 1024;
    # flops 2 * (8 * 4 * 8 + 8 * 8 * 2) = 768; backward: weight gradient of the first
    # 2 * 8 * 4 * 8 = 512, input and weight gradients of the second 2 * 256 = 512: 1024
    assert [float(row[f"moduleprofiler/net/{c}"]) for c in counts] == [58, 1024, 768, 1024]
    assert all(float(row[f"moduleprofiler/net/{t}"]) > 0 for t in times)
    assert float(row["moduleprofiler/step_ms"]) > 0
    assert callback.result is not None and callback.result.scalars["moduleprofiler/step_ms"] \
        == pytest.approx(float(row["moduleprofiler/step_ms"]))
    folder = Path(trainer.log_dir)
    assert callback.result.files == (folder / REPORT_NAME, folder / PROFILE_NAME)
    assert Profile.from_json(folder / PROFILE_NAME).total_params == 58
    assert "<html" in (folder / REPORT_NAME).read_text(encoding="utf-8").lower()


def _state(model: Tiny, trainer: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    return model.state_dict(), trainer.optimizers[0].state_dict()


def test_training_with_the_callback_equals_training_without(tmp_path: Path) -> None:
    plain_model, plain_optimizer = _state(*_fit(tmp_path / "plain", None))
    model, optimizer = _state(*_fit(tmp_path / "profiled", ModuleProfilerCallback(
        start_step=1, num_steps=3, log_dir=tmp_path / "files")))
    assert (tmp_path / "files" / PROFILE_NAME).exists()  # log_dir given: the files go there
    assert plain_model.keys() == model.keys()
    assert all(torch.equal(plain_model[key], model[key]) for key in model)
    assert optimizer["param_groups"] == plain_optimizer["param_groups"]
    assert optimizer["state"].keys() == plain_optimizer["state"].keys()
    for index, state in optimizer["state"].items():
        for name, value in state.items():
            assert torch.equal(value, plain_optimizer["state"][index][name]), (index, name)


def test_a_fit_that_ends_inside_the_window_reports_it(tmp_path: Path) -> None:
    callback = ModuleProfilerCallback(start_step=2, num_steps=10, depth=0)
    _, trainer = _fit(tmp_path, callback, max_steps=4)
    # batches 2 and 3 were profiled: one backward-hook and one forward-hook batch
    assert callback.result is not None
    assert len(callback.result.profile.records[0].metrics["backward_samples_ms"]) == 1
    # depth 0: no module; the step time, the training step's memory peak, the counts' flag
    assert set(callback.result.scalars) == {"moduleprofiler/step_ms",
                                            "moduleprofiler/training_peak_bytes",
                                            "moduleprofiler/peak_bytes",
                                            "moduleprofiler/complete",
                                            "moduleprofiler/backward_complete"}
    assert (Path(trainer.log_dir) / REPORT_NAME).exists()


def test_every_logged_name_is_a_column_or_a_model_scalar(tmp_path: Path) -> None:
    callback = ModuleProfilerCallback(start_step=2, num_steps=2, peaks="H100 SXM")
    _, trainer = _fit(tmp_path, callback)
    logged = {key for key in _metrics(trainer)[0] if key.startswith("moduleprofiler/")}
    assert callback.result is not None and logged == set(callback.result.scalars)
    # each module's number is the frame's value of the column it is named after: net's
    # flops is 768, its own flops 0 (a Sequential does no work of its own)
    assert misnamed(callback.result) == []


def test_bf16_mixed_mfu_uses_the_bf16_peak(tmp_path: Path) -> None:
    callback = ModuleProfilerCallback(start_step=2, num_steps=2, peaks="H100 SXM")
    _fit(tmp_path, callback, precision="bf16-mixed")
    result = callback.result
    assert result is not None and result.step_ms is not None
    # the step ran its Linear layers in bfloat16 under the trainer's autocast, and so did the
    # count: the bf16 dense peak of an H100 SXM, 989.4 TFLOP/s, not the fp32 67; model FLOPs
    # forward 768 + backward 1024 = 1792 (test_logged_keys_and_files)
    assert result.utilization is not None and result.utilization.dtype == "bf16"
    assert result.scalars["moduleprofiler/peak_tflops"] == pytest.approx(989.4)
    assert result.mfu == pytest.approx(1792 / (result.step_ms / 1e3 * 989.4e12), rel=1e-12)


class NoForward(Tiny):
    """A LightningModule whose ``training_step`` calls its layers: it has no ``forward``."""

    forward = L.LightningModule.forward

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor],
                      batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)


def test_a_failing_callback_warns_and_training_goes_on(tmp_path: Path) -> None:
    plain, _ = _fit(tmp_path / "plain", None, module=NoForward)
    callback = ModuleProfilerCallback(start_step=2, num_steps=2)
    with pytest.warns(WindowWarning, match=r"(?s)step 2.*forward.*training goes on") as caught:
        model, trainer = _fit(tmp_path / "profiled", callback, module=NoForward)
    assert [w.filename for w in caught if issubclass(w.category, WindowWarning)] == [__file__]
    # the fit ran to its end, trained as without the callback, with no hook left behind
    assert trainer.global_step == 5 and callback.result is None and callback.window is None
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 plain.state_dict().values()))
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


class DictBatch(Tiny):
    """Batches are dicts, and ``forward`` takes the batch whole: ``self(batch)``."""

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:  # type: ignore[override]
        return self.net(batch["x"])

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return nn.functional.cross_entropy(self(batch), batch["y"])

    def train_dataloader(self) -> Any:
        rows = torch.randn(24, 4, generator=torch.Generator().manual_seed(0))
        return torch.utils.data.DataLoader(
            [{"x": row, "y": torch.tensor(index % 2)} for index, row in enumerate(rows)],
            batch_size=8)


def test_a_dict_batch_reaches_a_forward_that_takes_the_batch(tmp_path: Path,
                                                              recwarn: Any) -> None:
    # the dict was passed as keywords, forward(x=..., y=...): "DictBatch.forward() got an
    # unexpected keyword argument 'x'", and the callback turned itself off
    callback = ModuleProfilerCallback(start_step=1, num_steps=1, memory=False)
    _fit(tmp_path, callback, max_steps=3, module=DictBatch)
    assert not [w for w in recwarn if issubclass(w.category, WindowWarning)]
    assert callback.result is not None
    # net on 8 rows: 2 x 8 x 4 x 8 + 2 x 8 x 8 x 2 = 768 FLOPs (test_logged_keys_and_files)
    assert callback.result.scalars["moduleprofiler/net/flops"] == 768


class _DownLogger(CSVLogger):
    """A logger whose service is down when the profiler's scalars come."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if any(key.startswith("moduleprofiler/") for key in metrics):
            raise ConnectionError("service down")
        super().log_metrics(metrics, step)


def test_a_logger_that_raises_keeps_neither_the_files_nor_the_other_loggers(
        tmp_path: Path) -> None:
    # the first logger's error stopped the emission: the files were never written and the
    # loggers after it got nothing
    callback = ModuleProfilerCallback(start_step=1, num_steps=1, memory=False,
                                      log_dir=tmp_path / "files")
    L.seed_everything(0)
    trainer = L.Trainer(max_steps=3, accelerator="cpu", callbacks=[callback],
                        logger=[_DownLogger(tmp_path / "down"), CSVLogger(tmp_path / "up")],
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    with pytest.warns(WindowWarning, match=r"logger _DownLogger raised ConnectionError: "
                                           r"service down"):
        trainer.fit(Tiny())
    assert trainer.global_step == 3 and callback.result is not None
    assert (tmp_path / "files" / PROFILE_NAME).exists()
    logged = (Path(trainer.loggers[1].log_dir) / "metrics.csv").read_text(encoding="utf-8")
    assert "moduleprofiler/net/flops" in logged.splitlines()[0]


def test_a_fit_that_ends_before_the_window_says_so(tmp_path: Path) -> None:
    callback = ModuleProfilerCallback()  # start_step=5
    with pytest.warns(WindowWarning, match=r"after 3 steps.*start_step=5") as caught:
        _fit(tmp_path, callback, max_steps=3)
    assert [w.filename for w in caught if issubclass(w.category, WindowWarning)] == [__file__]
    assert callback.result is None


def test_both_import_names_take_it() -> None:
    callback = ModuleProfilerCallback()
    assert isinstance(callback, L.pytorch.Callback) and isinstance(callback, pl.Callback)
    trainer = pl.Trainer(max_steps=1, accelerator="cpu", logger=False, callbacks=[callback],
                         enable_checkpointing=False, enable_progress_bar=False)
    assert callback in trainer.callbacks


def test_first_item_and_bad_arguments() -> None:
    x = torch.ones(1)
    assert first_item((x, 0)) is x and first_item([x]) is x and first_item(x) is x
    assert first_item({"a": x}) == {"a": x}
    with pytest.raises(ValueError, match="num_steps"):
        ModuleProfilerCallback(num_steps=0)
    with pytest.raises(TypeError, match="log_dir"):
        ModuleProfilerCallback(log_dir=3)  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.distributed.is_available()
                    or not torch.distributed.is_gloo_available(), reason="needs gloo")
def test_ddp_on_two_cpu_ranks_gathers_on_rank_0(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "tests/integrations/lightning_ddp.py", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    # rank 0 holds both ranks' profiles and wrote them; rank 1 holds nothing
    # (the two processes share stdout: their lines may interleave, so no line anchors)
    found = re.search(r"rank 0: result True, ranks 2, files \['(.*?)', '(.*?)'\]",
                      result.stdout)
    assert found is not None, result.stdout + result.stderr[-3000:]
    assert "rank 1: result False, ranks None, files []" in result.stdout
    report, document = Path(found[1]), Path(found[2])
    assert (report.name, document.name) == (REPORT_NAME, PROFILE_NAME)
    assert report.parent.is_relative_to(tmp_path)
    gathered = DistributedProfile.from_json(document)
    # each rank's profile: the same 58-parameter model, 768 forward FLOPs on its 8 rows
    assert gathered.world_size == 2
    assert [(p.total_params, p.total_flops) for p in gathered.profiles] == [(58, 768)] * 2
    metrics = (report.parent / "metrics.csv").read_text(encoding="utf-8")
    assert "moduleprofiler/net/flops" in metrics.splitlines()[0]


def _compiled_fit(tmp_path: Path, callback: ModuleProfilerCallback | None) -> tuple[Any, int]:
    """A fit of a compiled Tiny (Dynamo's tracing, no code generation), and the graph breaks
    Dynamo met during it."""
    torch._dynamo.reset()
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    L.seed_everything(0)
    trainer = L.Trainer(max_steps=5, accelerator="cpu", logger=CSVLogger(tmp_path),
                        callbacks=[callback] if callback is not None else [],
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(torch.compile(Tiny(), backend="eager"))
    return trainer, sum(torch._dynamo.utils.counters["graph_break"].values()) - breaks


@pytest.mark.filterwarnings("ignore::moduleprofiler.timing.TimingWarning")
def test_a_compiled_model_is_counted_eagerly_and_its_program_left_as_it_is(
        tmp_path: Path) -> None:
    _, plain_breaks = _compiled_fit(tmp_path / "plain", None)
    # Dynamo compiles the step at step 0 and recompiles it at step 1 (its frame count grows):
    # step 1 times the compiler, so it is left out of step_ms and said; step 2 is timed
    callback = ModuleProfilerCallback(start_step=3, num_steps=2)
    with pytest.warns(WindowWarning, match=r"torch.compile compiled during the hook-free "
                                           r"step\(s\) \[1\]"):
        trainer, breaks = _compiled_fit(tmp_path / "profiled", callback)
    # the counting pass and the window's hooks were traced into the compiled step: a graph
    # break at each hook; now Dynamo meets what it meets without the callback
    assert breaks == plain_breaks
    (row,) = [row for row in _metrics(trainer) if row["moduleprofiler/step_ms"]]
    # the eager program's counts, as for the uncompiled Tiny (test_logged_keys_and_files)
    assert [float(row[f"moduleprofiler/net/{c}"]) for c in ("params", "ops", "flops")] == [
        58, 1024, 768]
