"""Every pass leaves the model's buffers as it found them, also when the pass runs the model in
training mode (``eval=False``): BatchNorm running statistics, ``num_batches_tracked``, counters a
module writes in eval mode, and a lazy module's freshly materialised buffers."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler import state as state_module
from moduleprofiler.state import ModelStateWarning, preserved_state
from tests.fixtures.state import assert_unchanged, snapshot

X = torch.randn(8, 3)
FAST_TIMING = {"num_iters": 3, "drop_first": 1}


def batchnorm_model() -> nn.Module:
    """Linear then BatchNorm, in training mode, with statistics that are not the defaults."""
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    with torch.no_grad():
        model[1].running_mean.fill_(0.5)
        model[1].running_var.fill_(2.0)
        model[1].num_batches_tracked.fill_(7)
    return model.train()


PASSES: dict[str, Callable[[ModuleProfiler, nn.Module], Any]] = {
    "profile": lambda p, m: p.profile(m, X, eval=False),
    "profile_backward": lambda p, m: p.profile(m, X, eval=False, backward=True),
    "time_modules": lambda p, m: p.time_modules(m, X, eval=False, warmup_seconds=0.0,
                                                 **FAST_TIMING),
    "benchmark": lambda p, m: p.benchmark(m, X, eval=False, warmup_iters=0,
                                           warmup_seconds=0.0, target_ci=None,
                                           max_seconds=None, **FAST_TIMING),
    "trace_io_sizes": lambda p, m: p.trace_io_sizes(m, X),  # 0.0.4 default: eval=False
    "estimate_ops": lambda p, m: p.estimate_ops(m, X, eval=False),
    "estimate_inference_time": lambda p, m: p.estimate_inference_time(m, X, eval=False,
                                                                       **FAST_TIMING),
    "estimate_total_inference_time": lambda p, m: p.estimate_total_inference_time(
        m, X, eval=False, **FAST_TIMING),
}


@pytest.mark.parametrize("name", sorted(PASSES))
def test_eval_false_leaves_batchnorm_statistics_untouched(name: str) -> None:
    model = batchnorm_model()
    before = snapshot(model)
    PASSES[name](ModuleProfiler(), model)
    assert_unchanged(model, before)
    assert model[1].num_batches_tracked.item() == 7
    assert torch.equal(model[1].running_mean, torch.full((4,), 0.5))


def test_eval_false_really_runs_batchnorm_in_training_mode() -> None:
    # C = 4 channels, M = 8 rows. Batch statistics: C * (5M + 4) = 4 * 44 = 176, plus the
    # affine 2 * C * M = 64: 240. Running statistics: C * (2M + 2) = 72, plus 64: 136.
    model = batchnorm_model()
    training = ModuleProfiler().profile(model, X, eval=False)
    inference = ModuleProfiler().profile(model, X)
    assert training.calls("1")[0].self_ops == 240
    assert inference.calls("1")[0].self_ops == 136
    assert model.training and model[1].training


class StepCounter(nn.Module):
    """Writes a buffer in every forward, in eval mode too (a step counter, a cache)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        return self.lin(x)


@pytest.mark.parametrize("name", ["profile", "time_modules", "benchmark", "estimate_ops"])
def test_a_buffer_written_in_eval_mode_is_restored(name: str) -> None:
    model = StepCounter().eval()
    passes = {
        "profile": lambda: ModuleProfiler().profile(model, X),
        "time_modules": lambda: ModuleProfiler().time_modules(
            model, X, warmup_seconds=0.0, **FAST_TIMING),
        "benchmark": lambda: ModuleProfiler().benchmark(
            model, X, warmup_iters=0, warmup_seconds=0.0, target_ci=None, max_seconds=None,
            **FAST_TIMING),
        "estimate_ops": lambda: ModuleProfiler().estimate_ops(model, X),
    }
    passes[name]()
    assert model.steps.item() == 0  # the pass ran the forward (at least once) and put it back


def test_a_lazy_batchnorm_is_left_as_initialised() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.LazyBatchNorm1d()).train()
    ModuleProfiler().profile(model, X, eval=False)
    norm = model[1]
    # materialised by the pass (4 channels), but the pass's batch did not update its statistics
    assert torch.equal(norm.running_mean, torch.zeros(4))
    assert torch.equal(norm.running_var, torch.ones(4))
    assert norm.num_batches_tracked.item() == 0
    assert not norm._forward_pre_hooks  # nothing of the pass left behind


