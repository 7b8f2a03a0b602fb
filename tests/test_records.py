"""The records' own definitions (:mod:`moduleprofiler.records`)."""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, TimingOptions
from moduleprofiler.records import ModuleInfo, module_statuses, new_module_info, ran_without
from moduleprofiler.timing import time_modules


class _Stack(nn.Module):
    """GPT-2's shape: a ``ModuleList`` whose blocks the parent calls one by one, and a module
    that never runs."""

    def __init__(self) -> None:
        super().__init__()
        self.h = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        self.unused = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.h:
            x = block(x)
        return x


def _info(path: str, container: bool = False) -> ModuleInfo:
    return ModuleInfo(path, "M", path.count(".") + 1 if path else 0, 0, 0, 0, 0, False,
                      container=container)


def test_module_statuses_one_definition() -> None:
    modules = [_info(""), _info("h", container=True), _info("h.0"), _info("h.1"),
               _info("unused"), _info("script.sub"), _info("inner"), _info("inner.fc")]
    statuses = module_statuses(modules, called={"", "h.0", "inner.fc"},
                               unhooked={"script.sub"})
    # "inner" holds a called child like "h" does, but its class has a forward of its own
    # that never ran: never called, where the container "h" is a grouping
    assert statuses == {"": "called", "h": "grouping", "h.0": "called", "h.1": "uncalled",
                        "unused": "uncalled", "script.sub": "unhooked", "inner": "uncalled",
                        "inner.fc": "called"}


def test_module_statuses_a_root_run_through_pred_fn_groups_its_children() -> None:
    # the root is a grouping whatever its class, and never called when nothing in it ran
    modules = [_info(""), _info("a")]
    assert module_statuses(modules, called={"a"}) == {"": "grouping", "a": "called"}
    assert module_statuses(modules, called=set()) == {"": "uncalled", "a": "uncalled"}


def test_ran_without_names_the_topmost_descendants_that_ran() -> None:
    called = ["", "submod.fc", "submod.block", "submod.block.fc", "other.fc", "submodx.fc"]
    # submod.block.fc ran inside submod.block; submodx.fc is not under submod
    assert ran_without("submod", called) == ("submod.fc", "submod.block")
    assert ran_without("unused", called) == ()


class _Inner(nn.Module):
    """A module whose parent calls another of its methods, never its ``forward``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(10, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def other_func(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class _NonForwardNet(nn.Module):
    """fvcore's ``NonForwardNet``: ``submod.fc`` runs, ``submod``'s ``forward`` does not."""

    def __init__(self) -> None:
        super().__init__()
        self.submod = _Inner()
        self.fc = nn.Linear(10, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.submod.other_func(self.fc(x))


def test_a_module_whose_forward_never_ran_is_uncalled_in_every_view(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no name elided to fit
    model = _NonForwardNet()
    x = torch.randn(1, 10)
    profile = ModuleProfiler().profile(model, x)
    assert profile.uncalled == ("submod",) and profile.groupings == ()  # was () and ("submod",)
    # the counts do not change: fc 10 * 10 = 100 MACs, submod.fc 10 * 1 = 10; 110 in all
    assert profile.total_macs == 110
    assert [r.self_macs for r in profile.calls("submod.fc")] == [10]
    assert profile.to_dict()["uncalled"] == ["submod"]
    assert profile.to_dict()["groupings"] == []
    tree = profile.tree().to_text(width=0)
    assert tree is not None and "|-- submod (_Inner) [not called]" in tree
    assert "not called (1): submod; submod.fc ran without a call of it" in tree
    # the note about a parent using its child's weights is not this case: submod.fc ran
    assert "the work a parent does with their weights" not in tree
    frame = profile.to_df("module").set_index("module")
    assert frame.loc["submod", "ops_source"] == "uncalled"
    assert frame.loc["submod", "calls"] == 0
    again = type(profile).from_json(profile.to_json())
    assert again.uncalled == ("submod",) and again.groupings == ()

    timing = time_modules(model, x, num_iters=3, drop_first=0, warmup_seconds=0,
                          measure_overhead=False)
    assert timing.uncalled == ("submod",)
    assert "submod (_Inner) [not called]" in timing.report()


class _Blocks(nn.ModuleList):
    """A ``ModuleList`` subclass that adds no ``forward``: still a container."""


class _Named(nn.Module):
    """A ``ModuleList`` subclass and a ``ModuleDict`` whose members the parent calls."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = _Blocks([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 2)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.heads["a"](x) + self.heads["b"](x)


def test_a_module_list_and_a_module_dict_whose_members_ran_are_groupings() -> None:
    profile = ModuleProfiler().profile(_Named(), torch.randn(2, 4))
    assert profile.groupings == ("blocks", "heads") and profile.uncalled == ()
    assert [info.container for info in profile.modules] == [
        False, True, False, False, True, False, False]
    tree = profile.tree().to_text(width=0)
    assert tree is not None and "[not called]" not in tree and "ran without a call" not in tree
    again = type(profile).from_json(profile.to_json())
    assert again.groupings == ("blocks", "heads")


