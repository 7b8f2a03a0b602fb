"""The Hugging Face Trainer callback, with a real ``Trainer.train()`` of a tiny GPT-2 on CPU."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from moduleprofiler.export.columns import is_registered  # noqa: E402
from moduleprofiler.integrations import PROFILE_NAME, REPORT_NAME  # noqa: E402
from moduleprofiler.integrations.transformers import ModuleProfilerCallback  # noqa: E402
from moduleprofiler.integrations.window import (  # noqa: E402
    DEPRECATED_SCALARS,
    MODEL_SCALARS,
    WindowWarning,
)
from tests.integrations.test_window import misnamed  # noqa: E402

# 2 layers, 32 wide, 2 heads, a vocabulary of 64, 12 tokens, 4 sequences a step
CONFIG = {"vocab_size": 64, "n_positions": 16, "n_embd": 32, "n_layer": 2, "n_head": 2}
ROWS, TOKENS = 4, 12


class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Random token ids that are their own labels."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, CONFIG["vocab_size"], (32, TOKENS), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


def train(tmp_path: Path, callbacks: list[Any], steps: int = 6,
          report_to: list[str] | None = None, **settings: Any) -> tuple[Any, Any]:
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**CONFIG))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=steps,
        per_device_train_batch_size=ROWS, report_to=report_to or [], logging_steps=1,
        use_cpu=True, seed=0, data_seed=0, save_strategy="no", disable_tqdm=True, **settings)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(),
                                   callbacks=callbacks)
    trainer.train()
    return model, trainer


def test_a_real_training_run_is_profiled_and_unchanged(tmp_path: Path) -> None:
    callback = ModuleProfilerCallback(start_step=3, num_steps=2)
    model, trainer = train(tmp_path / "with", [callback])
    plain, plain_trainer = train(tmp_path / "without", [])
    # training is unchanged: every parameter and the optimizer's state as without it
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 plain.state_dict().values()))
    for mine, theirs in zip(trainer.optimizer.state.values(),
                            plain_trainer.optimizer.state.values()):
        assert all(torch.equal(mine[k], theirs[k]) for k in mine if torch.is_tensor(mine[k]))
    result = callback.result
    # two window steps: one with the backward's hooks, one with the forward's only
    assert result is not None
    assert result.profile.facts is not None and result.profile.facts.iterations == 1
    assert len(result.profile.records[0].metrics["backward_samples_ms"]) == 1
    # the count: GPT-2's parameters (wte 64 x 32 + wpe 16 x 32 + 2 blocks + ln_f; lm_head tied)
    params = sum(p.numel() for p in model.parameters())
    assert result.profile.total_params == params
    # the blocks' forward work, by hand: per token and block q/k/v 32 x 96, proj 32 x 32, MLP
    # 32 x 128 + 128 x 32 multiply-accumulates; 4 x 12 = 48 tokens
    block_macs = 48 * (32 * 96 + 32 * 32 + 2 * 32 * 128)
    block = result.profile.to_df("module").set_index("module").loc["transformer.h.0"]
    assert block["macs"] >= block_macs  # plus attention's q @ k and weights @ v
    assert block["macs"] == block_macs + 2 * ROWS * 2 * TOKENS * TOKENS * 16
    # the log history holds the numbers, at the window's last step (3 + 2 = 5)
    entry = next(e for e in trainer.state.log_history if "moduleprofiler/step_ms" in e)
    assert entry["step"] == 5 and entry["moduleprofiler/step_ms"] > 0
    assert entry["moduleprofiler/transformer/params"] == sum(
        p.numel() for p in model.transformer.parameters())
    assert "moduleprofiler/mfu" not in entry  # a CPU has no peak: not logged, never 0
    # the training step's memory, measured on the counted batch
    assert result.memory is not None
    assert entry["moduleprofiler/training_peak_bytes"] == result.memory.peak_bytes > 0
    assert entry["moduleprofiler/transformer/saved_bytes"] > 0
    # the files
    out = tmp_path / "with" / "out"
    assert (out / REPORT_NAME).read_text().startswith("<!DOCTYPE html>")
    saved = json.loads((out / PROFILE_NAME).read_text())
    assert saved["totals"]["params"] == params
    # the backward of a training step: 2 x the forward's multiply-accumulates (input and weight
    # gradients) for every matmul-type layer, the counted total
    assert saved["totals"]["backward_macs"] == 2 * saved["totals"]["macs"] \
        == result.profile.total_backward_macs


def test_tensorboard_gets_the_scalars_when_the_trainer_reports_there(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    callback = ModuleProfilerCallback(start_step=1, num_steps=1, depth=2, peaks="H100 SXM")
    _, trainer = train(tmp_path, [callback], steps=3, report_to=["tensorboard"])
    runs = tmp_path / "out" / "runs" / "moduleprofiler"  # beside the Trainer's own run
    events = EventAccumulator(str(runs), size_guidance={"tensors": 0})
    events.Reload()
    tags = set(events.Tags()["tensors"]) | set(events.Tags()["scalars"])
    assert "moduleprofiler/step_ms" in tags
    assert any(tag.startswith("moduleprofiler/transformer/") for tag in tags)
    # one vocabulary: a module's tag and a module's logged scalar end in the name of the
    # frame column holding the number, a model's is one of MODEL_SCALARS
    scalars = {tag for tag in tags  # the text plugin's tags hold the tree and the report
               if not tag.startswith(("moduleprofiler/tree/", "moduleprofiler/report/"))}
    for tag in scalars:
        _, *path, name = tag.split("/")
        assert is_registered(name) if path else (
            name in MODEL_SCALARS or name in DEPRECATED_SCALARS), tag
    assert "moduleprofiler/transformer/flops" in scalars
    entry = next(e for e in trainer.state.log_history if "moduleprofiler/step_ms" in e)
    assert callback.result is not None and misnamed(callback.result) == []
    assert {key for key in entry if key.startswith("moduleprofiler/")} \
        == set(callback.result.scalars)
    # TensorBoard holds the same scalars as the log history, the modules of depth 1 and 2
    assert scalars == set(callback.result.scalars)
    assert {"moduleprofiler/transformer/params", "moduleprofiler/lm_head/flops",
            "moduleprofiler/transformer.wte/params"} <= scalars
    # wte 64 x 32 + wpe 16 x 32 + 2 blocks + ln_f: 28,032 parameters, as logged
    (params,) = events.Tensors("moduleprofiler/transformer/params")
    assert tensor_util.make_ndarray(params.tensor_proto) == 28_032 \
        == entry["moduleprofiler/transformer/params"]


def test_bf16_mfu_uses_the_bf16_peak(tmp_path: Path) -> None:
    callback = ModuleProfilerCallback(start_step=2, num_steps=1, peaks="H100 SXM", memory=False)
    train(tmp_path, [callback], steps=3, bf16=True)
    result = callback.result
    assert result is not None and result.step_ms is not None
    # the step ran its matmuls in bfloat16 under the Trainer's autocast, and so did the
    # count: the bf16 dense peak of an H100 SXM, 989.4 TFLOP/s
    assert result.utilization is not None and result.utilization.dtype == "bf16"
    assert result.scalars["moduleprofiler/peak_tflops"] == pytest.approx(989.4)
    flops = result.utilization.model_flops
    assert result.mfu == pytest.approx(flops / (result.step_ms / 1e3 * 989.4e12), rel=1e-12)


def test_the_callback_counts_with_the_profiler_it_is_given(tmp_path: Path) -> None:
    # a profiler with its own rule for GELU: each call costs 1000 ops (the callback took no
    # profiler= and always counted with the registered formulas)
    from moduleprofiler import ModuleProfiler

    mine = ModuleProfiler()
    mine.ops_fn_map[transformers.activations.NewGELUActivation] = \
        lambda module, inputs, output: 1000
    callback = ModuleProfilerCallback(start_step=2, num_steps=1, depth=5, memory=False,
                                      profiler=mine)
    train(tmp_path, [callback], steps=3)
    assert callback.result is not None
    assert callback.result.scalars["moduleprofiler/transformer.h.0.mlp.act/ops"] == 1000


def test_a_failing_callback_warns_and_training_goes_on(tmp_path: Path) -> None:
    def broken(output: Any) -> torch.Tensor:
        raise KeyError("no loss here")

    callback = ModuleProfilerCallback(start_step=1, num_steps=1, loss_fn=broken)
    with pytest.warns(WindowWarning, match=r"(?s)KeyError.*no loss here.*training goes on"
                      ) as caught:
        _, trainer = train(tmp_path, [callback], steps=3)
    assert [w.filename for w in caught if issubclass(w.category, WindowWarning)] == [__file__]
    assert trainer.state.global_step == 3 and callback.result is None
    assert callback.window is None


def test_a_trainer_compiled_model_is_left_to_its_compiled_program(tmp_path: Path) -> None:
    # torch_compile=True: the Trainer calls a compiled wrapper no callback is given, so a
    # hook on the model would run inside the compiled call; the callback hooks nothing and
    # says so, and Dynamo meets what it meets without it (GPT-2's own graph breaks alone)
    from torch._dynamo.utils import counters

    def dynamo_run(callbacks: list[Any]) -> tuple[Any, dict[str, int]]:
        torch._dynamo.reset()
        counters.clear()
        model, _ = train(tmp_path / str(len(callbacks)), callbacks, steps=5,
                         torch_compile=True, torch_compile_backend="eager")
        # (the frames Dynamo looks at depend on what an earlier run compiled: not compared)
        return model, {"graph_breaks": sum(counters["graph_break"].values()),
                       "graphs": counters["stats"]["unique_graphs"]}

    callback = ModuleProfilerCallback(start_step=2, num_steps=2)
    with pytest.warns(WindowWarning, match=r"compiles the model \(torch_compile=True\).*"
                                           r"profiles nothing in this run"):
        model, watched = dynamo_run([callback])
    plain, alone = dynamo_run([])
    assert watched == alone
    assert callback.result is None and callback.window is None
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 plain.state_dict().values()))


def test_a_model_compiled_in_place_is_left_to_its_compiled_program(tmp_path: Path) -> None:
    # model.compile() without torch_compile: the model's own call is the compiled one, so the
    # pre-hook that keeps the batch ran inside it (Dynamo broke the graph at its handle's
    # remove() and recompiled) and the step it watched, timed for step_ms, compiled again
    from torch._dynamo.utils import counters

    def dynamo_run(callbacks: list[Any]) -> tuple[Any, int]:
        torch._dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**CONFIG))
        model.compile(backend="eager")
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / str(len(callbacks))), max_steps=3,
            per_device_train_batch_size=ROWS, report_to=[], use_cpu=True, seed=0,
            save_strategy="no", disable_tqdm=True)
        transformers.Trainer(model=model, args=args, train_dataset=Tokens(),
                             callbacks=callbacks).train()
        return model, sum(counters["graph_break"].values())

    callback = ModuleProfilerCallback(start_step=1, num_steps=1, memory=False)
    with pytest.warns(WindowWarning, match=r"the model's own call is compiled "
                                           r"\(model.compile\(\)\).*profiles nothing"):
        model, watched = dynamo_run([callback])
    plain, alone = dynamo_run([])
    assert watched == alone
    assert callback.result is None and callback.window is None
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 plain.state_dict().values()))


def test_hooks_left_by_a_run_that_raised_inside_the_window_come_off_at_the_next_event(
        tmp_path: Path) -> None:
    # the Trainer has no exception event: a train() that raises inside a profiled step left
    # the clock's hooks on the model, timing every later call of it; the next evaluation (or
    # the next train()) takes them off and says so
    class Raises(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == 3:  # the window's second step (2, 3)
                raise FloatingPointError("the loss is nan")

    def hooks(model: torch.nn.Module) -> int:
        return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())

    callback = ModuleProfilerCallback(start_step=2, num_steps=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**CONFIG))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=ROWS,
        per_device_eval_batch_size=ROWS, report_to=[], use_cpu=True, seed=0,
        save_strategy="no", disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(),
                                   eval_dataset=Tokens(), callbacks=[callback, Raises()])
    with pytest.raises(FloatingPointError):
        trainer.train()
    assert hooks(model) > 0  # the step it raised in had begun: nothing told the callback
    with pytest.warns(WindowWarning, match="training stopped inside the profiling window"):
        trainer.evaluate()
    assert hooks(model) == 0 and callback.window is None and callback.result is None


def test_a_run_that_ends_before_the_window_says_so(tmp_path: Path) -> None:
    with pytest.warns(WindowWarning, match=r"after 2 steps.*start_step=5"):
        train(tmp_path, [ModuleProfilerCallback()], steps=2)


def test_a_run_resumed_at_the_windows_first_step_says_so(tmp_path: Path) -> None:
    # train(resume_from_checkpoint=...) at global step 2 with start_step=2: the batch the
    # count needs is that of step 1, run before the checkpoint. The count ran on None and
    # warned "check forward_args ... no input was given"
    callback = ModuleProfilerCallback(start_step=2, num_steps=2)
    model = torch.nn.Linear(4, 2)  # never called: the run ends at its first event
    args = SimpleNamespace(output_dir=str(tmp_path), report_to=[])  # what the events read
    state = transformers.TrainerState(global_step=2)
    control = transformers.TrainerControl()
    callback.on_train_begin(args, state, control, model=model)
    with pytest.warns(WindowWarning, match=r"training started at step 2 \(resumed from a "
                      r"checkpoint\), the profiling window's first step \(start_step=2\): "
                      r"the model is counted on the batch of the step before the window, "
                      r"which this run did not run, so nothing was profiled or logged; pass "
                      r"a start_step above 2") as caught:
        for step in (2, 3):
            state.global_step = step
            callback.on_step_begin(args, state, control, model=model)
            state.global_step = step + 1
            callback.on_step_end(args, state, control, model=model)
        callback.on_train_end(args, state, control, model=model)
    assert len([w for w in caught if issubclass(w.category, WindowWarning)]) == 1
    assert callback.window is None and callback.result is None
    assert sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules()) == 0


def test_tensorboard_failing_keeps_not_the_files_from_the_result(tmp_path: Path) -> None:
    # TensorBoard's directory could not be made (a file is in its way): the error stopped
    # the emission and the report and JSON were never written
    from moduleprofiler.integrations import StepWindow

    window = StepWindow(start_step=0, num_steps=1, memory=False)
    model = torch.nn.Linear(4, 2)
    window.start(model)
    window.before_step(0, torch.randn(3, 4))
    model(torch.randn(3, 4)).sum().backward()
    result = window.after_step(0)
    assert result is not None
    (tmp_path / "blocked").write_text("a file, not a folder", encoding="utf-8")
    args = SimpleNamespace(report_to=["tensorboard"], output_dir=str(tmp_path / "out"),
                           logging_dir=str(tmp_path / "blocked" / "runs"))
    callback = ModuleProfilerCallback(start_step=1, num_steps=1)
    callback.window = window
    with pytest.warns(WindowWarning, match=r"writing TensorBoard's events raised "):
        callback._guarded("closing the profiling window", callback._emit, args,
                          transformers.TrainerState(), result)
    assert (tmp_path / "out" / PROFILE_NAME).exists() and callback.result is result


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="start_step must be >= 1"):
        ModuleProfilerCallback(start_step=0)
    with pytest.raises(TypeError, match="num_steps"):
        ModuleProfilerCallback(num_steps=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="log_dir"):
        ModuleProfilerCallback(log_dir=3)  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.distributed.is_available()
                    or not torch.distributed.is_gloo_available(), reason="needs gloo")
def test_ddp_on_two_cpu_ranks_gathers_on_rank_0(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from moduleprofiler.distributed import DistributedProfile

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(root)}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "tests/integrations/transformers_ddp.py", str(tmp_path)],
        cwd=root, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    # rank 0 holds both ranks' profiles; rank 1 holds none (shared stdout: no line anchors)
    assert "rank 0: result True, ranks 2" in result.stdout, result.stdout
    assert "rank 1: result False, ranks None" in result.stdout, result.stdout
    gathered = DistributedProfile.from_json(tmp_path / PROFILE_NAME)
    # each rank counted the same model on its own 4 x 12 batch
    params = sum(p.numel() for p in transformers.GPT2LMHeadModel(
        transformers.GPT2Config(**CONFIG)).parameters())
    assert gathered.world_size == 2
    assert [p.total_params for p in gathered.profiles] == [params] * 2
    assert gathered.profiles[0].total_macs == gathered.profiles[1].total_macs


def test_a_lower_bound_window_written_to_tensorboard_warns_once(tmp_path: Path) -> None:
    # GPT-2's activation priced as unknown: the window's counts are lower bounds, said once
    # by the window (its logged scalars and TensorBoard's are the same numbers), not again
    # by the TensorBoard writer
    pytest.importorskip("tensorboard")
    from moduleprofiler import ModuleProfiler

    profiler = ModuleProfiler()
    gelu = transformers.activations.NewGELUActivation
    profiler.ops_fn_map[gelu] = lambda module, inputs, output: None
    callback = ModuleProfilerCallback(start_step=1, num_steps=1, profiler=profiler)
    with pytest.warns(WindowWarning) as caught:
        train(tmp_path, [callback], steps=3, report_to=["tensorboard"])
    bounds = [str(w.message) for w in caught if "lower bound" in str(w.message)]
    # 2 blocks, one activation each: both unknown
    assert len(bounds) == 1, bounds
    assert "no formula for modules ['transformer.h.0.mlp.act', 'transformer.h.1.mlp.act']" \
        in bounds[0]
    assert callback.result is not None and not callback.result.profile.complete
