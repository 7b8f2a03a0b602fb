"""The two chains: the host issues, the device runs what was issued."""

from __future__ import annotations

import pytest

from moduleprofiler.prediction.chain import LAUNCH_LATENCY_US, QUEUED_GAP_US, Step, run_chain


def test_a_host_bound_pass_takes_the_host_time() -> None:
    # three 10 us launches of 1 us kernels: the device waits for each; the last kernel
    # starts at 30 + latency and ends 1 us later
    result = run_chain([Step(10, 1)] * 3)
    assert result.latency_us == pytest.approx(30 + LAUNCH_LATENCY_US + 1)
    assert (result.host_us, result.device_us) == (30, 3)
    assert result.host_bound


def test_a_device_bound_pass_queues_its_kernels() -> None:
    # two 1 us launches of 100 us kernels: the second waits for the first and starts one
    # queued gap after it ends; 1 + 2 (latency) + 100 + 1.2 (gap) + 100 = 204.2 us
    result = run_chain([Step(1, 100), Step(1, 100)])
    assert (LAUNCH_LATENCY_US, QUEUED_GAP_US) == (2.0, 1.2)
    assert result.latency_us == pytest.approx(204.2)
    assert result.device_us == 200  # the gap is idle, not busy
    assert not result.host_bound


def test_no_queued_gap_where_the_device_waited_for_the_launch() -> None:
    # a 1 us kernel, then a 10 us launch: the device is idle when the second is issued, so it
    # starts after the launch latency alone: 10 + 10 + 2 + 1 = 23 us (no gap added)
    result = run_chain([Step(10, 1), Step(10, 1)])
    assert result.latency_us == pytest.approx(23)


def test_a_synchronising_operator_waits_for_the_device() -> None:
    # kernel of 50 us issued at 1 us (ends at 1 + latency + 50); the .item() waits for it and
    # then costs 5 us of host time
    result = run_chain([Step(1, 50), Step(5, 0, syncs=True)])
    assert result.latency_us == pytest.approx(1 + LAUNCH_LATENCY_US + 50 + 5)


def test_views_cost_host_time_only() -> None:
    result = run_chain([Step(2, 0), Step(3, 0)])
    assert (result.latency_us, result.device_us) == (5, 0)
