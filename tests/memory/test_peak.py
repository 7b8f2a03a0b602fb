"""Peak memory on CPU and meta from operator-level accounting, checked against hand sums of the
tensors that are live at the peak."""

from __future__ import annotations

import resource
import warnings

import torch
from torch import Tensor, nn

from moduleprofiler.memory import measure_memory


def _chain() -> nn.Sequential:
    return nn.Sequential(nn.Linear(16, 32, bias=False), nn.Linear(32, 64, bias=False),
                         nn.Linear(64, 8, bias=False))


def test_inference_peak_of_a_linear_chain_by_hand() -> None:
    report = measure_memory(_chain(), torch.randn(4, 16))
    inference = report.inference
    # Live throughout: W1 32*16*4 = 2048, W2 64*32*4 = 8192, W3 8*64*4 = 2048, x 4*16*4 = 256.
    assert inference.baseline_bytes == 2048 + 8192 + 2048 + 256 == 12544
    # The peak is in the second Linear: its output (4*64*4 = 1024) is allocated while the first
    # Linear's output (4*32*4 = 512) is still referenced by Sequential.forward.
    assert inference.peak_bytes == 12544 + 512 + 1024 == 14080
    assert inference.method == "operator"
    assert inference.peak_call is not None
    assert (inference.peak_call.path, inference.peak_call.call_number,
            inference.peak_call.phase) == ("1", 0, "forward")
    assert report.peak_activation_bytes == 1536
    # the accounting counts the storages' own bytes, which are the bytes tensors asked for
    assert (inference.requested_baseline_bytes, inference.requested_peak_bytes,
            inference.requested_increase_bytes) == (12544, 14080, 1536)
    frame = report.to_df().set_index("module")
    assert list(frame["output_bytes"]) == [128, 512, 1024, 128]
    # Highest live bytes while each call ran (the root's covers its children); during the
    # third Linear the second one's output is still referenced: 12544 + 1024 + 128.
    assert list(frame["max_live_bytes"]) == [14080, 13056, 14080, 13696]


def test_training_peak_of_a_linear_relu_chain_by_hand() -> None:
    model = nn.Sequential(nn.Linear(16, 32, bias=False), nn.ReLU(), nn.Linear(32, 8, bias=False))
    report = measure_memory(model, torch.randn(4, 16), train=True, keep_output=False)
    training = report.training
    assert training is not None
    # Baseline: W1 32*16*4 = 2048, W2 8*32*4 = 1024, x 4*16*4 = 256.
    assert training.baseline_bytes == 3328
    # The peak is in the backward of the first Linear, when it allocates W1's gradient. Live:
    #   baseline 3328
    #   the loss (a float32 scalar) 4 and the backward's seed gradient ones_like(loss) 4
    #   W2's gradient 8*32*4 = 1024 (accumulated already)
    #   the gradient of the first Linear's output 4*32*4 = 512 (this node's input)
    #   W1's gradient being computed 32*16*4 = 2048
    # The ReLU result (saved by ReLU and the second Linear) was freed once both nodes had run.
    assert training.peak_bytes == 3328 + 4 + 4 + 1024 + 512 + 2048 == 6920
    assert training.peak_call is not None
    assert (training.peak_call.path, training.peak_call.phase) == ("0", "backward")
    assert training.grad_bytes == 2048 + 1024


