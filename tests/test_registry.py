"""Registries: MRO lookup, duplicates refused, fresh default maps, lazy dotted-name keys."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from moduleprofiler import (
    ModuleProfiler,
    ProfilingError,
    RegistryError,
    get_default_io_size_map,
    get_default_macs_map,
    get_default_ops_map,
    register_io_size,
    register_macs,
    register_ops,
    unregister_io_size,
    unregister_ops,
)
from moduleprofiler.operators import (
    FREE_OPERATORS,
    MISSING,
    OPERATOR_FORMULAS,
    lookup,
    register_free,
    register_operator,
    unregister_operator,
)
from moduleprofiler.registry import FormulaRegistry, qualified_name, resolve
from tests.fixtures.models import Triple


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
    assert (after.self_ops, after.ops_source) == (6, "operator")
    unknown = ModuleProfiler().profile(CustomChild(), torch.zeros(2, 3), operators=False)
    assert unknown.records[0].self_ops is None


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


LEGACY_MAP_CLASSES = (
    nn.Identity, nn.Linear, nn.Conv1d, nn.Conv2d, nn.ConvTranspose1d, nn.ConvTranspose2d,
    nn.GRUCell, nn.GRU, nn.LSTMCell, nn.LSTM, nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm,
    nn.AvgPool1d, nn.AvgPool2d, nn.MaxPool1d, nn.AdaptiveMaxPool1d, nn.MaxPool2d,
    nn.AdaptiveAvgPool2d, nn.ReLU, nn.LeakyReLU, nn.PReLU, nn.ELU, nn.SELU, nn.Sigmoid, nn.Tanh,
    nn.Softplus, nn.Softmax,
)
"""The classes 0.0.4's ``get_default_ops_map()`` had as keys."""


def test_default_map_has_a_key_for_every_legacy_layer_class() -> None:
    ops_map = get_default_ops_map()
    # BatchNorm, the pools: registered for their base classes, so ops_map[nn.BatchNorm2d]
    # was a KeyError in code written for 0.0.4's map
    assert [cls.__name__ for cls in LEGACY_MAP_CLASSES if cls not in ops_map] == []
    bn, x = nn.BatchNorm2d(3).eval(), torch.randn(2, 3, 4, 4)
    profiled = ModuleProfiler().profile(bn, x).total_ops
    assert ops_map[nn.BatchNorm2d](bn, (x,), bn(x)) == profiled
    # running statistics: C * (2M + 2) = 3 * (2 * 32 + 2) = 198, affine 2 * C * M = 192
    assert profiled == 3 * (2 * 32 + 2) + 2 * 3 * 32
    assert nn.MaxPool2d in get_default_macs_map()


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


