"""On the meta device the prediction sees the attention operators a GPU runs."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from moduleprofiler import ModuleProfiler, Profiler
from moduleprofiler.operator_listener import OperatorListener
from moduleprofiler.prediction import meta_copy as meta_copy_module
from moduleprofiler.prediction.meta_copy import FusedAttentionOnMeta, meta_copy, meta_input
from tests.fixtures.models import ReadsSettings


def _operators(model: nn.Module, x: torch.Tensor, backward: bool) -> dict[str, int]:
    copy, inputs = meta_copy(model), meta_input(x)

    def fused(*args: Any) -> Any:
        with FusedAttentionOnMeta():
            return copy(*args)

    listener = OperatorListener()
    profile = ModuleProfiler().profile(copy, inputs, pred_fn=fused, eval=not backward,
                                       backward=backward, listeners=[listener])
    calls: dict[str, int] = {}
    for record in profile.records:
        for name, tally in record.metrics.get("operators", {}).items():
            calls[name] = calls.get(name, 0) + tally["calls"]
    return calls


@pytest.mark.parametrize("backward", [False, True])
def test_multihead_attention_runs_one_fused_attention(backward: bool) -> None:
    model = nn.MultiheadAttention(64, 4, batch_first=True)
    names = _operators(nn.Sequential(_SelfAttention(model)), torch.randn(2, 10, 64), backward)
    assert "aten._scaled_dot_product_efficient_attention" in names
    assert "aten.bmm" not in names and "aten._safe_softmax" not in names


def test_inference_takes_the_fast_path_and_training_the_ordinary_one() -> None:
    model = nn.Sequential(_SelfAttention(nn.MultiheadAttention(64, 4, batch_first=True)))
    inference = _operators(model, torch.randn(2, 10, 64), False)
    # the fast path as a GPU runs it: the packed projection and the output projection, each
    # one addmm with its bias in the epilogue, attention on the heads as views of the packed
    # projection, whose output is already laid out as tokens: no copy, no separate bias add
    assert inference["aten.addmm"] == 2
    assert "aten.mm" not in inference and "aten.add" not in inference
    assert "aten.clone" not in inference and "aten.copy_" not in inference
    assert inference["aten._scaled_dot_product_efficient_attention"] == 1
    training = _operators(model, torch.randn(2, 10, 64), True)
    # the ordinary path, as a GPU runs it in training: the packed projection's heads are
    # made contiguous apart, and q, k and v are selected from it
    assert training["aten.clone"] == 3 and training["aten.select"] == 3


class _SelfAttention(nn.Module):
    def __init__(self, attention: nn.MultiheadAttention) -> None:
        super().__init__()
        self.attention = attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x, need_weights=False)[0]


class _GroupedQuery(nn.Module):
    """Grouped-query attention: 8 query heads share 2 key/value heads."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.kv = nn.Linear(64, 64), nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self.q(x).view(batch, length, 8, 8).transpose(1, 2)
        kv = self.kv(x).view(batch, length, 4, 8).transpose(1, 2)
        k, v = kv[:, :2], kv[:, 2:]
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                         enable_gqa=True)
        return out.transpose(1, 2).reshape(batch, length, 64)


@pytest.mark.parametrize("backward", [False, True])
def test_grouped_query_attention_runs_fused_on_its_own_heads(backward: bool) -> None:
    model = _GroupedQuery().to(torch.bfloat16)
    names = _operators(model, torch.randn(2, 10, 64, dtype=torch.bfloat16), backward)
    if backward and not meta_copy_module._meta_grouped_backward_fits():
        # this torch's meta backward gives grouped heads the query's head count (torch 2.11):
        # the prediction takes the unfused math rather than fail (the test below)
        assert "aten._scaled_dot_product_efficient_attention" not in names
        return
    assert names["aten._scaled_dot_product_efficient_attention"] == 1
    # no unfused math, and no copy repeating the key/value heads to the query heads
    assert "aten.bmm" not in names and "aten._safe_softmax" not in names
    assert "aten.repeat_interleave" not in names and "aten.index_select" not in names


def test_grouped_query_training_takes_the_math_where_the_meta_backward_misfits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a torch whose meta backward of the fused attention gives grouped key/value heads the
    # query's head count: the training step's prediction runs (the unfused math: two
    # products, q @ k^T and the weights @ v, forward), where it used to raise in the backward
    monkeypatch.setattr(meta_copy_module, "_meta_grouped_backward_fits", lambda: False)
    model = _GroupedQuery().to(torch.bfloat16)
    training = _operators(model, torch.randn(2, 10, 64, dtype=torch.bfloat16), True)
    assert "aten._scaled_dot_product_efficient_attention" not in training
    assert training["aten.bmm"] == 2
    inference = _operators(model, torch.randn(2, 10, 64, dtype=torch.bfloat16), False)
    assert inference["aten._scaled_dot_product_efficient_attention"] == 1


def test_grouped_query_attention_in_fp32_runs_the_unfused_math() -> None:
    # no fused kernel takes grouped heads in fp32: a GPU runs the math, as the meta device
    names = _operators(_GroupedQuery(), torch.randn(2, 10, 64), False)
    assert "aten._scaled_dot_product_efficient_attention" not in names
    assert names["aten.bmm"] == 2