def test_a_document_without_container_flags_reads_as_its_writer_did() -> None:
    # written before modules said whether they are containers: a module never called with
    # a called descendant was a grouping then, and stays one
    profile = ModuleProfiler().profile(_NonForwardNet(), torch.randn(1, 10))
    document = json.loads(str(profile.to_json()))
    for row in document["modules"]:
        del row["container"]
    assert type(profile).from_json(json.dumps(document)).groupings == ("submod",)


def test_a_grouping_whose_children_ran_is_not_uncalled_anywhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no name elided to fit
    model = _Stack()
    x = torch.randn(2, 4)
    profile = ModuleProfiler().profile(model, x)
    # profile.uncalled listed "h" while the tree and to_dict() left it out
    assert profile.uncalled == ("unused",) and profile.groupings == ("h",)
    assert profile.to_dict()["uncalled"] == ["unused"]
    assert profile.to_dict()["groupings"] == ["h"]
    tree = profile.tree().to_text(width=0)
    assert tree is not None
    assert "h (ModuleList) [not called]" not in tree and "unused (ReLU) [not called]" in tree

    timing = time_modules(model, x, num_iters=3, drop_first=0, warmup_seconds=0,
                          measure_overhead=False)
    assert timing.uncalled == ("unused",)  # listed "h" too
    assert timing.to_dict()["uncalled"] == ["unused"]
    summary = timing.report()
    assert "h (ModuleList) [not called]" not in summary  # the timing tree said so
    assert "|-- h (ModuleList)" in summary and "`-- unused (ReLU) [not called]" in summary


def test_a_model_whose_root_only_groups_its_children() -> None:
    blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

    def run(x: torch.Tensor) -> torch.Tensor:
        return blocks[1](blocks[0](x))

    profile = ModuleProfiler().profile(blocks, torch.randn(2, 4), pred_fn=run)
    assert profile.uncalled == () and profile.groupings == ("",)  # was uncalled == ("",)


def test_a_module_path_that_is_not_there_names_the_nearest() -> None:
    from moduleprofiler import Profiler

    profile = Profiler().profile(torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(2, 2))),
                                 torch.randn(1, 2))
    assert profile.module("0.0").type_name == "Linear"
    with pytest.raises(KeyError, match=r"no module '0\.1' in this profile .*nearest: '0\.0'"):
        profile.module("0.1")