class Scale(nn.Module):
    """The README's custom-module example: registered with an ops formula only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_ops_only_registration_makes_the_macs_total_a_lower_bound() -> None:
    @register_ops(Scale)
    def scale_ops(module: nn.Module, inputs: tuple, output: torch.Tensor) -> int:
        return inputs[0].numel()  # one multiply per element

    model, x = nn.Sequential(nn.Linear(4, 3), Scale()), torch.randn(2, 4)
    try:
        counted = ModuleProfiler().profile(model, x)
        profile = ModuleProfiler().profile(model, x, operators=False)
    finally:
        unregister_ops(Scale)
    # Linear: 2 rows * 3 outputs * (2 * 4) = 48 ops, 2 * 3 * 4 = 24 MACs; Scale: 2 * 3 = 6 ops
    # and no MACs formula: its MACs are those of its operators (a mul: 0), exact
    assert counted.calls("1")[0].self_macs == 0
    assert (counted.total_ops, counted.total_macs, counted.complete) == (54, 24, True)
    # without operators they are unknown (None), not 0
    assert profile.calls("1")[0].self_macs is None
    assert profile.total_ops == 54 and profile.ops_complete
    assert profile.total_macs == 24 and not profile.macs_complete
    assert profile.lower_bounds == ("macs", "flops")
    assert not profile.complete
    assert profile.backward_complete is None  # no backward was profiled
    assert ("note: macs unknown in 1 module(s) with known ops: 1; MACs and FLOPs totals are "
            "lower bounds") in profile.tree().to_text(width=0)
    # each row says it as the profile does: the root's 24 MACs bound its MACs from below,
    # so its `complete` is False like profile.complete; Linear's own subtree is exact
    frame = profile.to_df("module").set_index("module")
    assert frame["complete"].to_dict() == {"__root__": False, "0": True, "1": False}
    assert frame.loc["__root__", "macs"] == 24 and pd.isna(frame.loc["1", "macs"])


def test_ops_and_macs_registration_is_complete() -> None:
    register_ops(Scale)(lambda module, inputs, output: inputs[0].numel())
    register_macs(Scale)(lambda module, inputs, output: 0)  # a scaling accumulates nothing
    try:
        profile = ModuleProfiler().profile(nn.Sequential(nn.Linear(4, 3), Scale()),
                                           torch.randn(2, 4))
    finally:
        unregister_ops(Scale)  # removes the MACs formula too
    # 24 MACs of the Linear + 0 of Scale, exact
    assert (profile.total_macs, profile.lower_bounds, profile.complete) == (24, (), True)
    assert "lower bound" not in str(profile)


def test_an_excluded_module_does_not_make_totals_lower_bounds() -> None:
    profile = ModuleProfiler(exclude_from_ops=[nn.ReLU]).profile(
        nn.Sequential(nn.Linear(4, 3), nn.ReLU()), torch.randn(2, 4))
    # excluded on purpose: its ops and MACs are None, and the totals (48 ops, 24 MACs) are
    # exactly those of everything that was asked for
    assert profile.calls("1")[0].self_macs is None
    assert (profile.total_ops, profile.total_macs, profile.complete) == (48, 24, True)


def test_register_decorates_functions_only() -> None:
    with pytest.raises(TypeError, match=r"register_ops\(...\) decorates a function "
                                        r"\(module, inputs, output\); got int 42"):
        register_ops(Custom)(42)  # type: ignore[type-var]
    with pytest.raises(TypeError, match=r"register_io_size\(...\) decorates a function"):
        register_io_size(Custom)(Custom)
    assert Custom not in get_default_ops_map()


def test_register_without_parentheses_says_how_to_use_it() -> None:
    def custom_ops(module: nn.Module, inputs: tuple, output: torch.Tensor) -> int:
        return 1

    with pytest.raises(RegistryError, match=r"write @register_macs\(MyModule\), not "
                                            r"@register_macs; got the function custom_ops"):
        register_macs(custom_ops)  # type: ignore[arg-type]
    with pytest.raises(RegistryError, match=r"not a subclass of torch\.nn\.Module"):
        register_ops(int)


def test_strict_names_the_modules_whose_macs_are_unknown() -> None:
    profiler = ModuleProfiler()
    profiler.ops_fn_map[Scale] = lambda module, inputs, output: inputs[0].numel()
    model = nn.Sequential(nn.Linear(4, 3), Scale())
    with pytest.raises(ProfilingError, match=r"strict=True and the macs, flops totals are lower "
                                             r"bounds: no formula for macs of modules \['1'\]"):
        profiler.profile(model, torch.randn(2, 4), strict=True, operators=False)
    profiler.macs_fn_map[Scale] = lambda module, inputs, output: 0
    assert profiler.profile(model, torch.randn(2, 4), strict=True,
                            operators=False).total_macs == 24


# -- a profiler sees the registry as it is at each pass ---------------------------------------

class Weighted(nn.Module):
    """The README's Scale: one multiply per element by a learned weight."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


def thousand_and_one_per_element(module: nn.Module, inputs: tuple, output: torch.Tensor) -> int:
    return 1000 + output.numel()


