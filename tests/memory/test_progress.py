"""Memory passes show the timing passes' progress bar: module calls of the inference pass, then
the training pass's forward and backward, with a total once the first pass has counted its
calls; silent when not on a terminal or with ``progress=False``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, progress
from moduleprofiler.memory import measure_memory


class FakeBar:
    """What tqdm's bar is told."""

    def __init__(self, total: int | None) -> None:
        self.n = 0
        self.total = total
        self.seen: list[tuple[int, int | None, str]] = []
        self.text = ""
        self.closed = False

    def update(self, steps: int) -> None:
        self.n += steps
        self.seen.append((self.n, self.total, self.text))

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.text = text

    def close(self) -> None:
        self.closed = True


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_calls_forward_then_backward_with_a_total(monkeypatch: pytest.MonkeyPatch) -> None:
    bars: list[FakeBar] = []

    def fake(label: str, total: int | None, unit: str, delay: float) -> FakeBar:
        assert (label, unit) == ("measuring memory", "calls")
        bars.append(FakeBar(total))
        return bars[-1]

    monkeypatch.setattr(progress, "_tqdm_bar", fake)
    measure_memory(mlp(), torch.randn(3, 4), train=True, progress=True)
    (bar,) = bars
    # a step is counted before its text is set: the text lags one update behind
    steps = [(done, total) for done, total, _ in bar.seen]
    # 4 calls (the Sequential and its 3 layers) in the inference pass, no total yet; then
    # 4 forward calls of the training pass out of 3 x 4 = 12 steps, and one backward step per
    # call that owns backward work: the second Linear, the ReLU, the first Linear (the
    # Sequential runs no operator of its own; the loss is outside every call)
    assert steps == [(1, None), (2, None), (3, None), (4, None),
                     (5, 12), (6, 12), (7, 12), (8, 12), (9, 12), (10, 12), (11, 12)]
    assert bar.text == "training backward" and bar.closed


@pytest.mark.parametrize("enabled", [None, False])
def test_silent_off_a_terminal_or_when_off(enabled: bool | None,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    made: list[Any] = []
    monkeypatch.setattr(progress, "_tqdm_bar", lambda *args: made.append(args))
    report = ModuleProfiler().measure_memory(mlp(), torch.randn(3, 4), train=True,
                                             progress=enabled)  # capsys' stderr: no terminal
    assert made == [] and capsys.readouterr().err == ""
    assert report.training is not None and report.training.peak_bytes > 0


def test_plain_line_without_tqdm(monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "_tqdm_bar", lambda *args: None)  # tqdm not installed
    measure_memory(mlp(), torch.randn(3, 4), progress=True)
    err = capsys.readouterr().err
    assert err.startswith("\rmeasuring memory: 1 calls, inference forward [")
    assert err.endswith("\r\x1b[K")  # erased at the end


def test_progress_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="progress must be True or False"):
        measure_memory(mlp(), torch.randn(3, 4), progress="yes")  # type: ignore[arg-type]
