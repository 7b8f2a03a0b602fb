"""Per-module numbers of modules that run inside themselves, and of containers that never run
but group modules that do."""

from __future__ import annotations

import pandas as pd
import torch
from torch import Tensor, nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.export.select import profile_totals


class Recursive(nn.Module):
    """Applies its Linear, then calls itself until ``depth`` is 1: three nested calls."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: Tensor, depth: int = 3) -> Tensor:
        x = self.fc(x)
        return self(x, depth - 1) if depth > 1 else x


def recursive_profile() -> Profile:
    return ModuleProfiler().profile(Recursive(), torch.randn(2, 4))


def test_a_module_calling_itself_counts_its_outermost_call_only() -> None:
    profile = recursive_profile()
    # each fc call: 2 rows x 4 out x (2 x 4 in - 1) + 2 x 4 bias = 64 ops; 3 calls = 192
    assert profile.total_ops == 192
    modules = profile.to_df("module").set_index("module")
    assert modules.loc["__root__", "calls"] == 3
    # the three root calls contain one another (192, 128 and 64): only the outer one counts
    assert modules.loc["__root__", "ops"] == 192
    assert modules.loc["fc", "ops"] == 192 and modules.loc["fc", "self_ops"] == 192
    tree = profile.tree().df.set_index("module")
    assert tree.loc["__root__", "ops_pct"] == 100.0  # not 200 %
    assert "100.0%" in str(profile.tree()).splitlines()[2]
    assert ModuleProfiler().estimate_ops(Recursive(), torch.randn(2, 4))["__root__"][
        "inclusive_ops"] == 192


def test_a_type_nested_in_itself_counts_its_outermost_module() -> None:
    inner = nn.Sequential(nn.Linear(4, 4))
    model = nn.Sequential(inner, nn.ReLU())
    profile = ModuleProfiler().profile(model, torch.randn(2, 4))
    types = profile.to_df("type").set_index("type")
    # Linear 64 ops + ReLU 8 = 72 in the outer Sequential, which contains the inner one
    assert types.loc["Sequential", "ops"] == 72
    assert types.loc["Sequential", "modules"] == 2


class Blocks(nn.Module):
    """Two Linear layers in a ModuleList and a head in a ModuleDict; ``spare`` never runs."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.heads = nn.ModuleDict({"out": nn.Linear(4, 2)})
        self.spare = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.heads["out"](x)


def test_containers_show_their_childrens_sums() -> None:
    profile = ModuleProfiler().profile(Blocks(), torch.randn(2, 4))
    # Linear(4, 4) on 2 rows: 2 x 4 x 7 + 2 x 4 = 64 ops, 2 x 4 x 4 = 32 MACs;
    # Linear(4, 2): 2 x 2 x 7 + 2 x 2 = 32 ops, 16 MACs; total 64 + 64 + 32 = 160 ops
    assert profile.total_ops == 160
    modules = profile.to_df("module").set_index("module")
    assert modules.loc["layers", "ops"] == 128
    assert modules.loc["layers", "macs"] == 64
    assert modules.loc["heads", "ops"] == 32
    assert modules.loc["layers", "calls"] == 0
    assert modules.loc["layers", "self_ops"] == 0  # it never ran: no work of its own
    assert pd.isna(modules.loc["layers", "output_shapes"])
    assert modules.loc["layers", "ops_source"] == "grouping"
    assert modules.loc["spare", "ops_source"] == "uncalled"
    text = str(profile.tree())
    lines = {line.split("(")[0].strip("|-` "): line for line in text.splitlines()}
    assert "80.0%" in lines["layers"] and "[not called]" not in lines["layers"]
    assert "[not called]" in lines["spare"]
    assert "note: not called (1): spare" in text
    assert profile.to_dict()["uncalled"] == ["spare"]
    assert profile.to_dict()["groupings"] == ["layers", "heads"]


def test_a_grouping_of_groupings() -> None:
    model = nn.Module()
    model.stages = nn.ModuleList([nn.ModuleList([nn.Linear(4, 4)]), nn.ModuleList([nn.ReLU()])])

    def run(x: Tensor) -> Tensor:
        return model.stages[1][0](model.stages[0][0](x))

    profile = ModuleProfiler().profile(model, torch.randn(2, 4), pred_fn=run)
    modules = profile.to_df("module").set_index("module")
    # the root itself is never called (pred_fn calls its grandchildren): a grouping too;
    # Linear 64 ops + ReLU 2 x 4 = 8 ops
    assert modules.loc["__root__", "ops"] == 72
    assert modules.loc["stages", "ops"] == 72
    assert modules.loc["stages.0", "ops"] == 64
    assert "not called" not in str(profile.tree())