def lazy_model() -> nn.Module:
    return nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.LazyLinear(2))


def test_a_lazy_models_draws_are_those_of_its_own_first_forward() -> None:
    x = torch.ones(5, 3)
    torch.manual_seed(0)
    plain = lazy_model()
    plain(x)  # the model's own first forward draws its weights
    expected = torch.rand(6)  # the user's next draws
    torch.manual_seed(0)
    profiled = lazy_model()
    ModuleProfiler().profile(profiled, x)
    after = torch.rand(6)
    # the pass materialised the same weights, and the generator is where the model's own first
    # forward leaves it; put back to before the pass, the next six draws u repeated the numbers
    # the first layer's weight was drawn from (its first six entries are (2u - 1) / sqrt(3))
    assert torch.equal(profiled[0].weight, plain[0].weight)
    assert torch.equal(profiled[2].bias, plain[2].bias)
    assert torch.equal(after, expected)
    assert not profiled[0]._forward_pre_hooks and not profiled[2]._forward_pre_hooks


def test_a_lazy_model_already_materialised_gets_its_generator_back() -> None:
    model = lazy_model()
    model(torch.ones(5, 3))
    state = torch.get_rng_state()
    ModuleProfiler().profile(nn.Sequential(model, nn.Dropout(0.5)).train(), torch.ones(5, 3),
                             eval=False)
    assert torch.equal(torch.get_rng_state(), state)  # the Dropout's draws are undone


def test_buffers_false_keeps_what_the_block_wrote() -> None:
    model = batchnorm_model()
    with preserved_state(model, buffers=False), torch.no_grad():
        model(X)
    assert model[1].num_batches_tracked.item() == 8  # 7 + this batch


