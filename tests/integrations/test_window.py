"""The shared core of the training integrations, driven by a plain training loop."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.distributed import DistributedError
from moduleprofiler.efficiency import device_peaks
from moduleprofiler.errors import ProfilingError
from moduleprofiler.export.columns import is_registered
from moduleprofiler.integrations import PROFILE_NAME, REPORT_NAME, StepWindow, WindowResult
from moduleprofiler.integrations.window import (
    DEPRECATED_SCALARS,
    MODEL_SCALARS,
    WindowCallback,
    WindowWarning,
)
from tests.timing.helpers import spin

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _train(model: nn.Module, window: StepWindow | None, steps: int = 5,
           optimizer: torch.optim.Optimizer | None = None) -> list[WindowResult]:
    """A plain loop over ``steps`` batches of 3 rows; the window (if any) around each step."""
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.1)
    results = []
    if window is not None:
        window.start(model)
    for step in range(steps):
        x, y = torch.randn(3, 4), torch.randint(0, 2, (3,))
        if window is not None:
            window.before_step(step, (x, y))
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        if window is not None and (result := window.after_step(step)) is not None:
            results.append(result)
    if window is not None and (result := window.finish()) is not None:
        results.append(result)
    return results


def _first(batch: Any) -> Any:
    return batch[0]


def test_logged_keys_and_counts() -> None:
    torch.manual_seed(0)
    window = StepWindow(start_step=2, num_steps=2, forward_args=_first)
    results = _train(_model(), window)
    # after_step returns the result when step 3 closes the window; finish() returns it again
    assert len(results) == 2 and results[0] is results[1] is window.result
    scalars = results[0].scalars
    times = ("time_median_ms", "backward_time_median_ms")  # the CPU clock's
    counts = ("params", "ops", "flops", "backward_flops")
    memory = ("saved_bytes", "train_max_live_bytes")  # the training step's
    assert set(scalars) == {"moduleprofiler/step_ms", "moduleprofiler/training_peak_bytes",
                            "moduleprofiler/peak_bytes", "moduleprofiler/complete",
                            "moduleprofiler/backward_complete"} | {
        f"moduleprofiler/{path}/{column}" for path in "012"
        for column in times + counts + memory}
    # saved for the backward: ReLU keeps its 3 x 8 float32 output, 96 bytes; the second
    # Linear's saved input is that same tensor (counted once, at ReLU); the first Linear's
    # input is the batch, which the model did not make
    assert [scalars[f"moduleprofiler/{p}/saved_bytes"] for p in "012"] == [0, 96, 0]
    assert results[0].memory is not None
    assert scalars["moduleprofiler/training_peak_bytes"] == results[0].memory.peak_bytes > 0
    assert all(scalars[f"moduleprofiler/{p}/train_max_live_bytes"] > 0 for p in "012")
    # Linear(4, 8) on 3 rows: params 4 * 8 + 8 = 40; ops 3 * 8 * (2 * 4 - 1) + 3 * 8 = 192;
    # flops 2 * MACs = 2 * 3 * 4 * 8 = 192; backward: the weight gradient only (the batch
    # needs no gradient), 2 * 3 * 4 * 8 = 192
    assert [scalars[f"moduleprofiler/0/{c}"] for c in counts] == [40, 192, 192, 192]
    # ReLU: 3 * 8 = 24 comparisons, no multiply-accumulate
    assert [scalars[f"moduleprofiler/1/{c}"] for c in counts] == [0, 24, 0, 0]
    # Linear(8, 2): params 8 * 2 + 2 = 18; ops 3 * 2 * 15 + 6 = 96; flops 2 * 3 * 8 * 2 = 96;
    # backward: input gradient 96 + weight gradient 96 = 192
    assert [scalars[f"moduleprofiler/2/{c}"] for c in counts] == [18, 96, 96, 192]
    assert all(scalars[f"moduleprofiler/{p}/{t}"] > 0 for p in "012" for t in times)
    # two hook-free steps (0 and 1) timed whole
    assert results[0].step_ms == scalars["moduleprofiler/step_ms"] > 0
    # a CPU has no peak: no MFU, never a 0
    assert results[0].mfu is None and "moduleprofiler/mfu" not in scalars
    facts = results[0].profile.facts  # the one merged profile holds the timing pass's facts
    assert facts is not None and facts.iterations >= 1
    assert results[0].profile.to_df("module")["time_median_ms"].notna().all()


def test_the_window_counts_with_the_profiler_it_is_given() -> None:
    torch.manual_seed(0)
    profiler = ModuleProfiler()
    profiler.ops_fn_map[nn.ReLU] = lambda module, inputs, output: 1000
    window = StepWindow(start_step=1, num_steps=1, forward_args=_first, profiler=profiler,
                        memory=False)
    (result, _) = _train(_model(), window, steps=3)
    # the profiler's own entry prices ReLU: 1000 ops, where the registered formula counts
    # 3 * 8 = 24 comparisons
    assert result.scalars["moduleprofiler/1/ops"] == 1000
    (plain, _) = _train(_model(), StepWindow(start_step=1, num_steps=1, forward_args=_first,
                                             memory=False), steps=3)
    assert plain.scalars["moduleprofiler/1/ops"] == 24


def test_depth_and_the_mfu_of_a_named_peak() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), nn.Linear(8, 2))
    window = StepWindow(start_step=1, num_steps=1, depth=2, forward_args=_first,
                        peaks="H100 SXM")
    (result, _) = _train(model, window, steps=3)
    paths = {key.split("/")[1] for key in result.scalars} - set(MODEL_SCALARS) \
        - set(DEPRECATED_SCALARS)
    assert paths == {"0", "0.0", "0.1", "1"}
    # the block's numbers include its children's: 192 + 24 ops
    assert result.scalars["moduleprofiler/0/ops"] == 216
    # model FLOPs of a step: forward 192 + 96 = 288, backward 192 + 192 = 384, 672 in all;
    # fp32 peak of an H100 SXM 67 TFLOP/s
    assert result.step_ms is not None
    expected = 672 / (result.step_ms / 1e3 * 67e12)
    assert result.mfu == pytest.approx(expected, rel=1e-12)
    assert result.scalars["moduleprofiler/mfu"] == result.mfu
    # the peak it was measured against is logged beside it
    assert result.scalars["moduleprofiler/peak_tflops"] == 67
    assert result.utilization is not None and result.utilization.dtype == "fp32"
    assert result.mfu == utilization_mfu(result)


def test_the_mfu_of_a_step_that_calls_the_model_twice_counts_both_calls() -> None:
    torch.manual_seed(0)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    window = StepWindow(start_step=1, num_steps=1, forward_args=_first, peaks="H100 SXM")
    window.start(model)
    for step in range(2):
        x, y = torch.randn(3, 4), torch.randint(0, 2, (3,))
        window.before_step(step, (x, y))
        for _ in range(2):  # gradient accumulation: two micro-batches, one optimizer step
            nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():  # an evaluation between steps: hooked, no training work
            model(x)
        result = window.after_step(step)
    assert result is not None and result.utilization is not None
    # one call: forward 192 + 96 = 288 FLOPs, backward 192 + 192 = 384, 672; the step time
    # holds two of them: 2 x 672 = 1344 (the evaluation's call is not the step's)
    assert result.utilization.model_flops == 1344
    assert result.step_ms is not None
    assert result.mfu == pytest.approx(1344 / (result.step_ms / 1e3 * 67e12), rel=1e-12)


class SlowerInEval(nn.Module):
    """Busy-waits 0.2 ms a training call and 30 ms an evaluation call (a larger batch)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spin(200_000 if self.training else 30_000_000)
        return x * 2


