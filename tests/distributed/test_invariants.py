"""Invariants of profiles taken inside a real ``torch.distributed`` program: two CPU
processes on gloo, each profiling its own batch.

Starting processes is the slow part, so one pair of processes runs every scenario in turn
(:func:`_scenarios`) and each test checks its own scenario's results."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel

from moduleprofiler import ModuleProfiler
from moduleprofiler.distributed import CommunicationListener, DistributedError, gather
from moduleprofiler.memory import measure_memory, module_bytes
from moduleprofiler.timing import TimingOptions
from tests.distributed.models import batch, mlp
from tests.distributed.ranks import run_ranks

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")


def _scenarios(rank: int, world_size: int) -> dict:
    # the absent rank goes last: after it, rank 1 takes part in no collective
    return {worker.__name__: worker(rank, world_size)
            for worker in (_ddp, _fsdp, _tp, _gathered, _failing, _timed, _absent)}


@pytest.fixture(scope="module")
def ranks() -> list[dict]:
    # a collective left waiting (a rank that stopped early) fails its rank instead of hanging
    return run_ranks(_scenarios, timeout=60)


def _of(ranks: list[dict], name: str) -> list:
    return [result[name] for result in ranks]


def _counts(profile, prefix=""):
    """(path without the wrapper's prefix, ops, macs) of every call."""
    return [(r.path.removeprefix(prefix), r.self_ops, r.self_macs) for r in profile.records
            if r.path.startswith(prefix) and r.path != prefix.rstrip(".")]


def _ddp(rank: int, world_size: int) -> dict:
    model = DistributedDataParallel(mlp())
    x = batch(rank)
    listener = CommunicationListener()
    profile = ModuleProfiler().profile(model, x, backward=True, listeners=[listener])
    single = ModuleProfiler().profile(mlp(), x, backward=True)
    return {
        "rank": (profile.rank, profile.world_size),
        "counts": _counts(profile, "module."), "single": _counts(single),
        "self_backward_macs": sum(r.self_backward_macs for r in profile.records),
        "single_backward_macs": single.total_backward_macs,
        "all_reduce": sum(c.bytes for c in listener.collectives if c.kind == "all_reduce"),
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()
                           if p.requires_grad),
        "grads_untouched": all(p.grad is None for p in model.parameters()),
    }


def test_ddp_counts_per_rank_and_gradient_all_reduce_bytes(ranks: list[dict]) -> None:
    for rank, result in enumerate(_of(ranks, "_ddp")):
        assert result["rank"] == (rank, 2)
        # forward counts of the wrapped model equal the plain model's on this rank's batch:
        # Linear(4, 8) on 2 + rank rows: (2 + rank) * 8 * 4 MACs
        assert result["counts"] == result["single"]
        assert result["counts"][0][2] == (2 + rank) * 8 * 4
        assert result["self_backward_macs"] == result["single_backward_macs"]
        # the bucket all-reduce carries every trainable gradient once:
        # (4 * 8 + 8 + 8 * 6 + 6) = 94 parameters * 4 bytes = 376
        assert result["all_reduce"] == result["param_bytes"] == 376
        assert result["grads_untouched"]


def _fsdp(rank: int, world_size: int) -> dict:
    model = mlp()
    mesh = init_device_mesh("cpu", (world_size,))  # the default mesh is the GPU's, if any
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    listener = CommunicationListener()
    x = batch(rank)
    profile = ModuleProfiler().profile(model, x, backward=True, listeners=[listener])
    forward = [c for c in listener.collectives if c.phase == "forward"]
    held = sum(p._local_tensor.numel() * p.element_size() for p in model.parameters())
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    single = ModuleProfiler().profile(mlp(), x)
    memory = measure_memory(model, x, train=True)
    return {
        "memory": (memory.training.grad_bytes, memory.training.peak_bytes,
                   memory.inference.peak_bytes),
        "grads_untouched": all(p.grad is None for p in model.parameters()),
        "counts": _counts(profile), "single": _counts(single),
        "kinds": sorted({(c.phase, c.kind) for c in listener.collectives}),
        "gather_bus": sum(c.bus_bytes for c in forward if c.kind == "all_gather"),
        "gather_bytes": sum(c.bytes for c in forward if c.kind == "all_gather"),
        "gathered_in": sorted({c.path for c in forward}),
        "held": held, "total": total,
        "reduce_scatter": sum(c.bytes for c in listener.collectives
                              if c.kind == "reduce_scatter"),
        "complete": profile.complete,
    }


