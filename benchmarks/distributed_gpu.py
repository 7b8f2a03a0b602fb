"""GPU proof of the distributed profiles: FSDP2 and tensor-parallel training steps of a
GPT-2-small-shaped model (bf16) on 2 GPUs with NCCL.

Run on a machine with 2 GPUs (from the repository root)::

    PYTHONPATH=. torchrun --nproc_per_node 2 benchmarks/distributed_gpu.py
    PYTHONPATH=. torchrun --nproc_per_node 2 benchmarks/distributed_gpu.py --smoke  # CPU, gloo

Each rank profiles one training step (forward + real backward) with the communication
listener, and rank 0 prints:

* per-rank forward MACs and their equality with the same rank's batch counted on the meta
  device in one process (the CPU path, no process group: FSDP2) or with half of it (TP);
* communication bytes per step beside the values computed by hand from the model's shape;
* moduleprofiler's training peak (``measure_memory(train=True)``) beside
  ``torch.cuda.max_memory_allocated`` of a plain training step, per rank;
* per-module time across ranks (``gather`` -> ``module_stats``) and the straggler table.
"""

from __future__ import annotations

import argparse
import os
import time
import traceback
from collections import Counter

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils._python_dispatch import TorchDispatchMode

from moduleprofiler import ModuleProfiler
from moduleprofiler.distributed import CommunicationListener, gather
from moduleprofiler.memory import measure_memory


class Block(nn.Module):
    """GPT-2 block with separate q/k/v projections (so that tensor parallelism can shard
    them by heads)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))
        self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        y = self.ln_1(x)
        # -1 heads: a tensor-parallel rank holds heads / ranks of them
        q, k, v = (m(y).view(b, t, -1, 64).transpose(1, 2) for m in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, ctx: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.h = nn.ModuleList(Block(d, d // 64) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def loss_fn(logits: torch.Tensor) -> torch.Tensor:
    return logits.float().logsumexp(-1).mean()


def tp_plan() -> dict:
    return {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
            "proj": RowwiseParallel(), "fc": ColwiseParallel(), "fc_proj": RowwiseParallel()}


def say(*parts: object) -> None:
    if dist.get_rank() == 0:
        print(*parts, flush=True)


def by_kind(listener: CommunicationListener) -> Counter:
    counts: Counter = Counter()
    for c in listener.collectives:
        counts[(c.phase, c.kind)] += c.bytes
    return counts


def step_peak(model: nn.Module, idx: torch.Tensor, device: torch.device) -> int | None:
    """max_memory_allocated of one plain training step (after a warm-up step)."""
    if device.type != "cuda":
        return None
    loss_fn(model(idx)).backward()
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    loss_fn(model(idx)).backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    model.zero_grad(set_to_none=True)
    return peak


def run(name: str, model: nn.Module, idx: torch.Tensor, reference: int, device: torch.device,
        expected: dict) -> None:
    rank = dist.get_rank()
    listener = CommunicationListener()
    try:
        profile = ModuleProfiler().profile(model, idx, backward=True, loss_fn=loss_fn,
                                           listeners=[listener])
    except Exception:
        say(f"{name}: profile with the listener failed:\n" + traceback.format_exc()[-3000:])
        for options in ({}, {"operators": False}):  # which part fails
            try:
                plain = ModuleProfiler().profile(model, idx, **options)
                say(f"{name}: forward profile {options} works: MACs {plain.total_macs:,}")
            except Exception as exc:
                say(f"{name}: forward profile {options} fails too: {exc}")
        raise
    counted = by_kind(listener)
    timed = CommunicationListener(timing=True)
    start = time.perf_counter()
    timed_profile = ModuleProfiler().profile(model, idx, backward=True, loss_fn=loss_fn,
                                             listeners=[timed])
    wall = time.perf_counter() - start
    timing = ModuleProfiler().time_modules(model, idx, num_iters=12, drop_first=2,
                                          warmup_seconds=0.2, measure_overhead=False)
    report = measure_memory(model, idx, train=True, loss_fn=loss_fn)
    peak = step_peak(model, idx, device)
    gathered = gather(timed_profile.with_timing(timing))
    rows = [None] * dist.get_world_size()
    dist.all_gather_object(rows, (rank, profile.total_macs, reference, profile.complete,
                                  dict(counted), report.peak_bytes, peak,
                                  sum(c.ms or 0 for c in timed.collectives), wall))
    say(f"\n=== {name} (world size {profile.world_size}) ===")
    for (r, macs, ref, complete, comm, predicted, measured, comm_ms, wall_s) in rows:
        say(f"rank {r}: forward MACs {macs:,} (reference {ref:,}: "
            f"{'equal' if macs == ref else 'DIFFERENT'}), complete {complete}")
        for key in sorted(set(comm) | set(expected)):
            hand = expected.get(key)
            got = comm.get(key, 0)
            verdict = "" if hand is None else (" equal" if got == hand else " DIFFERENT")
            say(f"    {key[0]:8s} {key[1]:14s} {got:>14,} bytes  hand {hand}{verdict}")
        if measured:
            error = (predicted - measured) / measured * 100
            say(f"    training peak: moduleprofiler {predicted / 2**20:,.1f} MiB, "
                f"max_memory_allocated {measured / 2**20:,.1f} MiB ({error:+.1f} %)")
        say(f"    timed pass: collectives {comm_ms:.1f} ms of {wall_s * 1e3:.1f} ms")
    if gathered is not None:
        stats = gathered.module_stats(["time_median_ms", "comm_bytes"])
        top = stats.sort_values("time_median_ms_max", ascending=False).head(8)
        say(top[["module", "time_median_ms_min", "time_median_ms_median",
                 "time_median_ms_max", "time_median_ms_skew", "comm_bytes_sum"]]
            .to_string(index=False))
        say("stragglers:\n" + gathered.stragglers(5).to_string(index=False))


class NoOp(TorchDispatchMode):
    """A dispatch mode that only runs each operator (what any operator observer is)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