def test_calls_of_a_path_that_is_not_there_is_an_error_and_of_an_uncalled_module_empty() -> None:
    from moduleprofiler import Profiler

    class SkipsOne(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used, self.spare = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    profile = Profiler().profile(SkipsOne(), torch.randn(1, 2))
    assert len(profile.calls("used")) == 1 and profile.calls("spare") == ()
    with pytest.raises(KeyError, match=r"no module 'usd' in this profile .*nearest: 'used'"):
        profile.calls("usd")


def test_the_root_is_found_by_its_output_name_too() -> None:
    from moduleprofiler import Profiler

    class Named(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.add_module("__root__", torch.nn.Linear(2, 2))  # a child really named so

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self._modules["__root__"](x)  # type: ignore[misc]

    profile = Profiler().profile(torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.randn(1, 2))
    # every table, file and 0.0.4 dict names the root "__root__": the lookups take that name
    # (they raised KeyError "no module '__root__'"), as timing.samples and by_operator do
    assert profile.module("__root__") is profile.module("")
    assert profile.calls("__root__") == profile.calls("") and len(profile.calls("")) == 1
    named = Profiler().profile(Named(), torch.randn(1, 2))
    assert named.module("__root__").type_name == "Linear"  # the child, not the root
    assert named.module("").type_name == "Named"


def test_merge_takes_a_profile_only() -> None:
    from moduleprofiler import Profiler

    profile = Profiler().profile(torch.nn.Linear(2, 2), torch.randn(1, 2))
    with pytest.raises(TypeError, match=r"merge takes a profile .* got dict"):
        profile.merge({"forward_ms": 1.0})  # type: ignore[arg-type]


def test_new_module_info_is_the_constructor_s_info_and_stays_immutable() -> None:
    """``new_module_info`` fills a subclass slot by slot, then hands out the class itself: it
    must equal, hash and pickle as the constructor's info, and stay frozen."""
    fields = ("a.b", "Conv2d", 2, 7, 5, 7, 3, True, 28, 12, "x", False, ((0, 0, 4, 16, 4),))
    info = new_module_info(*fields)
    assert type(info) is ModuleInfo
    assert info == ModuleInfo(*fields) and hash(info) == hash(ModuleInfo(*fields))
    assert pickle.loads(pickle.dumps(info)) == info
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.params = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del info.params  # type: ignore[misc]


class _ForwardCalledDirectly(nn.Module):
    """``b``'s and ``inner``'s ``forward`` run without their hooks (``.forward(x)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner.forward(self.b.forward(self.a(x)))


def test_a_module_run_without_its_hooks_is_not_said_to_have_never_run() -> None:
    profile = ModuleProfiler().profile(_ForwardCalledDirectly(), torch.randn(2, 4))
    assert profile.uncalled == ("b", "inner")
    # b's Linear runs in the root's own count: 2 rows * 4 * (2 * 4 - 1 + 1) = 64 ops
    assert profile.records[0].self_ops == 64
    notes = profile.tree().notes
    [note] = [n for n in notes if "not called" in n]
    # its forward ran (inner's called its children): "never called", "its forward never ran"
    # were untrue of both
    assert "never" not in note
    assert note == (
        "not called (2): b, inner; inner.0, inner.1 ran without a call of inner; the work a "
        "parent does with their weights is in the parent's own count; one run without its "
        "hooks (module.forward(x), a class replacing __call__) is listed too: its work is in "
        "its caller's own count")


def test_a_path_that_is_no_string_is_a_type_error_naming_it() -> None:
    profile = ModuleProfiler().profile(nn.Sequential(nn.Linear(2, 2)), torch.randn(1, 2))
    # module(1) was a KeyError ("no module 1"), as for a typo; a position is no path
    with pytest.raises(TypeError, match="path must be a module path string"):
        profile.module(1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path must be a module path string"):
        profile.calls(0)  # type: ignore[arg-type]
    assert profile.module("0").type_name == "Linear"


def test_repr_says_which_totals_are_unknown_or_lower_bounds() -> None:
    class Odd(nn.Module):  # x * 2 with operators off: no formula
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    model, x = nn.Sequential(nn.Linear(4, 4), Odd()), torch.randn(3, 4)
    # Linear: 3 rows * 4 outputs * (2 * 4 - 1 + 1 bias add) = 96 ops, 3 * 4 * 4 = 48 MACs
    partial = ModuleProfiler().profile(model, x, operators=False)
    assert repr(partial) == ("Profile(calls=3, modules=3, total_params=20, total_ops>=96, "
                             "total_macs>=48, complete=False)")
    exact = ModuleProfiler().profile(model[0], x)
    assert repr(exact) == ("Profile(calls=1, modules=1, total_params=20, total_ops=96, "
                           "total_macs=48, complete=True)")
    # a memory pass counts nothing: its totals were shown as total_ops=0, total_macs=0;
    # and it is a memory report, which the repr called a Profile
    memory = ModuleProfiler().measure_memory(model, x)
    assert repr(memory) == ("MemoryReport(calls=3, modules=3, total_params=20, "
                            "total_ops=None, total_macs=None, complete=False)")
    predicted = ModuleProfiler().predict(model[0], x, "H100 SXM")
    assert repr(predicted).startswith("PredictedProfile(calls=1, modules=1, total_params=20")


def test_the_totals_of_a_pass_that_counted_nothing_are_none() -> None:
    model, x = nn.Linear(4, 4), torch.randn(3, 4)
    memory = ModuleProfiler().measure_memory(model, x)
    timing = ModuleProfiler().time_modules(model, x, TimingOptions(num_iters=2, drop_first=0,
                                                                   warmup_seconds=0.0))
    for result in (memory, timing):
        # it ran the model without counting: unknown, where the totals read 0 before
        assert (result.total_ops, result.total_macs, result.total_flops) == (None, None, None)
    # counted: 3 rows * 4 outputs * (2 * 4 - 1 + 1 bias add) = 96 ops, 3 * 4 * 4 = 48 MACs
    counted = ModuleProfiler().profile(model, x)
    assert (counted.total_ops, counted.total_macs, counted.total_flops) == (96, 48, 96)
    # merged into the counting pass, the memory pass's profile has the counts
    assert counted.merge(memory).total_ops == 96


def test_a_result_says_it_is_unhashable_by_its_own_name() -> None:
    from moduleprofiler import Profiler, TimingOptions
    from moduleprofiler.distributed import DistributedProfile

    model, x = torch.nn.Linear(2, 2), torch.randn(1, 2)
    profile = Profiler().profile(model, x)
    # equal by value (a result read back equals the one written), so no identity hash: the
    # error named a field's type, "unhashable type: 'dict'"
    assert profile == Profiler().profile(model, x)
    for result in (profile, Profiler().measure_memory(model, x),
                   Profiler().time_modules(model, x, TimingOptions(num_iters=2)),
                   DistributedProfile((profile,))):
        with pytest.raises(TypeError, match=rf"^unhashable type: '{type(result).__name__}'$"):
            hash(result)