def _shared_blocks() -> tuple[nn.Module, Profile]:
    """Issue 23, item 2: one Linear(8, 8) (8*8 + 8 = 72 parameters) in three blocks."""
    shared = nn.Linear(8, 8)
    blocks = nn.ModuleList([nn.Sequential(shared, nn.ReLU()) for _ in range(3)])

    def run(x: Tensor) -> Tensor:
        for block in blocks:
            x = block(x)
        return x

    return blocks, ModuleProfiler().profile(blocks, torch.randn(4, 8), pred_fn=run)


def test_a_shared_module_is_drawn_under_each_block_that_called_it() -> None:
    _, profile = _shared_blocks()
    tree = profile.tree(["calls", "params", "ops"]).to_text(width=0, fold=False)
    assert tree is not None
    frame = profile.tree().frame.set_index("module")
    # per call: Linear 4*8*(2*8-1) + 4*8 = 512 ops, ReLU 4*8 = 32; a block 544
    for block in ("0", "1", "2"):
        assert frame.loc[block, "ops"] == 544 and frame.loc[block, "params"] == 72
        assert frame.loc[f"{block}.0", "calls"] == 1  # all three sat under block 0 (x3, 1,536)
        assert frame.loc[f"{block}.0", "ops"] == 512
    # its parameters once, on its own row; the rows drawn under blocks 1 and 2 have none
    assert frame.loc["0.0", "params"] == 72
    assert pd.isna(frame.loc["1.0", "params"]) and pd.isna(frame.loc["2.0", "params"])
    assert list(frame.index) == ["__root__", "0", "0.0", "0.1", "1", "1.0", "1.1", "2",
                                 "2.0", "2.1"]
    assert "shared module" in tree and "1.0, 2.0" in tree
    # the flat table keeps one row per module: the shared Linear's three calls together
    table = profile.to_df(aggregate="module").set_index("module")
    assert table.loc["0.0", "calls"] == 3 and table.loc["0.0", "ops"] == 3 * 512


def test_blocks_holding_a_shared_module_do_not_fold_into_more_parameters_than_the_model(
        ) -> None:
    _, profile = _shared_blocks()
    folded = profile.tree().folded().frame.set_index("module")
    # folded, "1-2 (Sequential) x2" showed 72 + 72 = 144 parameters of a 72-parameter model
    assert (folded["params"].dropna() <= 72).all()
    assert {"0", "1", "2"} <= set(folded.index) and "1-2" not in folded.index


def test_tied_blocks_do_not_fold_their_parameters_twice() -> None:
    # two blocks with the same weight tensor: each holds 16 + 4 = 20, the list 16 + 2 * 4
    first, second = nn.Linear(4, 4), nn.Linear(4, 4)
    second.weight = first.weight
    blocks = nn.Sequential(nn.Sequential(first), nn.Sequential(second))
    profile = ModuleProfiler().profile(blocks, torch.randn(2, 4))
    folded = profile.tree().folded().frame.set_index("module")
    assert folded.loc["__root__", "params"] == 24
    assert "0-1" not in folded.index and folded.loc["0", "params"] == 20


