"""The one walk of module facts: paths, parents, depths, leaves and each module's tensors."""

from __future__ import annotations

import torch
from torch import nn

from moduleprofiler.tensors import (
    bytes_by_dtype,
    distinct,
    module_facts,
    module_tensor,
    walk_modules,
)


def test_module_facts_of_a_tied_model() -> None:
    embedding, linear = nn.Embedding(5, 3), nn.Linear(3, 5)
    linear.weight = embedding.weight  # tied: one 5 x 3 tensor in two modules
    model = nn.Sequential(embedding, nn.Sequential(linear, nn.BatchNorm1d(5)))
    facts = module_facts(model)
    assert [f.path for f in facts] == ["", "0", "1", "1.0", "1.1"]
    assert [f.parent for f in facts] == [-1, 0, 0, 2, 2]
    assert [f.depth for f in facts] == [0, 1, 1, 2, 2]
    assert [f.is_leaf for f in facts] == [False, True, False, True, True]
    # the root holds the shared weight once, the Linear's bias (5) and the BatchNorm's 5 + 5
    assert [p.numel() for p in facts[0].params] == [15, 5, 5, 5]
    assert list(facts[0].params) == list(model.parameters())
    # running mean 5, running var 5, num_batches_tracked 1
    assert [b.numel() for b in facts[0].buffers] == [5, 5, 1]
    # the tied 5 x 3 weight is owned by its first holder, the Embedding "0"; the Linear
    # "1.0" owns only its bias (5) and names the owner of the rest
    assert [p.numel() for p in facts[1].own_params] == [15]
    assert [p.numel() for p in facts[3].own_params] == [5]
    assert facts[3].shared_with == ("0",)
    assert [f.shared_with for f in facts if f.path != "1.0"] == [()] * 4
    assert list(facts[2].own_params) == []
    # own parameters add up to the model's: 15 + 5 + 5 + 5 = 30
    assert sum(p.numel() for f in facts for p in f.own_params) == 30


def test_aliases_count_once_and_bytes_by_dtype() -> None:
    base = torch.zeros(4, dtype=torch.float64)
    same = base.view(4)  # another tensor object, the same elements
    other = torch.zeros(3, dtype=torch.float16)
    assert len(distinct([base, same, other])) == 2
    # 4 * 8 = 32 float64 bytes; 3 * 2 = 6 float16 bytes
    assert bytes_by_dtype(distinct([base, same, other])) == {"float64": 32, "float16": 6}


def test_module_tensor_reads_what_getattr_reads() -> None:
    class Shadowed(nn.Linear):
        pass

    class Looked(nn.Linear):
        def __getattr__(self, name: str) -> object:
            return "mine" if name == "ghost" else super().__getattr__(name)

    plain, no_bias = nn.Linear(3, 2), nn.Linear(3, 2, bias=False)
    norm = nn.BatchNorm1d(2, track_running_stats=False)
    plain.scale = 3  # an ordinary attribute in the instance dict
    cases = [(plain, "weight"), (plain, "bias"), (plain, "scale"), (plain, "missing"),
             (no_bias, "bias"), (norm, "running_mean"), (nn.BatchNorm1d(2), "running_var"),
             (Looked(3, 2), "ghost"), (Looked(3, 2), "weight")]
    shadowed = Shadowed(3, 2)
    # a class attribute set after the bias was registered: ordinary lookup finds it first
    Shadowed.bias = property(lambda self: torch.full((2,), 7.0))  # type: ignore[assignment]
    cases.append((shadowed, "bias"))
    for module, name in cases:
        got, expected = module_tensor(module, name), getattr(module, name, None)
        if isinstance(expected, torch.Tensor):
            assert isinstance(got, torch.Tensor) and torch.equal(got, expected)
            assert (got is expected) == (type(module) is not Shadowed)  # the property makes anew
        else:
            assert got == expected
    assert module_tensor(no_bias, "bias") is None
    assert module_tensor(plain, "weight") is plain.weight
    assert module_tensor(Looked(3, 2), "ghost") == "mine"
    assert torch.equal(module_tensor(shadowed, "bias"), torch.full((2,), 7.0))


def test_walk_modules_keeps_named_modules_order_and_first_paths() -> None:
    # a block registered at two places, one of them inside a child registered twice itself
    shared = nn.Linear(2, 2)
    inner = nn.Sequential(shared, nn.ReLU())
    model = nn.Sequential(inner, shared, nn.Sequential(inner, nn.Tanh()))
    walk = walk_modules(model)
    # occurrences: root, 0, 0.0, 0.1, 1, 2, 2.0, 2.0.0, 2.0.1, 2.1 = 10 places, 6 modules
    assert [path for path, _ in walk.occurrences] == [
        "", "0", "0.0", "0.1", "1", "2", "2.0", "2.0.0", "2.0.1", "2.1"]
    assert walk.modules == list(model.modules())
    assert walk.paths == {id(module): path for path, module in model.named_modules()}
    plain = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    assert walk_modules(plain).modules == list(plain.modules())