class InPlace(nn.Module):
    """In-place ops and views: new memory only for the Linear's output."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        y = self.relu(self.linear(x))
        y.mul_(2).add_(1)
        return y.view(-1).t().unsqueeze(0)


def test_in_place_ops_and_views_allocate_nothing() -> None:
    report = measure_memory(InPlace(), torch.randn(2, 8))
    frame = report.to_df().set_index("module")
    linear_out = 2 * 8 * 4
    assert frame.loc["linear", "output_bytes"] == linear_out
    assert frame.loc["relu", "output_bytes"] == 0  # in place: the input's storage
    assert frame.loc["__root__", "output_bytes"] == linear_out  # a view of the Linear's output
    assert report.inference.allocations == 1
    assert report.inference.peak_bytes == report.inference.baseline_bytes + linear_out


def _small_convnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
        nn.MaxPool2d(2), nn.Conv2d(8, 16, 3), nn.Dropout(0.1), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(16, 10),
    )


def test_meta_device_gives_the_numbers_of_the_cpu() -> None:
    torch.manual_seed(0)
    model = _small_convnet()
    x = torch.randn(2, 3, 16, 16)
    cpu = measure_memory(model, x, train=True)
    meta = measure_memory(model, x, train=True, device="meta")
    assert meta.device == "meta"
    assert cpu.training is not None and meta.training is not None
    for name in ("baseline_bytes", "peak_bytes", "saved_bytes", "saved_param_bytes",
                 "grad_bytes", "allocations"):
        assert getattr(meta.training, name) == getattr(cpu.training, name), name
    assert meta.peak_call == cpu.peak_call
    # One kernel difference: in eval mode the CPU's native_batch_norm returns empty
    # save_mean/save_invstd, the meta kernel two [C] tensors: 2 * 8 channels * 4 bytes.
    assert meta.inference.peak_bytes - cpu.inference.peak_bytes == 64
    ours, theirs = meta.to_df(), cpu.to_df()
    assert ours.drop(columns="max_live_bytes").equals(theirs.drop(columns="max_live_bytes"))


def test_an_input_passed_twice_stays_one_tensor_on_the_meta_device() -> None:
    class Both(nn.Module):  # a language model's input_ids and labels: often one tensor
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 4, bias=False)

        def forward(self, x: Tensor, again: Tensor) -> Tensor:
            return self.linear(x) + again

    x = torch.randn(3, 4)
    cpu = measure_memory(Both(), (x, x))
    meta = measure_memory(Both(), (x, x), device="meta")
    # weight 4 x 4 = 64 bytes, the input once 3 x 4 x 4 = 48 bytes: 112, on both devices
    assert cpu.inference.baseline_bytes == meta.inference.baseline_bytes == 112


def test_an_input_that_requires_grad_is_a_leaf_on_the_meta_device() -> None:
    """A reentrant checkpoint's backward is ``loss.backward()``, which reaches every leaf: the
    input's copy on meta ends it there, not in the user's CPU tensor."""
    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(5, 7), nn.Linear(7, 3)

        def forward(self, x: Tensor) -> Tensor:
            return self.b(torch.utils.checkpoint.checkpoint(self.a, x, use_reentrant=True))

    model, x = Checkpointed(), torch.randn(4, 5, requires_grad=True)
    cpu = measure_memory(model, x, train=True)
    meta = measure_memory(model, x, train=True, device="meta")
    assert cpu.training is not None and meta.training is not None
    assert meta.training.peak_bytes == cpu.training.peak_bytes
    # saved for the backward: b's input, 4 x 7 floats = 112 bytes (a's are recomputed)
    assert meta.training.saved_bytes == cpu.training.saved_bytes == 112
    assert x.grad is None


def test_meta_device_plans_a_model_that_does_not_fit_and_allocates_nothing() -> None:
    width = 2**16
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))
    x = torch.empty(64, width, device="meta")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = measure_memory(model, x, train=True)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    weights = 2 * (width * width + width) * 4  # 32 GiB of parameters
    assert report.param_bytes == weights
    assert report.training is not None
    assert report.training.peak_bytes > 2 * weights  # parameters and their gradients
    assert report.training.grad_bytes == weights
    assert grown_kib < 200 * 1024  # the process did not allocate any of it


def test_backward_peak_is_attributed_through_autograd_nodes() -> None:
    class Wide(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.small = nn.Linear(4, 4)
            self.big = nn.Linear(4, 4096)

        def forward(self, x: Tensor) -> Tensor:
            return self.big(self.small(x)).square().mean()

    report = measure_memory(Wide(), torch.randn(64, 4), train=True)
    training = report.training
    assert training is not None and training.peak_call is not None
    # The widest tensors (64 x 4096) and their gradients belong to ``big`` and the root's
    # square/mean, so the backward peak is in one of those two, never in ``small``.
    assert training.peak_call.phase == "backward"
    assert training.peak_call.path in ("", "big")
    frame = report.to_df().set_index("module")
    assert frame.loc["big", "backward_max_live_bytes"] > frame.loc["small",
                                                                    "backward_max_live_bytes"]


def test_pred_fn_and_dict_inputs() -> None:
    class Keyword(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(3, 5)

        def forward(self, *, x: Tensor) -> Tensor:
            return self.proj(x)

    model = Keyword()
    direct = measure_memory(model, {"x": torch.randn(2, 3)})
    assert direct.to_df().loc[1, "output_bytes"] == 2 * 5 * 4
    wrapped = measure_memory(model, torch.randn(2, 3), pred_fn=lambda x: model(x=x) * 2)
    assert wrapped.inference.peak_bytes == direct.inference.peak_bytes + 2 * 5 * 4
    assert wrapped.inference.peak_call is not None
    assert wrapped.inference.peak_call.path is None  # the ``* 2`` outside every module call


def test_peak_label_names_the_module_its_type_and_which_call() -> None:
    from moduleprofiler.memory.report import PeakCall

    # 2x4 -> Linear -> ReLU -> the same Linear: the ReLU's output, made while its input is
    # still held, sets the inference peak; the report fills in its type and call count
    shared = nn.Linear(4, 4)
    report = measure_memory(nn.Sequential(shared, nn.ReLU(), shared), torch.randn(2, 4))
    assert str(report.inference.peak_call) == "1 (ReLU), call 1 of 1, forward"
    assert "at 1 (ReLU), call 1 of 1, forward" in " ".join(str(report).split())  # wrapped
    assert str(PeakCall("0", 1, 2, "forward", type_name="Linear", calls=2)) == \
        "0 (Linear), call 2 of 2, forward"
    assert str(PeakCall("0", 0, 0, "backward", type_name="Linear", calls=1)) == \
        "0 (Linear), call 1 of 1, backward"  # was "0 call 0 (backward)"
    assert str(PeakCall("0", 0, 0, "backward", accumulating=True, type_name="Linear",
                        calls=2)) == "0 (Linear), gradient accumulation, backward"
    assert str(PeakCall(None, None, None, "backward")) == "outside every module call (backward)"


def test_a_compiled_model_is_measured_as_its_own_modules() -> None:
    # a torch.compile wrapper's report had an "_orig_mod." level in every path, so it
    # merged into the wrapper's profile (whose paths are the model's own) with no row in
    # common and a warning that the model took another path
    from moduleprofiler import Profiler

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(4, 8)
    report = measure_memory(compiled, x, train=True)
    assert [info.path for info in report.modules] == ["", "0", "1", "2"]
    frame = report.to_df("module").set_index("module")
    # float32 outputs: 4 x 16 x 4 = 256 bytes (Linear, then ReLU), 4 x 4 x 4 = 64
    assert list(frame["output_bytes"]) == [64, 256, 256, 64]
    eager = measure_memory(model, x, train=True)
    assert report.peak_bytes == eager.peak_bytes
    profile = Profiler().profile(compiled, x, backward=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # row by row, nothing left out
        merged = profile.merge(report)
    assert list(merged.to_df("module")["output_bytes"]) == [64, 256, 256, 64]


class KeptInAttributes(nn.Module):
    """A table and a cache kept as plain attributes (not buffers), made before the pass: the
    forward reads a slice of one and writes the other in place, allocating neither."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.table = torch.randn(1000, 8)
        self.cache = torch.zeros(1000, 8)

    def forward(self, x: Tensor) -> Tensor:
        y = self.linear(x)
        self.cache[: x.shape[0]].copy_(y.detach())
        return y + self.table[: x.shape[0]]


