"""The 25 moduleprofiler 0.0.4 methods: names, keywords, defaults, keys, columns, files."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.warn import LowerBoundWarning

ANALYSES = {
    "count_params": ["module", "param_size", "param_dtype", "percent"],
    "trace_io_sizes": ["module", "input", "pred_fn", "eval"],
    "estimate_ops": ["module", "input", "pred_fn", "eval"],
    "estimate_inference_time": ["module", "input", "eval", "num_iters", "drop_first"],
    "estimate_total_inference_time": ["module", "input", "eval", "num_iters", "drop_first"],
}
DEFAULTS = {
    "count_params": {"param_size": True, "param_dtype": True, "percent": True},
    "trace_io_sizes": {"pred_fn": None, "eval": False},
    "estimate_ops": {"pred_fn": None, "eval": True},
    "estimate_inference_time": {"eval": True, "num_iters": 1000, "drop_first": 100},
    "estimate_total_inference_time": {"eval": True, "num_iters": 1000, "drop_first": 100},
}


def net() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))


@pytest.mark.parametrize("analysis", sorted(ANALYSES))
def test_all_25_methods_exist_with_legacy_signatures(analysis: str) -> None:
    profiler = ModuleProfiler()
    parameters = inspect.signature(getattr(profiler, analysis)).parameters
    assert list(parameters)[: len(ANALYSES[analysis])] == ANALYSES[analysis]
    for name, default in DEFAULTS[analysis].items():
        assert parameters[name].default == default
    for suffix in ("_df", "_csv", "_html", "_latex"):
        assert callable(getattr(profiler, analysis + suffix))
    assert next(iter(inspect.signature(getattr(profiler, analysis + "_csv")).parameters)) == "file"
    assert next(iter(inspect.signature(getattr(profiler, analysis + "_html")).parameters)) == "file"
    latex = inspect.signature(getattr(profiler, analysis + "_latex"))
    assert latex.parameters["index"].default is False


def test_aggr_defaults_differ_as_in_004() -> None:
    profiler = ModuleProfiler()
    per_layer = inspect.signature(profiler.estimate_inference_time_df).parameters
    total = inspect.signature(profiler.estimate_total_inference_time_df).parameters
    assert per_layer["aggr"].default is True
    assert total["aggr"].default is False


def test_count_params_keys_and_values() -> None:
    result = ModuleProfiler().count_params(nn.Linear(8, 32))
    # 8 * 32 weights + 32 biases = 288 parameters of 32 bits = 9216 bits
    assert result == {
        "__root__": {
            "type": "Linear", "trainable_params": 288, "trainable_params_dtype": torch.float32,
            "trainable_params_size_bits": 9216, "nontrainable_params": 0,
            "nontrainable_params_dtype": None, "nontrainable_params_size_bits": 0,
            "trainable_params_percent": 1.0, "nontrainable_params_percent": 0.0,
            "buffers": 0, "buffers_size_bits": 0,
        }
    }


def test_count_params_mixed_dtypes_frozen_buffers_and_empty_modules() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4).double(), nn.BatchNorm1d(4), nn.ReLU())
    model[0].requires_grad_(False)
    result = ModuleProfiler().count_params(model)
    root = result["__root__"]
    # trainable: fp64 linear 20 + bn 8 = 28; frozen: fp32 linear 20
    assert root["trainable_params"] == 28 and root["nontrainable_params"] == 20
    # bits: 20 * 64 + 8 * 32 = 1536 (0.0.4 multiplied the total by the last dtype's bits)
    assert root["trainable_params_size_bits"] == 1536
    assert root["trainable_params_dtype"] == (torch.float64, torch.float32)
    # BatchNorm buffers: running_mean 4 + running_var 4 + num_batches_tracked 1 (int64)
    assert root["buffers"] == 9
    assert root["buffers_size_bits"] == 4 * 32 + 4 * 32 + 64
    assert result["3"]["trainable_params_percent"] == 0.0
    # a parameter-less model: no ZeroDivisionError
    empty = ModuleProfiler().count_params(nn.ReLU())["__root__"]
    assert empty["trainable_params_percent"] == 0.0


def test_count_params_counts_tied_weights_once() -> None:
    from tests.fixtures.models import TiedWeights

    result = ModuleProfiler().count_params(TiedWeights())
    assert result["__root__"]["trainable_params"] == 40  # one 10 x 4 matrix


def test_quick_start_dataframes_have_legacy_columns() -> None:
    profiler = ModuleProfiler()
    x = torch.randn(1, 8)
    params = profiler.count_params_df(module=net())
    assert list(params.columns[:10]) == [
        "module", "type", "trainable_params", "trainable_params_dtype",
        "trainable_params_size_bits", "nontrainable_params", "nontrainable_params_dtype",
        "nontrainable_params_size_bits", "trainable_params_percent",
        "nontrainable_params_percent",
    ]
    assert isinstance(params.index, pd.RangeIndex)
    io = profiler.trace_io_sizes_df(module=net(), input=x)
    assert list(io.columns) == ["module", "type", "input_size", "output_size"]
    assert io["output_size"].tolist() == [(1, 2), (1, 32), (1, 32), (1, 2)]
    ops = profiler.estimate_ops_df(module=net(), input=x)
    assert list(ops.columns[:3]) == ["module", "type", "ops"]
    assert ops["module"].tolist() == ["__root__", "0", "1", "2"]


def test_reused_module_ops_are_summed_and_io_lists_every_call() -> None:
    lin = nn.Linear(8, 8)

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = lin

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(self.lin(x)[:1])

    profiler = ModuleProfiler()
    io = profiler.trace_io_sizes(Twice(), torch.randn(4, 8))
    # 0.0.4 reported only the last call, (1, 8)
    assert io["lin"]["input_size"] == [(4, 8), (1, 8)]
    ops = profiler.estimate_ops(Twice(), torch.randn(4, 8))
    assert ops["lin"]["calls"] == 2


class _HalfKnown(nn.Module):
    """Doubles a matrix exponential: the mul is counted, the exponential has no formula."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_exp(x) * 2


