"""Registries: MRO lookup, duplicates refused, fresh default maps, lazy dotted-name keys."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import (
    ModuleProfiler,
    RegistryError,
    get_default_io_size_map,
    get_default_ops_map,
    register_ops,
    unregister_ops,
)
from moduleprofiler.registry import FormulaRegistry, qualified_name, resolve


class Custom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


class CustomChild(Custom):
    pass


def test_lookup_follows_the_class_hierarchy() -> None:
    table = {Custom: lambda m, i, o: 1}
    assert resolve(table, CustomChild) is table[Custom]
    assert resolve(table, nn.ReLU) is None


def test_nearest_class_wins() -> None:
    parent, child = (lambda m, i, o: 1), (lambda m, i, o: 2)
    table = {Custom: parent, CustomChild: child}
    assert resolve(table, CustomChild) is child


def test_dotted_name_keys_match_without_importing() -> None:
    fn = lambda m, i, o: 1  # noqa: E731
    table = {qualified_name(CustomChild): fn}
    assert resolve(table, CustomChild) is fn
    assert qualified_name(CustomChild) == f"{__name__}.CustomChild"


def test_duplicate_registration_raises() -> None:
    registry = FormulaRegistry("test")
    registry.register(Custom)(lambda m, i, o: 1)
    with pytest.raises(RegistryError, match="already has"):
        registry.register(Custom)(lambda m, i, o: 2)


def test_bad_keys_raise() -> None:
    registry = FormulaRegistry("test")
    with pytest.raises(RegistryError):
        registry.register(int)  # not a module type
    with pytest.raises(RegistryError):
        registry.register("default")  # reserved legacy key
    with pytest.raises(RegistryError):
        registry.register()


def test_register_ops_decorator_reaches_new_profilers() -> None:
    @register_ops(Custom)
    def custom_ops(module: nn.Module, inputs: tuple, output: torch.Tensor) -> int:
        return inputs[0].numel()  # one add per element

    try:
        # a subclass inherits the formula: 2 * 3 = 6 adds
        profile = ModuleProfiler().profile(CustomChild(), torch.zeros(2, 3))
        assert profile.total_ops == 6
        assert profile.records[0].ops_source == "formula"
        with pytest.raises(RegistryError):
            register_ops(Custom)(custom_ops)
    finally:
        unregister_ops(Custom)
    # without the formula the operators are counted instead: the same 6 adds
    after = ModuleProfiler().profile(CustomChild(), torch.zeros(2, 3)).records[0]
    assert (after.ops, after.ops_source) == (6, "operator")
    unknown = ModuleProfiler().profile(CustomChild(), torch.zeros(2, 3), operators=False)
    assert unknown.records[0].ops is None


def test_default_maps_are_fresh_dicts_with_legacy_keys() -> None:
    first, second = get_default_ops_map(), get_default_ops_map()
    assert first is not second
    first[Custom] = lambda m, i, o: 0
    assert Custom not in get_default_ops_map()
    assert "default" in first and "excluded" in first
    assert first["default"](nn.ReLU(), (torch.zeros(1),), torch.zeros(1)) is None
    assert "default" in get_default_io_size_map()
    # 0.0.4 evaluated its default maps once and shared them between profilers (B16)
    assert ModuleProfiler().ops_fn_map is not ModuleProfiler().ops_fn_map


def test_legacy_plus_one_map_entry_works() -> None:
    """The 0.0.4 tutorial's custom-module example: add an entry to ``ops_fn_map``."""

    class PlusOne(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    ops_map = get_default_ops_map()
    ops_map[PlusOne] = lambda module, input, output: output.numel()
    result = ModuleProfiler(ops_fn_map=ops_map).estimate_ops(PlusOne(), torch.zeros(4, 5))
    # 4 * 5 = 20 additions
    assert result["__root__"]["ops"] == 20


def test_legacy_default_key_is_used_for_unknown_types() -> None:
    ops_map = get_default_ops_map()
    ops_map["default"] = lambda module, input, output: 7
    profile = ModuleProfiler(ops_fn_map=ops_map).profile(Custom(), torch.zeros(1))
    assert profile.total_ops == 7
