"""The core ``Profiler`` holds the passes a new user needs; ``ModuleProfiler`` adds 0.0.4's."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

import moduleprofiler.timing
from moduleprofiler import ModuleProfiler, ProfilingError, TimingOptions
from moduleprofiler.core import Profiler

CORE_METHODS = ["benchmark", "measure_memory", "parameter_memory_df", "predict", "profile",
                "sweep", "time_modules", "train_step_times"]


def _public_methods(cls: type) -> list[str]:
    return sorted(name for name in dir(cls)
                  if not name.startswith("_") and callable(getattr(cls, name)))


def test_the_core_has_the_new_user_methods_only() -> None:
    assert _public_methods(Profiler) == CORE_METHODS
    # 5 analyses x (dict, _df, _csv, _html, _latex) = 25 more on ModuleProfiler
    legacy = set(_public_methods(ModuleProfiler)) - set(CORE_METHODS)
    assert len(legacy) == 25 and issubclass(ModuleProfiler, Profiler)
    assert list(inspect.signature(Profiler).parameters) == [
        "ops_fn_map", "exclude_from_ops", "verbose", "macs_fn_map", "operator_fn_map"]


def test_the_core_counts_and_records_shapes_without_an_io_size_map() -> None:
    profile = Profiler().profile(nn.Linear(5, 7), torch.randn(2, 3, 5))
    # rows 2 * 3 = 6; per row 7 * (2 * 5 - 1) + 7 bias adds = 70; 6 * 70 = 420
    assert profile.total_ops == 420
    record = profile.records[0]
    assert (record.input_size, record.output_size) == ((2, 3, 5), (2, 3, 7))
    assert not hasattr(Profiler(), "io_size_fn_map")


def test_the_0_0_4_constructor_strings_are_accepted_and_not_kept() -> None:
    profiler = ModuleProfiler(ops_attr="__my_ops__", ts_fmt="%H:%M")
    assert not hasattr(profiler, "ops_attr") and profiler.ts_fmt == "%H:%M"
    assert "default" in profiler.io_size_fn_map


def test_a_hook_free_failure_names_its_module_without_running_the_model_again() -> None:
    calls: list[int] = []

    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            raise RuntimeError("boom")

    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), Fails()))
    with pytest.raises(ProfilingError, match=r"^forward of module '1\.1' \(Fails\) "
                       r"raised RuntimeError: boom") as info:
        Profiler().benchmark(model, torch.randn(2, 4))
    assert info.value.path == "1.1"
    assert len(calls) == 1  # the failing forward ran once: no second pass to locate it


class FailsOnSecondCall(nn.Module):
    """Runs once, then raises ``error``: its failure falls in a later, hook-free iteration
    of a timed pass."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 1:
            raise self.error
        return x


@pytest.mark.parametrize("error", [RuntimeError("boom"), StopIteration("no more")],
                         ids=["RuntimeError", "StopIteration"])
@pytest.mark.parametrize("verb", ["time_modules", "train_step_times", "benchmark"])
def test_a_failure_in_any_iteration_of_a_timed_pass_names_its_module(
        verb: str, error: Exception) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), FailsOnSecondCall(error)))
    run = getattr(Profiler(), verb)
    with pytest.raises(ProfilingError, match=rf"forward of module '1\.1' \(FailsOnSecondCall\)"
                       rf" raised {type(error).__name__}") as info:
        run(model, torch.randn(2, 4), TimingOptions(num_iters=3, warmup_iters=0))
    assert info.value.path == "1.1" and info.value.__cause__ is error
    # the same words as when the first, hooked, iteration fails: one message per failure
    first = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), FailsOnSecondCall(error)))
    first[1][1].calls = 1
    with pytest.raises(ProfilingError) as hooked:
        run(first, torch.randn(2, 4), TimingOptions(num_iters=3, warmup_iters=0))
    assert str(hooked.value) == str(info.value)


@pytest.mark.parametrize("verb", ["time_modules", "train_step_times", "benchmark"])
def test_the_timing_functions_name_a_failing_module_too(verb: str) -> None:
    # moduleprofiler.timing's own functions (the documented entry points), not only the
    # Profiler's methods: the second call, a hook-free iteration's, raised a bare error
    model = nn.Sequential(nn.Linear(4, 4), FailsOnSecondCall(RuntimeError("boom")))
    run = getattr(moduleprofiler.timing, verb)
    with pytest.raises(ProfilingError, match=r"forward of module '1' \(FailsOnSecondCall\)"
                       r" raised RuntimeError: boom") as info:
        run(model, torch.randn(2, 4), options=TimingOptions(num_iters=3, warmup_iters=0))
    assert info.value.path == "1"


def test_a_failure_outside_every_module_stays_what_it_was() -> None:
    def broken(x: torch.Tensor) -> torch.Tensor:
        raise KeyError("not a module's")

    with pytest.raises(KeyError):
        Profiler().benchmark(nn.Linear(4, 4), torch.randn(2, 4), pred_fn=broken)


class _ForceField(nn.Module):
    """An energy model that returns the forces too: minus the energy's gradient with respect
    to the positions, taken in its own forward (as molecular force fields do)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = positions.detach().requires_grad_(True)
        energy = self.net(positions).sum()
        forces = -torch.autograd.grad(energy, positions, create_graph=True)[0]
        return energy, forces


def test_a_forward_that_takes_gradients_is_counted_with_them_on() -> None:
    model = _ForceField()
    profile = Profiler().profile(model, torch.randn(10, 3))
    # the energy: 10 rows through Linear(3, 16) and Linear(16, 1), 10*3*16 + 10*16*1 = 640
    # MACs; the forces, its gradient with respect to the 10 x 3 positions: (10 x 1) @ (1 x 16)
    # and (10 x 16) @ (16 x 3), 160 + 480 = 640 more, in the root's own call
    assert profile.total_macs == 640 + 640 and profile.complete
    assert profile.calls("net.0")[0].macs == 480
    assert all(p.grad is None for p in model.parameters())
    # a caller that turned gradients off gets the model's own error, as its own call would
    with torch.no_grad(), pytest.raises(ProfilingError, match="does not require grad"):
        Profiler().profile(model, torch.randn(10, 3))
