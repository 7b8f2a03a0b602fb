"""A pass run in the middle of a training script leaves nothing the script can notice: the
random number generators draw what they would have drawn, a graph built before the pass still
backpropagates (the version counters of what the pass wrote back are as they were), and the
training goes on exactly as without the pass."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profiler, ProfilingError, TimingOptions
from moduleprofiler.cli import main
from moduleprofiler.state import preserved_state
from tests.test_state import Scaled

FAST = TimingOptions(num_iters=3, drop_first=1, warmup_seconds=0.0, measure_overhead=False)
X = torch.randn(8, 3)


def dropout_model() -> nn.Module:
    """Linear, BatchNorm (running statistics saved by its backward) and Dropout (a random
    draw on every training forward), in training mode."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.5)).train()


PASSES: dict[str, Callable[[nn.Module], Any]] = {
    "profile": lambda m: ModuleProfiler().profile(m, X, eval=False),
    "profile_backward": lambda m: ModuleProfiler().profile(m, X, eval=False, backward=True),
    "estimate_ops": lambda m: ModuleProfiler().estimate_ops(m, X, eval=False),
    "trace_io_sizes": lambda m: ModuleProfiler().trace_io_sizes(m, X),  # 0.0.4: eval=False
    "time_modules": lambda m: ModuleProfiler().time_modules(m, X, FAST, eval=False),
    "benchmark": lambda m: ModuleProfiler().benchmark(m, X, FAST, eval=False),
    "train_step_times": lambda m: ModuleProfiler().train_step_times(
        m, X, FAST, optimizer=torch.optim.SGD(m.parameters(), lr=0.1)),
    "measure_memory": lambda m: ModuleProfiler().measure_memory(m, X, train=True),
}


@pytest.mark.parametrize("name", sorted(PASSES))
def test_a_pass_leaves_the_random_number_generator_as_it_found_it(name: str) -> None:
    model = dropout_model()
    torch.manual_seed(7)
    expected = torch.rand(4)  # what the script draws next without the pass
    torch.manual_seed(7)
    PASSES[name](model)  # its Dropout drew masks from the global generator
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.parametrize("name", sorted(PASSES))
def test_a_graph_built_before_the_pass_still_backpropagates(name: str) -> None:
    model = dropout_model()
    reference = copy.deepcopy(model)
    torch.manual_seed(1)
    loss = model(X).pow(2).sum()  # BatchNorm saved its running statistics for the backward
    torch.manual_seed(1)
    reference(X).pow(2).sum().backward()
    versions = {name: t._version for name, t in [*model.named_parameters(),
                                                 *model.named_buffers()]}
    PASSES[name](model)  # wrote the statistics (and train_step_times the weights) back
    assert {name: t._version for name, t in [*model.named_parameters(),
                                             *model.named_buffers()]} == versions
    loss.backward()  # raised "modified by an inplace operation" when the counters moved
    for parameter, expected in zip(model.parameters(), reference.parameters()):
        assert parameter.grad is not None and expected.grad is not None
        assert torch.equal(parameter.grad, expected.grad)


def test_an_eval_pass_keeps_a_saved_buffer_usable() -> None:
    # the multiplication saved the buffer for the backward; an eval-mode pass writes back
    # the buffers of modules other than torch's norms too
    model = Scaled()
    x = torch.ones(2, 3, requires_grad=True)
    loss = model(x).sum()
    ModuleProfiler().profile(model, x.detach())
    loss.backward()
    # d loss / d x = scale * (column sums of the weight): 2 * w.sum(0), for both rows
    expected = 2.0 * model.linear.weight.detach().sum(0)
    assert x.grad is not None and torch.equal(x.grad, expected.expand(2, 3))


def _train(profile_at: int | None) -> tuple[list[float], dict[str, torch.Tensor]]:
    model = dropout_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(2)
    losses = []
    for step in range(4):
        if step == profile_at:
            ModuleProfiler().profile(model, X, eval=False, backward=True)
        loss = model(X).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model.state_dict()


def test_training_with_a_pass_in_it_equals_training_without() -> None:
    plain_losses, plain_state = _train(None)
    losses, state = _train(profile_at=2)
    assert losses == plain_losses  # the same Dropout masks at every step
    assert all(torch.equal(state[key], plain_state[key]) for key in plain_state)


