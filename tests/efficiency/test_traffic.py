"""Bytes moved per module call, hand-computed from the aten operators each call runs."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from moduleprofiler import FormulaError, ModuleProfiler
from moduleprofiler.efficiency import TrafficListener, operator_bytes


def traffic(model: nn.Module, x: torch.Tensor, **options: object):
    return ModuleProfiler().profile(model, x, listeners=[TrafficListener()], **options)


def test_mlp_forward_bytes_by_hand():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    profile = traffic(model, torch.randn(3, 4))
    moved = {r.path: r.metrics["self_moved_bytes"] for r in profile.records}
    # addmm(bias[8], x[3,4], W.t()[4,8]) (the transpose is a view: nothing moved):
    # reads 4 * (8 + 12 + 32) = 208, writes 4 * 3 * 8 = 96 -> 304
    assert moved["0"] == 304
    # relu reads and writes 3 * 8 floats: 2 * 96 = 192
    assert moved["1"] == 192
    # addmm(bias[2], h[3,8], W.t()[8,2]): 4 * (2 + 24 + 16) = 168 read, 4 * 6 = 24 written
    assert moved["2"] == 192
    assert moved[""] == 0  # the container runs no operator of its own
    calls = profile.to_df("call").set_index("module")
    assert calls.loc["__root__", "moved_bytes"] == 304 + 192 + 192
    assert list(calls["self_launches"]) == [0, 1, 1, 1]
    # the root's launches hold its three children's: 0 + 1 + 1 + 1
    assert list(calls["launches"]) == [3, 1, 1, 1]


def test_views_move_nothing_and_a_repeated_input_is_read_once():
    class AddSelf(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x + x).view(-1).t()

    # x + x reads x once (24 bytes) and writes 24; view and t are views: 48
    record = traffic(AddSelf(), torch.randn(2, 3)).records[0]
    assert record.metrics == {"self_moved_bytes": 48, "self_launches": 1}


def test_in_place_reads_and_writes_its_target():
    class Bump(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.add_(1)

    # add_ reads the 4 floats and writes them back: 16 + 16
    assert traffic(Bump(), torch.randn(4)).records[0].metrics["self_moved_bytes"] == 32


def test_an_expanded_input_is_read_once_per_distinct_element():
    aten = torch.ops.aten
    row, other = torch.randn(1, 4), torch.randn(1000, 4)
    wide = row.expand(1000, 4)  # strides (0, 1): 4 distinct floats
    # add reads the 4 floats of wide (16 bytes, not 16,000) and the 16,000 of other, writes
    # 16,000: 32,016
    assert operator_bytes(aten.add.Tensor, (wide, other), {}, wide + other) == 32_016
    # clone (the copy under reshape of an expanded tensor, as repeat_kv makes): 16 + 16,000
    assert operator_bytes(aten.clone.default, (wide,), {}, wide.clone()) == 16_016
    # a scalar expanded to (3, 2) and transposed: all strides 0, one float read
    scalar = torch.ones(()).expand(3, 2).t()
    assert operator_bytes(aten.mul.Tensor, (scalar, 2.0), {}, scalar * 2) == 4 + 24


def test_an_overwrite_writes_its_target_without_reading_it():
    aten = torch.ops.aten
    target, source = torch.empty(3, 4), torch.randn(3, 4)
    # zero_ / fill_ (torch.zeros, torch.full) and a random fill write the 48 bytes only
    assert operator_bytes(aten.zero_.default, (target,), {}, target) == 48
    assert operator_bytes(aten.fill_.Scalar, (target, 1.0), {}, target) == 48
    assert operator_bytes(aten.normal_.default, (target,), {}, target) == 48
    # copy_ reads the source's 48 and writes the target's 48
    assert operator_bytes(aten.copy_.default, (target, source), {}, target) == 96
    # add_ does read its target: 48 + 48 read, 48 written
    assert operator_bytes(aten.add_.Tensor, (target, source), {}, target) == 144

    class Zeros(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.zeros(3, 4) + x

    # zeros: empty (nothing) then zero_ writes 48; the add reads 48 + 48 and writes 48: 192
    assert traffic(Zeros(), torch.randn(3, 4)).records[0].metrics["self_moved_bytes"] == 192


def test_a_scatter_moves_only_the_elements_it_touches():
    aten = torch.ops.aten
    cache, new = torch.zeros(2, 4, 100, 8), torch.randn(2, 4, 1, 8)
    # a cache update writes the 64 new floats (256 bytes), not the 25,600-byte cache twice:
    # reads new 256 + position 8, writes 256 = 520 (it was 25,600 + 264 + 25,600 = 51,464)
    assert operator_bytes(aten.index_copy_.default, (cache, 2, torch.tensor([5]), new), {},
                          cache) == 520
    table, rows, values = torch.zeros(1000, 4), torch.tensor([1, 7]), torch.randn(2, 4)
    # table[rows] = values: reads 16 (rows) + 32 (values), writes 2 rows of 4 floats: 80
    assert operator_bytes(aten.index_put_.default, (table, [rows], values), {}, table) == 80
    # accumulating (index_put_ with accumulate, index_add_) also reads the 32 touched bytes
    assert operator_bytes(aten.index_put_.default, (table, [rows], values, True), {},
                          table) == 112
    assert operator_bytes(aten.index_add_.default, (table, 0, rows, values), {}, table) == 112
    # scatter_ touches as many elements as its index holds (4), whatever src's size (20):
    # reads index 32 + src 80, writes 16 = 128
    index, src = torch.tensor([[0, 1, 2, 3]]), torch.randn(5, 4)
    assert operator_bytes(aten.scatter_.src, (table, 0, index, src), {}, table) == 128

    class Update(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            cache = torch.zeros(100, 4)  # zero_ writes 1,600 bytes
            cache[torch.tensor([3])] = x  # index_put_: reads 8 + 16, writes 16
            return cache

    moved = traffic(Update(), torch.randn(1, 4)).records[0].metrics["self_moved_bytes"]
    assert moved == 1600 + 8 + 16 + 16


def test_a_masked_write_moves_the_mask_and_the_selected_elements() -> None:
    aten = torch.ops.aten
    x, value = torch.zeros(100, 4), torch.tensor(0.0)
    rows = torch.zeros(100, dtype=torch.bool)
    rows[:10] = True
    # x[rows] = 0.0: reads the 100-byte mask and the 4-byte value, writes the 10 selected
    # rows of 4 floats, 160 bytes: 264 (it read and wrote the whole 1,600-byte target: 3,304)
    assert operator_bytes(aten.index_put_.default, (x, [rows], value), {}, x) == 264
    # accumulating also reads the 160 bytes it adds into: 424
    assert operator_bytes(aten.index_put_.default, (x, [rows], value, True), {}, x) == 424
    # a mask over both dims selects elements: 5 x 2 of 400 mask bytes -> 400 + 4 + 10 * 4
    cells = torch.zeros(100, 4, dtype=torch.bool)
    cells[:5, :2] = True
    assert operator_bytes(aten.index_put_.default, (x, [cells], value), {}, x) == 444
    # a mask and a position: 10 rows x 1 column, 100 + 8 + 4 read, 10 * 4 written
    column = torch.tensor(2)
    assert operator_bytes(aten.index_put_.default, (x, [rows, column], value), {}, x) == 152
    # without data (meta) the selection is unknown: the whole target, as a plain in-place op
    meta = aten.index_put_.default(x.to("meta"), [rows.to("meta")], value.to("meta"))
    assert operator_bytes(aten.index_put_.default, (meta, [rows.to("meta")], value.to("meta")),
                          {}, meta) == 1600 + 100 + 4 + 1600

    class Clip(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x[x < 0] = 0.0  # lt reads 4 * 8 = 32 and writes an 8-byte mask
            return x

    signs = torch.tensor([-1.0, 2, -3, 4, 5, -6, 7, 8])
    # index_put_: the mask 8 and the 0-d value 4 read, the 3 negative floats written 12
    moved = traffic(Clip(), signs).records[0].metrics["self_moved_bytes"]
    assert moved == 32 + 8 + 8 + 4 + 12


def test_a_gather_reads_only_the_rows_it_returns():
    # Embedding(1000, 8) looking up 2 tokens: 2 rows x 8 x 4 = 64 bytes read from the table
    # (not its 1000 x 8 x 4 = 32,000), 2 x 8 bytes of indices, 64 written: 144
    lookup = traffic(nn.Embedding(1000, 8), torch.tensor([3, 7])).records[0]
    assert lookup.metrics["self_moved_bytes"] == 144
    table, rows = torch.randn(5, 3), torch.tensor([4, 0, 4, 2, 1, 3])
    aten = torch.ops.aten
    # index_select of 6 rows (72 bytes) from a 60-byte table: at most the whole table is read,
    # then 48 bytes of indices and the 72 written: 60 + 48 + 72 = 180
    picked = aten.index_select.default(table, 0, rows)
    assert operator_bytes(aten.index_select.default, (table, 0, rows), {}, picked) == 180


class _CacheWrite(nn.Module):
    """Writes two rows into a 1000 x 64 float cache (256,000 bytes) by ``write``."""

    def __init__(self, write: str) -> None:
        super().__init__()
        self.write = write
        self.register_buffer("cache", torch.zeros(1000, 64))

    def forward(self, rows: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        if self.write == "setitem":
            self.cache[at] = rows
        elif self.write == "fill":
            self.cache[at] = 0.0
        elif self.write == "columns":
            self.cache[:, at] = 0.0
        elif self.write == "index_copy_":
            self.cache.index_copy_(0, at, rows)
        else:
            self.cache.index_add_(0, at, rows)
        return rows


@pytest.mark.parametrize(("write", "moved"), [
    # 2 x 64 x 4 = 512 bytes of rows and 2 x 8 = 16 of positions read, the 512 written
    ("setitem", 512 + 16 + 512),
    ("index_copy_", 512 + 16 + 512),
    # index_add_ also reads the 512 bytes of cache it adds into
    ("index_add_", 512 + 16 + 512 + 512),
    # a 4-byte 0-d value and the positions read; 2 whole rows of 64 floats written
    ("fill", 4 + 16 + 2 * 64 * 4),
    # 1000 rows x 2 columns written
    ("columns", 4 + 16 + 1000 * 2 * 4),
])
def test_a_scatter_into_a_cache_moves_what_it_writes(write: str, moved: int) -> None:
    # it read the whole 256,000-byte cache and wrote it whole: 512,528 bytes for 2 rows,
    # 500 times what the kernel moves, in a figure said to be a lower bound
    rows, at = torch.randn(2, 64), torch.tensor([3, 7])
    profile = ModuleProfiler().profile(_CacheWrite(write), (rows, at),
                                       listeners=[TrafficListener()])
    assert profile.records[0].metrics["self_moved_bytes"] == moved
    # the functional form returns a new cache: it reads and writes it whole, as before
    aten = torch.ops.aten
    cache = torch.zeros(1000, 64)
    out = aten.index_copy.default(cache, 0, at, rows)
    assert operator_bytes(aten.index_copy.default, (cache, 0, at, rows), {}, out) == \
        256_000 + 16 + 512 + 256_000


def test_operator_bytes_of_views_and_allocations_is_none():
    x = torch.randn(2, 3)
    aten = torch.ops.aten
    assert operator_bytes(aten.t.default, (x,), {}, x.t()) is None
    assert operator_bytes(aten.empty.memory_format, ([4],), {}, torch.empty(4)) is None
    # clone: reads 24 bytes, writes 24
    assert operator_bytes(aten.clone.default, (x,), {}, x.clone()) == 48


def test_backward_bytes_by_hand_and_on_meta():
    profile = traffic(nn.Linear(4, 2, bias=False), torch.randn(3, 4), backward=True)
    metrics = profile.records[0].metrics
    # forward mm(x[3,4], W.t()[4,2]): 4 * (12 + 8) read + 4 * 6 written = 104
    assert metrics["self_moved_bytes"] == 104
    # weight gradient mm(grad.t()[2,3], x[3,4]); the default loss is a sum, so grad is its
    # scalar gradient expanded to (3, 2): one element read. 4 * (1 + 12) read + 4 * 8 written
    # = 84; the input needs no gradient
    assert metrics["self_backward_moved_bytes"] == 84
    assert metrics["self_backward_launches"] == 1
    meta = traffic(nn.Linear(4, 8, device="meta"), torch.randn(3, 4, device="meta"))
    assert meta.records[0].metrics["self_moved_bytes"] == 304  # shapes alone, as on the CPU


def test_without_backward_no_backward_columns():
    metrics = traffic(nn.Linear(4, 2), torch.randn(3, 4)).records[0].metrics
    assert "self_backward_moved_bytes" not in metrics  # not run: unknown, never 0


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


class _Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = _Block()
        self.out = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(checkpoint(self.block, x, use_reentrant=False))


def test_checkpoint_recomputation_is_counted_in_its_own_column():
    profile = traffic(_Checkpointed(), torch.randn(2, 4), backward=True)
    recompute = {r.path: r.metrics["self_recompute_macs"] for r in profile.records}
    # the backward of block.b re-runs block.a's addmm (2 rows x 4 x 4 = 32 MACs) and the relu,
    # then stops (what it needs is rebuilt): the rerun is block.a's own work again
    assert recompute == {"": 0, "block": 0, "block.a": 32, "block.b": 0, "out": 0}
    a, b = profile.calls("block.a")[0], profile.calls("block.b")[0]
    # block.b: its own backward (grad input 32 + grad weight 32 MACs); block.a: its weight
    # gradient (32; its input needs none) plus the rerun (32)
    assert b.self_backward_macs == 32 + 32
    assert a.self_backward_macs == 32 + 32
    assert a.metrics["self_recompute_moved_bytes"] > 0
    assert b.metrics["self_recompute_moved_bytes"] == 0
    # the inclusive columns hold the subtree's: block and the root have block.a's 32 MACs,
    # 2 x 32 = 64 FLOPs
    modules = profile.to_df("module").set_index("module")
    assert modules["recompute_macs"].to_dict() == {
        "__root__": 32, "block": 32, "block.a": 32, "block.b": 0, "out": 0}
    assert modules.loc["block", "recompute_flops"] == 64
    assert modules.loc["block", "self_recompute_flops"] == 0
    # block's own rerun work is the relu of its forward: 2 x 4 fp32 read and written, 64 bytes
    assert modules.loc["block", "recompute_moved_bytes"] == (
        a.metrics["self_recompute_moved_bytes"] + 64)


def test_recomputation_is_counted_with_the_profilers_own_operator_formulas():
    profiler = ModuleProfiler()
    profiler.operator_fn_map[torch.ops.aten.addmm] = lambda args, kwargs, out: (1000, 10)
    profile = profiler.profile(_Checkpointed(), torch.randn(2, 4), backward=True,
                               listeners=[TrafficListener()])
    # block.b's backward re-runs block.a's one addmm, block.a's own work again: the
    # profiler's formula says 10 MACs
    assert profile.calls("block.a")[0].metrics["self_recompute_macs"] == 10


def test_a_recomputed_operators_formula_result_is_checked():
    table = {torch.ops.aten.addmm: lambda args, kwargs, out: (1.5, 0)}
    with pytest.raises(FormulaError, match=r"operator formula for aten.addmm.default \(ops\) "
                                           r"for module 'block.a' \(Linear\) returned float 1.5"):
        ModuleProfiler().profile(_Checkpointed(), torch.randn(2, 4), backward=True,
                                 listeners=[TrafficListener(table)])


def test_a_nested_tensor_input_is_read_once_by_hand():
    # a nested tensor has no one shape or strides: asking raised and ended the pass
    class AddSelf(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + x

    x = torch.nested.nested_tensor([torch.randn(2, 4), torch.randn(3, 4)])
    # Linear(4, 3) on 2 + 3 = 5 rows of 4 floats: reads 4 * (5 * 4 + 3 * 4 + 3) = 140,
    # writes 4 * 5 * 3 = 60 -> 200
    assert traffic(nn.Linear(4, 3), x).records[0].metrics["self_moved_bytes"] == 200
    # x + x reads the 20 floats once (80 bytes) and writes 20 (80): 160
    assert traffic(AddSelf(), x).records[0].metrics["self_moved_bytes"] == 160
