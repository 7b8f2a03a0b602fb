"""Warnings about the machine: the page-fault warning only when faults cost a measurable share
of the iteration."""

from __future__ import annotations

import pytest
import torch

from moduleprofiler.timing.environment import (
    FAULT_SHARE_LIMIT,
    MINOR_FAULT_US,
    environment_warnings,
    fault_share,
)

CPU = torch.device("cpu")
QUIET = {"loadavg": 0.5, "cpu_count": 2, "intraop_threads": 1}


def test_fault_share_on_synthetic_numbers():
    assert MINOR_FAULT_US == 3.0 and FAULT_SHARE_LIMIT == 0.01
    # 2 faults x 3 us = 6 us of a 13 ms iteration: 0.046 %
    assert fault_share(2, 13.0) == pytest.approx(6e-3 / 13.0)
    # 50 faults x 3 us = 150 us of 13 ms: 1.15 %
    assert fault_share(50, 13.0) == pytest.approx(0.15 / 13.0)


def test_page_faults_warn_only_above_one_percent_of_the_iteration():
    # GPT-2 on a CPU: 2 faults per 13 ms iteration -> silent
    assert environment_warnings(QUIET, 2.0, CPU, 13.0) == []
    # the limit: 1 % of 13 ms = 130 us = 43.3 faults at 3 us; 43 stay silent, 44 warn
    assert environment_warnings(QUIET, 43.0, CPU, 13.0) == []
    (message,) = environment_warnings(QUIET, 44.0, CPU, 13.0)
    # 44 x 3 us = 132 us = 1.02 % of 13 ms
    assert message.startswith("44 minor page faults per timed iteration, about 1.0 % of "
                              "the 13 ms median iteration (at ~3 us a fault)")
    # a short iteration: 2 faults (6 us) of a 0.1 ms iteration are 6 %
    assert "6.0 %" in environment_warnings(QUIET, 2.0, CPU, 0.1)[0]
    # a fault every 7th iteration is counted as such, not rounded to "0": 0.15 x 3 us =
    # 0.45 us of a 9 us iteration = 5.0 %
    assert environment_warnings(QUIET, 0.15, CPU, 0.009)[0].startswith(
        "0.15 minor page faults per timed iteration, about 5.0 % of the 0.009 ms")
    # unknown iteration time or unknown faults: no share can be told, nothing is said
    assert environment_warnings(QUIET, 500.0, CPU, None) == []
    assert environment_warnings(QUIET, None, CPU, 0.1) == []
    # faults are a CPU-timing matter: a GPU's times do not move with them
    assert environment_warnings(QUIET, 500.0, torch.device("cuda", 0), 0.1) == []


def test_load_warning_is_kept():
    (message,) = environment_warnings({"loadavg": 3.5, "cpu_count": 2, "intraop_threads": 2},
                                      None, CPU, 13.0)
    assert message.startswith("load average 3.50 exceeds the 2 CPU cores")
