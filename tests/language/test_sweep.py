"""Sweeps over sequence lengths and batch sizes: one tidy table, counts by hand."""

from __future__ import annotations

import pytest
import torch

from moduleprofiler.language import plot_sweep, sweep
from tests.language.tiny import HIDDEN, LAYERS, VOCAB, gpt2

PER_TOKEN_LAYER = 12 * HIDDEN * HIDDEN  # GPT-2: c_attn, c_proj, MLP (see test_generation)


def forward_macs(batch: int, length: int) -> int:
    """GPT-2 forward: every position's logits, causal attention counted in full."""
    per_sequence = (LAYERS * (length * PER_TOKEN_LAYER + 2 * length * length * HIDDEN)
                    + length * HIDDEN * VOCAB)
    return batch * per_sequence


def test_grid_rows_and_counts() -> None:
    frame = sweep(gpt2(), seq_lens=[4, 8], batch_sizes=[1, 2])
    assert list(zip(frame["batch_size"], frame["seq_len"], strict=True)) == [
        (1, 4), (1, 8), (2, 4), (2, 8)]
    # batch 1, 4 tokens: 2 x (4 x 49,152 + 2 x 16 x 64) + 4 x 6,400 = 393,216 + 4,096 + 25,600
    assert forward_macs(1, 4) == 422_912
    assert list(frame["macs"]) == [forward_macs(b, s) for b, s in ((1, 4), (1, 8), (2, 4),
                                                                    (2, 8))]
    assert (frame["flops"] == 2 * frame["macs"]).all()
    assert list(frame["tokens"]) == [4, 8, 8, 16]
    assert frame["flops_per_token"].iloc[0] == 2 * 422_912 / 4
    assert frame["complete"].all()
    assert set(frame["params"]) == {sum(p.numel() for p in gpt2().parameters())}


def test_backward_time_and_memory_columns() -> None:
    frame = sweep(gpt2(), [4], backward=True, time=True, memory=True, num_iters=3,
                  warmup_iters=1)
    assert frame["self_backward_flops"].iloc[0] > frame["flops"].iloc[0]
    assert frame["time_ms"].iloc[0] > 0
    assert frame["peak_bytes"].iloc[0] > 0


def test_any_model_with_its_own_inputs() -> None:
    model = torch.nn.Linear(8, 3)
    frame = sweep(model, [2, 5], make_input=lambda batch, length: torch.randn(batch, length, 8))
    # rows = length; 3 outputs x 8 multiply-accumulates each
    assert list(frame["macs"]) == [2 * 24, 5 * 24]


def test_figure() -> None:
    pytest.importorskip("matplotlib")
    frame = sweep(gpt2(), [4, 8], [1, 2])
    figure = plot_sweep(frame, y="flops")
    axes = figure.axes[0]
    assert [line.get_label() for line in axes.get_lines()] == ["batch 1", "batch 2"]
    assert list(axes.get_lines()[1].get_ydata()) == list(frame["flops"][2:])
    with pytest.raises(KeyError, match="time_ms"):
        plot_sweep(frame, y="time_ms")


def test_bad_sizes() -> None:
    with pytest.raises(ValueError, match="seq_lens"):
        sweep(gpt2(), [])
    with pytest.raises(ValueError, match="batch_sizes"):
        sweep(gpt2(), [4], [0])