class DriftingNorm(nn.BatchNorm1d):
    """A norm subclass whose own forward writes its running mean even in eval mode."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.running_mean.add_(1.0)
        return super().forward(x)


def test_a_norm_subclass_that_writes_in_eval_mode_is_restored() -> None:
    # torch's eval-mode norms are not snapshotted (they only read their statistics); a subclass
    # with its own forward is, so its write is undone
    model = nn.Sequential(nn.Linear(3, 4), DriftingNorm(4), nn.BatchNorm1d(4)).eval()
    before = snapshot(model)
    ModuleProfiler().profile(model, torch.randn(5, 3))
    assert_unchanged(model, before)


class StreamingConv(nn.Module):
    """Keeps the last two frames of its input in a buffer that every forward replaces (the state
    of a streaming audio layer): ``self.state = ...`` puts a new tensor in the buffer table."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 2, 3)
        self.register_buffer("state", torch.zeros(1, 2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        full = torch.cat([self.state, x], dim=-1)
        self.state = full[..., -2:].detach()
        return self.conv(full)


def test_a_buffer_the_forward_replaces_is_put_back() -> None:
    model = StreamingConv()
    state = model.state
    before = snapshot(model)
    ModuleProfiler().profile(model, torch.ones(1, 2, 4))
    assert model.state is state  # the model's own tensor, not the pass's last frames
    assert_unchanged(model, before)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")  # torch.ao's own
def test_a_buffer_resized_in_place_gets_its_shape_back() -> None:
    # a fresh per-channel QAT observer resizes its scale, zero point and min/max buffers in
    # place in its first forward (min_val and max_val from 0 elements to one per channel)
    quantization = pytest.importorskip("torch.ao.quantization")
    model = nn.Sequential(quantization.QuantStub(), nn.Conv2d(3, 4, 3), quantization.DeQuantStub())
    model.qconfig = quantization.get_default_qat_qconfig("fbgemm")
    model = quantization.prepare_qat(model.train())
    observer = model[1].weight_fake_quant.activation_post_process
    assert observer.min_val.shape == (0,)
    before = snapshot(model)
    ModuleProfiler().profile(model, torch.randn(1, 3, 8, 8), eval=False)
    assert observer.min_val.shape == (0,)
    assert_unchanged(model, before)


def test_an_embedding_with_max_norm_keeps_its_weight() -> None:
    # its forward renormalises the rows it looks up in place (rows 1-3 here, norms ~2 > 1)
    model = nn.Sequential(nn.Embedding(10, 4, max_norm=1.0))
    with torch.no_grad():
        model[0].weight.fill_(1.0)  # every row's norm is sqrt(4) = 2
    before = snapshot(model)
    ModuleProfiler().profile(model, torch.tensor([[1, 2, 3]]))
    assert torch.equal(model[0].weight, torch.ones(10, 4))
    assert_unchanged(model, before)


class MomentumEncoder(nn.Module):
    """A frozen key encoder updated from the query encoder inside ``forward``, as MoCo does."""

    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(4, 4)
        self.key = nn.Linear(4, 4).requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            for key, query in zip(self.key.parameters(), self.query.parameters()):
                key.mul_(0.9).add_(query, alpha=0.1)
        return self.query(x) + self.key(x)


def test_parameters_the_forward_writes_are_named_in_a_warning() -> None:
    model = MomentumEncoder()
    with pytest.warns(ModelStateWarning, match=r"2 parameter\(s\).*'key.weight', 'key.bias'"):
        ModuleProfiler().profile(model, torch.randn(2, 4))


def test_no_warning_when_the_forward_writes_no_parameter() -> None:
    # BatchNorm statistics (buffers) and a max_norm embedding's weight are restored: no warning
    model = nn.Sequential(nn.Embedding(10, 4, max_norm=1.0), nn.Flatten(), nn.BatchNorm1d(8))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelStateWarning)
        ModuleProfiler().profile(model, torch.tensor([[1, 2], [3, 4]]), eval=False,
                                 backward=True)


def test_a_model_built_under_inference_mode_is_profiled() -> None:
    # its parameters are inference tensors, which keep no version counter to read
    with torch.inference_mode():
        model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    # 2 rows * 4 * 4 = 32 MACs
    assert ModuleProfiler().profile(model, torch.randn(2, 4)).total_macs == 32


class Scaled(nn.Module):
    """Multiplies by a buffer of its own (snapshotted and written back by every pass)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.register_buffer("scale", torch.full((3,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x * self.scale)


def test_an_inference_mode_model_with_a_buffer_is_profiled_and_keeps_its_mode() -> None:
    # its buffer is an inference tensor, written back only inside inference mode: the write
    # back raised after the forward had run, and the model was left in eval mode
    with torch.inference_mode():
        model = nn.Sequential(Scaled(), nn.BatchNorm1d(3))
    # 2 rows * 3 * 3 = 18 MACs
    assert ModuleProfiler().profile(model, torch.randn(2, 3)).total_macs == 18
    assert all(module.training for module in model.modules())
    with torch.inference_mode():  # in training mode, where the norm writes its statistics
        ModuleProfiler().profile(model, torch.randn(2, 3), eval=False)
    assert model[1].num_batches_tracked.item() == 0
    assert torch.equal(model[0].scale, torch.full((3,), 2.0))


def test_an_exported_program_s_module_that_refuses_eval_is_profiled() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    x = torch.randn(2, 8)
    exported = torch.export.export(model, (x,)).module()
    with pytest.raises(NotImplementedError):
        exported.eval()  # torch.export's module refuses the switch the pass makes
    before = snapshot(exported)
    profile = ModuleProfiler().profile(exported, x)
    assert_unchanged(exported, before)
    # the same work as the eager model: 2 * 16 * (2 * 8) + 32 + 2 * 4 * (2 * 16) = 800 ops
    assert profile.total_ops == ModuleProfiler().profile(model, x).total_ops == 800
    with preserved_state(exported, eval=True):
        assert not any(module.training for module in exported.modules())
    assert exported.training


class _Caching(nn.Module):
    """Registers a buffer and a parameter on its first forward, and may raise after."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)
        self.fail = fail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "cache" not in self._buffers:
            self.register_buffer("cache", x.detach().clone(), persistent=False)
            self.register_parameter("scale", nn.Parameter(torch.ones(())))
        if self.fail:
            raise RuntimeError("boom")
        return self.linear(x) * self.scale + self.cache


@pytest.mark.parametrize("fail", [False, True])
def test_what_a_forward_registers_is_taken_out(fail: bool) -> None:
    model = _Caching(fail)
    keys = list(model.state_dict())
    names = [name for name, _ in model.named_parameters()]
    if fail:
        with pytest.raises(Exception, match="boom"):
            ModuleProfiler().profile(model, torch.randn(2, 3))
    else:
        # the pass ran with them: the Linear's 2 * 3 * 3 = 18 MACs (the scale's multiplies
        # and the cache's additions are ops, not MACs)
        assert ModuleProfiler().profile(model, torch.randn(2, 3)).total_macs == 18
    assert "cache" not in model._buffers and "cache" not in model._non_persistent_buffers_set
    assert list(model.state_dict()) == keys
    assert [name for name, _ in model.named_parameters()] == names


def _orthogonal_linear() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3))
    torch.nn.utils.parametrizations.orthogonal(model[0])
    return model


