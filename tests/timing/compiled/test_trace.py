"""Reading a compiled program's kernel records: each kernel's launch configuration from the
metadata the profiler keeps with its device record."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from moduleprofiler.timing.compiled.trace import (
    _keeping_metadata,
    _launch_configurations,
    launch_configuration,
)

KERNEL = ('"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 912, '
          '"registers per thread": 64, "shared memory": 49152, "blocks per SM": 1.48, '
          '"warps per SM": 5.9, "grid": [196, 1, 1], "block": [128, 1, 1], '
          '"est. achieved occupancy %": 9')
"""A kernel record's metadata as the profiler writes it (the fields of its trace's args)."""


def test_the_configuration_keeps_grid_block_registers_and_shared_memory():
    assert launch_configuration(KERNEL) == (
        "grid 196x1x1, block 128x1x1, registers 64, shared memory 49152")


def test_two_launches_of_one_configuration_read_alike():
    # another stream, correlation and queue time: the same configuration
    other = (KERNEL.replace('"stream": 7', '"stream": 3')
             .replace('"correlation": 912', '"correlation": 77').replace('"queued": 0',
                                                                        '"queued": 5'))
    assert launch_configuration(other) == launch_configuration(KERNEL)
    assert launch_configuration(KERNEL.replace("[196, 1, 1]", "[98, 2, 1]")).startswith(
        "grid 98x2x1, ")


def test_metadata_without_a_configuration_reads_as_none():
    assert launch_configuration("") == ""
    assert launch_configuration('"bytes": 4096, "memory bandwidth (GB/s)": 12.5') == ""
    assert launch_configuration("not json") == ""


@dataclass
class _Event:
    """The parts of a profiler event the reader calls."""

    device: object
    correlation: int
    start: int
    metadata: str

    def device_type(self) -> object:
        return self.device

    def correlation_id(self) -> int:
        return self.correlation

    def start_ns(self) -> int:
        return self.start

    def duration_ns(self) -> int:
        return 10

    def metadata_json(self) -> str:
        return self.metadata


def test_configurations_are_keyed_by_correlation_and_start():
    cuda = torch._C._autograd.DeviceType.CUDA
    cpu = torch._C._autograd.DeviceType.CPU
    replay = KERNEL.replace("[196, 1, 1]", "[8, 1, 1]")
    events = [_Event(cuda, 5, 100, KERNEL),
              _Event(cuda, 5, 200, replay),  # a CUDA graph's replay: one correlation id
              _Event(cpu, 5, 100, '"grid": [1, 1, 1]'),  # a host event is no kernel
              _Event(cuda, 6, 300, '"bytes": 64')]  # a memset: no configuration
    assert _launch_configurations(events) == {
        (5, 100): "grid 196x1x1, block 128x1x1, registers 64, shared memory 49152",
        (5, 200): "grid 8x1x1, block 128x1x1, registers 64, shared memory 49152"}


def _metadata(**options: object) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                **options) as session:  # type: ignore[arg-type]
        torch.randn(8, 8) @ torch.randn(8, 8)
    return [event.metadata_json()
            for event in session.profiler.kineto_results.events()]  # type: ignore[union-attr]


def test_the_session_keeps_each_records_metadata_on_its_event():
    # by default the profiler leaves the records' metadata off the events: a launch
    # configuration would never be read
    config = _keeping_metadata()
    if config is None or not hasattr(torch._C._autograd._KinetoEvent, "metadata_json"):
        pytest.skip("this torch keeps no record metadata on the profiler's events")
    assert not any(_metadata())
    assert all(_metadata(experimental_config=config))