def probe_dispatch_mode(device: torch.device) -> None:
    """Does a c10d collective work under a no-op dispatch mode on this torch and backend?"""
    out = torch.empty(2 * dist.get_world_size(), device=device)
    for async_op in (False, True):
        try:
            with NoOp():
                work = dist.all_gather_into_tensor(out, torch.ones(2, device=device),
                                                   async_op=async_op)
                if async_op:
                    work.wait()
            say(f"all_gather_into_tensor(async_op={async_op}) under a no-op dispatch mode: "
                f"works ({type(work).__name__})")
        except Exception as exc:
            say(f"all_gather_into_tensor(async_op={async_op}) under a no-op dispatch mode: "
                f"{type(exc).__name__}: {exc}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="CPU, gloo, tiny sizes")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.smoke
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda \
        else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    vocab, d, layers, ctx, batch, seq = (50304, 768, 12, 1024, 4, 1024) if cuda else \
        (512, 128, 2, 64, 2, 32)
    dtype = torch.bfloat16 if cuda else torch.float32
    say(f"device {torch.cuda.get_device_name() if cuda else 'cpu'}, torch {torch.__version__}, "
        f"GPT-2 shape d={d} layers={layers} vocab={vocab}, batch {batch}x{seq} per rank, {dtype}")
    torch.manual_seed(0)
    with torch.device("meta"):
        meta = GPT(vocab, d, layers, ctx).to(dtype)
    n_params = sum(p.numel() for p in meta.parameters())
    elt = 2 if dtype == torch.bfloat16 else 4
    say(f"parameters {n_params:,}")
    probe_dispatch_mode(device)

    # FSDP2: each rank its own batch
    torch.manual_seed(1 + rank)
    idx = torch.randint(0, vocab, (batch, seq), device=device)
    reference = ModuleProfiler().profile(meta, idx.to("meta")).total_macs
    torch.manual_seed(0)
    model = GPT(vocab, d, layers, ctx).to(device=device, dtype=dtype)
    for block in model.h:
        fully_shard(block)
    fully_shard(model)
    root_bytes = sum(p.numel() for n, p in meta.named_parameters() if not n.startswith("h.")) * elt
    block_bytes = (n_params * elt - root_bytes)
    expected = {("forward", "all_gather"): n_params * elt,
                # the root keeps its parameters gathered from forward to backward
                ("backward", "all_gather"): block_bytes,
                ("backward", "reduce_scatter"): n_params * elt}
    try:
        run("FSDP2", model, idx, reference, device, expected)
    except Exception:  # report and go on to TP
        say("FSDP2 failed:\n" + traceback.format_exc()[-4000:])
    del model

    # TP: the same batch on both ranks
    torch.manual_seed(1)
    idx = torch.randint(0, vocab, (batch, seq), device=device)
    mesh = init_device_mesh(device.type, (world,))
    torch.manual_seed(0)
    model = GPT(vocab, d, layers, ctx).to(device=device, dtype=dtype)
    for block in model.h:
        parallelize_module(block, mesh, tp_plan())
    single = ModuleProfiler().profile(meta, idx.to("meta"))
    sharded = sum(r.self_macs for r in single.records if r.path.startswith("h.") and r.type_name ==
                  "Linear")
    attention = sum(r.self_macs for r in single.records if r.path.startswith("h.")
                    and r.type_name == "Block")
    # sharded linears and attention (heads split) halve; embeddings, norms and lm_head do not
    local = single.total_macs - (sharded + attention) // world * (world - 1)
    activation = batch * seq * d * elt
    # forward: the row-parallel proj and fc_proj sum their partial outputs; backward: the
    # column-parallel q, k, v and fc sum their partial input gradients
    expected = {("forward", "all_reduce"): 2 * layers * activation,
                ("backward", "all_reduce"): 4 * layers * activation}
    try:
        run("TP", model, idx, local, device, expected)
    except Exception:
        say("TP failed:\n" + traceback.format_exc()[-4000:])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