def test_a_model_with_torch_s_weight_norm_is_copied_and_predicted() -> None:
    # torch.nn.utils.weight_norm keeps the computed weight as a plain attribute with a
    # grad_fn, which copy.deepcopy refuses; the copy's pre-hook recomputes it on meta
    model = nn.Sequential(nn.utils.weight_norm(nn.Linear(4, 4)), nn.ReLU())
    copy = meta_copy(model)
    assert copy[0].weight.is_meta and copy[0].weight_v.is_meta
    assert copy(meta_input(torch.randn(2, 4))).shape == (2, 4)
    # the Linear 2 * 4 * (2 * 4 - 1) + 8 = 64 and ReLU 8, as profiled on the CPU; the norm of
    # the 4 rows of v and g * v / norm: 3 * 16 + 4 = 52 (weight_norm_ops)
    assert ModuleProfiler().predict(model, torch.randn(2, 4), "H100 SXM").total_ops == 64 + 8 + 52
    assert not model[0].weight.is_meta  # the user's model as it was


class _WithScripted(nn.Module):
    """A TorchScript submodule inside a Python model (its Python hooks cannot be set)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8, 8)
        self.scripted = torch.jit.script(nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scripted(self.head(x))  # type: ignore[no-any-return]


def test_a_scripted_submodule_is_copied_to_meta_and_predicted() -> None:
    with warnings.catch_warnings():  # torch.jit.script is deprecated in newer torch
        warnings.simplefilter("ignore", FutureWarning)
        model = _WithScripted()
    copy = meta_copy(model, torch.bfloat16)
    # copy.deepcopy copies a scripted module's tensors where they are: the copy's are meta
    assert all(t.is_meta for t in [*copy.parameters(), *copy.buffers()])
    tensors = dict(copy.scripted.named_parameters()) | dict(copy.scripted.named_buffers())
    assert tensors["0.weight"].dtype is torch.bfloat16
    assert tensors["1.running_mean"].dtype is torch.bfloat16
    x = torch.randn(2, 8)
    # the Linear(8, 8) 2 x 8 x 8 = 128 macs and the Linear(8, 16) 2 x 16 x 8 = 256, as
    # profiled on the CPU (where the scripted part is counted by its operators)
    assert ModuleProfiler().profile(model, x).total_macs == 128 + 256
    assert ModuleProfiler().predict(model, x, "H100 SXM").total_macs == 128 + 256
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])


class _Locked(nn.Module):
    """Holds a lock (as a module guarding a cache from several threads does): deepcopy
    refuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.lock = __import__("threading").Lock()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.lock:
            return self.fc(x)  # type: ignore[no-any-return]


def test_an_attribute_deepcopy_refuses_is_shared_by_the_meta_copy() -> None:
    model = _Locked()
    copy = meta_copy(model)
    assert copy.lock is model.lock and copy.fc.weight.is_meta and not model.fc.weight.is_meta
    # 2 x 4 outputs of 8 multiplies, 7 adds and the bias add: 8 x 16 = 128 ops
    assert ModuleProfiler().predict(model, torch.randn(2, 8)).total_ops == 128
    assert not model.lock.locked()


def test_a_model_that_cannot_be_copied_gets_a_typed_error() -> None:
    from moduleprofiler import ProfilingError

    with pytest.raises(ProfilingError, match=r"cannot be copied to the meta device.*"
                                             r"raised KeyError: '__deepcopy__'"):
        ModuleProfiler().predict(ReadsSettings(8, 4), torch.randn(2, 8))
    # the passes that need no copy run it: 8 x 16 = 128 ops, 8 multiplies by the scale
    assert ModuleProfiler().profile(ReadsSettings(8, 4), torch.randn(2, 8)).total_ops == 128 + 8


@dataclasses.dataclass
class _Batch:
    x: torch.Tensor
    scale: float = 2.0


class _OnBatch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, batch: _Batch) -> torch.Tensor:
        return self.fc(batch.x) * batch.scale


def test_a_dataclass_batch_is_predicted_on_meta() -> None:
    # its tensor stayed on the CPU beside the meta weights ("Tensor on device meta is not on
    # the expected device cpu"); the copy keeps the class and its other fields
    batch = _Batch(torch.randn(2, 4))
    moved = meta_input(batch)
    assert type(moved) is _Batch and moved.x.is_meta and moved.scale == 2.0
    assert not batch.x.is_meta  # the caller's batch is untouched
    predicted = Profiler().predict(_OnBatch(), batch, device="H100 SXM", host=None)
    # Linear(4, 3) on 2 rows: 2*3 outputs * (2*4 - 1) + 6 bias adds = 48; "* scale": 6
    assert (predicted.total_ops, predicted.total_macs) == (54, 24)


def test_a_packed_sequence_is_predicted_on_meta_as_profiled_on_the_cpu() -> None:
    # rebuilt by torch's pytree, the packed sequence's batch sizes went to the meta device
    # too, which the class refuses ("batch_sizes should always be on CPU")
    torch.manual_seed(0)
    gru = nn.GRU(4, 3)
    packed = pack_padded_sequence(torch.randn(5, 2, 4), torch.tensor([5, 3]))
    moved = meta_input(packed)
    assert isinstance(moved, PackedSequence) and moved.data.is_meta
    assert moved.batch_sizes is packed.batch_sizes  # on the CPU, as the class requires
    predicted = Profiler().predict(gru, packed, device="H100 SXM", host=None)
    measured = Profiler().profile(gru, packed)  # the same counts on the real input
    assert predicted.total_ops == measured.total_ops > 0
    assert predicted.total_macs == measured.total_macs > 0
