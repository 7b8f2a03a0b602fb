"""The communication listener and the collective table, in one process on the fake process
group (collectives move no data there; kinds, bytes and group sizes are real)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.distributed import CommunicationListener, fake_world


class Talks(nn.Module):
    """Forward: an all-reduce of its input, an all-gather of it and a reduce-scatter."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(x)  # blocking: no work handle comes back
        gathered = torch.empty(dist.get_world_size() * x.numel())
        dist.all_gather_into_tensor(gathered, x.flatten())
        scattered = funcol.reduce_scatter_tensor(gathered, "sum", 0, dist.group.WORLD)
        return x + scattered.view_as(x)


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.talks = Talks()
        self.after = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dist.broadcast(x, src=0)
        return self.after(self.talks(x))


@pytest.mark.parametrize("timing", [False, True])
def test_every_collective_on_its_call(timing: bool) -> None:
    listener = CommunicationListener(timing=timing)
    with fake_world(4, rank=1):
        profile = ModuleProfiler().profile(Outer(), torch.ones(2, 3), listeners=[listener])
    assert (profile.rank, profile.world_size) == (1, 4)
    found = [(c.path, c.kind, c.bytes, c.bus_bytes, c.group_size) for c in listener.collectives]
    # 2 x 3 floats = 24 bytes; gathered over 4 ranks: 96. all-reduce bus 2 * 3 / 4 * 24 = 36,
    # all-gather and reduce-scatter bus 3 / 4 * 96 = 72
    assert found == [("", "broadcast", 24, 24, 4),
                     ("talks", "all_reduce", 24, 36, 4),
                     ("talks", "all_gather", 96, 72, 4),
                     ("talks", "reduce_scatter", 96, 72, 4)]
    frame = profile.to_df().set_index("module")
    assert frame.loc["talks", "self_comm_bytes"] == 24 + 96 + 96
    assert frame.loc["talks", "comm_kinds"] == "all_reduce, all_gather, reduce_scatter"
    assert frame.loc["__root__", "comm_bytes"] == 24 + 24 + 96 + 96
    assert frame.loc["after", "collectives"] == 0
    assert profile.complete  # communication costs no compute ops
    if timing:
        assert all(c.ms is not None and c.ms >= 0 for c in listener.collectives)
        assert "comm_ms" in frame
    else:
        assert all(c.ms is None for c in listener.collectives) and "comm_ms" not in frame


def test_the_columns_show_in_the_views() -> None:
    with fake_world(2):
        profile = ModuleProfiler().profile(Outer(), torch.ones(2, 3),
                                           listeners=[CommunicationListener()])
    assert "comm bytes" in profile.to_text()
    assert "comm_bus_bytes" in profile.to_csv()


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="timing"):
        CommunicationListener(timing=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rank"):
        with fake_world(2, rank=2):
            pass
    with fake_world(2), pytest.raises(ValueError, match="already initialised"):
        with fake_world(2):
            pass
    assert not dist.is_initialized()


def test_no_process_group_no_rank() -> None:
    profile = ModuleProfiler().profile(nn.Linear(2, 2), torch.ones(1, 2))
    assert (profile.rank, profile.world_size) == (None, None)