def test_a_registration_made_after_the_profiler_is_seen_by_it() -> None:
    profiler = ModuleProfiler()
    register_ops(Weighted)(thousand_and_one_per_element)
    try:
        # 1000 + 3 * 4 = 1012, as a profiler made now counts
        assert profiler.profile(Weighted(4), torch.randn(3, 4)).total_ops == 1012
        assert ModuleProfiler().profile(Weighted(4), torch.randn(3, 4)).total_ops == 1012
        assert profiler.ops_fn_map[Weighted] is thousand_and_one_per_element
    finally:
        unregister_ops(Weighted)
    # unregistered after the profiler was made: counted by its operators again, 3 * 4 = 12
    # multiplies
    record = profiler.profile(Weighted(4), torch.randn(3, 4)).records[0]
    assert (record.self_ops, record.ops_source) == (12, "operator")
    assert Weighted not in profiler.ops_fn_map


def test_a_profilers_own_entry_wins_over_a_later_registration() -> None:
    profiler = ModuleProfiler()
    profiler.ops_fn_map[Weighted] = lambda module, inputs, output: output.numel()
    register_ops(Weighted)(thousand_and_one_per_element)
    try:
        # its own entry: 3 * 4 = 12; the registry's, in a new profiler: 1000 + 12 = 1012
        assert profiler.profile(Weighted(4), torch.randn(3, 4)).total_ops == 12
        assert ModuleProfiler().profile(Weighted(4), torch.randn(3, 4)).total_ops == 1012
    finally:
        unregister_ops(Weighted)


def test_a_map_given_to_the_constructor_is_the_profilers_own_entries_over_the_registry() -> None:
    own = {Weighted: lambda module, inputs, output: output.numel()}
    profiler = ModuleProfiler(ops_fn_map=own)
    register_ops(Custom)(lambda module, inputs, output: 7)
    try:
        # Weighted by its own entry (3 * 4 = 12), Custom by the later registration (7), Linear
        # by the registry's formula: 3 rows * 2 outputs * (2 * 4) = 48
        model = nn.Sequential(Weighted(4), Custom(), nn.Linear(4, 2))
        profile = profiler.profile(model, torch.randn(3, 4))
        assert [r.self_ops for r in profile.records[1:]] == [12, 7, 48]
        assert [r.ops_source for r in profile.records[1:]] == ["formula"] * 3
    finally:
        unregister_ops(Custom)
    own[Custom] = lambda module, inputs, output: 5  # the given map is kept, not copied
    assert profiler.ops_fn_map[Custom](None, (), None) == 5


def test_deleting_a_profilers_entry_hides_the_registrys_as_a_dict_would() -> None:
    profiler = ModuleProfiler()
    del profiler.ops_fn_map[nn.ReLU]
    assert nn.ReLU not in profiler.ops_fn_map and nn.ReLU in ModuleProfiler().ops_fn_map
    # ReLU counted by its operator instead: 2 * 3 = 6 comparisons
    record = profiler.profile(nn.ReLU(), torch.randn(2, 3)).records[0]
    assert (record.self_ops, record.ops_source) == (6, "operator")
    profiler.ops_fn_map[nn.ReLU] = lambda module, inputs, output: 1
    assert profiler.profile(nn.ReLU(), torch.randn(2, 3)).total_ops == 1


def test_a_macs_registration_made_after_the_profiler_is_seen_by_it() -> None:
    profiler = ModuleProfiler()
    register_ops(Weighted)(lambda module, inputs, output: output.numel())
    register_macs(Weighted)(lambda module, inputs, output: 100)
    try:
        assert profiler.profile(Weighted(4), torch.randn(3, 4)).total_macs == 100
    finally:
        unregister_ops(Weighted)


def test_an_io_size_registration_made_after_the_profiler_is_seen_by_it() -> None:
    profiler = ModuleProfiler()
    register_io_size(Custom)(lambda module, inputs, output: ("in", "out"))
    try:
        sizes = profiler.trace_io_sizes(Custom(), torch.zeros(2))["__root__"]
        assert (sizes["input_size"], sizes["output_size"]) == ("in", "out")
    finally:
        unregister_io_size(Custom)
    sizes = profiler.trace_io_sizes(Custom(), torch.zeros(2))["__root__"]
    assert (sizes["input_size"], sizes["output_size"]) == ((2,), (2,))