def _original_grad(model: nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    model(x).sum().backward()
    grad = model[0].parametrizations.weight.original.grad
    return None if grad is None else grad.clone()


@pytest.mark.parametrize("backward", [False, True])
def test_a_pass_inside_parametrize_cached_leaves_the_cache_as_it_was(backward: bool) -> None:
    from torch.nn.utils import parametrize

    x = torch.randn(2, 3)
    expected = _original_grad(_orthogonal_linear(), x)
    model = _orthogonal_linear()
    other = _orthogonal_linear()
    with parametrize.cached():
        other[0].weight  # noqa: B018 (the user's own entry, made before the pass)
        kept = dict(parametrize._cache)
        ModuleProfiler().profile(model, x, backward=backward)
        # the pass's weight (computed under no_grad, or with the pass's own graph) was taken
        # out again; the entry the user made is still there, the same tensor
        assert list(parametrize._cache) == list(kept)
        assert all(parametrize._cache[key] is tensor for key, tensor in kept.items())
        grad = _original_grad(model, x)
    # the forward after the pass computed its own weight: the gradient reaches the original
    # parameter, as it does without the pass
    assert grad is not None and expected is not None
    assert torch.allclose(grad, expected)


REWEIGHTINGS: dict[str, Callable[[nn.Module], Any]] = {
    "weight_norm": torch.nn.utils.weight_norm,
    "spectral_norm": torch.nn.utils.spectral_norm,
    "pruning": lambda layer: torch.nn.utils.prune.l1_unstructured(layer, "weight", 0.5),
}


@pytest.mark.parametrize("name", sorted(REWEIGHTINGS))
def test_the_weight_an_older_reparametrization_sets_is_put_back(name: str) -> None:
    torch.manual_seed(0)
    layer = nn.Linear(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weight_norm's deprecation
        REWEIGHTINGS[name](layer)
    model = nn.Sequential(layer).train()
    weight = layer.weight  # a plain attribute its forward pre-hook sets on every call
    value = weight.detach().clone()
    ModuleProfiler().profile(model, X, eval=False)
    # the module's own tensor, not the pass's (computed under no_grad; the spectral norm's
    # from the power iteration the pass ran in training mode)
    assert layer.weight is weight
    assert torch.equal(layer.weight, value)


def test_a_torchscript_models_statistics_are_restored_after_benchmark() -> None:
    # a TorchScript module's buffer tables have no ``get``; the restore raised AttributeError
    # after the run, so benchmarking a scripted model failed
    model = torch.jit.script(batchnorm_model())
    PASSES["benchmark"](ModuleProfiler(), model)
    assert model[1].num_batches_tracked.item() == 7
    assert torch.equal(model[1].running_mean, torch.full((4,), 0.5))
    assert torch.equal(model[1].running_var, torch.full((4,), 2.0))


class DoublesInput(nn.Module):
    """Writes its input in place (``x.mul_(2)``) before its layer."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return self.lin(x)


INPUT_PASSES: dict[str, Callable[[ModuleProfiler, nn.Module, torch.Tensor], Any]] = {
    "profile": lambda p, m, x: p.profile(m, x),
    "profile_backward": lambda p, m, x: p.profile(m, x, backward=True),
    "time_modules": lambda p, m, x: p.time_modules(m, x, warmup_seconds=0.0, **FAST_TIMING),
    "benchmark": lambda p, m, x: p.benchmark(m, x, warmup_iters=0, warmup_seconds=0.0,
                                              target_ci=None, max_seconds=None, **FAST_TIMING),
    "train_step_times": lambda p, m, x: p.train_step_times(m, x, warmup_seconds=0.0,
                                                            **FAST_TIMING),
    "measure_memory": lambda p, m, x: p.measure_memory(m, x, train=True),
    "estimate_ops": lambda p, m, x: p.estimate_ops(m, x),
}


@pytest.mark.parametrize("name", sorted(INPUT_PASSES))
def test_an_input_the_forward_writes_in_place_is_given_back(name: str) -> None:
    # the pass left x doubled once per run of the model: 2 after a profile, 4 after the
    # inference and training passes of measure_memory, 8 or more after the timing passes; the
    # user's next forward then saw other numbers than without the pass
    model = DoublesInput()
    x = torch.ones(2, 3)
    expected = model(torch.ones(2, 3))
    INPUT_PASSES[name](ModuleProfiler(), model, x)
    assert torch.equal(x, torch.ones(2, 3))
    assert x._version == 0  # put back with its version counter, as buffers are
    assert torch.equal(model(x), expected)


class DoublesSecond(nn.Module):
    """Writes its second input in place (``y.mul_(2)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        y.mul_(2)
        return self.lin(x + y)


def test_an_input_past_the_copy_budget_is_not_copied_and_its_write_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a second host copy of a batch as large as the host's memory would end the run: past the
    # budget the input is not copied, and a write to it is said, never silent. Here the budget
    # is one 2 x 3 float32 tensor (24 bytes): x is copied, y (24 more) is not
    monkeypatch.setattr(state_module, "INPUT_COPY_BYTES", 24)
    x, y = torch.ones(2, 3), torch.ones(2, 3)
    with pytest.warns(ModelStateWarning, match=r"wrote 1 input tensor\(s\) in place .*\(2, 3\)"):
        ModuleProfiler().profile(DoublesSecond(), (x, y))
    assert torch.equal(y, torch.full((2, 3), 2.0))  # written, as the warning says
    assert torch.equal(x, torch.ones(2, 3))
    # within the budget, the same write is put back without a word
    monkeypatch.setattr(state_module, "INPUT_COPY_BYTES", 48)
    y = torch.ones(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModelStateWarning)
        ModuleProfiler().profile(DoublesSecond(), (x, y))
    assert torch.equal(y, torch.ones(2, 3))


class OwnNoise(nn.Module):
    """Adds noise drawn from a generator it holds (not torch's global one)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.noise = torch.Generator().manual_seed(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) + torch.randn(x.shape, generator=self.noise)


@pytest.mark.parametrize("name", sorted(INPUT_PASSES))
def test_a_generator_the_model_holds_is_put_back(name: str) -> None:
    # the pass drew from it: the user's next forward got other noise than without the pass
    model = OwnNoise()
    start = model.noise.get_state()
    expected = model(torch.ones(2, 3))
    model.noise.set_state(start)
    INPUT_PASSES[name](ModuleProfiler(), model, torch.ones(2, 3))
    assert torch.equal(model.noise.get_state(), start)
    assert torch.equal(model(torch.ones(2, 3)), expected)


class LazyNoiseTakingGradients(nn.Module):
    """Makes its generator in its first forward, draws from it, then takes a gradient itself
    (``profile()`` runs it again with gradients on)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "noise" not in vars(self):
            self.noise = torch.Generator().manual_seed(0)
        x = (x + torch.randn(x.shape, generator=self.noise)).requires_grad_()
        y = self.lin(x)
        (grad,) = torch.autograd.grad(y.sum(), x)
        return y + grad


def test_a_generator_made_in_a_first_run_is_put_back_after_the_run_with_gradients() -> None:
    # the run without gradients made the generator and drew once; the run with gradients
    # finds it there and puts it back: one draw of (2, 3) after the seed, not two
    model = LazyNoiseTakingGradients()
    profile = ModuleProfiler().profile(model, torch.ones(2, 3))
    assert profile.total_ops is not None
    after_one = torch.Generator().manual_seed(0)
    torch.randn(2, 3, generator=after_one)
    assert torch.equal(model.noise.get_state(), after_one.get_state())