def test_estimate_ops_says_which_of_its_numbers_are_lower_bounds() -> None:
    # the 0.0.4 dict has no key to mark a lower bound: a warning names them, keys unchanged
    model, x = nn.Sequential(nn.Linear(4, 4), _HalfKnown(), nn.ReLU()), torch.randn(4, 4)
    with pytest.warns(LowerBoundWarning) as caught:
        ops = ModuleProfiler().estimate_ops(model, x)
    assert [str(w.message) for w in caught] == [
        "estimate_ops: ops of ['1'] and inclusive_ops of ['__root__', '1'] are lower bounds: "
        "no formula for modules ['1']; operators {'aten.linalg_matrix_exp': 1}"]
    # Linear 4 x 4 x 8 = 128; the mul 4 x 4 = 16 of the half-known module (a lower bound);
    # ReLU 16; the root's 128 + 16 + 16 = 160 a lower bound too
    assert ops["__root__"] == {"type": "Sequential", "ops": 0, "macs": 0,
                               "inclusive_ops": 160, "calls": 1}
    assert (ops["1"]["ops"], ops["1"]["inclusive_ops"], ops["2"]["ops"]) == (16, 16, 16)
    assert list(ModuleProfiler().estimate_ops_df(nn.Linear(4, 4), x).columns) == [
        "module", "type", "ops", "macs", "inclusive_ops", "calls"]
    with warnings.catch_warnings():  # exact counts: no warning
        warnings.simplefilter("error", LowerBoundWarning)
        ModuleProfiler().estimate_ops(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), x)


def test_csv_and_html_names_get_one_extension(tmp_path: Path) -> None:
    profiler = ModuleProfiler()
    profiler.count_params_csv(str(tmp_path / "params"), module=net())
    profiler.count_params_html(str(tmp_path / "params.html"), module=net())
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names == ["params.csv", "params.html"]  # 0.0.4 wrote params..csv
    csv = pd.read_csv(tmp_path / "params.csv")
    assert csv["trainable_params"].tolist()[0] == 8 * 32 + 32 + 32 * 2 + 2


