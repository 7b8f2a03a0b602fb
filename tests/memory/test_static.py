"""Parameter and buffer bytes by dtype, tied weights once, trainable vs frozen, state_dict size."""

from __future__ import annotations

import io

import torch
from torch import nn

from moduleprofiler.memory import (
    measure_memory,
    memory_by_dtype,
    parameter_memory,
    state_dict_bytes,
)
from moduleprofiler.memory.serialized import CountingWriter


class Mixed(nn.Module):
    """float16 and float32 parameters, a tied weight, a frozen layer, an int64 buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.half = nn.Linear(3, 2).half()  # (3 * 2 + 2) * 2 bytes = 16
        self.embed = nn.Embedding(10, 4)  # 10 * 4 * 4 = 160
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied: counted once
        self.frozen = nn.Linear(2, 2).requires_grad_(False)  # (2 * 2 + 2) * 4 = 24
        self.register_buffer("steps", torch.zeros(3, dtype=torch.int64))  # 3 * 8 = 24


def _row(frame, path: str):
    return frame.set_index("module").loc[path]


def test_dtype_sizes_tied_weights_and_frozen() -> None:
    frame = parameter_memory(Mixed())
    root = _row(frame, "__root__")
    assert root["param_bytes"] == 16 + 160 + 24  # the tied head weight adds nothing
    assert root["trainable_param_bytes"] == 16 + 160
    assert root["frozen_param_bytes"] == 24
    assert root["buffer_bytes"] == 24
    assert root["own_param_bytes"] == 0
    assert root["float16_param_bytes"] == 16
    assert root["float32_param_bytes"] == 160 + 24
    assert root["int64_buffer_bytes"] == 24
    head = _row(frame, "head")
    # the head holds the tied 160 bytes; the Embedding before it owns them
    assert head["param_bytes"] == 160
    assert head["own_param_bytes"] == 0
    assert _row(frame, "embed")["own_param_bytes"] == 160
    # own bytes add up to the model's: 16 + 160 + 0 + 24
    assert frame["own_param_bytes"].sum() == root["param_bytes"]
    assert head["float16_param_bytes"] == 0
    assert list(frame["module"]) == ["__root__", "half", "embed", "head", "frozen"]


def test_distinct_parameters_on_the_same_storage_count_once() -> None:
    model = nn.Sequential(nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False))
    model[1].weight = nn.Parameter(model[0].weight.detach())  # another object, same memory
    assert _row(parameter_memory(model), "__root__")["param_bytes"] == 4 * 4 * 4


def test_a_submodule_registered_twice_counts_once() -> None:
    shared = nn.Linear(5, 5)  # 30 * 4 = 120 bytes
    model = nn.Sequential(shared, nn.ReLU(), shared)
    assert _row(parameter_memory(model), "__root__")["param_bytes"] == 120


def test_long_table_by_dtype() -> None:
    table = memory_by_dtype(Mixed()).set_index(["kind", "dtype", "trainable"])
    assert table.loc[("param", "float16", True), "bytes"] == 16
    assert table.loc[("param", "float32", True), "bytes"] == 160
    assert table.loc[("param", "float32", False), "numel"] == 6
    assert table.loc[("buffer", "int64", False), "tensors"] == 1
    assert table["bytes"].sum() == 16 + 160 + 24 + 24


def test_lazy_parameters_count_zero_until_materialised() -> None:
    frame = parameter_memory(nn.Sequential(nn.LazyLinear(3)))
    assert _row(frame, "__root__")["param_bytes"] == 0


def test_measure_memory_counts_the_lazy_parameters_its_pass_materialised() -> None:
    model = nn.Sequential(nn.LazyLinear(16), nn.ReLU(), nn.LazyLinear(4))
    report = measure_memory(model, torch.randn(2, 8))
    # Linear(8, 16): 8 * 16 + 16 = 144; Linear(16, 4): 16 * 4 + 4 = 68; 212 float32 = 848 bytes
    assert report.total_params == 212
    assert (report.param_bytes, report.trainable_param_bytes) == (848, 848)


def test_state_dict_bytes_is_what_torch_save_writes() -> None:
    model = Mixed()
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    assert state_dict_bytes(model) == len(buffer.getvalue())


def test_state_dict_bytes_on_meta_is_close_to_the_real_size() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(300, 200), nn.BatchNorm1d(200), nn.Linear(200, 300))
    model[2].weight = nn.Parameter(model[0].weight.detach().t())  # a view: shares the storage
    real = state_dict_bytes(model)
    with torch.device("meta"):
        planned = nn.Sequential(nn.Linear(300, 200), nn.BatchNorm1d(200), nn.Linear(200, 300))
    planned[2].weight = nn.Parameter(planned[0].weight.detach().t())
    storages = 6  # 0.weight (shared), 0.bias, 1.{weight,bias,running_mean,running_var,...}
    assert abs(state_dict_bytes(planned) - real) <= 64 * (storages + 2)
    assert real > 300 * 200 * 4  # the data is really there once


def test_counting_writer_keeps_the_length_of_a_file() -> None:
    writer = CountingWriter()
    writer.write(b"abc")
    writer.seek(10)
    writer.write(memoryview(b"xy"))
    writer.seek(0)
    writer.write(b"z")
    assert (writer.size, writer.tell()) == (12, 1)
