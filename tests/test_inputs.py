"""How ``input`` becomes a call of the model, and the hint a list input gets when the call
fails (a list is spread into positional arguments, which list-taking models do not expect)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profiler, ProfilingError
from moduleprofiler.inputs import LIST_HINT, add_note, forward_binds, random_input
from tests.fixtures.models import ReadsSettings


class TakesList(nn.Module):
    """Like torchvision's detection models: one argument, a list of images."""

    def forward(self, images: list[torch.Tensor]) -> torch.Tensor:
        if not isinstance(images, list):
            raise ValueError("images is expected to be a list")
        return images[0] * 2


class TakesTwo(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def test_a_failing_list_input_says_how_lists_are_spread() -> None:
    image = torch.ones(3)
    with pytest.raises(ProfilingError, match=r"images is expected to be a list; hint: input "
                                             r"was a list, so it was spread into 1 positional"):
        ModuleProfiler().profile(TakesList(), [image])
    # the list as one argument: 3 multiplies
    assert ModuleProfiler().profile(TakesList(), ([image],)).total_ops == 3


def test_a_list_of_arguments_still_spreads_and_other_errors_get_no_hint() -> None:
    # a list of two tensors is two arguments: 4 adds
    assert ModuleProfiler().profile(TakesTwo(), [torch.ones(4), torch.ones(4)]).total_ops == 4
    with pytest.raises(ProfilingError) as raised:  # a tuple is spread by intent: no hint
        ModuleProfiler().profile(TakesTwo(), (torch.ones(4),))
    assert "hint" not in str(raised.value)


def test_a_note_is_added_once() -> None:
    error = ValueError("x")
    add_note(error, LIST_HINT.format(count=2))
    add_note(error, LIST_HINT.format(count=2))
    assert error.__notes__ == [LIST_HINT.format(count=2)]


def test_input_size_makes_a_random_tensor_of_the_models_dtype() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten()).to(torch.float64)
    profile = ModuleProfiler().profile(model, input_size=(1, 3, 8, 8))
    # output 1 x 4 x 6 x 6 = 144 values, each 27 multiplies + 26 adds + 1 bias add = 54 ops
    assert profile.total_ops == 144 * 54 == 7776
    assert profile.records[1].input_dtypes == ("float64",)
    two = ModuleProfiler().profile(TakesTwo(), input_size=[(2, 4), (2, 4)])
    assert two.total_ops == 8  # 2 x 4 adds
    x = random_input(nn.Linear(2, 2), (3, 2))
    assert isinstance(x, torch.Tensor) and x.shape == (3, 2) and x.dtype == torch.float32
    # a shape read from numpy (an array, its integers) is a shape: it was a TypeError
    for size in (np.array([3, 2]), (np.int64(3), 2), [np.array([3, 2]), (3, np.int32(2))]):
        made = random_input(nn.Linear(2, 2), size)  # type: ignore[arg-type]
        assert all(t.shape == (3, 2) for t in (made if isinstance(made, tuple) else (made,)))
    # Linear(2, 2) on 3 rows: 3 x 2 outputs of 2 multiplies, 1 add and 1 bias add = 24 ops
    assert ModuleProfiler().profile(nn.Linear(2, 2),
                                    input_size=np.array([3, 2])).total_ops == 3 * 2 * 4


@pytest.mark.parametrize(("input_size", "error", "message"), [
    ((1, 0, 8), ValueError, "input_size .* has a size below 1"),
    ("1x3", TypeError, "input_size must be a shape"),
    ([(1, 2), "a"], TypeError, "input_size must be a shape"),
    ((1.5, 2), TypeError, "input_size must be a shape"),
])
def test_bad_input_size_names_the_argument(input_size: object, error: type[Exception],
                                           message: str) -> None:
    with pytest.raises(error, match=message):
        ModuleProfiler().profile(nn.Linear(2, 2), input_size=input_size)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="input or input_size, not both"):
        ModuleProfiler().profile(nn.Linear(2, 2), torch.ones(2), input_size=(2,))


def test_no_input_and_a_shape_as_input_hint_at_input_size() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten())
    with pytest.raises(TypeError, match=r"no input given, and Sequential.forward requires an "
                                        r"argument: pass input= .* also take input_size="):
        ModuleProfiler().profile(model)
    with pytest.raises(ProfilingError, match=r"takes 2 positional arguments but 5 were given; "
                                             r"hint: input=\(1, 3, 8, 8\) was spread into 4 "
                                             r"int argument\(s\); .* "
                                             r"pass input_size=\(1, 3, 8, 8\)"):
        ModuleProfiler().profile(model, (1, 3, 8, 8))


def test_a_pred_fn_that_takes_no_argument_runs_without_input() -> None:
    # the closure holds its own inputs: 4 adds, no None passed anywhere
    module = TakesTwo()
    a, b = torch.ones(4), torch.ones(4)
    profile = ModuleProfiler().profile(module, pred_fn=lambda: module(a, b))
    assert profile.total_ops == 4
    # a pred_fn whose one parameter has a default binds with no argument too
    assert ModuleProfiler().profile(module, pred_fn=lambda x=a: module(x, b)).total_ops == 4


