"""The progress display: silent unless asked or on a terminal, the time left estimated from the
rate so far, a plain stderr line when tqdm is not installed."""

from __future__ import annotations

import pytest

from moduleprofiler import progress
from moduleprofiler.progress import Progress, eta_text


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr("moduleprofiler.progress.time.perf_counter", fake)
    return fake


def test_eta_text() -> None:
    assert eta_text(75.2) == "1:15" and eta_text(3725) == "1:02:05" and eta_text(-3) == "0:00"


def test_plain_line_with_the_time_left(clock: Clock, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "_tqdm_bar", lambda *args: None)  # tqdm not installed
    bar = Progress("timing modules", True)
    bar.update(10, 1000)  # the rate is measured from here
    clock.now += 20.0
    bar.update(110, 1000)  # 100 iterations in 20 s: 890 left take 178 s = 2:58
    bar.close()
    err = capsys.readouterr().err
    assert "\rtiming modules: 110/1000 iterations [20.0 s, ETA 2:58]" in err
    assert err.endswith("\r\x1b[K")  # the line is erased at the end


def test_silent_when_disabled_or_not_a_terminal(clock: Clock,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    for enabled in (False, None):  # capsys' stderr is no terminal
        bar = Progress("benchmark", enabled)
        bar.update(1, 10)
        clock.now += 30.0
        bar.update(5, 10)
        bar.close()
    assert capsys.readouterr().err == ""


def test_tqdm_bar_when_installed(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tqdm")
    made: list[object] = []
    real = progress._tqdm_bar

    def spy(*args: object) -> object:
        bar = real(*args)  # type: ignore[arg-type]
        made.append(bar)
        return bar

    monkeypatch.setattr(progress, "_tqdm_bar", spy)
    bar = Progress("timing training steps", True, unit="steps")
    bar.update(3, 40)
    bar.update(7, 40, "CI ±1.00%")
    assert made and made[0].n == 7 and made[0].total == 40  # type: ignore[attr-defined]
    bar.close()


def test_warm_up_updates_do_not_count_towards_the_rate(clock: Clock,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "_tqdm_bar", lambda *args: None)
    bar = Progress("timing modules", True)
    bar.update(0, 100, "warming up")  # shown from the start, no rate yet
    clock.now += 30.0  # a long warm-up: not progress
    bar.update(10, 100)  # the rate is measured from here
    clock.now += 10.0
    bar.update(20, 100)  # 10 iterations in 10 s: 80 left take 80 s = 1:20 (not 2:00)
    bar.close()
    err = capsys.readouterr().err
    assert "\rtiming modules: 0/100 iterations, warming up [0.0 s]" in err
    assert "\rtiming modules: 20/100 iterations [40.0 s, ETA 1:20]" in err


def test_tqdm_rate_reads_per_iteration() -> None:
    pytest.importorskip("tqdm")
    bar = progress._tqdm_bar("timing modules", 10, "iterations", 0.0)
    try:
        # slow steps: seconds per iteration; fast ones: iterations per second
        slow = bar.format_meter(1, 10, 3.61, unit=bar.unit)
        fast = bar.format_meter(25, 100, 2.0, unit=bar.unit)
    finally:
        bar.close()
    assert "3.61s/iteration" in slow and "s/ " not in slow  # before: "3.61s/ iterations"
    assert "12.50iteration/s" in fast
