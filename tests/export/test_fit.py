"""Text that fits the terminal: real models' trees and tables at 80 and 120 columns, folding of
identical blocks (numbers summed), shapes without the arguments that hold no tensor, and the
width and depth arguments checked."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest
import torch
import torchvision
from torch import nn
from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.export.fit import MIN_WIDTH, terminal_width

TOKENS = 16


def _on_meta(build: Callable[[], nn.Module], *inputs: torch.Tensor) -> Profile:
    """Profiled on the meta device: every count and shape, no memory, in a fraction of a
    second."""
    with torch.device("meta"):
        model = build().eval()
    return ModuleProfiler().profile(model, tuple(x.to("meta") for x in inputs))


@pytest.fixture(scope="module")
def models() -> dict[str, Profile]:
    ids = torch.zeros(1, TOKENS, dtype=torch.long)
    image = torch.zeros(1, 3, 224, 224)
    return {
        "gpt2": _on_meta(lambda: GPT2Model(GPT2Config(n_layer=3)), ids),
        "bert": _on_meta(lambda: BertModel(BertConfig(num_hidden_layers=2)), ids),
        "resnet18": _on_meta(lambda: torchvision.models.resnet18(weights=None), image),
        "vit_b_16": _on_meta(lambda: torchvision.models.vit_b_16(weights=None), image),
    }


IO_OPS = ["params", "input_shapes", "output_shapes", "macs", "ops",
          "ops_pct"]


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", ["gpt2", "bert", "resnet18", "vit_b_16"])
def test_no_line_is_wider_than_the_width(models: dict[str, Profile], name: str,
                                         width: int) -> None:
    profile = models[name]
    texts = {
        "tree": profile.tree().to_text(width=width),
        "tree with shapes": profile.tree(IO_OPS).to_text(width=width),
        "every block": profile.tree(IO_OPS).to_text(width=width, fold=False),
        "table": profile.table(sort_by="ops", limit=10).to_text(width=width),
        "calls": profile.table(aggregate="call").to_text(width=width),
        "top": profile.top(5).to_text(width=width),
    }
    for kind, text in texts.items():
        assert text is not None
        too_long = [line for line in text.splitlines() if len(line) > width]
        assert too_long == [], f"{name} {kind} at {width}: {too_long[:2]}"
    rows = str(texts["tree with shapes"]).splitlines()
    assert rows[0].startswith("module") and rows[2].startswith("__root__")


def test_what_is_hidden_is_named_and_comes_back_wider(models: dict[str, Profile]) -> None:
    tree = models["gpt2"].tree(IO_OPS)
    narrow = tree.to_text(width=80)
    assert narrow is not None
    assert "note: hidden to fit 80 columns: input, output" in narrow
    header = narrow.splitlines()[0].split()
    assert header == ["module", "params", "MACs", "ops", "ops", "%"]  # the numbers stay
    full = tree.to_text(width=0)
    assert full is not None and "hidden to fit" not in full
    assert full.splitlines()[0].split()[:4] == ["module", "params", "input", "output"]


def test_width_from_columns(monkeypatch: pytest.MonkeyPatch, models: dict[str, Profile]) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    assert terminal_width(None) == 120
    text = str(models["bert"].tree(IO_OPS))
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "hidden to fit 120 columns: input" in text
    monkeypatch.setenv("COLUMNS", "20")  # narrower than any table can be: the floor
    assert terminal_width(None) == MIN_WIDTH


def test_names_are_elided_in_the_middle(models: dict[str, Profile]) -> None:
    # BERT's deepest labels do not fit 80 columns beside the numbers: the start of the name
    # and the end of the label stay, the middle goes
    text = models["bert"].tree().to_text(width=80)
    assert text is not None
    elided = [line for line in text.splitlines() if "..." in line]
    assert elided and all(len(line) <= 80 for line in elided)
    assert any("-- self ..." in line and "Attention) x2" in line for line in elided)


def test_shapes_leave_out_arguments_without_tensors(models: dict[str, Profile]) -> None:
    text = models["gpt2"].tree(["input_shapes", "output_shapes"]).to_text(width=0, fold=False)
    assert text is not None
    root = text.splitlines()[2]
    assert root.split()[-2:] == ["{last_hidden_state:", "1x16x768}"]  # no "past_key_values: -"
    block = next(line for line in text.splitlines() if line.startswith("|   |-- 0 (GPT2Block)"))
    assert block.split()[4] == "1x16x768,"  # the hidden states come first
    # None keyword arguments (masks, caches, flags at their defaults) are not listed
    assert "encoder_attention_mask" not in text and "use_cache" not in text


def _folded(profile: Profile, columns: list[str] | None = None) -> pd.DataFrame:
    return profile.tree(columns).folded().frame.set_index("module")


def test_gpt2_blocks_fold_with_their_numbers_summed(models: dict[str, Profile]) -> None:
    profile = models["gpt2"]
    whole = profile.tree().frame.set_index("module")
    folded = _folded(profile)
    assert "h.0-2" in folded.index and "h.1" not in folded.index
    assert folded.loc["h.0-2", "calls"] == 3 and folded.loc["h.0-2", "type"] == "GPT2Block"
    # per block: c_attn 16*768*2304 = 28,311,552 MACs; c_proj 16*768*768 = 9,437,184;
    # the MLP 2 * 16*768*3072 = 75,497,472; QK^T and AV 2 * 12*16*16*64 = 393,216;
    # 113,639,424 per block, 340,918,272 for three
    assert folded.loc["h.0-2", "macs"] == 340_918_272 == profile.total_macs
    assert folded.loc["h.0-2.attn.c_attn", "macs"] == 3 * 28_311_552
    for column in ("params", "macs", "ops", "ops_pct"):
        blocks = [f"h.{i}" for i in range(3)]
        assert folded.loc["h.0-2", column] == pytest.approx(whole.loc[blocks, column].sum())
        children = [f"h.{i}.mlp.c_fc" for i in range(3)]
        assert folded.loc["h.0-2.mlp.c_fc", column] == pytest.approx(
            whole.loc[children, column].sum())
    # the folded rows under h add up to h itself, as the unfolded blocks do
    assert folded.loc["h.0-2", "ops"] == whole.loc["h", "ops"]
    assert len(folded) == len(whole) - 2 * 13  # two of the three 13-row blocks are gone
    text = profile.tree().to_text(width=80)
    assert text is not None and "`-- 0-2 (GPT2Block) x3" in text


def test_only_identical_blocks_fold(models: dict[str, Profile]) -> None:
    folded = _folded(models["resnet18"], ["params", "macs"])
    assert "layer1.0-1" in folded.index  # two identical BasicBlocks
    # layer2.0 downsamples (its own parameters and shapes), so layer2's blocks stay apart,
    # and layer1 ... layer4 differ in width although their shown columns are all sums
    assert {"layer2.0", "layer2.1", "layer1", "layer4"} <= set(folded.index)
    # 2 blocks x (2 convs 64*64*9 + 2 BN 2*64) = 2 * 73,984 = 147,968 parameters
    assert folded.loc["layer1.0-1", "params"] == 147_968
    vit = _folded(models["vit_b_16"], ["params"])
    assert "encoder.layers.encoder_layer_0-11" in vit.index
    assert vit.loc["encoder.layers.encoder_layer_0-11.mlp.0", "calls"] == 12


def test_nothing_to_fold_gives_the_same_view(models: dict[str, Profile]) -> None:
    tree = models["resnet18"].tree(max_depth=1)
    assert tree.folded() is tree


def test_invalid_view_arguments_are_errors(models: dict[str, Profile]) -> None:
    profile = models["resnet18"]
    with pytest.raises(ValueError, match="max_depth must be at least 0, got -1"):
        profile.tree(max_depth=-1)
    with pytest.raises(TypeError, match="max_depth must be an int or None"):
        profile.table(max_depth=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_pct must be a percentage from 0 to 100"):
        profile.tree(min_pct=150)
    with pytest.raises(ValueError, match="k must be at least 1, got 0"):
        profile.top(0)
    with pytest.raises(ValueError, match="depth must be at least 0"):
        profile.top(3, depth=-2)
    with pytest.raises(ValueError, match="limit must be at least 0"):
        profile.table(limit=-1)
    with pytest.raises(ValueError, match=r"width must be 0 \(no limit\) or at least 40, got 10"):
        profile.tree().to_text(width=10)
    with pytest.raises(TypeError, match="width must be an int"):
        profile.to_text(width="80")


def test_the_counting_convention_is_stated(models: dict[str, Profile]) -> None:
    text = models["resnet18"].tree(["params", "flops"], max_depth=0).to_text()
    assert text is not None
    lines = text.splitlines()
    # 1.81G MACs, so 3.63G FLOPs = 2 x MACs in the totals
    assert lines[-2] == "total: params 11.69M, MACs 1.81G, FLOPs (2xMACs) 3.63G, ops 3.64G"
    assert lines[-1] == "ops = multiplies + adds; MACs = multiply-accumulates; FLOPs = 2 x MACs"


def test_notes_are_wrapped(models: dict[str, Profile]) -> None:
    text = models["vit_b_16"].tree().to_text(width=80)
    assert text is not None
    note = [line for line in text.splitlines() if line.startswith("note: not called")]
    assert note and all(len(line) <= 80 for line in text.splitlines())
    continued = text.splitlines()[text.splitlines().index(note[0]) + 1]
    assert continued.startswith("  encoder.layers.encoder_layer_1")


# -- the columns asked about are the last to be hidden ----------------------------------------
def _timed_tiny() -> Profile:
    """tests/export/profiles.tiny with per-module times: row i has time 1.5 * i ms and self
    time 0.5 * i ms (root 0, conv 1, bn 2, block 3, block.act 4, block.fc 5, custom 6)."""
    from tests.export.profiles import tiny

    paths = ["", "conv", "bn", "block", "block.act", "block.fc", "custom"]
    return tiny().with_metrics({path: {"time_median_ms": 1.5 * i, "self_time_median_ms": 0.5 * i}
                                for i, path in enumerate(paths)})


def _header(text: str | None) -> str:
    assert text is not None
    return text.splitlines()[0]


def test_top_keeps_the_value_it_ranks_by() -> None:
    view = _timed_tiny().top(5, by="self_time_median_ms")
    text = view.to_text(width=60)
    # before: "self time median" was hidden at 60 columns, only its % shown; now the
    # other numbers go first (type 11 + self params 11 + self MACs 9 + 16 + 18 + 4 * 2 = 73)
    assert _header(text).split() == ["type", "self", "time", "median", "self", "time",
                                     "median", "%"]
    assert text is not None and all(len(line) <= 60 for line in text.splitlines())
    # Custom ranks first: self time 6 * 0.5 = 3 ms of 0.5 * (0+1+...+6) = 10.5 ms = 28.6 %
    assert text.splitlines()[2].split() == ["Custom", "3.000", "ms", "28.6%"]


def test_table_keeps_and_shows_its_sort_column() -> None:
    profile = _timed_tiny()
    text = profile.table(sort_by="self_time_median_ms").to_text(width=70)
    assert _header(text).endswith("self time median")
    # a sort column the columns named lack is shown: custom 6 * 0.5 = 3 ms first, then
    # block 3 * 0.5 = 1.5 ms (depth 1 only)
    table = profile.table(["params"], sort_by="self_time_median_ms", max_depth=1)
    assert table.columns == ("module", "type", "params", "self_time_median_ms")
    assert list(table.df["self_time_median_ms"])[:2] == [3.0, 1.5]


def test_a_column_a_note_names_is_kept() -> None:
    from moduleprofiler.export.view import View

    frame = pd.DataFrame({"module": ["a_rather_long_module_name_" * 2], "type": ["Linear"],
                          "calls": [1], "time_median_ms": [1.0], "self_time_median_ms": [1.0],
                          "ops_source": ["formula"]})
    columns = ("time_median_ms", "self_time_median_ms", "ops_source")
    plain = View(frame=frame, columns=columns, kind="tree")
    noted = View(frame=frame, columns=columns, kind="tree", notes=("see ops_source",))
    # 60 columns do not hold the name elided to 24 and three columns (24 + 11 + 16 + the
    # source's 8 + 3 * 2 = 65): a text column goes first, unless a note points at it
    assert "ops from" not in _header(plain.to_text(width=60))
    assert _header(noted.to_text(width=60)).endswith("ops from")


def test_a_low_confidence_flag_goes_with_its_time() -> None:
    from moduleprofiler.export.view import View

    frame = pd.DataFrame({"module": ["a_rather_long_module_name_" * 2], "type": ["Linear"],
                          "calls": [1], "time_median_ms": [1.0], "self_time_median_ms": [1.0],
                          "low_confidence": [True], "self_low_confidence": [False]})
    columns = ("time_median_ms", "self_time_median_ms", "low_confidence",
               "self_low_confidence")
    # the registry says which time each flag qualifies (ColumnSpec.qualifies); a text
    # column would go first, but a flag goes with its time, in every view: asked for by
    # name or not. At 80 columns the name elided to 24, two times (11, 16) and two flags
    # (14, 19) need 24 + 11 + 16 + 14 + 19 + 4 * 2 = 92: the second time goes first, with
    # its flag: 24 + 11 + 14 + 2 * 2 = 53 fit
    for view in (View(frame=frame, columns=columns, kind="tree"),
                 View(frame=frame, columns=columns, kind="tree", keep=columns)):
        assert _header(view.to_text(width=80)).split() == [
            "module", "time", "median", "low", "confidence"]
    # narrower, the last time left sheds its flag before it goes: 24 + 11 + 2 = 37
    narrow = View(frame=frame, columns=columns, kind="tree").to_text(width=40)
    assert _header(narrow).split() == ["module", "time", "median"]


def test_one_column_of_each_quantity_stays_longest() -> None:
    from moduleprofiler.export.fit import TextColumn, fit_columns

    def column(name: str, kind: str, cell: str, label: str | None = None) -> TextColumn:
        return TextColumn(name, label or name, [cell], True, kind, [None])

    names = TextColumn("module", "module", ["root (Net)"], False, "name", [None], identity=True)
    columns = [names, column("params", "count", "19.21K"),
               column("macs", "count", "606.21K", "macs with kids"),
               column("backward_macs", "count", "688.13K", "backward macs with kids"),
               column("backward_ops", "count", "1.37M", "backward ops with kids"),
               column("saved_bytes", "bytes", "32.00 KiB"),
               column("self_saved_bytes", "bytes", "32.00 KiB"),
               column("time_median_ms", "time", "101.2 us"),
               column("self_time_median_ms", "time", "101.2 us")]
    kept, hidden = fit_columns(columns, 80)
    # widths: module 10, params 6, macs 14, backward macs 23, saved_bytes 11,
    # time_median_ms 14, joined by 2 spaces: 10+6+14+23+11+14 + 5*2 = 88 > 80, so the
    # backward counts' first column goes too: 88 - 25 = 63
    assert [c.name for c in kept] == ["module", "params", "macs", "saved_bytes",
                                      "time_median_ms"]
    assert hidden == ["self_time_median_ms", "self_saved_bytes", "backward ops with kids",
                      "backward macs with kids"]


def test_a_deep_tree_keeps_its_prefixes_while_numbers_can_go() -> None:
    import torch
    from torch import nn

    from moduleprofiler import ModuleProfiler

    class Wide(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            inner: nn.Module = nn.Linear(4, 4)
            for _ in range(5):
                inner = nn.Sequential(inner)
            self.encoder_stack = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.encoder_stack(x)

    profile = ModuleProfiler().profile(Wide(), torch.randn(2, 4))
    text = profile.tree(["params", "macs", "ops", "flops", "output_bytes"]).to_text(width=60)
    rows = text.splitlines()[2:9]
    # the deepest row's prefix is 6 x 4 - 4 = 20 characters: names were elided to 24 (step
    # 3), which cut it ("     ...- 0 (Sequential)" read as another depth); now a label keeps
    # 16 characters after its prefix, and numbers go first
    assert [row.split("(")[0].rstrip() for row in rows] == [
        "__root__", "`-- encoder_stack", "    `-- 0", "        `-- 0", "            `-- 0",
        "                `-- 0", "                    `-- 0"]
    assert all(len(line) <= 60 for line in text.splitlines())


def test_a_tree_deeper_than_the_width_counts_its_outer_levels() -> None:
    model: nn.Module = nn.ReLU()
    for _ in range(30):
        model = nn.Sequential(model)
    text = ModuleProfiler().profile(model, torch.randn(2, 4)).tree().to_text(width=80)
    lines = text.splitlines()
    # the ReLU is at depth 30: 4 characters a level drew a 30 x 4 = 120-character prefix,
    # lines were 120 characters wide, every row past depth 16 beyond 80 columns
    assert max(map(len, lines)) <= 80
    rows = lines[2:33]
    assert rows[0] == "__root__ (Sequential)" and rows[-1].endswith("`-- 0 (ReLU)")
    # a prefix may take 80 - 16 = 64 characters (16 are kept for its label): depth 16 is
    # the deepest drawn whole; deeper rows keep (64 - 6) // 4 = 14 inner levels behind a
    # count of the outer ones, padded to the widest ("[+16] ": 30 - 14)
    assert rows[16] == " " * 60 + "`-- 0 (Sequential)"
    assert rows[17] == "[+3]  " + " " * 52 + "`-- 0 (Sequential)"
    assert rows[30] == "[+16] " + " " * 52 + "`-- 0 (ReLU)"
    for depth, row in enumerate(rows[17:], start=17):  # the count plus the levels drawn
        assert int(row[2:row.index("]")]) + (row.index("`") - 6) // 4 + 1 == depth


def test_wide_characters_align_and_fit_by_the_columns_they_take() -> None:
    class Named(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = nn.ModuleDict({"中文": nn.Linear(4, 4), "ab": nn.Linear(4, 4),
                                    "模型" * 40: nn.Linear(4, 4)})

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.d.values():
                x = layer(x)
            return x

    profile = ModuleProfiler().profile(Named(), torch.randn(2, 4))
    rows = profile.table(["params"]).to_text(width=0).splitlines()[2:7]
    # "d.中文" is 4 characters in 6 columns (a CJK character takes two): padded as 4, its
    # type and params stood 2 columns right of "d.ab"'s; now it has 2 spaces fewer
    by_name = {row.split()[0]: row for row in rows}
    assert by_name["d.中文"] == by_name["d.ab"].replace("d.ab  ", "d.中文", 1)
    # 80 CJK characters take 160 columns: elided by characters to fit 80, the row took
    # about 40 more; by columns it ends within the line
    fitted = profile.table(["params"]).to_text(width=80).splitlines()
    widths = [sum(2 if "\u4e00" <= ch <= "\u9fff" else 1 for ch in line) for line in fitted]
    assert max(widths) <= 80 and any(line.startswith("d.模型模型模...") for line in fitted)
    ends = {w for w, line in zip(widths, fitted) if line.endswith("  20")}
    assert len(ends) == 1  # the last column's cells end in one column


def test_names_elided_alike_show_where_they_differ() -> None:
    names = ["branch_alpha_output_projection_layer", "branch_beta_output_projection_layer"]

    class Branches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = nn.ModuleDict({"blk": nn.ModuleDict({n: nn.Linear(4, 4) for n in names})})

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.enc["blk"].values():  # type: ignore[union-attr]
                x = layer(x)
            return x

    profile = ModuleProfiler().profile(Branches(), torch.randn(2, 4))
    table = profile.table(["params", "macs", "ops", "flops", "output_shapes"]).to_text(width=80)
    # both rows read "enc.blk...output_projection_layer": two modules shown as one. Elided to
    # the column's 33 characters they now keep from 2 characters before their first
    # difference (character 15, after "enc.blk.branch_"): 33 - 16 (the shared end, cut to
    # half) - 2 x 3 (two ellipses) = 11 characters of it
    rows = [line.split()[0] for line in table.splitlines()[5:7]]
    assert rows == ["...h_alpha_out...projection_layer", "...h_beta_outp...projection_layer"]
    tree = profile.tree(["params", "macs", "ops", "flops", "output_bytes"]).to_text(width=60)
    # the siblings' labels were both "bra...r (Linear)" (16 characters, their floor)
    labels = [line.split()[1] for line in tree.splitlines()[5:7]]
    assert labels == ["...al...(Linear)", "...be...(Linear)"]