class Counted(nn.Module):
    """A Linear that counts its forwards: a refused argument must cost no pass."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 2)
        self.forwards = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        return self.linear(x)


@pytest.mark.parametrize("file", [None, 3, ["ops.csv"]])
@pytest.mark.parametrize("writer", ["estimate_ops_csv", "estimate_ops_html"])
def test_writers_refuse_a_file_that_is_not_a_path_before_the_pass(writer: str,
                                                                   file: object) -> None:
    model = Counted()
    with pytest.raises(TypeError, match=r"file must be a file path \(a str or os.PathLike\), "
                                        r"got (None|int 3|list \['ops.csv'\])"):
        getattr(ModuleProfiler(), writer)(file, model, torch.randn(1, 8))
    assert model.forwards == 0  # refused at the boundary, not by open() after the pass
    with pytest.raises(TypeError, match="file must be a file path"):
        ModuleProfiler().estimate_ops_latex(model, torch.randn(1, 8), file=3)
    assert model.forwards == 0


@pytest.mark.parametrize(("method", "keyword"), [
    ("estimate_inference_time_df", "aggr"), ("estimate_total_inference_time_df", "aggr"),
    ("estimate_ops_latex", "index"),
])
def test_flags_of_the_views_must_be_bools(method: str, keyword: str) -> None:
    model = Counted()
    with pytest.raises(TypeError, match=f"{keyword} must be True or False, got str 'no'"):
        getattr(ModuleProfiler(), method)(model, torch.randn(1, 8), **{keyword: "no"})
    assert model.forwards == 0  # 0.0.4 took any truthy value: "no" meant aggr=True


def test_verbose_writers_say_where_they_saved(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    profiler = ModuleProfiler(verbose=True, ts_fmt="%Y")
    profiler.estimate_ops_csv(str(tmp_path / "ops"), net(), torch.randn(1, 8))
    profiler.count_params_html(str(tmp_path / "params.html"), net())
    profiler.estimate_ops_latex(net(), torch.randn(1, 8), file=str(tmp_path / "ops"))
    log = capsys.readouterr().err
    # as 0.0.4's verbose log did (its line named "ops..csv")
    for name in ("ops.csv", "params.html", "ops.tex"):
        assert f"Results saved to {tmp_path / name}\n" in log
    assert log.startswith("[2") and "] Profiling Sequential" in log


def test_verbose_passes_open_with_the_004_log_lines(capsys: pytest.CaptureFixture[str]) -> None:
    profiler = ModuleProfiler(verbose=True, ts_fmt="%Y")
    x = torch.randn(1, 8)
    profiler.estimate_ops(net(), x)
    profiler.trace_io_sizes(net(), x)
    profiler.count_params(net())
    profiler.estimate_inference_time(net(), x, num_iters=2, drop_first=1)
    profiler.estimate_total_inference_time(net(), x, num_iters=2, drop_first=1)
    lines = [line.split("] ", 1)[1] for line in capsys.readouterr().err.splitlines()]
    # 0.0.4's first line of each pass, in order (ours follow with the pass that runs)
    expected = ["Estimating ops of Sequential", "Tracing I/O shapes of Sequential",
                "Counting parameters of Sequential", "Estimating inference time of Sequential",
                "Estimating total inference time of Sequential"]
    assert [line for line in lines if line in expected] == expected


def test_an_exclusion_list_given_is_kept_as_0_0_4_kept_it() -> None:
    excluded: list[type[nn.Module]] = []
    profiler = ModuleProfiler(exclude_from_ops=excluded)
    excluded.append(nn.ReLU)  # after the profiler was made: 0.0.4 held this very list
    ops = profiler.estimate_ops(net(), torch.randn(1, 8))
    # ReLU excluded: unknown; the first Linear still counted, 1 row * 32 * 2 * 8 = 512
    assert ops["1"]["ops"] is None and ops["0"]["ops"] == 512
    assert profiler.exclude_from_ops is excluded


def test_latex_escapes_names_and_has_no_nan() -> None:
    latex = ModuleProfiler().count_params_latex(module=net())
    # 0.0.4's columns under human headers, stacked to fit the line (the raw names
    # made ResNet-18's table 960 pt too wide); the escaped root name; no NaN
    assert r"\_\_root\_\_ & Sequential & 354" in latex
    assert r"trainable \\ params \\ size bits" in latex
    assert "NaN" not in latex and "nan" not in latex
    assert r"\begin{tabular}" in latex and latex.rstrip().endswith(r"\end{tabular}}")
    assert r"\bottomrule" in latex


def test_timing_passes_name_the_module_whose_forward_failed() -> None:
    from moduleprofiler import ProfilingError
    from tests.fixtures.state import assert_unchanged, snapshot

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(5, 2))  # 4 features into 5
    before = snapshot(model)
    profiler = ModuleProfiler()
    for run in (
        lambda: profiler.estimate_inference_time(model, torch.randn(2, 4), num_iters=3,
                                                 drop_first=1),
        lambda: profiler.estimate_total_inference_time(model, torch.randn(2, 4), num_iters=3,
                                                       drop_first=1),
        lambda: profiler.time_modules(model, torch.randn(2, 4), num_iters=3, drop_first=1),
        lambda: profiler.benchmark(model, torch.randn(2, 4), num_iters=3),
    ):
        with pytest.raises(ProfilingError, match=r"module '2' \(Linear\)") as info:
            run()
        assert info.value.path == "2" and isinstance(info.value.__cause__, RuntimeError)
    assert_unchanged(model, before)
    # an argument error is not a forward failure: it stays what it was
    with pytest.raises(ValueError):
        profiler.estimate_inference_time(nn.Linear(4, 4), torch.randn(2, 4), num_iters=3,
                                         drop_first=3)


def test_count_params_counts_unmaterialised_lazy_parameters_as_zero() -> None:
    model = nn.Sequential(nn.LazyLinear(3), nn.LazyBatchNorm1d())
    result = ModuleProfiler().count_params(model)  # 0.0.4 (and before this fix): ValueError
    linear = result["0"]
    # no shape before the first forward: 0 parameters, 0 bits, the dtype is known
    assert (linear["trainable_params"], linear["trainable_params_size_bits"]) == (0, 0)
    assert linear["trainable_params_dtype"] == torch.float32
    assert linear["trainable_params_percent"] == 0.0
    # the BatchNorm's running statistics are lazy too; num_batches_tracked is one int64
    assert (result["1"]["buffers"], result["1"]["buffers_size_bits"]) == (1, 64)
    model(torch.randn(2, 5))
    # materialised: 5 * 3 weights + 3 biases = 18; BatchNorm 3 weights + 3 biases = 6
    assert ModuleProfiler().count_params(model)["__root__"]["trainable_params"] == 24


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.lin(a) + b


def test_legacy_methods_call_pred_fn_with_the_whole_tuple() -> None:
    model = TwoInputs()
    pair = (torch.randn(4, 3), torch.randn(4, 2))
    seen: list[int] = []

    def pred_fn(inputs: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        seen.append(len(inputs))  # 0.0.4 called pred_fn(input): one argument, the tuple
        return model(*inputs)

    profiler = ModuleProfiler()
    ops = profiler.estimate_ops(model, pair, pred_fn=pred_fn)
    # lin: 4 rows * 2 outputs * (2 * 3) = 48; the add in the root: 4 * 2 = 8
    assert (ops["lin"]["ops"], ops["__root__"]["ops"]) == (48, 8)
    io = profiler.trace_io_sizes(model, pair, pred_fn=pred_fn)
    assert io["lin"]["input_size"] == (4, 3)
    assert profiler.estimate_total_inference_time(model, pair, pred_fn=pred_fn, num_iters=2,
                                                  drop_first=1)["__root__"]["type"] == "TwoInputs"
    assert set(seen) == {2}
    # a list is passed whole too, and a dict still runs pred_fn(**input)
    assert profiler.estimate_ops(model, list(pair), pred_fn=pred_fn)["lin"]["ops"] == 48
    by_name = profiler.estimate_ops(model, {"a": pair[0], "b": pair[1]},
                                    pred_fn=lambda a, b: model(a, b))
    assert by_name["lin"]["ops"] == 48


class Pair(nn.Module):
    """Takes its two tensors as one argument, a pair (or a list of two)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        first, second = pair
        return self.lin(first) + self.lin(second)


