"""Run a function on every rank of a gloo process group of CPU processes.

``run_ranks(worker, 2)`` starts two processes with ``torch.multiprocessing``; each joins the
group and returns a picklable result from ``worker(rank, world_size)``; the results come
back in rank order. A worker that raises fails the test with its traceback; with ``timeout``
(seconds) a collective that waits longer raises in its worker instead of hanging the test.
"""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _entry(rank: int, worker: Callable[[int, int], Any], world_size: int, port: int,
           results: Any, timeout: float | None) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            timeout=None if timeout is None else timedelta(seconds=timeout))
    try:
        results.put((rank, worker(rank, world_size), None))
    except BaseException:
        results.put((rank, None, traceback.format_exc()))
    finally:
        dist.destroy_process_group()


def run_ranks(worker: Callable[[int, int], Any], world_size: int = 2,
              timeout: float | None = None) -> list[Any]:
    """``[worker(rank, world_size) for each rank]``, each in its own gloo process."""
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    mp.start_processes(_entry, args=(worker, world_size, _free_port(), results, timeout),
                       nprocs=world_size, start_method="spawn")
    found = dict()
    while not results.empty():
        rank, value, error = results.get()
        if error is not None:
            raise AssertionError(f"rank {rank} raised:\n{error}")
        found[rank] = value
    return [found[rank] for rank in range(world_size)]
