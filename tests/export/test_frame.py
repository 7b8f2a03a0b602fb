"""``Profile.to_df``: the columns that hold data by default, every column on request."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.export.frame import data_columns

BACKWARD = ["self_backward_ops", "self_backward_macs", "self_backward_flops", "backward_ops",
            "backward_macs", "backward_flops"]


@pytest.fixture(scope="module")
def quick_start() -> Profile:
    """The README's quick start: Linear(8, 32), ReLU, Linear(32, 2) on a (4, 8) input."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
    return ModuleProfiler().profile(model, torch.randn(4, 8))


def test_a_forward_profile_shows_no_backward_columns(quick_start: Profile) -> None:
    every = quick_start.to_df(columns="all")
    shown = quick_start.to_df()
    # the call frame has 32 columns; the 6 backward ones hold nothing without a backward pass
    assert len(every.columns) == 32 and every[BACKWARD].isna().all().all()
    assert list(shown.columns) == [c for c in every.columns if c not in BACKWARD]
    assert len(shown.columns) == 26 and not shown.isna().all().any()
    # 4 calls: the root, Linear 4*32*8 = 1024 MACs, ReLU 0, Linear 4*2*32 = 256
    assert shown["self_macs"].tolist() == [0, 1024, 0, 256]
    assert shown["macs"].tolist() == [1024 + 256, 1024, 0, 256]  # the root with its children
    for aggregate in ("module", "type"):
        assert not set(BACKWARD) & set(quick_start.to_df(aggregate).columns)
        assert set(BACKWARD) <= set(quick_start.to_df(aggregate, columns="all").columns)


def test_unknown_forward_counts_stay() -> None:
    from tests.export.profiles import tiny

    # every forward count of the custom leaf is unknown, and a column of unknowns is kept
    # (its <NA> is an answer) when no other row knows a value either
    profile = tiny()
    frame = profile.to_df("module", columns="all")
    custom = frame[frame["module"] == "custom"]
    assert custom["self_ops"].isna().all() and custom["self_macs"].isna().all()
    kept = data_columns(custom, profile)
    assert {"self_ops", "self_macs", "self_flops"} <= set(kept.columns)
    assert "self_backward_ops" not in kept


def test_a_backward_profile_keeps_its_backward_columns() -> None:
    model = nn.Linear(5, 7)
    profile = ModuleProfiler().profile(model, torch.randn(2, 5), backward=True)
    frame = profile.to_df()
    # backward of Linear(5, 7) on (2, 5), an input that needs no grad: grad weight
    # 7*2*5 = 70 MACs (the bias's grad is a sum: ops, no MACs)
    assert frame.loc[0, "self_backward_macs"] == 70
    assert set(BACKWARD) <= set(frame.columns)


def test_columns_is_checked(quick_start: Profile) -> None:
    with pytest.raises(ValueError, match="columns must be 'data' or 'all', got 'some'"):
        quick_start.to_df(columns="some")  # type: ignore[arg-type]


def test_a_column_derived_from_a_derived_column_whatever_the_registration_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from moduleprofiler.export import columns

    monkeypatch.setattr(columns, "_REGISTRY", dict(columns._REGISTRY))  # this test's own
    # registered before the column it is derived from: it was left out of the frame
    columns.register_column("quadruple_macs", "count", derive=columns.scaled("double_macs", 2))
    columns.register_column("double_macs", "count", derive=columns.scaled("macs", 2))
    profile = ModuleProfiler().profile(nn.Linear(4, 8, bias=False), torch.randn(3, 4))
    frame = profile.to_df()
    # 3 rows * 4 * 8 = 96 MACs; doubled 192, quadrupled 384
    assert list(frame["double_macs"]) == [192] and list(frame["quadruple_macs"]) == [384]


def test_a_profile_builds_its_frame_once_and_every_caller_gets_a_copy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from moduleprofiler.export import columns
    from moduleprofiler.export import frame as frames

    built: list[Profile] = []
    build = frames._call_frame
    monkeypatch.setattr(frames, "_call_frame", lambda p: built.append(p) or build(p))
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
    profile = ModuleProfiler().profile(model, torch.randn(4, 8))
    first = profile.to_df()
    first["self_macs"] = 0  # the caller's copy: the next view does not see it
    # own MACs per call: the Sequential 0, Linear(8, 32) 4 * 8 * 32 = 1,024, ReLU 0,
    # Linear(32, 2) 4 * 32 * 2 = 256
    assert list(profile.to_df()["self_macs"]) == [0, 1024, 0, 256]
    profile.summary()
    profile.to_html()
    assert len(built) == 1
    # a column registered after the frame was built is in the next frame
    monkeypatch.setattr(columns, "_REGISTRY", dict(columns._REGISTRY))
    columns.register_column("double_self_macs", "count", derive=columns.scaled("self_macs", 2))
    assert list(profile.to_df()["double_self_macs"]) == [0, 2048, 0, 512]
    assert len(built) == 2


def test_counts_past_64_bits_are_exact_python_integers_in_every_frame() -> None:
    # Linear(10**7, 10**7) on 10**6 rows: 10**6 * 10**7 * 10**7 = 10**20 MACs, past 2**63
    # (~9.2 * 10**18); ops 10**6 * 10**7 * (2 * 10**7 - 1 + 1) = 2 * 10**20 with the bias add
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(10**7, 10**7), nn.ReLU())
    profile = ModuleProfiler().profile(model, torch.empty(10**6, 10**7, device="meta"))
    macs, ops = 10**20, 2 * 10**20 + 10**13  # ReLU: 10**13 elements, one op each
    assert (profile.total_macs, profile.total_ops) == (macs, ops)
    calls = profile.to_df()
    assert calls["macs"].tolist() == [macs, macs, 0]
    assert calls["flops"].tolist() == [2 * macs, 2 * macs, 0]  # 2 x MACs, not wrapped
    assert calls["ops"].iloc[0] == ops and type(calls["ops"].iloc[0]) is int
    assert profile.to_df("module")["ops"].tolist() == [ops, 2 * 10**20, 10**13]
    by_type = profile.to_df("type").set_index("type")
    assert by_type.loc["Linear", "self_macs"] == macs
    assert profile.to_df()["params"].dtype == "Int64"  # 10**14 fits: still Int64
    assert profile.summary()["flops"].item() == 2 * macs


def test_flops_past_64_bits_do_not_wrap() -> None:
    # Linear(4612, 10**6) without bias on 10**9 rows: MACs 10**9 * 10**6 * 4612 =
    # 4.612 * 10**18 (fits in 64 bits), FLOPs = 2 x MACs = 9.224 * 10**18 does not
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4612, 10**6, bias=False))
    profile = ModuleProfiler().profile(model, torch.empty(10**9, 4612, device="meta"))
    assert profile.to_df()["flops"].tolist() == [9_224 * 10**15] * 2