class _Blocks(nn.Module):
    """A ModuleList whose blocks run (a grouping, never called itself) and a Linear that
    never runs."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.unused = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def test_one_uncalled_in_the_profile_its_dict_and_its_views() -> None:
    profile = ModuleProfiler().profile(_Blocks(), torch.randn(2, 4))
    assert profile.uncalled == ("unused",)
    assert profile.groupings == ("blocks",)
    as_dict = profile.to_dict()
    assert as_dict["uncalled"] == list(profile.uncalled) == ["unused"]
    assert as_dict["groupings"] == ["blocks"]
    text = profile.tree().to_text(width=0) or ""
    # the only row marked: unused's 4 x 4 + 4 = 20 parameters, no ops (it never ran)
    assert [line.split()[1:6] for line in text.splitlines() if "[not called]" in line] == [
        ["unused", "(Linear)", "[not", "called]", "20"]]
    assert "blocks (ModuleList) x" not in text and "blocks (ModuleList)" in text


def test_the_totals_under_a_view_are_the_profile_totals() -> None:
    profile = ModuleProfiler().profile(nn.Linear(4, 2), torch.randn(3, 4), backward=True)
    totals = profile_totals(profile)
    # 4 x 2 + 2 = 10 parameters; 3 rows x 2 outputs x 4 inputs = 24 MACs, 48 FLOPs;
    # ops 3 x 2 x (2 x 4 - 1) + 3 x 2 (bias) = 48
    assert {name: totals[name] for name in ("params", "self_params", "macs",
                                            "flops", "ops")} == {
        "params": 10, "self_params": 10, "macs": 24, "flops": 48,
        "ops": 48}
    # the weight's gradient: 3 rows x 4 inputs x 2 outputs = 24 MACs (the input needs none)
    self_backward_macs = profile.total_backward_macs
    assert self_backward_macs == 24
    assert totals["self_backward_flops"] == totals["backward_flops"] == 2 * self_backward_macs
    assert dict(profile.tree().totals) == {
        "params": 10, "macs": 24, "flops": 48, "ops": 48,
        "backward_macs": self_backward_macs,
        "backward_ops": profile.total_backward_ops}
    assert dict(ModuleProfiler().profile(nn.Linear(4, 2), torch.randn(3, 4)).tree().totals) == {
        "params": 10, "macs": 24, "flops": 48, "ops": 48}


class Doubles(nn.Module):
    """``x * 2 + 1`` in its own forward: work no module formula covers."""

    def forward(self, x: Tensor) -> Tensor:
        return x * 2 + 1


def test_a_types_share_of_unknown_own_ops_is_unknown_not_zero() -> None:
    # operators off: Doubles' own work is unknown, so its share of the total is unknown too
    model = nn.Sequential(nn.Linear(3, 4), Doubles())
    profile = ModuleProfiler().profile(model, torch.randn(2, 3), operators=False)
    # Linear(3, 4) on 2 rows: 2 x 4 x (2 x 3 - 1) + 2 x 4 bias adds = 48 ops, all of the known
    assert profile.total_ops == 48 and not profile.complete
    types = profile.to_df("type").set_index("type")
    # 48 is a lower bound of the total, so no type's share of it is known: Linear's 48 of
    # 48 known ops (100 %) is no share of the model's ops, nor the container's 0 of 48
    assert types["self_ops_pct"].isna().all()
    assert pd.isna(types.loc["Doubles", "self_ops_pct"])  # was 0.0
    # the same share in the top-types view, as a percentage
    top = profile.top(3).frame.set_index("type")
    assert pd.isna(top.loc["Doubles", "self_ops_pct"])


def test_a_types_share_of_a_model_without_ops_is_unknown() -> None:
    # nn.Identity runs no work: 0 of 0 ops is no share at all (the tree shows its ops % as -)
    types = ModuleProfiler().profile(nn.Identity(), torch.randn(2, 3)).to_df("type")
    assert types["self_ops_pct"].isna().all()  # was 0.0


def test_a_types_share_of_the_ops_has_one_name_and_one_scale_in_every_view() -> None:
    # to_df("type") wrote the share as ops_fraction (0-1), top() and the HTML report's
    # per-type chart as self_ops_pct (0-100): one quantity, two names
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    profile = ModuleProfiler().profile(model, torch.randn(2, 4))
    # Linear(4, 8) on 2 rows: 2 * 8 * (2 * 4) = 128 ops; ReLU 2 * 8 = 16; Linear(8, 2):
    # 2 * 2 * (2 * 8) = 64; total 208: Linear 192 / 208 = 92.3%, ReLU 16 / 208 = 7.7%
    types = profile.to_df("type").set_index("type")
    assert "ops_fraction" not in types
    assert types.loc["Linear", "self_ops_pct"] == 192 * 100.0 / 208
    assert types.loc["ReLU", "self_ops_pct"] == 16 * 100.0 / 208
    top = profile.top(None).frame.set_index("type")
    assert types["self_ops_pct"].equals(top["self_ops_pct"].reindex(types.index))


def test_the_retired_share_name_is_refused_naming_its_new_column() -> None:
    # ops_fraction (0-1) cannot be read as self_ops_pct (0-100) under the old name without
    # a factor of 100 in silence: a typed error names the new column, in every selection
    import pytest

    from moduleprofiler.errors import RescaledColumnError

    profile = ModuleProfiler().profile(nn.Linear(4, 8), torch.randn(2, 4))
    for select in (lambda: profile.table(columns=["ops_fraction"]),
                   lambda: profile.table(sort_by="ops_fraction"),
                   lambda: profile.top(by="ops_fraction")):
        with pytest.raises(RescaledColumnError, match="'self_ops_pct'") as raised:
            select()
        assert (raised.value.name, raised.value.new) == ("ops_fraction", "self_ops_pct")
        assert isinstance(raised.value, KeyError) and isinstance(raised.value, ValueError)