def test_fsdp2_counts_per_rank_and_all_gather_bytes(ranks: list[dict]) -> None:
    for result in _of(ranks, "_fsdp"):
        assert result["counts"] == result["single"]
        assert result["complete"]
        # 94 parameters * 4 bytes = 376 gathered per forward, each rank holding half
        assert result["total"] == result["gather_bytes"] == 376 and result["held"] == 188
        # what each rank receives is exactly what it does not hold
        assert result["gather_bus"] == result["total"] - result["held"] == 188
        # each unit's all-gather is booked to the unit's own call (issued in its pre-hook)
        assert result["gathered_in"] == ["0", "2"]
        assert ("backward", "reduce_scatter") in result["kinds"]
        assert result["reduce_scatter"] == 376  # every gradient reduced once
        # the training pass's backward ran (a backward into the sharded parameters reached
        # none of them): each rank holds its half of the reduced gradients, 188 of 376 bytes,
        # and the backward's gradients lift the peak above the inference pass's
        grad_bytes, training_peak, inference_peak = result["memory"]
        assert grad_bytes == 188
        assert training_peak > inference_peak
        assert result["grads_untouched"]


def _tp(rank: int, world_size: int) -> dict:
    mesh = init_device_mesh("cpu", (world_size,))
    model = parallelize_module(mlp(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    listener = CommunicationListener()
    x = batch(0)  # tensor parallelism: every rank sees the same batch
    profile = ModuleProfiler().profile(model, x, listeners=[listener])
    report = measure_memory(model, x)
    counted = ModuleProfiler().count_params(model)
    return {"macs": profile.total_macs, "complete": profile.complete,
            "param_bytes": module_bytes(model)[""].param_bytes,
            "layer_bytes": module_bytes(model)["2"].param_bytes,
            # every view of the parameters' bytes: the profile's, its summary with and
            # without the memory report, the report's own, 0.0.4's bits
            "views": (profile.modules[0].param_bytes, profile.module("2").param_bytes,
                      int(profile.summary()["param_bytes"].iloc[0]),
                      int(profile.summary(memory=report)["param_bytes"].iloc[0]),
                      report.param_bytes, report.modules[0].param_bytes,
                      counted["__root__"]["trainable_params_size_bits"] // 8,
                      counted["2"]["trainable_params_size_bits"] // 8),
            "params": (profile.total_params, counted["__root__"]["trainable_params"]),
            "single": ModuleProfiler().profile(mlp(), x).total_macs,
            "reduced": [(c.path, c.kind, c.bytes, c.group_size) for c in listener.collectives]}


def test_tensor_parallel_local_macs_sum_to_the_single_process_macs(ranks: list[dict]) -> None:
    results = _of(ranks, "_tp")
    # 2 rows: Linear(4, 8) 2 * 4 * 8 = 64 and Linear(8, 6) 2 * 8 * 6 = 96 MACs in one process
    assert results[0]["single"] == 160
    assert sum(result["macs"] for result in results) == 160
    assert [result["macs"] for result in results] == [80, 80]
    for result in results:
        assert result["complete"]
        # static bytes are this rank's shards: Linear(4, 8) column-parallel holds 4 of the 8
        # rows of its weight and bias (16 + 4), Linear(8, 6) row-parallel half its weight's
        # columns (24) and the whole bias (6): 50 floats, 200 bytes of the 376 in one process
        assert (result["param_bytes"], result["layer_bytes"]) == (200, 120)
        # every view says the same (the profile, its summary and 0.0.4's bits said 376, the
        # global size, while the memory views said 200)
        assert result["views"] == (200, 120, 200, 200, 200, 200, 200, 120)
        # elements are the model's: 4 x 8 + 8 + 8 x 6 + 6 = 94 on every rank
        assert result["params"] == (94, 94)
        # the row-parallel layer sums its partial outputs: 2 x 6 floats = 48 bytes
        assert result["reduced"] == [("2", "all_reduce", 48, 2)]


def _gathered(rank: int, world_size: int) -> dict | None:
    profile = ModuleProfiler().profile(mlp(), batch(rank))
    result = gather(profile, dst=0)
    if result is None:
        return None
    stats = result.module_stats(["macs"]).set_index("module")
    return {"world_size": result.world_size,
            "stats": stats.loc["0", ["macs_min", "macs_median", "macs_max", "macs_sum",
                                     "macs_skew"]].tolist(),
            "total_macs": result.totals()["macs"]}


def test_gather_on_the_destination_rank_only(ranks: list[dict]) -> None:
    on_zero, on_one = _of(ranks, "_gathered")
    assert on_one is None
    assert on_zero["world_size"] == 2
    # Linear(4, 8) on 2 rows (rank 0): 64 MACs, on 3 rows (rank 1): 96
    assert on_zero["stats"] == [64, 80, 96, 160, 96 / 80]
    # + Linear(8, 6): 96 and 144
    assert on_zero["total_macs"] == 64 + 96 + 96 + 144


def _failing(rank: int, world_size: int) -> str:
    profile = ModuleProfiler().profile(mlp(), batch(rank))
    try:
        gather(ValueError("bad batch") if rank == 1 else profile)
    except DistributedError as error:
        return str(error)
    return "no error"


def test_a_rank_that_raised_makes_every_rank_raise(ranks: list[dict]) -> None:
    for message in _of(ranks, "_failing"):
        assert message == "gather: profiling failed on rank 1 (ValueError: bad batch)"


def _timed(rank: int, world_size: int) -> dict:
    torch.manual_seed(0)
    # BatchNorm's buffers: DDP broadcasts them in every forward, so forward-only timing
    # communicates too
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(64)))
    # uneven batches: rank 1's iterations take far longer than rank 0's, so each rank's own
    # clock chooses other round sizes and another end
    x = torch.randn(4 if rank == 0 else 2048, 64)
    options = TimingOptions(max_seconds=0.5, warmup_seconds=0.05, progress=False)
    steps = ModuleProfiler().train_step_times(model, x, options)
    forward = ModuleProfiler().time_modules(model, x, options)
    return {"steps": steps.budget.kept, "forward": forward.budget.kept,
            "grads_untouched": all(p.grad is None for p in model.parameters())}


def test_ranks_of_a_ddp_model_run_the_same_timed_iterations(ranks: list[dict]) -> None:
    # each rank's loop deciding alone, rank 0 ran more iterations than rank 1 (47 against 9),
    # its extra all-reduces left waiting or paired with the next pass's collectives
    first, second = _of(ranks, "_timed")
    assert first["steps"] == second["steps"] >= 1
    assert first["forward"] == second["forward"] >= 1
    assert first["grads_untouched"] and second["grads_untouched"]


def _absent(rank: int, world_size: int) -> tuple[str, float]:
    if rank == 1:
        # never reaches gather, but stays until rank 0 has given up waiting: leaving at once
        # tore the process group down under rank 0's barrier, which gloo sometimes answered by
        # aborting this process
        time.sleep(3.0)
        return "absent", 0.0
    start = time.perf_counter()
    try:
        gather(ModuleProfiler().profile(mlp(), batch(rank)), timeout=1.0)
    except DistributedError as error:
        return str(error), time.perf_counter() - start
    return "no error", 0.0


def test_a_rank_that_never_arrives_is_named_within_the_timeout(ranks: list[dict]) -> None:
    (message, waited), _ = _of(ranks, "_absent")
    assert message.startswith("gather: not every rank arrived within 1.0 s")
    assert "1" in message.partition("s:")[2]
    assert waited < 10