def test_an_operator_registration_made_after_the_profiler_is_seen_by_it() -> None:
    profiler = ModuleProfiler()
    own = ModuleProfiler()
    own.operator_fn_map[torch.ops.moduleprofiler_tests.triple] = lambda args, kwargs, out: (2, 0)
    assert profiler.profile(Triple(), torch.randn(5)).unsupported_ops == {
        "moduleprofiler_tests.triple": 1}
    register_operator(torch.ops.moduleprofiler_tests.triple)(
        lambda args, kwargs, out: (out.numel(), 0))  # one multiply per element
    try:
        profile = profiler.profile(Triple(), torch.randn(5))
        assert (profile.total_ops, profile.complete) == (5, True)
        assert own.profile(Triple(), torch.randn(5)).total_ops == 2  # its own entry wins
    finally:
        unregister_operator(torch.ops.moduleprofiler_tests.triple)
    assert profiler.profile(Triple(), torch.randn(5)).unsupported_ops == {
        "moduleprofiler_tests.triple": 1}


# -- an ops formula without a MACs formula keeps the operators' MACs ----------------------------

class Gate(nn.Module):
    """sigmoid(x @ w) * x: one (rows, 16) x (16, 16) product and element-wise work."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x @ self.w) * x


def gate_ops(module: nn.Module, inputs: tuple, output: torch.Tensor) -> int:
    """rows * 16 * (2 * 16 - 1) for the product, + 3 (sigmoid) + 1 (multiply) per element."""
    rows = inputs[0].shape[0]
    return rows * 16 * (2 * 16 - 1) + 4 * output.numel()


def test_an_ops_formula_keeps_the_macs_its_operators_count() -> None:
    model, x = nn.Sequential(nn.Linear(16, 16), Gate()), torch.randn(4, 16)
    before = ModuleProfiler().profile(model, x)
    register_ops(Gate)(gate_ops)
    try:
        profile = ModuleProfiler().profile(model, x)
    finally:
        unregister_ops(Gate)
    gate = profile.calls("1")[0]
    # Gate's ops by its formula: 4 * 16 * 31 + 4 * 64 = 2240; its MACs from the mm it ran,
    # 4 * 16 * 16 = 1024 (exact), as without the formula
    assert (gate.self_ops, gate.ops_source, gate.self_macs) == (2240, "formula", 1024)
    assert before.calls("1")[0].self_macs == 1024
    # Linear(16, 16): 4 * 16 * 16 = 1024 MACs; 2048 in all, and exact
    assert (profile.total_macs, profile.complete) == (2048, True)
    # FlopCounterMode counts 2 * MACs of the two products: 2 * 2048 = 4096
    with FlopCounterMode(display=False) as oracle, torch.no_grad():
        model(x)
    assert profile.total_flops == oracle.get_total_flops() == 4096


class PolynomialGate(nn.Module):
    """x @ w, then an operator without an operator formula."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.chebyshev_polynomial_t(x @ self.w, 3)


def test_an_ops_formula_over_an_operator_without_formula_has_unknown_macs() -> None:
    profiler = ModuleProfiler()
    profiler.ops_fn_map[PolynomialGate] = lambda module, inputs, output: 9
    profile = profiler.profile(PolynomialGate(), torch.randn(2, 4))
    # the ops are the formula's (exact); the MACs cannot be told from operators one of which
    # has no formula: unknown, and the operator is not listed (the ops do not miss it)
    assert (profile.records[0].self_ops, profile.records[0].self_macs) == (9, None)
    assert profile.unsupported_ops == {} and profile.lower_bounds == ("macs", "flops")
    # without observing operators the MACs are unknown too
    unobserved = profiler.profile(PolynomialGate(), torch.randn(2, 4), operators=False)
    assert unobserved.records[0].self_macs is None