def test_a_model_taking_one_pair_gets_the_pair_whole_as_in_004() -> None:
    model = Pair()
    pair = (torch.randn(2, 4), torch.randn(2, 4))
    profiler = ModuleProfiler()
    for given in (pair, list(pair)):  # 0.0.4 called module(input) for both
        ops = profiler.estimate_ops(model, given)
        # lin twice: 2 * (2 rows * 3 outputs * 2 * 4) = 96; the root's add: 2 * 3 = 6
        assert (ops["lin"]["ops"], ops["lin"]["calls"], ops["__root__"]["ops"]) == (96, 2, 6)
        sizes = profiler.trace_io_sizes(model, given)
        assert sizes["lin"]["input_size"] == (2, 4) and sizes["__root__"]["output_size"] == (2, 3)
        times = profiler.estimate_inference_time(model, given, num_iters=2, drop_first=1)
        assert times["lin"]["calls"] == 2 and len(times["lin"]["inference_time_ms"]) == 1
        total = profiler.estimate_total_inference_time(model, given, num_iters=2, drop_first=1)
        assert len(total["__root__"]["inference_time_ms"]) == 1
    # a model taking two arguments still gets the pair spread (0.0.4 raised there)
    assert profiler.estimate_ops(TwoInputs(), (torch.randn(4, 3), torch.randn(4, 2))
                                 )["lin"]["ops"] == 48


