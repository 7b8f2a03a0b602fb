"""Tied parameters: owned once, by their first holder, in every share and per-type view, and
marked where they are held again (``shared_with``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.export.report import _charts
from tests.export.test_columns import VIEWS, command_line


class TiedHead(nn.Module):
    """An embedding, a middle layer and an output layer tied to the embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 16)  # 100 x 16 = 1,600
        self.mid = nn.Linear(16, 16)  # 16 x 16 + 16 = 272
        self.out = nn.Linear(16, 100, bias=False)
        self.out.weight = self.emb.weight  # tied: the same 1,600

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.mid(self.emb(x)))


@pytest.fixture(scope="module")
def profile() -> Profile:
    torch.manual_seed(0)
    return ModuleProfiler().profile(TiedHead(), torch.randint(0, 100, (2, 5)))


def test_own_parameters_add_up_to_the_model(profile: Profile) -> None:
    modules = profile.to_df("module").set_index("module")
    # 1,600 + 272 = 1,872 parameters; the tied weight is the Embedding's own, once
    assert profile.total_params == 1872
    assert list(modules["self_params"]) == [0, 1600, 272, 0]
    assert modules["self_params"].sum() == 1872  # was 3,472: the tie counted twice
    # the output layer still holds the weight (its params), and names its owner
    assert modules.loc["out", "params"] == 1600
    assert modules.loc["out", "shared_with"] == "emb"
    assert modules["shared_with"].isna().sum() == 3


def test_per_type_own_parameters_add_up_to_the_model(profile: Profile) -> None:
    types = profile.to_df("type").set_index("type")
    # Linear: mid's 272 (out owns none); Embedding: 1,600; the root owns none
    assert types.loc["Linear", "self_params"] == 272
    assert types.loc["Embedding", "self_params"] == 1600
    assert types["self_params"].sum() == 1872


def test_the_tree_marks_the_tied_layer(profile: Profile) -> None:
    text = profile.tree(width=0).to_text()
    assert "out (Linear) [shared with emb]" in text
    assert "mid (Linear) [shared" not in text


def test_the_flat_table_notes_the_tied_layer(profile: Profile) -> None:
    # emb's 1,600 and out's 1,600 are one weight: the rows say 1,600 twice, the total once
    text = profile.table(width=0).to_text()
    assert "total: params 1.87K" in text
    assert "note: params and buffers include tied tensors another module owns, counted once " \
           "in the total: out (owned by emb)" in text
    # a table without parameter columns has nothing to say of them
    assert "tied" not in profile.table(["ops"], width=0).to_text()


def test_the_report_bars_add_up_to_the_model(profile: Profile) -> None:
    chart = next(c for c in _charts(profile) if c is not None and c.id == "params-by-module")
    labels = [bar.label for bar in chart.bars]
    # emb 1,600 (85.5 %) and mid 272 (14.5 %); out owns none and draws no bar
    assert labels == ["emb (Embedding)", "mid (Linear)"]
    assert [bar.pct for bar in chart.bars] == ["85.5%", "14.5%"]


def test_a_model_without_ties_has_no_shared_column() -> None:
    plain = ModuleProfiler().profile(nn.Linear(2, 2), torch.randn(1, 2))
    assert "shared_with" not in plain.to_df("module")
    assert "shared_with" not in plain.to_df("call")


@pytest.mark.parametrize("view_name", list(VIEWS))
def test_shared_with_in_every_view(profile: Profile, view_name: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    if view_name == "command_line":
        command_line(profile, "shared_with", capsys)
    else:
        VIEWS[view_name](profile, "shared_with")


class DeepTie(nn.Module):
    """An output layer tied to an embedding two levels down, whose owner's path is long."""

    def __init__(self) -> None:
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.word_token_embedding = nn.Embedding(100, 16)
        self.lm_head = nn.Linear(16, 100, bias=False)
        self.lm_head.weight = self.transformer.word_token_embedding.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.transformer.word_token_embedding(x))