def test_rng_false_keeps_what_the_block_drew() -> None:
    torch.manual_seed(3)
    first = torch.rand(1)
    torch.manual_seed(3)
    with preserved_state(nn.Linear(1, 1), rng=False):
        torch.rand(1)
    assert not torch.equal(torch.rand(1), first)  # the block's draw stayed drawn


def test_train_step_times_restore_false_keeps_its_random_draws() -> None:
    model = dropout_model()
    torch.manual_seed(7)
    untouched = torch.rand(4)
    torch.manual_seed(7)
    ModuleProfiler().train_step_times(model, X, FAST, restore=False)
    assert not torch.equal(torch.rand(4), untouched)  # its steps are the training's own


def test_an_in_process_command_leaves_the_random_number_generator_alone(
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_cli import TINY

    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    # it seeds its input (seed 0) and builds a model, whose initialisation draws weights
    assert main([TINY, "-i", "2x4", "--depth", "0"]) == 0
    capsys.readouterr()
    assert torch.equal(torch.rand(3), expected)


def optimizer_in_backward() -> tuple[nn.Module, list[torch.optim.Optimizer]]:
    """A model whose parameters each step their own SGD inside the backward, as soon as their
    gradient is accumulated (torch's "optimizer in backward" recipe)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    optimizers = {p: torch.optim.SGD([p], lr=0.1, momentum=0.9) for p in model.parameters()}

    def step(parameter: torch.Tensor) -> None:
        optimizers[parameter].step()
        optimizers[parameter].zero_grad()

    for parameter in model.parameters():
        parameter.register_post_accumulate_grad_hook(step)
    return model, list(optimizers.values())


@pytest.mark.parametrize("name", ["train_step_times", "measure_memory"])
def test_an_optimizer_stepping_in_the_backward_is_refused_not_run(name: str) -> None:
    model, optimizers = optimizer_in_backward()
    weights = {key: value.clone() for key, value in model.state_dict().items()}
    passes = {"train_step_times": lambda: ModuleProfiler().train_step_times(model, X, FAST),
              "measure_memory": lambda: ModuleProfiler().measure_memory(model, X, train=True)}
    # its steps moved every weight and gave each optimizer a momentum buffer, for good
    with pytest.raises(ProfilingError, match=r"post-accumulate-grad hooks of 4 parameter\(s\) "
                                             r"\('0.weight', '0.bias', '2.weight', \.\.\.\)"):
        passes[name]()
    assert all(torch.equal(model.state_dict()[key], value) for key, value in weights.items())
    assert all(not optimizer.state for optimizer in optimizers)


def test_restore_false_times_an_optimizer_in_the_backward_as_training() -> None:
    model, optimizers = optimizer_in_backward()
    ModuleProfiler().train_step_times(model, X, FAST, restore=False)
    assert all(optimizer.state for optimizer in optimizers)  # the steps were training's own


@pytest.mark.parametrize("measure", ["train_step_times", "measure_memory"])
def test_a_training_pass_keeps_a_batchnorm_the_user_froze(measure: str) -> None:
    # fine-tuning with a frozen BatchNorm: model.train(), then bn.eval(). The pass switched the
    # whole tree to training mode (root.train()), so it ran a step the user never runs: the
    # BatchNorm normalised with the batch's statistics and saved them for its backward
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).train()
    model[1].eval()
    modes: list[bool] = []
    model[1].register_forward_pre_hook(lambda module, args: modes.append(module.training))
    x = torch.randn(8, 4)
    if measure == "train_step_times":
        Profiler().train_step_times(model, x, options=TimingOptions(
            num_iters=2, drop_first=0, measure_overhead=False, warmup_seconds=0.0))
    else:
        Profiler().measure_memory(model, x, train=True)
    assert modes and not any(modes)  # frozen in every step the pass ran
    assert model.training and not model[1].training  # and as the user left it


def test_an_eval_pass_keeps_a_dropout_the_user_left_on() -> None:
    # MC dropout: model.eval(), then the Dropout switched back on for sampling. An eval pass
    # called root.eval() whenever some module was training, and counted a model the user
    # never runs; a model in training mode is still switched to eval
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).eval()
    model[1].train()
    modes: list[bool] = []
    model[1].register_forward_pre_hook(lambda module, args: modes.append(module.training))
    Profiler().profile(model, torch.randn(2, 4))
    assert modes == [True] and not model.training and model[1].training
    training = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).train()
    training[1].register_forward_pre_hook(lambda module, args: modes.append(module.training))
    Profiler().profile(training, torch.randn(2, 4))
    assert modes == [True, False] and training.training and training[1].training