def test_views_and_in_place_writes_of_tensors_made_before_the_pass_allocate_nothing() -> None:
    report = measure_memory(KeptInAttributes(), torch.randn(4, 8), train=True, keep_output=False)
    inference = report.inference
    # Baseline: weight 8*8*4 = 256, bias 8*4 = 32, x 4*8*4 = 128; the table and the cache
    # (1000*8*4 = 32000 each) are neither parameters, buffers nor inputs.
    assert inference.baseline_bytes == 256 + 32 + 128 == 416
    # Allocated: the Linear's output 4*8*4 = 128 and the sum 128; slicing the table, slicing
    # the cache and copying into it allocate nothing (they used to count 32000 bytes each).
    assert inference.allocations == 2
    assert inference.peak_bytes == 416 + 128 + 128 == 672
    # the same increase as the model without the table and the cache
    plain = measure_memory(nn.Linear(8, 8), torch.randn(4, 8), train=True, keep_output=False)
    assert report.training is not None and plain.training is not None
    assert report.training.peak_bytes - report.training.baseline_bytes \
        == plain.training.peak_bytes - plain.training.baseline_bytes


def test_a_lazy_module_materialised_in_the_pass_puts_its_weights_in_the_baseline() -> None:
    lazy = measure_memory(nn.Sequential(nn.LazyLinear(8)), torch.randn(4, 8))
    built = measure_memory(nn.Sequential(nn.Linear(8, 8)), torch.randn(4, 8))
    # weight 8*8*4 = 256 and bias 8*4 = 32 are model state, as the built Linear's are (they
    # counted as 288 bytes of activation: the baseline read x's 128 alone): baseline
    # 288 + x 4*8*4 = 128 = 416; peak 416 + the output 128 = 544
    for report in (lazy, built):
        assert report.inference.baseline_bytes == 416
        assert report.inference.peak_bytes == 544
        assert report.peak_activation_bytes == 128