def _one_op(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> int:
    return 1


@pytest.mark.parametrize("duplicate", ["deepcopy", "pickle"])
def test_a_profiler_can_be_deep_copied_and_pickled(duplicate: str) -> None:
    import copy
    import pickle

    profiler = ModuleProfiler(exclude_from_ops=[nn.Tanh])
    profiler.ops_fn_map[nn.ReLU] = _one_op
    del profiler.ops_fn_map[nn.GELU]  # hidden: counted by its operators
    # 'cannot pickle mappingproxy object': the maps held the registry's read-only tables
    twin = (copy.deepcopy(profiler) if duplicate == "deepcopy"
            else pickle.loads(pickle.dumps(profiler)))
    net, x = nn.Sequential(nn.ReLU(), nn.GELU(), nn.Tanh()), torch.randn(2, 3)
    assert twin.estimate_ops(net, x) == profiler.estimate_ops(net, x)
    assert twin.estimate_ops(net, x)["0"]["ops"] == 1  # its own entry travelled
    twin.ops_fn_map[nn.ReLU] = lambda module, inputs, output: 2
    assert profiler.ops_fn_map[nn.ReLU] is _one_op  # the copy's maps are its own
    # and still over the live registry: a formula registered after the copy counts in it
    register_ops(Custom)(lambda module, inputs, output: 42)
    try:
        assert twin.profile(Custom(), torch.zeros(1)).total_ops == 42
    finally:
        unregister_ops(Custom)


def test_a_shallow_copy_of_a_profiler_has_maps_of_its_own() -> None:
    import copy

    profiler = ModuleProfiler(exclude_from_ops=[nn.Tanh])
    profiler.ops_fn_map[nn.ReLU] = _one_op
    del profiler.ops_fn_map[nn.GELU]  # hidden: counted by its operators
    twin = copy.copy(profiler)
    relu, x = nn.ReLU(), torch.randn(2, 3)
    assert twin.profile(relu, x).total_ops == 1  # its own entry travelled
    assert nn.GELU not in twin.ops_fn_map and twin.exclude_from_ops == [nn.Tanh]
    # set on the copy: the original still counts ReLU with its own entry, 1 op; the copy
    # with 2; a mm entry and an exclusion set on the copy leave the original as it was
    twin.ops_fn_map[nn.ReLU] = lambda module, inputs, output: 2
    twin.operator_fn_map[torch.ops.aten.mm] = _thousand
    twin.io_size_fn_map[nn.ReLU] = lambda module, inputs, output: ("in", "out")
    twin.exclude_from_ops.append(nn.ReLU)
    assert profiler.profile(relu, x).total_ops == 1
    assert torch.ops.aten.mm not in profiler.operator_fn_map.own
    assert nn.ReLU not in profiler.io_size_fn_map.own
    assert profiler.exclude_from_ops == [nn.Tanh]
    # a map copied alone is a map of its own too
    entries = copy.copy(profiler.ops_fn_map)
    entries[nn.ReLU] = lambda module, inputs, output: 3
    assert profiler.ops_fn_map[nn.ReLU] is _one_op and nn.GELU not in entries


# -- a profiler's maps behave as 0.0.4's default dicts ------------------------------------------

def _batch_norm_call() -> tuple[nn.BatchNorm2d, torch.Tensor]:
    # BatchNorm2d(3) in eval mode on (2, 3, 4, 4): M = 2 * 4 * 4 = 32 values per channel;
    # running statistics C * (2M + 2) = 3 * 66 = 198, affine 2 * C * M = 192: 390 ops
    return nn.BatchNorm2d(3).eval(), torch.randn(2, 3, 4, 4)


def test_wrapping_a_built_in_formula_read_from_the_profilers_map() -> None:
    profiler = ModuleProfiler()
    bn, x = _batch_norm_call()
    assert profiler.profile(bn, x).total_ops == 390
    # nn.BatchNorm2d's formula is registered for its base class: the map read through to it
    # (0.0.4's map had the key), so wrapping it as 0.0.4 users did works on the same profiler
    old = profiler.ops_fn_map[nn.BatchNorm2d]
    profiler.ops_fn_map[nn.BatchNorm2d] = lambda module, inputs, output: 2 * old(
        module, inputs, output)
    assert profiler.profile(bn, x).total_ops == 2 * 390
    assert ModuleProfiler().profile(bn, x).total_ops == 390  # other profilers: unchanged
    wrapped = ModuleProfiler()
    old_conv = wrapped.ops_fn_map[nn.Conv2d]
    wrapped.ops_fn_map[nn.Conv2d] = lambda m, i, o: 2 * old_conv(m, i, o)
    conv, image = nn.Conv2d(1, 1, 1), torch.randn(1, 1, 2, 2)
    # 4 outputs * (1 multiply + 1 bias add) = 8, doubled: 16
    assert wrapped.profile(conv, image).total_ops == 16


def test_the_ops_map_keeps_the_whole_dict_protocol_of_004() -> None:
    profiler = ModuleProfiler()
    ops_map = profiler.ops_fn_map
    default = get_default_ops_map()
    assert set(ops_map) == set(ops_map.keys()) == set(default)
    assert len(ops_map) == len(default) and dict(ops_map) == default == ops_map
    assert dict(ops_map.items()) == default and list(ops_map.values()) == [
        default[key] for key in ops_map]
    assert ops_map.copy() == default
    for key in ("default", "excluded", nn.BatchNorm2d, nn.MaxPool2d, nn.AdaptiveAvgPool2d,
                nn.Linear):
        assert key in ops_map and ops_map.get(key) is default[key] is ops_map[key]
    assert ops_map.get(Custom) is None and ops_map.get(Custom, 3) == 3
    with pytest.raises(KeyError):
        ops_map[Custom]
    popped = ops_map.pop(nn.MaxPool2d)
    assert popped is default[nn.MaxPool2d] and nn.MaxPool2d not in ops_map
    assert len(ops_map) == len(default) - 1
    with pytest.raises(KeyError):
        del ops_map[nn.MaxPool2d]
    ops_map.update({nn.MaxPool2d: popped, Custom: _one_op})
    assert ops_map[nn.MaxPool2d] is popped and ops_map[Custom] is _one_op
    assert nn.MaxPool2d in get_default_macs_map() and nn.MaxPool2d in profiler.macs_fn_map
    assert set(profiler.macs_fn_map) == set(get_default_macs_map())
    io_map = profiler.io_size_fn_map
    assert dict(io_map) == get_default_io_size_map() and "default" in io_map


def test_a_deleted_layer_class_does_not_get_its_base_classs_formula() -> None:
    profiler = ModuleProfiler()
    bn, x = _batch_norm_call()
    del profiler.ops_fn_map[nn.BatchNorm2d]
    assert nn.BatchNorm2d not in profiler.ops_fn_map
    # not priced by the formula registered for _BatchNorm: counted by its operators, which
    # find the same 390
    record = profiler.profile(bn, x).records[0]
    assert (record.self_ops, record.ops_source) == (390, "operator")


def test_an_own_entry_for_a_base_class_is_what_its_layer_classes_read() -> None:
    from torch.nn.modules.batchnorm import _BatchNorm

    profiler = ModuleProfiler()
    profiler.ops_fn_map[_BatchNorm] = _one_op
    bn, x = _batch_norm_call()
    assert profiler.ops_fn_map[nn.BatchNorm2d] is _one_op
    assert profiler.profile(bn, x).total_ops == 1


def test_a_dotted_name_entry_for_a_layer_class_wins_over_its_base_classs_formula() -> None:
    profiler = ModuleProfiler()
    profiler.ops_fn_map[qualified_name(nn.BatchNorm2d)] = _one_op
    bn, x = _batch_norm_call()
    assert profiler.ops_fn_map[nn.BatchNorm2d] is _one_op
    assert profiler.profile(bn, x).total_ops == 1  # not the 390 of _BatchNorm's formula


# -- nn.Module as a key -------------------------------------------------------------------------

class Doubler(nn.Module):
    """A Linear(4, 4) and a doubling of its output: its own work is outside its child."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * 2


def test_a_formula_for_nn_module_is_refused_naming_the_key_and_the_default_key() -> None:
    profiler = ModuleProfiler()
    profiler.ops_fn_map[nn.Module] = _one_op  # accepted, then never used by any module
    with pytest.raises(RegistryError, match=r"ops_fn_map got the key torch\.nn\.Module.*"
                                            r"'default' key"):
        profiler.profile(Doubler(), torch.randn(2, 4))
    with pytest.raises(RegistryError, match=r"register_ops got the key torch\.nn\.Module"):
        register_ops(nn.Module)
    with pytest.raises(RegistryError, match=r"macs_fn_map got the key torch\.nn\.Module"):
        ModuleProfiler(macs_fn_map={nn.Module: _one_op})
    with pytest.raises(RegistryError, match=r"io_size_fn_map got the key torch\.nn\.Module"):
        ModuleProfiler(io_size_fn_map={nn.Module: _one_op})


def test_the_default_key_prices_the_own_work_of_a_module_without_a_formula() -> None:
    profiler = ModuleProfiler()
    profiler.ops_fn_map["default"] = lambda module, inputs, output: output.numel()
    profile = profiler.profile(Doubler(), torch.randn(2, 4))
    # Doubler's own work by the default function: 2 * 4 = 8 doublings; its Linear by its own
    # formula: 2 rows * 4 outputs * (2 * 4) = 64
    assert [(r.path, r.self_ops) for r in profile.records] == [("", 8), ("linear", 64)]


@pytest.mark.parametrize(("keyword", "key"), [("macs_fn_map", "default"),
                                              ("macs_fn_map", "excluded"),
                                              ("io_size_fn_map", "excluded")])
def test_a_04_key_a_map_does_not_read_is_refused(keyword: str, key: str) -> None:
    # accepted and ignored: a "default" MACs function never priced anything
    with pytest.raises(RegistryError, match=f"{keyword} has the key '{key}', which no pass "
                                            "reads"):
        ModuleProfiler(**{keyword: {key: _one_op}})
    profiler = ModuleProfiler()
    getattr(profiler, keyword)[key] = _one_op
    with pytest.raises(RegistryError, match=f"{keyword} has the key '{key}'"):
        profiler.profile(Custom(), torch.zeros(1))


def test_unregistering_a_class_that_inherits_its_formula_names_the_base_and_removes_nothing(
) -> None:
    register_ops(Custom)(_one_op)
    try:
        with pytest.raises(KeyError, match=r"ops registry has no function registered for "
                                           r"torch\.nn\.modules\.batchnorm\.BatchNorm2d; it "
                                           r"inherits the one registered for "
                                           r"torch\.nn\.modules\.batchnorm\._BatchNorm"):
            unregister_ops(Custom, nn.BatchNorm2d)
        assert ModuleProfiler().ops_fn_map[Custom] is _one_op  # not removed half-way
    finally:
        unregister_ops(Custom)


# -- a profiler's own entries are never shadowed by the registry's ------------------------------

class Plus(nn.Module):
    """x + 1: one add per element."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def test_an_own_entry_under_a_dotted_name_wins_over_a_registered_class() -> None:
    register_ops(Plus)(lambda module, inputs, output: 5)
    try:
        profiler = ModuleProfiler()
        profiler.ops_fn_map[qualified_name(Plus)] = lambda module, inputs, output: 99
        assert profiler.profile(Plus(), torch.zeros(3)).total_ops == 99
        assert ModuleProfiler().profile(Plus(), torch.zeros(3)).total_ops == 5
    finally:
        unregister_ops(Plus)


def test_an_own_entry_for_a_base_under_its_dotted_name_prices_the_layers_below_it() -> None:
    profiler = ModuleProfiler()
    base = "torch.nn.modules.batchnorm._BatchNorm"  # registered by its class
    profiler.ops_fn_map[base] = lambda module, inputs, output: 7
    bn, x = nn.BatchNorm2d(3).eval(), torch.randn(2, 3, 4, 4)
    assert profiler.ops_fn_map[nn.BatchNorm2d](bn, (x,), x) == 7
    assert profiler.profile(bn, x).total_ops == 7
    # M = 2 * 4 * 4 = 32 per channel: 3 * (2 * 32 + 2) + 2 * 3 * 32 = 390 by the registry's
    assert ModuleProfiler().profile(bn, x).total_ops == 390


class Einsum(nn.Module):
    """(2, 3) @ (3, 4) written as an einsum."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.einsum("ij,jk->ik", a, b)


def _thousand(args: tuple, kwargs: dict, out: object) -> tuple[int, int]:
    return 1000, 7


def test_an_own_entry_for_a_packet_wins_over_a_formula_registered_for_its_overload() -> None:
    # einsum's formula is registered per overload (aten.einsum.default, by decomposition):
    # under inference_mode the profiler's entry for the packet counts, 1000 ops
    profiler = ModuleProfiler()
    profiler.operator_fn_map[torch.ops.aten.einsum] = _thousand
    inputs = (torch.randn(2, 3), torch.randn(3, 4))
    with torch.inference_mode():
        assert profiler.profile(Einsum(), inputs).total_ops == 1000
        # the registered one: 2 * 4 * (2 * 3 - 1) = 40
        assert ModuleProfiler().profile(Einsum(), inputs).total_ops == 40


def test_registering_a_packet_whose_overloads_have_formulas_is_refused() -> None:
    # the overloads' formulas would win, and the packet's never count: refused, and named
    with pytest.raises(RegistryError, match=r"aten\.einsum\.default, aten\.einsum\.sublist "
                                            r"already have formulas"):
        register_operator(torch.ops.aten.einsum)(_thousand)
    with pytest.raises(RegistryError, match=r"aten\.einsum\.default"):
        register_free(torch.ops.aten.einsum)
    assert torch.ops.aten.einsum not in OPERATOR_FORMULAS
    assert torch.ops.aten.einsum not in FREE_OPERATORS


def test_a_packet_can_be_registered_once_its_overloads_are_unregistered() -> None:
    assert lookup(torch.ops.moduleprofiler_tests.triple.default) is MISSING
    register_operator(torch.ops.moduleprofiler_tests.triple.default)(_thousand)
    with pytest.raises(RegistryError, match="already have formulas"):
        register_operator(torch.ops.moduleprofiler_tests.triple)(_thousand)
    unregister_operator(torch.ops.moduleprofiler_tests.triple.default)
    register_operator(torch.ops.moduleprofiler_tests.triple)(_thousand)
    try:
        assert ModuleProfiler().profile(Triple(), torch.randn(5)).total_ops == 1000
    finally:
        unregister_operator(torch.ops.moduleprofiler_tests.triple)


def test_unregistering_an_operator_without_a_formula_names_its_overloads_and_removes_nothing(
) -> None:
    with pytest.raises(KeyError, match=r"no operator formula is registered for aten\.einsum; "
                                       r"its overloads aten\.einsum\.default, "
                                       r"aten\.einsum\.sublist have their own"):
        unregister_operator(torch.ops.aten.mm, torch.ops.aten.einsum)
    assert torch.ops.aten.mm in OPERATOR_FORMULAS  # not removed half-way


def test_a_profilers_maps_merge_with_the_dict_operators() -> None:
    # 0.0.4's maps were plain dicts: `|` and `|=` worked on them (a TypeError here before)
    count = lambda m, i, o: i[0].numel()  # noqa: E731
    profiler = ModuleProfiler()
    merged = profiler.ops_fn_map | {Custom: count}
    assert type(merged) is dict and merged[Custom] is count
    assert merged[nn.Linear] is profiler.ops_fn_map[nn.Linear] and "default" in merged
    assert Custom not in profiler.ops_fn_map  # `|` leaves the profiler's map as it was
    assert ({Custom: count} | profiler.ops_fn_map)[Custom] is count
    profiler.ops_fn_map |= {Custom: count}
    model = nn.Sequential(nn.Linear(4, 3), Custom())
    ops = profiler.estimate_ops(model, torch.randn(2, 4))
    # Custom: 2 rows * 3 features = 6 elements; Linear: 2 * 3 * 2 * 4 = 48
    assert (ops["1"]["ops"], ops["0"]["ops"]) == (6, 48)
    sizes = {Custom: lambda m, i, o: ("in", "out")}
    profiler.io_size_fn_map |= sizes
    assert profiler.trace_io_sizes(model, torch.randn(2, 4))["1"]["input_size"] == "in"