def test_a_pred_fn_that_takes_an_argument_gets_none_and_a_hint_without_input() -> None:
    module = TakesTwo()
    seen: list[object] = []

    def pred_fn(mod: object) -> torch.Tensor:
        seen.append(mod)
        return module(mod, mod)  # type: ignore[arg-type]

    with pytest.raises(ProfilingError, match=r"pred_fn was called with None as its one "
                                             r"argument"):
        ModuleProfiler().profile(module, pred_fn=pred_fn)
    assert seen == [None]  # as 0.0.4 called it


@pytest.mark.parametrize("root", [True, False])
def test_a_model_s_own_getattr_is_not_asked_whether_it_was_compiled(root: bool) -> None:
    model = ReadsSettings() if root else nn.Sequential(ReadsSettings())
    x = torch.randn(4, 3)
    # 4 x 2 outputs of 3 multiplies, 2 adds and the bias add: 8 x 6 = 48 ops; 8 scalings
    assert ModuleProfiler().profile(model, x).total_ops == 48 + 8
    timing = ModuleProfiler().time_modules(model, x, num_iters=2, drop_first=0,
                                           warmup_seconds=0.0)
    assert len(timing.records) == (2 if root else 3)


def test_the_input_size_hint_names_the_passes_that_take_it() -> None:
    # time_modules() and the 0.0.4 methods said "pass ... input_size=(1, 3, 224, 224)", a
    # keyword they refuse; the hint now names the passes that take it, and those do
    import inspect

    from moduleprofiler.timing import TimingOptions

    profiler, model = ModuleProfiler(), nn.Linear(3, 2)
    for call in (lambda: profiler.profile(model),
                 lambda: profiler.time_modules(model, None, TimingOptions(num_iters=2)),
                 lambda: profiler.estimate_ops(model, None)):
        with pytest.raises(TypeError, match=r"pass input= \(a tensor, tuple or dict\); "
                                            r"profile\(\) and predict\(\) also take "
                                            r"input_size=\(1, 3, 224, 224\)"):
            call()
    with pytest.raises(ProfilingError, match=r"pass input_size=\(4, 3\) \(profile\(\) and "
                                             r"predict\(\) take it\)"):
        profiler.time_modules(model, (4, 3), TimingOptions(num_iters=2))
    for name in ("profile", "predict"):
        assert "input_size" in inspect.signature(getattr(profiler, name)).parameters
    for name in ("time_modules", "benchmark", "train_step_times", "measure_memory",
                 "estimate_ops", "trace_io_sizes"):
        assert "input_size" not in inspect.signature(getattr(profiler, name)).parameters


def test_predict_without_input_says_so_before_running() -> None:
    # it ran the meta copy with no argument and raised ProfilingError "forward of module
    # '__root__' (Linear) raised TypeError: ... missing 1 required positional argument"
    with pytest.raises(TypeError, match=r"no input given, and Linear.forward requires an "
                                        r"argument: pass input="):
        ModuleProfiler().predict(nn.Linear(3, 2))
    # a model that needs no input predicts without one
    assert ModuleProfiler().predict(Constant()).predicted_device_ms is not None


class Constant(nn.Module):
    """A model of no argument: its forward makes its own input."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self) -> torch.Tensor:
        return self.fc(torch.ones(1, 3, device=self.fc.weight.device))


class SumsItems(nn.Module):
    """Runs its layer on each item of an iterable argument and sums the results."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, items: Any) -> torch.Tensor:
        return sum(self.lin(x) for x in items)  # type: ignore[return-value]


def _items() -> Iterator[torch.Tensor]:
    return (x for x in [torch.ones(2, 4), torch.ones(2, 4)])


FAST = {"num_iters": 3, "drop_first": 1, "warmup_seconds": 0.0}
REPEATED_PASSES: dict[str, Callable[[nn.Module, Any], Any]] = {
    "time_modules": lambda m, x: ModuleProfiler().time_modules(m, x, **FAST),
    "benchmark": lambda m, x: ModuleProfiler().benchmark(m, x, **FAST),
    "train_step_times": lambda m, x: ModuleProfiler().train_step_times(m, x, **FAST),
    "measure_memory(train=True)": lambda m, x: ModuleProfiler().measure_memory(m, x, train=True),
    "estimate_inference_time": lambda m, x: ModuleProfiler().estimate_inference_time(
        m, x, num_iters=3, drop_first=1),
    "predict": lambda m, x: ModuleProfiler().predict(m, x),
    "sweep": lambda m, x: ModuleProfiler().sweep(m, x, batch_sizes=(1, 2), dtypes="fp32"),
}