@pytest.mark.parametrize("width", [60, 50, 44])
def test_a_narrow_tree_shortens_the_shared_mark_not_the_modules_type(width: int) -> None:
    # the mark's owner is elided first (then the mark goes short): eliding the label in its
    # middle kept the mark whole and cut the type, "lm_head (...[shared with ...]"
    profile = ModuleProfiler().profile(DeepTie(), torch.randint(0, 100, (2, 5)))
    text = profile.to_text(width=width, columns=["params"]) or ""
    row = next(line for line in text.splitlines() if "lm_head" in line)
    assert len(row) <= width and "lm_head (Linear) [shared" in row
    full = profile.to_text(width=0, columns=["params"]) or ""
    assert "lm_head (Linear) [shared with transformer.word_token_embedding]" in full


def test_elide_label_keeps_name_and_type_before_the_mark() -> None:
    from moduleprofiler.export.names import elide_label

    label = "lm_head (Linear) [shared with transformer.wte]"  # 46 characters
    assert elide_label(label, 46) == label
    # 44: "lm_head (Linear) [shared with ]" is 31, leaving 13 for the owner (15, elided)
    assert elide_label(label, 44) == "lm_head (Linear) [shared with tr...rmer.wte]"
    # 30: 30 - 31 leaves no room for the owner: the mark goes short (16 + 9 = 25)
    assert elide_label(label, 30) == "lm_head (Linear) [shared]"
    assert all(len(elide_label(label, n)) <= n for n in range(4, 50))


