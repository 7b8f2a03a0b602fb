"""Bytes saved for backward per call, against hand counts and an independent hooks total."""

from __future__ import annotations

import torch
import torchvision
from torch import Tensor, nn

from moduleprofiler.memory import measure_memory


def _by_module(report):
    return report.to_df().set_index("module")


def test_linear_relu_linear_by_hand() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    report = measure_memory(model, torch.randn(3, 4), train=True)
    frame = _by_module(report)
    # "0": addmm saves its input x (an input of the model: 3 * 4 * 4 = 48 bytes, counted apart)
    #      and not its weight (x does not require grad).
    # "1": ReLU saves its result: 3 * 8 * 4 = 96 bytes.
    # "2": addmm saves its input (the ReLU result, already charged) and its weight, a parameter:
    #      8 * 2 * 4 = 64 bytes, counted apart.
    assert list(frame["self_saved_bytes"]) == [0, 0, 96, 0]
    assert list(frame["saved_bytes"]) == [96, 0, 96, 0]  # the root includes its children
    assert frame.loc["2", "self_saved_param_bytes"] == 64
    training = report.training
    assert training is not None
    assert (training.saved_bytes, training.saved_param_bytes, training.saved_input_bytes) == (
        96, 64, 48)
    assert training.grad_bytes == (4 * 8 + 8 + 8 * 2 + 2) * 4


def _independent_saved(model: nn.Module, x: Tensor) -> dict[str, int]:
    """Distinct saved storages by kind, keyed by data pointer (CPU), from our own hooks."""
    parameters = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    inputs = {x.untyped_storage().data_ptr()}
    seen: dict[int, int] = {}
    kinds = {"activation": 0, "parameter": 0, "input": 0}

    def pack(tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer not in seen:
            seen[pointer] = storage.nbytes()
            kind = ("parameter" if pointer in parameters
                    else "input" if pointer in inputs else "activation")
            kinds[kind] += storage.nbytes()
        return tensor

    was_training = model.training
    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output = model(x)
    model.train(was_training)
    del output
    return kinds


def test_resnet18_saved_bytes_match_an_independent_hooks_total() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    x = torch.randn(2, 3, 32, 32)
    report = measure_memory(model, x, train=True)
    # BatchNorm in training updated the running stats above: measure first, then the oracle.
    expected = _independent_saved(model, x)
    training = report.training
    assert training is not None
    assert training.saved_bytes == expected["activation"] > 0
    assert training.saved_param_bytes == expected["parameter"] > 0
    assert training.saved_input_bytes == expected["input"] > 0
    # Attribution adds up: the root's inclusive saved bytes are the total.
    frame = report.to_df()
    assert frame.loc[0, "saved_bytes"] == training.saved_bytes
    assert frame["self_saved_bytes"].sum() == training.saved_bytes


def test_saved_bytes_are_charged_to_the_innermost_call() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(5, 5)

        def forward(self, x: Tensor) -> Tensor:
            return torch.sigmoid(self.inner(x))  # sigmoid runs in Block's own forward

    model = nn.Sequential(nn.Linear(5, 5), Block())
    frame = _by_module(measure_memory(model, torch.randn(2, 5), train=True))
    # Block's sigmoid saves its result (2 * 5 * 4 = 40); Block.inner's addmm saves the output of
    # the first Linear (40 bytes, an activation) for its weight's gradient.
    assert frame.loc["1", "self_saved_bytes"] == 40
    assert frame.loc["1.inner", "self_saved_bytes"] == 40
    assert frame.loc["1", "saved_bytes"] == 80


def test_inference_only_reports_no_saved_bytes() -> None:
    report = measure_memory(nn.Linear(3, 3), torch.randn(2, 3))
    assert report.training is None
    # not measured: left out of the frame of the columns that hold data, <NA> in every row
    # of the frame of all columns (unknown, never 0)
    assert "saved_bytes" not in report.to_df()
    assert report.to_df(columns="all")["saved_bytes"].isna().all()


class ScaledByTable(nn.Module):
    """Multiplies by a slice of a table held as a plain attribute (not a buffer)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.table = torch.randn(1000, 8)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x) * self.table[: x.shape[0]]


def test_a_table_held_as_an_attribute_is_saved_as_model_state_not_activation() -> None:
    model, x = ScaledByTable(), torch.randn(4, 8)
    # Independent count: the storages autograd saves in the forward, by hand with the hooks.
    saved: dict[int, int] = {}

    def pack(tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        saved[storage._cdata] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(x)
    # addmm saves x (4*8*4 = 128; not the weight: x needs no gradient); mul saves the table's
    # slice, whose storage is the whole table (1000*8*4 = 32000), for the Linear's gradient.
    assert sorted(saved.values()) == [128, 32000]
    report = measure_memory(model, x, train=True)
    training = report.training
    assert training is not None
    assert training.saved_input_bytes == 128
    # the table exists anyway, as a buffer would: model state, not activation (it was
    # charged as 32000 bytes of activation)
    assert training.saved_param_bytes == 32000
    assert training.saved_bytes == 0