def test_profile_keeps_unpacking_a_tuple_for_pred_fn() -> None:
    model = TwoInputs()
    pair = (torch.randn(4, 3), torch.randn(4, 2))
    profile = ModuleProfiler().profile(model, pair, pred_fn=lambda a, b: model(a, b))
    assert profile.total_ops == 56  # 48 + 8, as above
    with pytest.raises(TypeError, match="pred_fn must be a function"):
        ModuleProfiler().estimate_ops(model, pair, pred_fn=model.lin.weight)



class _SparseHolder(nn.Module):
    """A frozen sparse COO parameter of dense shape 100 x 100 holding 3 values, and a sparse
    CSR buffer of dense shape 8 x 8 holding 2."""

    def __init__(self) -> None:
        super().__init__()
        indices = torch.tensor([[0, 5, 99], [1, 7, 0]])
        values = torch.tensor([1.0, 2.0, 3.0])
        self.weight = nn.Parameter(torch.sparse_coo_tensor(indices, values, (100, 100)),
                                   requires_grad=False)
        mask = torch.zeros(8, 8)
        mask[0, 1] = mask[3, 2] = 1.0
        self.register_buffer("mask", mask.to_sparse_csr())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_count_params_size_bits_of_a_sparse_tensor_are_what_it_stores() -> None:
    from moduleprofiler.memory import module_bytes

    model = _SparseHolder()
    row = ModuleProfiler().count_params(model)["__root__"]
    # elements at the dense shape: 100 x 100 = 10000; stored: 2 x 3 int64 indices (48 bytes)
    # + 3 float32 values (12 bytes) = 60 bytes = 480 bits (dense: 10000 x 32 = 320000)
    assert row["nontrainable_params"] == 10000
    assert row["nontrainable_params_size_bits"] == 60 * 8
    # CSR 8 x 8 with 2 values: 9 int64 row offsets (72) + 2 int64 columns (16) + 2 float32
    # values (8) = 96 bytes = 768 bits (dense: 64 x 32 = 2048)
    assert row["buffers"] == 64
    assert row["buffers_size_bits"] == 96 * 8
    # the profile's param_bytes and the memory view count the same bytes
    profile = ModuleProfiler().profile(model, torch.randn(1))
    assert (profile.modules[0].param_bytes, profile.modules[0].buffer_bytes) == (60, 96)
    static = module_bytes(model)[""]
    assert (static.param_bytes, static.buffer_bytes) == (60, 96)