@pytest.mark.parametrize("name", sorted(REPEATED_PASSES))
@pytest.mark.parametrize("spread", ["alone", "tuple", "dict"])
def test_a_pass_that_runs_the_model_again_refuses_an_iterator_before_running(
        name: str, spread: str) -> None:
    # the first run used the generator up: the later ones timed a model that did nothing
    # (benchmark said 0.003 ms, time_modules listed the Linear as not called); predict could
    # not copy its tensors to the meta device (the Linear raised: meta weight, CPU input)
    items = _items()
    given = {"alone": items, "tuple": (items,), "dict": {"items": items}}[spread]
    where = {"alone": "input", "tuple": "input[0]", "dict": "input['items']"}[spread]
    pass_name = "time_modules" if name == "estimate_inference_time" else name
    with pytest.raises(TypeError, match=re.escape(
            f"{where} is an iterator (generator)") + ".*" + re.escape(pass_name)):
        REPEATED_PASSES[name](SumsItems(), given)
    assert len(list(items)) == 2  # refused before the model ran


def test_a_single_run_still_takes_an_iterator() -> None:
    # Linear(4, 3) on each 2x4 item: 2 * 3 * (2 * 4 - 1) + 2 * 3 = 48 ops, two items 96;
    # sum() adds 0 + first + second: 2 adds of 6 elements, 12; total 108
    assert ModuleProfiler().profile(SumsItems(), _items()).total_ops == 108


def _meta_embedding_takes_floats() -> bool:
    """Whether torch's meta kernel of an embedding lookup takes floating-point indices (a
    prediction runs on the meta device, where some versions check the dtype and some not)."""
    try:
        torch.nn.functional.embedding(torch.zeros(2, 5, device="meta"),
                                      torch.zeros(100, 8, device="meta"))
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("entry", ["profile", "predict"])
def test_a_random_input_refused_for_integers_says_where_it_came_from(entry: str) -> None:
    # input_size makes a random floating-point tensor; an Embedding takes token ids, and the
    # error said only "Expected tensor for argument #1 'indices' to have one of the following
    # scalar types: Long, Int; but got torch.FloatTensor"
    if entry == "predict" and _meta_embedding_takes_floats():
        pytest.skip("this torch's meta embedding takes floating-point indices (torch 2.11): "
                    "the prediction runs, nothing to explain")
    model = nn.Sequential(nn.Embedding(100, 8), nn.Linear(8, 2))
    profiler = Profiler()
    run = (lambda: profiler.profile(model, input_size=(2, 5))) if entry == "profile" else \
        (lambda: profiler.predict(model, input_size=(2, 5), device="H100 SXM", host=None))
    with pytest.raises(ProfilingError) as caught:
        run()
    notes = getattr(caught.value, "__notes__", [])
    assert any("input_size=(2, 5) stands for random floating-point input" in note
               and "torch.randint(0, vocab_size, (2, 5))" in note for note in notes)


def test_an_error_unrelated_to_integers_gets_no_note() -> None:
    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("the model's own failure")

    with pytest.raises(ProfilingError) as caught:
        Profiler().profile(Fails(), input_size=(2, 5))
    assert not getattr(caught.value, "__notes__", [])


def test_compiled_inside_finds_each_kind_of_compiled_code_deep_in_a_tree() -> None:
    from moduleprofiler.inputs import compiled_inside

    def tree() -> nn.Sequential:
        return nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Sequential(
            nn.Linear(2, 2), nn.Tanh())))

    plain = tree()
    plain[1].helper = torch.relu  # a callable attribute that no compile wrapped
    plain[1].kind = nn.Linear  # a class is callable too
    assert compiled_inside(plain) == ()
    forward = tree()
    inner = forward[1][1]
    inner.forward = torch.compile(inner.forward)  # its own call eager, its children's not
    assert {id(m) for m in compiled_inside(forward)} == {id(inner[0]), id(inner[1])}
    step = tree()
    step[1].training_step = torch.compile(lambda: None)  # the module itself runs inside
    assert {id(m) for m in compiled_inside(step)} == {id(m) for m in step[1].modules()}
    in_place = tree()
    in_place[1][1].compile()
    assert {id(m) for m in compiled_inside(in_place)} == {id(m) for m in in_place[1][1].modules()}
    wrapped = tree()
    wrapped[1] = torch.compile(wrapped[1])  # the wrapper's own call is eager
    assert {id(m) for m in compiled_inside(wrapped)} == {
        id(m) for m in wrapped[1]._orig_mod.modules()}


def test_forward_binds_counts_the_positional_arguments_a_forward_takes() -> None:
    class Optional(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
            return x

    class Variadic(nn.Module):
        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            return xs[0]

    # Linear.forward(input): one; Optional: one or two; Variadic: any number
    assert [forward_binds(nn.Linear(2, 2), n) for n in (0, 1, 2)] == [False, True, False]
    assert [forward_binds(Optional(), n) for n in (1, 2, 3)] == [True, True, False]
    assert forward_binds(Variadic(), 5) is True