def test_a_validation_loop_between_window_steps_is_no_steps() -> None:
    # Lightning and the Trainer validate after a training batch has ended: the window's clock
    # is off until the next step starts, so an evaluation forward never stands in a step's
    # samples for the training forward
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), SlowerInEval())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    window = StepWindow(start_step=1, num_steps=4, memory=False)
    window.start(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(5):
            x = torch.randn(3, 4)
            window.before_step(step, x)
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            result = window.after_step(step)
            if step == 1:  # validation after the window's first step: 2 batches
                model.eval()
                with torch.no_grad():
                    model(torch.randn(64, 4))
                    model(torch.randn(64, 4))
                model.train()
    assert result is not None
    # the window's steps 1 and 3 give the forward samples: each 0.2 ms of training call, not
    # the first evaluation call's 30 ms (a sample of 30 ms would make the median of two
    # at least 15 ms)
    logged = result.scalars["moduleprofiler/1/time_median_ms"]
    assert 0.97 * 0.2 <= logged < 5
    # the training call is the step's one call, as in the count: nothing left unmerged
    assert not [w for w in caught if "merge:" in str(w.message)]


def test_gradient_accumulation_logs_one_micro_batch_and_warns_of_nothing() -> None:
    # three micro-batches a step: the count is of one call, and so are a module's logged
    # times; the other two calls are more of the same work, not calls the count missed
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), SlowerInEval())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    window = StepWindow(start_step=1, num_steps=2, memory=False)
    window.start(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(3):
            x = torch.randn(3, 4)
            window.before_step(step, x)
            for _ in range(3):
                model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            result = window.after_step(step)
    assert result is not None
    assert not [str(w.message) for w in caught if "merge:" in str(w.message)]
    # Linear(4, 8) on 3 rows: 3 x 8 x 4 = 96 multiply-accumulates, 2 x 96 = 192 FLOPs
    assert result.scalars["moduleprofiler/0/flops"] == 192
    # one call's time (at least its 0.2 ms), in the one counted call's row
    assert result.scalars["moduleprofiler/1/time_median_ms"] >= 0.97 * 0.2
    assert list(result.profile.to_df("module")["calls"]) == [1, 1, 1]


def test_a_compiled_model_is_profiled_as_its_own_modules_without_a_merge_warning() -> None:
    # torch.compile(model): the count and the memory walk the original module, the clock
    # times the wrapper's call whole (nothing inside carries hooks); joined without a
    # warning that the profiles are of another model or that calls were not made
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = torch.compile(model, backend="eager")
    window = StepWindow(start_step=1, num_steps=2, forward_args=_first)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _train(compiled, window, steps=3)[0]
    assert not [str(w.message) for w in caught if "merge:" in str(w.message)]
    frame = result.profile.to_df("module").set_index("module")
    assert list(frame.index) == ["__root__", "0", "1", "2"]
    assert frame.loc["__root__", "time_median_ms"] > 0  # the compiled call, timed whole
    # Linear(4, 8) on 3 rows: 3 x 8 x 4 = 96 multiply-accumulates, 192 FLOPs; the ReLU's
    # output, 3 x 8 float32 = 96 bytes, saved for its backward
    assert result.scalars["moduleprofiler/0/flops"] == 192
    assert result.scalars["moduleprofiler/1/saved_bytes"] == 96
    assert "moduleprofiler/0/time_median_ms" not in result.scalars  # inside: unknown


def test_a_step_that_compiled_is_no_step_time_and_says_so() -> None:
    # torch.compile(model) with start_step=1: step 0, the one hook-free step, is the one
    # that compiles (Dynamo's frame count grows in it); its seconds were step_ms, and the
    # mfu of a step of about a millisecond came out hundreds of times too low
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.compile(_model(), backend="eager")
    window = StepWindow(start_step=1, num_steps=1, depth=0, forward_args=_first,
                        memory=False, peaks="H100 SXM")
    with pytest.warns(WindowWarning, match=r"torch.compile compiled during the hook-free "
                      r"step\(s\) \[0\].*no other step was timed.*start_step >= 2"):
        (result, _) = _train(model, window, steps=2)
    assert result.step_ms is None and result.mfu is None
    assert "moduleprofiler/step_ms" not in result.scalars
    assert "moduleprofiler/mfu" not in result.scalars
    # started later, the steps before the window (1 and 2) run the compiled program: timed,
    # and nothing is said
    torch.manual_seed(0)
    model = torch.compile(_model(), backend="eager")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (result, _) = _train(model, StepWindow(start_step=3, num_steps=2, depth=0,
                                               forward_args=_first, memory=False,
                                               peaks="H100 SXM"), steps=5)
    assert not [str(w.message) for w in caught if "compiled during" in str(w.message)]
    assert result.step_ms is not None and result.mfu is not None


def utilization_mfu(result: WindowResult) -> float:
    from moduleprofiler.efficiency import utilization

    assert result.step_ms is not None
    return utilization(result.profile, result.step_ms, device_peaks("H100 SXM")).mfu


class _ColdFirstStep(nn.Module):
    """A Linear whose first forward takes 200 ms more (a cold start: first kernel launches,
    the allocator's growth, lazy set-up), the later ones as they are."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)
        self.cold = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cold:
            self.cold = False
            spin(200_000_000)
        return self.linear(x)


def test_the_first_training_step_is_no_step_time_when_a_later_one_is() -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a loaded 2-core machine stalls 2-thread ops for milliseconds
    try:
        # start_step=2, num_steps=2: steps 0 and 1 run before the window; the median of both
        # was their mean, above 100 ms, for a step of about a millisecond; step 1 alone is
        # timed now
        (result, _) = _train(_ColdFirstStep(), StepWindow(start_step=2, num_steps=2, depth=0,
                                                          forward_args=_first, memory=False))
        assert result.step_ms is not None and 0 < result.step_ms < 100
        # with step 0 the only one before the window, it is the only step there is to time
        (result, _) = _train(_ColdFirstStep(), StepWindow(start_step=1, num_steps=1, depth=0,
                                                          forward_args=_first, memory=False))
        assert result.step_ms is not None and result.step_ms >= 200
    finally:
        torch.set_num_threads(threads)


def test_no_hook_free_step_no_step_time() -> None:
    torch.manual_seed(0)
    (result, _) = _train(_model(), StepWindow(start_step=0, num_steps=1, depth=0,
                                              forward_args=_first, peaks="H100 SXM"), steps=2)
    # nothing ran before the window: step time and MFU unknown, so not logged; depth 0
    # logs no module, only the training step's memory peak (and whether the counts are exact)
    assert result.step_ms is None and result.mfu is None
    assert set(result.scalars) == {"moduleprofiler/training_peak_bytes",
                                   "moduleprofiler/peak_bytes", "moduleprofiler/complete",
                                   "moduleprofiler/backward_complete"}


def test_files_written(tmp_path: Path) -> None:
    torch.manual_seed(0)
    (result, _) = _train(_model(), StepWindow(start_step=1, num_steps=2, forward_args=_first))
    report, document = result.write(tmp_path / "run")
    assert (report, document) == (tmp_path / "run" / REPORT_NAME, tmp_path / "run" / PROFILE_NAME)
    assert result.files == (report, document)
    assert report.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    loaded = Profile.from_json(document)
    # 40 + 18 parameters; forward flops 192 + 96
    assert (loaded.total_params, loaded.total_flops) == (58, 288)
    assert json.loads(document.read_text(encoding="utf-8"))  # plain JSON
    assert loaded.to_df("module")["time_median_ms"].notna().all()  # the times went along


def test_window_cut_short_by_the_end_of_training() -> None:
    torch.manual_seed(0)
    window = StepWindow(start_step=3, num_steps=5, forward_args=_first)
    (result,) = _train(_model(), window, steps=5)
    # steps 3 and 4 ran with hooks: one backward-hook step and one forward-hook step
    assert result.profile.facts is not None and result.profile.facts.iterations == 1
    assert len(result.profile.records[0].metrics["backward_samples_ms"]) == 1
    assert window.closed and window.finish() is result


def test_window_never_reached_says_so() -> None:
    window = StepWindow(start_step=10, num_steps=2, forward_args=_first)
    # training ran steps 0, 1 and 2 and ended before the window's first step, 10
    with pytest.warns(WindowWarning, match=r"after 3 steps.*start_step=10.*nothing") as caught:
        assert _train(_model(), window, steps=3) == [] and window.result is None
    assert caught[0].filename == __file__  # pointed at the loop that called finish()


def test_training_resumed_after_the_windows_start_says_so() -> None:
    # a training resumed from a checkpoint at step 3 never ran the window's first step (2):
    # its steps 3 and 4 opened the window on step 3's batch (a callback that counts on the
    # batch of the step before had none: the count failed, blaming forward_args), or,
    # past the window, nothing was profiled and nothing said
    model = _model()
    for first, steps in ((3, 2), (6, 2)):
        window = StepWindow(start_step=2, num_steps=3, forward_args=_first)
        window.start(model)
        with pytest.warns(WindowWarning, match=rf"training started at step {first} \(resumed "
                          rf"from a checkpoint\), after the profiling window's first step "
                          rf"\(start_step=2\): nothing was profiled or logged; pass a "
                          rf"start_step above {first}"):
            for step in range(first, first + steps):
                window.before_step(step, (torch.randn(3, 4), None))
                assert window.after_step(step) is None
            assert window.finish() is None
        assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_a_window_that_ran_warns_nothing_at_the_end(recwarn: pytest.WarningsRecorder) -> None:
    torch.manual_seed(0)
    _train(_model(), StepWindow(start_step=1, num_steps=1, forward_args=_first), steps=3)
    assert not [w for w in recwarn if issubclass(w.category, WindowWarning)]


def misnamed(result: WindowResult) -> list[str]:
    """The keys of ``result.scalars`` that break the one vocabulary (empty: none). A module's
    scalar ``moduleprofiler/<module>/<name>`` is the value of the profile-frame column
    ``<name>`` (a registered column) in that module's row; a model's ``moduleprofiler/<name>``
    is one of :data:`MODEL_SCALARS`, each named as the field or the summary column that holds
    it (or, until 0.3.0, one of :data:`DEPRECATED_SCALARS`, the same number as its new name)."""
    frame = result.profile.to_df("module").set_index("module")
    fields = {"step_ms": result.step_ms, "mfu": result.mfu,
              "peak_tflops": result.utilization.peak_tflops if result.utilization else None,
              "training_peak_bytes": None if result.memory is None else
              result.profile.summary(result.memory).loc[0, "training_peak_bytes"],
              "complete": float(result.profile.summary().loc[0, "complete"]),
              "backward_complete": float(frame.loc["__root__", "backward_complete"])}
    assert set(fields) == set(MODEL_SCALARS)
    fields.update({old: fields[new] for old, new in DEPRECATED_SCALARS.items()})
    wrong = []
    for key, value in result.scalars.items():
        prefix, *path, name = key.split("/")
        assert prefix == "moduleprofiler" and len(path) <= 1, key
        if path:
            right = is_registered(name) and name in frame \
                and frame.loc[path[0], name] == pytest.approx(value)
        else:
            right = fields.get(name) == value
        if not right:
            wrong.append(key)
    return wrong


def test_every_scalar_is_named_as_its_column() -> None:
    torch.manual_seed(0)
    # a block with children: its own counts (0: a Sequential does no work itself) and its
    # inclusive ones (192 + 24 ops) differ, so a scalar named after one but holding the other
    # shows
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), nn.Linear(8, 2))
    window = StepWindow(start_step=1, num_steps=1, forward_args=_first, peaks="H100 SXM")
    (result, _) = _train(model, window, steps=3)
    assert "moduleprofiler/mfu" in result.scalars and misnamed(result) == []


def test_every_result_attribute_the_guides_name_is_one() -> None:
    fields = {name for name in dir(WindowResult) if not name.startswith("_")} | set(
        WindowResult.__dataclass_fields__)
    named = set()
    for guide in ("lightning.md", "transformers.md"):
        text = (DOCS / "integrations" / guide).read_text(encoding="utf-8")
        named |= set(re.findall(r"`(?:callback\.)?result\.(\w+)", text))
    assert "profile" in named and named - fields == set()


def test_tf32_matmuls_are_measured_against_the_tf32_peak() -> None:
    torch.manual_seed(0)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # FP32 matmuls may run on tensor cores
    try:
        window = StepWindow(start_step=1, num_steps=1, forward_args=_first, peaks="H100 SXM")
        (result, _) = _train(_model(), window, steps=3)
    finally:
        torch.set_float32_matmul_precision(before)
    # the step's model FLOPs (test_depth_and_the_mfu_of_a_named_peak): 672; the TF32 dense
    # peak of an H100 SXM, 494.7 TFLOP/s
    assert result.step_ms is not None and result.utilization is not None
    assert result.utilization.dtype == "tf32"
    assert result.scalars["moduleprofiler/peak_tflops"] == pytest.approx(494.7)
    assert result.mfu == pytest.approx(672 / (result.step_ms / 1e3 * 494.7e12), rel=1e-12)


def test_the_count_runs_in_the_step_context() -> None:
    torch.manual_seed(0)
    window = StepWindow(start_step=1, num_steps=1, forward_args=_first, peaks="H100 SXM")
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    window.start(model, context=lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    for step in range(3):
        x, y = torch.randn(3, 4), torch.randint(0, 2, (3,))
        window.before_step(step, (x, y))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        window.after_step(step)
    result = window.result
    assert result is not None and result.step_ms is not None
    # the Linear layers ran in bfloat16 under autocast, as the step's did: the bf16 dense peak
    # of an H100 SXM, 989.4 TFLOP/s, against 672 FLOPs (the parameters stay float32)
    frame = result.profile.to_df("module").set_index("module")
    assert frame.loc["0", "output_dtypes"] == ("bfloat16",)
    assert result.utilization is not None and result.utilization.dtype == "bf16"
    assert result.scalars["moduleprofiler/peak_tflops"] == pytest.approx(989.4)
    assert result.mfu == pytest.approx(672 / (result.step_ms / 1e3 * 989.4e12), rel=1e-12)


@pytest.mark.parametrize(("peaks", "message"), [
    ("H100", r"peaks 'H100' could be any of H100 SXM, H100 PCIe, H100 NVL"),
    ("H100 SMX", r"peaks 'H100 SMX' is not in the peak table \(close: H100 SXM"),
])
def test_a_peaks_name_of_no_card_or_of_several_is_refused_when_made(peaks: str,
                                                                    message: str) -> None:
    # both were taken, and the window's end then left MFU out without a word
    with pytest.raises(ValueError, match=message):
        StepWindow(peaks=peaks)
    with pytest.raises(ValueError, match=message):
        WindowCallback(None, peaks=peaks)  # a callback refuses it when it is made


def test_a_peak_table_without_the_steps_dtype_warns_and_leaves_mfu_out() -> None:
    torch.manual_seed(0)
    # a V100 has no bf16 peak; the step computes in bfloat16 under autocast: no MFU (never
    # one against another dtype's peak), and the missing scalar said once, with the cause
    window = StepWindow(start_step=1, num_steps=1, forward_args=_first, peaks="V100 SXM2",
                        memory=False)
    model = _model()
    window.start(model, context=lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    with pytest.warns(WindowWarning, match=r"mfu and peak_tflops are not logged: V100 SXM2 "
                      r"has no peak for dtype 'bf16'; give the callback peaks=") as caught:
        for step in range(3):
            x, y = torch.randn(3, 4), torch.randint(0, 2, (3,))
            window.before_step(step, (x, y))
            with torch.autocast("cpu", dtype=torch.bfloat16):
                nn.functional.cross_entropy(model(x), y).backward()
            window.after_step(step)
    assert len([w for w in caught if issubclass(w.category, WindowWarning)]) == 1
    result = window.result
    assert result is not None and result.step_ms is not None and result.mfu is None
    assert not {"moduleprofiler/mfu", "moduleprofiler/peak_tflops"} & set(result.scalars)


class _OnlyUnknownWork(nn.Module):
    """A training step whose one multiply-accumulating operator has no formula: a matrix
    exponential of a scaled input (the scaling is ops, not multiply-accumulates)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_exp(x * self.scale)


def test_a_step_that_knows_no_flops_says_so_without_blaming_the_peaks() -> None:
    # no FLOPs known: no MFU (never 0), and the warning names the work without a formula; it
    # said "give the callback peaks=", which no peak table would mend
    window = StepWindow(start_step=1, num_steps=1, forward_args=lambda batch: (batch,),
                        peaks="H100 SXM", memory=False)
    model = _OnlyUnknownWork()
    window.start(model)
    with pytest.warns(WindowWarning, match="no FLOPs of the profile are known") as caught:
        for step in range(3):
            x = torch.randn(4, 4)
            window.before_step(step, x)
            model(x).sum().backward()
            window.after_step(step)
    said = [str(w.message) for w in caught if "mfu and peak_tflops" in str(w.message)]
    assert len(said) == 1 and "matrix_exp" in said[0] and "peaks=" not in said[0]
    assert window.result is not None and window.result.mfu is None


class _NoForward(nn.Module):
    """Layers called by the training loop, no ``forward`` (a LightningModule's habit)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _model()


def test_a_failing_window_warns_and_the_callback_turns_itself_off() -> None:
    callback = WindowCallback(None, start_step=1, num_steps=1, forward_args=_first)
    model = _NoForward()
    window = callback._new_window(model)
    with pytest.raises(ProfilingError):  # the window itself raises: its driver decides
        window.before_step(1, (torch.randn(3, 4), None))
    window = callback._new_window(model)
    with pytest.warns(WindowWarning, match=r"(?s)step 1.*NotImplementedError.*training goes"
                      ) as caught:
        callback._guarded("counting the model", window.before_step, 1,
                          (torch.randn(3, 4), None))
    assert caught[0].filename == __file__
    assert callback.window is None and window.closed  # off, its hooks gone
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def _raises(*_: Any) -> Any:
    raise ZeroDivisionError("by design")


def _failing_relu_profiler() -> ModuleProfiler:
    profiler = ModuleProfiler()
    profiler.ops_fn_map[nn.ReLU] = _raises
    return profiler


@pytest.mark.parametrize(("settings", "hint"), [
    ({"profiler": _failing_relu_profiler()}, r"a formula raised\): ops formula '_raises' for "
                                             r"module '1' \(ReLU\)"),
    ({"loss_fn": _raises}, r"check loss_fn\): loss_fn raised ZeroDivisionError"),
    ({"forward_args": lambda batch: batch[1]}, r"check forward_args\): forward of module "
                                               r"'0' \(Linear\) raised TypeError"),
])
def test_a_failed_count_points_at_the_setting_that_failed(settings: dict[str, Any],
                                                          hint: str) -> None:
    # every failure of the count said "check forward_args", a formula's and the loss's too
    window = StepWindow(**{"start_step": 0, "num_steps": 1, "memory": False,
                           "forward_args": _first, **settings})
    window.start(_model())
    with pytest.raises(ProfilingError, match=r"batch of step 0 failed \(" + hint):
        window.before_step(0, (torch.randn(3, 4), "labels"))


def _training_state(window: StepWindow | None) -> tuple[dict[str, torch.Tensor], Any, torch.Tensor]:
    torch.manual_seed(1)
    # Dropout draws from the RNG, BatchNorm updates buffers: the counting pass, in training
    # mode, must leave both as they were
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    _train(model, window, steps=6, optimizer=optimizer)
    return model.state_dict(), optimizer.state_dict(), torch.get_rng_state()


def test_training_with_the_window_equals_training_without() -> None:
    plain_model, plain_optimizer, plain_rng = _training_state(None)
    model, optimizer, rng = _training_state(
        StepWindow(start_step=2, num_steps=3, forward_args=_first))
    assert plain_model.keys() == model.keys()
    assert all(torch.equal(plain_model[key], model[key]) for key in model)
    assert torch.equal(plain_rng, rng)
    assert optimizer["param_groups"] == plain_optimizer["param_groups"]
    for index, state in optimizer["state"].items():
        for name, value in state.items():
            assert torch.equal(value, plain_optimizer["state"][index][name]), (index, name)


def test_the_counting_pass_leaves_grads_and_flags() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5))
    model[1].eval()  # a deliberately frozen submodule stays frozen
    model(torch.randn(2, 4)).sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    window = StepWindow(start_step=0, num_steps=1)
    window.start(model)
    window.before_step(0, torch.randn(2, 4))
    assert [p.grad for p in model.parameters()] and all(
        torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads) if p.grad is not None)
    assert (model.training, model[0].training, model[1].training) == (True, True, False)
    window.release()  # the clock's hooks, installed for step 0, are gone
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"start_step": -1}, ValueError, "start_step"),
    ({"num_steps": 0}, ValueError, "num_steps"),
    ({"depth": 1.5}, TypeError, "depth"),
    ({"forward_args": 3}, TypeError, "forward_args"),
    ({"peaks": 3}, TypeError, "peaks"),
    ({"profiler": {}}, TypeError, "profiler"),
])
def test_bad_arguments_name_themselves(kwargs: dict[str, Any], error: type[Exception],
                                       name: str) -> None:
    with pytest.raises(error, match=name):
        StepWindow(**kwargs)


def test_window_callback_checks_and_reads_its_settings() -> None:
    callback = WindowCallback(None, start_step=3, num_steps=2, depth=0)
    assert (callback.start_step, callback.num_steps, callback.depth) == (3, 2, 0)
    assert callback.peaks is None and callback.memory is True  # StepWindow's defaults
    assert callback.result is None and callback.window is None
    with pytest.raises(AttributeError, match="no attribute 'span'"):
        callback.span  # noqa: B018 (not a setting)
    with pytest.raises(ValueError, match="num_steps must be >= 1"):
        WindowCallback(None, num_steps=0)
    with pytest.raises(TypeError, match="log_dir must be a path or None"):
        WindowCallback(3)  # type: ignore[arg-type]


def test_under_ddp_a_failed_count_still_reaches_the_gather(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # two ranks, as gather() sees them: a rank that failed sends its exception, and every
    # rank then raises; a rank that raised at once would leave the others waiting there
    sent: list[Any] = []

    def gather(window: StepWindow, outcome: Any) -> None:
        sent.append(outcome)
        if isinstance(outcome, BaseException):
            raise DistributedError(f"gather: profiling failed on rank 0 ({outcome})")

    monkeypatch.setattr(StepWindow, "_distributed", lambda window: True)
    monkeypatch.setattr(StepWindow, "_gather", gather)
    window = StepWindow(start_step=1, num_steps=2)
    window.start(_NoForward())
    for step in (0, 1):
        window.before_step(step, torch.randn(3, 4))  # the count fails at step 1, quietly
        assert window.after_step(step) is None and sent == []
    window.before_step(2, torch.randn(3, 4))
    with pytest.raises(DistributedError, match="NotImplementedError"):
        window.after_step(2)  # the window's last step: the gather hears of the failure
    assert len(sent) == 1 and isinstance(sent[0], ProfilingError) and window.closed


def test_the_memory_peak_is_logged_under_the_summarys_name() -> None:
    # the window logged the training step's peak as peak_bytes, the number
    # profile.summary(memory) calls training_peak_bytes: one quantity, two names. It is
    # training_peak_bytes now; peak_bytes is logged beside it until 0.3.0, with a warning
    torch.manual_seed(0)
    with pytest.warns(DeprecationWarning, match=r"'moduleprofiler/peak_bytes' is deprecated "
                      r"and will be removed in moduleprofiler 0\.3\.0; read "
                      r"'moduleprofiler/training_peak_bytes'"):
        (result, _) = _train(_model(), StepWindow(start_step=1, num_steps=1, depth=0,
                                                  forward_args=_first), steps=3)
    assert result.memory is not None
    summary = result.profile.summary(result.memory)
    peak = result.scalars["moduleprofiler/training_peak_bytes"]
    assert peak == summary.loc[0, "training_peak_bytes"] == result.memory.training.peak_bytes
    assert result.scalars["moduleprofiler/peak_bytes"] == peak > 0


def test_the_deprecated_scalar_warns_once_per_callback() -> None:
    # three training runs (three windows) of one callback: one warning, not three; each run
    # still logs the scalar
    callback = WindowCallback(None, start_step=1, num_steps=1, depth=0, forward_args=_first)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = []
        for _ in range(3):
            model = _model()
            results += _train(model, callback._new_window(model), steps=3)[:1]
    said = [w for w in caught if issubclass(w.category, DeprecationWarning)
            and "'moduleprofiler/peak_bytes' is deprecated and will be removed in "
                "moduleprofiler 0.3.0" in str(w.message)]
    assert len(said) == 1
    assert all("moduleprofiler/peak_bytes" in result.scalars for result in results)


class _Opaque(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_exp(x.reshape(3, 2, 2)).reshape(3, 4)  # no formula


def test_a_window_whose_counts_are_lower_bounds_says_so_and_training_goes_on() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(_Opaque(), nn.Linear(4, 2))
    window = StepWindow(start_step=1, num_steps=1, forward_args=_first, memory=False)
    with pytest.warns(WindowWarning, match=r"the logged ops, flops, backward_flops and mfu "
                      r"count only the work with a formula: the ops, macs, flops totals "
                      r"are lower bounds: no formula for modules \['0'\]; operators "
                      r"\{'aten.linalg_matrix_exp': 1\}"):
        results = _train(model, window, steps=3)
    # the Linear's forward is still counted: 3 rows x 2 outputs x 4 inputs = 24 MACs
    assert results[0].profile.total_macs == 24 and not results[0].profile.complete
    # a logger's dashboard, read later without the warning, holds the flag beside the counts
    assert results[0].scalars["moduleprofiler/complete"] == 0.0


@pytest.mark.skipif(not set(torch.backends.quantized.supported_engines)
                    & {"x86", "fbgemm", "qnnpack"}, reason="no quantized engine in this build")
def test_a_window_whose_parameters_alone_are_a_lower_bound_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from moduleprofiler import packed

    # a dynamically quantized Linear whose packing this torch could not read: its weights are
    # unknown, every count is exact (the quantized matmul has a formula)
    monkeypatch.delitem(packed._READERS,
                        "__torch__.torch.classes.quantized.LinearPackedParamsBase")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization is deprecated
        frozen = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(4, 4)),
                                                        {nn.Linear}, dtype=torch.qint8)
    window = StepWindow(start_step=1, num_steps=1, forward_args=_first, memory=False)
    with pytest.warns(WindowWarning, match=r"the logged parameters are a lower bound: the "
                      r"params totals are lower bounds: packed weights that cannot be read"):
        results = _train(nn.Sequential(frozen, nn.Linear(4, 2)), window, steps=3)
    profile = results[0].profile
    # 3 rows: the quantized 4 x 4 and the float 4 x 2 products, 3 x 16 + 3 x 8 = 72 MACs
    assert profile.total_macs == 72 and profile.lower_bounds == ("params",)
    # the counts are exact, and their flags say so; the parameters' bound is the warning's
    assert results[0].scalars["moduleprofiler/complete"] == 1.0
    assert results[0].scalars["moduleprofiler/backward_complete"] == 1.0


class _OpaqueGradient(torch.autograd.Function):
    """Doubles its input; its backward runs an operator without a formula."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_exp(grad.reshape(-1, 2, 2)).reshape(grad.shape)


class _OpaqueBackward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _OpaqueGradient.apply(self.linear(x))


def test_the_flags_are_logged_under_their_columns_meanings() -> None:
    # only the backward has work without a formula: the frame's and the summary's complete
    # is true (the forward's ops and MACs are exact), its backward_complete false. The window
    # logged 'complete' 0: a number the one vocabulary gives another meaning
    torch.manual_seed(0)
    window = StepWindow(start_step=1, num_steps=1, forward_args=_first, memory=False)
    with pytest.warns(WindowWarning, match="lower bounds"):
        (result, _) = _train(_OpaqueBackward(), window, steps=3)
    frame = result.profile.to_df("module").set_index("module")
    assert bool(frame.loc["__root__", "complete"]) and bool(result.profile.summary().loc[
        0, "complete"]) and not frame.loc["__root__", "backward_complete"]
    assert result.scalars["moduleprofiler/complete"] == 1.0
    assert result.scalars["moduleprofiler/backward_complete"] == 0.0
    assert misnamed(result) == []


def test_a_complete_window_warns_of_nothing(recwarn: pytest.WarningsRecorder) -> None:
    results = _train(_model(), StepWindow(start_step=1, num_steps=1, forward_args=_first,
                                          memory=False))
    assert not [w for w in recwarn if issubclass(w.category, WindowWarning)]
    assert results[0].scalars["moduleprofiler/complete"] == 1.0


def test_an_optimizer_in_the_backward_leaves_memory_out_and_the_window_goes_on() -> None:
    # torch's "optimizer in backward": each parameter steps in its post-accumulate-grad hook.
    # The memory pass refuses such a model (its real backward would step); the window failed
    # as a whole then ("check forward_args") and logged nothing
    torch.manual_seed(0)
    model = _model()
    optimizers = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}

    def step(parameter: torch.Tensor) -> None:
        optimizers[parameter].step()
        optimizers[parameter].zero_grad()

    for parameter in model.parameters():
        parameter.register_post_accumulate_grad_hook(step)
    window = StepWindow(start_step=1, num_steps=1, forward_args=_first)
    window.start(model)
    with pytest.warns(WindowWarning, match=r"memory is not measured .* an optimizer stepping "
                                           r"inside the backward"):
        for index in range(3):
            x, y = torch.randn(3, 4), torch.randint(0, 2, (3,))
            window.before_step(index, (x, y))
            nn.functional.cross_entropy(model(x), y).backward()  # the hooks step
            window.after_step(index)
        result = window.finish()
    assert result is not None and result.memory is None
    # Linear(4, 8) on 3 rows: 3 x 8 x 4 = 96 MACs, as the window logs without the optimizer
    assert result.profile.records[1].macs == 96
    assert "moduleprofiler/training_peak_bytes" not in result.scalars