class SharedAcrossOneType(nn.Module):
    """Three embeddings sharing one weight (T5's and BART's ``shared``, ``encoder.embed_tokens``
    and ``decoder.embed_tokens``), two layers sharing a bias and two batch norms sharing their
    running mean."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Embedding(100, 16)  # 1,600
        self.encoder = nn.Embedding(100, 16)
        self.decoder = nn.Embedding(100, 16)
        self.encoder.weight = self.decoder.weight = self.shared.weight
        self.a = nn.Linear(4, 4)  # 16 + 4 = 20
        self.b = nn.Linear(4, 4)  # 16 of its own, the bias a's
        self.b.bias = self.a.bias
        self.norm_a = nn.BatchNorm1d(4)  # buffers: mean 4, var 4, batches 1 = 9
        self.norm_b = nn.BatchNorm1d(4)
        self.norm_b.running_mean = self.norm_a.running_mean  # its own var and batches: 5

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = torch.ones(2, 4)
        return (self.encoder(ids).sum() + self.decoder(ids).sum()
                + self.norm_b(self.norm_a(self.b(self.a(x)))).sum())


def test_a_tensor_several_modules_of_one_type_hold_counts_once_per_type() -> None:
    model = SharedAcrossOneType().eval()
    profile = ModuleProfiler().profile(model, torch.zeros(2, 3, dtype=torch.long))
    types = profile.to_df("type").set_index("type")
    # Embedding: the one 1,600 weight, not 3 x 1,600 = 4,800; Linear: 16 + 16 + 4 = 36, not
    # 40; BatchNorm1d: 9 + 5 = 14 buffer elements, not 18
    assert types.loc["Embedding", "params"] == 1600
    assert types.loc["Embedding", "param_bytes"] == 1600 * 4
    assert types.loc["Linear", "params"] == 36
    assert types.loc["Linear", "trainable_params"] == 36
    assert types.loc["BatchNorm1d", "buffers"] == 14
    assert types.loc["BatchNorm1d", "params"] == 16  # two weights and two biases of 4
    assert profile.total_params == 1600 + 36 + 16
    top = profile.top(by="params", depth=1).frame.set_index("type")
    assert top.loc["Embedding", "params"] == 1600
    again = Profile.from_json(profile.to_json())  # the shared tensors travel with the file
    assert again.to_df("type").set_index("type").loc["Embedding", "params"] == 1600


class Rotary(nn.Module):
    """A layer holding a rotary ``inv_freq`` buffer that every layer registers (the same
    tensor), and a Linear(8, 8)."""

    def __init__(self, inv_freq: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("inv_freq", inv_freq)  # 8 float32: 32 bytes
        self.proj = nn.Linear(8, 8)  # 64 + 8 = 72 parameters

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * self.inv_freq


class RotaryLast(Rotary):
    """The same layer under another type name."""


@pytest.fixture(scope="module")
def rotary() -> Profile:
    inv_freq = torch.ones(8)
    model = nn.Sequential(Rotary(inv_freq), RotaryLast(inv_freq))
    return ModuleProfiler().profile(model, torch.randn(2, 8))


def test_a_shared_buffer_is_marked_as_a_tied_weight(rotary: Profile) -> None:
    # the second layer holds the first layer's buffer: named, as a tied weight's owner is
    assert [(info.path, info.shared_with) for info in rotary.modules] == [
        ("", None), ("0", None), ("0.proj", None), ("1", "0"), ("1.proj", None)]
    assert "1 (RotaryLast) [shared with 0]" in rotary.tree(width=0).to_text()
    text = rotary.table(["buffers", "buffer_bytes"], width=0).to_text()
    assert "counted once in the total: 1 (owned by 0)" in " ".join(text.split())


def test_shares_of_a_shared_buffer_are_of_the_models_buffers_counted_once(
        rotary: Profile) -> None:
    # the model holds 8 buffer elements, 32 bytes; each layer type holds all of them: 100 %
    # each (the rows' sum, 2 x 32 = 64 bytes, made them 50 %; at every depth 3 x 8 = 24
    # elements, 33.3 %)
    assert (rotary.modules[0].buffers, rotary.modules[0].buffer_bytes) == (8, 32)
    depth_one = rotary.top(by="buffer_bytes", depth=1).frame.set_index("type")
    assert list(depth_one["buffer_bytes"]) == [32, 32]
    assert list(depth_one["buffer_bytes_pct"]) == [100.0, 100.0]
    every = rotary.top(by="buffers").frame.set_index("type")
    assert every.loc["RotaryLast", "buffers_pct"] == 100.0
    # parameters are not shared here: 72 each of 144, 50 %
    assert list(rotary.top(by="params", depth=1).frame["params_pct"]) == [50.0, 50.0]


def test_shares_of_parameter_bytes_are_of_the_model_with_the_tie_once(profile: Profile) -> None:
    top = profile.top(by="param_bytes", depth=1).frame.set_index("type")
    # Embedding 1,600 x 4 = 6,400 bytes of the model's 1,872 x 4 = 7,488: 85.5 % (of the rows'
    # sum 6,400 + 1,088 + 6,400 = 13,888 it read 46.1 %)
    assert top.loc["Embedding", "param_bytes"] == 6400
    assert round(float(top.loc["Embedding", "param_bytes_pct"]), 1) == 85.5


def test_a_module_registered_twice_keeps_the_per_type_sums_of_shared_tensors() -> None:
    # one module registered at two places sends the scan down its slow path, which listed no
    # shared tensor: Embedding read 4,800 (the weight three times), BatchNorm1d 18 buffers
    model = SharedAcrossOneType().eval()
    plain = ModuleProfiler().profile(model, torch.zeros(2, 3, dtype=torch.long))
    model.alias = model.a  # registered again, under another name
    aliased = ModuleProfiler().profile(model, torch.zeros(2, 3, dtype=torch.long))
    columns = ["params", "param_bytes", "trainable_params", "buffers", "buffer_bytes"]
    types = aliased.to_df("type").set_index("type")
    assert types.loc["Embedding", "params"] == 1600
    assert types.loc["BatchNorm1d", "buffers"] == 14
    assert types.loc["Linear", "params"] == 36
    assert types[columns].equals(plain.to_df("type").set_index("type")[columns])
    assert [info.shared_tensors for info in aliased.modules] == [
        info.shared_tensors for info in plain.modules]


def test_a_per_type_view_marks_a_tensor_counted_in_two_types(profile: Profile) -> None:
    # top(by="params", depth=1) showed Embedding 1,600 and Linear 272 + 1,600 = 1,872 of
    # 1,872 parameters: shares of 85.5% and 100.0% (185.5% together), with no word that the
    # tied 1,600 are in both rows, where the table and the tree mark the tie
    view = profile.top(None, by="params", depth=1)
    frame = view.frame.set_index("type")
    assert frame.loc["Embedding", "params"] == 1600
    assert frame.loc["Linear", "params"] == 272 + 1600
    assert frame.loc["Linear", "params_pct"] == 100.0
    assert [note for note in view.notes if "tied" in note] == [
        "params and buffers include tied tensors that a module of another type owns: counted "
        "in both types' rows (and their shares), once in the total: out (Linear, owned by "
        "emb)"]
    # the own parameters count each tensor once: no overlap, no note
    assert not [note for note in profile.top(None, by="params").notes if "tied" in note]
