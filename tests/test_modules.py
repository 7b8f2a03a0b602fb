"""The module facts every pass stands on: the one walk (paths, parents, depths, leaves and
each module's tensors) and the module scan's sums against the set-based ones."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.parameter import UninitializedParameter

from moduleprofiler.modules import (
    held_tensors,
    module_facts,
    module_infos,
    scan_modules,
    walk_modules,
)
from moduleprofiler.storage import own_nbytes
from tests.fixtures.models import LinearReLU


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
    assert [p.numel() for p in facts[1].self_params] == [15]
    assert [p.numel() for p in facts[3].self_params] == [5]
    assert facts[3].shared_with == ("0",)
    assert [f.shared_with for f in facts if f.path != "1.0"] == [()] * 4
    assert list(facts[2].self_params) == []
    # own parameters add up to the model's: 15 + 5 + 5 + 5 = 30
    assert sum(p.numel() for f in facts for p in f.self_params) == 30


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


def test_walk_modules_occurrences_are_named_modules_with_duplicates() -> None:
    # a None child (skipped), a module registered twice (listed at both places), and a
    # two-level nesting under a custom block: named_modules(remove_duplicate=False) itself
    class Block(nn.Module):
        def __init__(self, shared: nn.Module) -> None:
            super().__init__()
            self.first = nn.Sequential(nn.Linear(2, 2), shared)
            self.gap = None
            self.last = shared

    shared = nn.ReLU()
    model = nn.Sequential(Block(shared), nn.Tanh(), Block(shared))
    model.register_module("empty", None)
    expected = [(path, id(module)) for path, module in model.named_modules(
        remove_duplicate=False)]
    assert [(path, id(module)) for path, module in walk_modules(model).occurrences] == expected
    # root, 0, 0.first, 0.first.0, 0.first.1, 0.last, 1, 2, 2.first, 2.first.0, 2.first.1,
    # 2.last: 12 places
    assert len(expected) == 12


def test_walk_modules_follows_a_class_s_own_named_modules() -> None:
    class Hidden(nn.Sequential):
        """Lists itself only, hiding its children (as some wrappers do)."""

        def named_modules(self, memo: Any = None, prefix: str = "",
                          remove_duplicate: bool = True) -> Any:
            yield prefix, self

    model = nn.Sequential(nn.Linear(2, 2), Hidden(nn.ReLU(), nn.Tanh()))
    assert [path for path, _ in walk_modules(model).occurrences] == ["", "0", "1"]


def test_walk_modules_of_a_module_holding_itself_raises_as_named_modules_does() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    model.add_module("again", model)
    with pytest.raises(RecursionError):
        list(model.named_modules(remove_duplicate=False))
    with pytest.raises(RecursionError):
        walk_modules(model)


def _module_infos_reference(root: nn.Module) -> tuple[Any, ...]:
    """Per module: the set-based sums the fast scan must equal."""
    def numel(tensor: torch.Tensor) -> int:
        return 0 if isinstance(tensor, UninitializedParameter) else tensor.numel()

    rows = []
    owned: set[int] = set()  # a parameter is its first holder's own (named_modules order)
    for path, module in root.named_modules():
        mine = list(module.parameters())  # each tensor once
        buffers = list(module.buffers())
        own = [p for p in module.parameters(recurse=False) if id(p) not in owned]
        owned.update(id(p) for p in own)
        rows.append((path, sum(numel(p) for p in mine), sum(numel(p) for p in own),
                     sum(numel(p) for p in mine if p.requires_grad),
                     sum(numel(b) for b in buffers),
                     sum(own_nbytes(p) for p in mine),
                     sum(own_nbytes(b) for b in buffers)))
    return tuple(rows)


def _shared_models() -> list[nn.Module]:
    linear = nn.Linear(3, 4)
    reused = nn.Sequential(linear, nn.ReLU(), linear, nn.Sequential(linear, nn.BatchNorm1d(4)))
    tied = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5))
    tied[1].weight = tied[0].weight
    frozen = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2, bias=False))
    frozen[0].weight.requires_grad_(False)
    twice = nn.Module()
    twice.a = twice.b = nn.Linear(2, 2)
    twice.w = nn.Parameter(torch.ones(3))
    twice.register_buffer("counter", torch.zeros(2, dtype=torch.float64))
    lazy = nn.Sequential(nn.LazyLinear(4), nn.BatchNorm1d(4))
    # a tree whose tensors are registered at several places: a weight tied two levels apart
    # and registered twice on the root, a buffer and a bias each registered twice on one module
    aliased = nn.Module()
    aliased.a = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2)))
    aliased.a[1][0].weight = aliased.a[0].weight
    aliased.register_parameter("w", aliased.a[0].weight)
    aliased.register_parameter("v", aliased.a[0].weight)
    aliased.norm = nn.BatchNorm1d(2)
    aliased.c = nn.Module()
    aliased.c.register_buffer("mean", aliased.norm.running_mean)
    aliased.c.register_buffer("again", aliased.norm.running_mean)
    aliased.c.register_parameter("bias", aliased.a[0].bias)
    aliased.c.register_parameter("same", aliased.a[0].bias)
    aliased.a[0].bias.requires_grad_(False)
    return [reused, tied, frozen, twice, lazy, aliased]


@pytest.mark.parametrize("index", range(6))
def test_module_scan_equals_the_set_based_sums(index: int) -> None:
    model = _shared_models()[index]
    infos, lazy, plain = scan_modules(model)
    assert infos == module_infos(model)
    assert lazy == (index == 4)
    # plain parameters only, seen one by one: not the lazy model's (an UninitializedParameter)
    # nor those of the models registering a module twice (scanned from the module facts)
    assert plain == (index in (1, 2, 5))
    got = tuple((i.path, i.params, i.self_params, i.trainable_params, i.buffers, i.param_bytes,
                 i.buffer_bytes) for i in infos)
    assert got == _module_infos_reference(model)
    assert [i.path for i in infos] == [path for path, _ in model.named_modules()]


def test_every_module_infos_parent_is_listed_before_it() -> None:
    # a block registered at two places is listed once, at its first place ("0.0"), inside
    # its parent's first place
    shared = nn.Linear(2, 2)
    inner = nn.Sequential(shared, nn.ReLU())
    model = nn.Sequential(inner, shared, nn.Sequential(inner, nn.Tanh()))
    infos = module_infos(model)
    assert [(i.path, i.parent) for i in infos] == [
        ("", None), ("0", ""), ("0.0", "0"), ("0.1", "0"), ("2", ""), ("2.1", "2")]
    paths = [i.path for i in infos]
    assert all(paths.index(i.parent) < paths.index(i.path) for i in infos[1:])


def test_an_unflattened_exported_program_keeps_its_source_classes() -> None:
    from moduleprofiler.modules import exported_types

    model = nn.Sequential(LinearReLU(), nn.Linear(4, 2))
    program = torch.export.export(model, (torch.randn(2, 4),))
    rebuilt = torch.export.unflatten(program)
    # every rebuilt module is an InterpreterModule; the views name the source's classes
    assert {type(m).__name__ for _, m in rebuilt.named_modules() if _} == {"InterpreterModule"}
    expected = {"": "Sequential", "0": "LinearReLU", "0.fc": "Linear", "0.act": "ReLU",
                "1": "Linear"}
    assert exported_types(rebuilt) == expected
    assert {info.path: info.type_name for info in module_infos(rebuilt)} == expected
    assert exported_types(model) == {}  # any other model: the class it has


def test_held_values_lists_callable_and_generator_attributes_in_module_order() -> None:
    from moduleprofiler.modules import held_values

    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU()))
    first, second = torch.Generator(), torch.Generator()
    model[0].noise = first
    model[1][0].noise = second
    model[1].act = torch.relu  # a plain callable attribute
    held = held_values(model.modules())
    assert held.generators == [first, second]  # Linear before the inner ReLU
    assert held.callables == [torch.relu]
    assert held_values([nn.Linear(2, 2)]) == ([], [])


def test_held_tensors_are_plain_attributes_not_parameters_or_buffers() -> None:
    model = nn.Linear(2, 2)
    model.register_buffer("scale", torch.ones(2))
    table, first, second = torch.zeros(3), torch.zeros(1), torch.zeros(1)
    model.table = table
    model.cache = [first, None, second]
    assert [id(t) for t in held_tensors(model.modules())] == [id(table), id(first), id(second)]
