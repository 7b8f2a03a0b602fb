"""Profile every rank of a data-parallel training program and compare the ranks.

    torchrun --nproc_per_node 2 examples/distributed_torchrun.py

Runs on CPU with gloo when there is no GPU (one GPU per process with NCCL otherwise). Each rank
profiles one forward and backward of its own batch with the communication listener, then
rank 0 gathers the profiles and prints the per-module spread across ranks.
"""

import gc
import os

import torch
import torch.distributed as dist
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.distributed import CommunicationListener, gather

cuda = torch.cuda.is_available()
device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
if cuda:
    # this process's GPU: without it every rank's NCCL collectives that take the current
    # device (the object collectives of gather, barriers) would run on cuda:0 and never return
    torch.cuda.set_device(device)
dist.init_process_group("nccl" if cuda else "gloo")
rank = dist.get_rank()


def main() -> None:
    torch.manual_seed(0)  # the same weights on every rank
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 10)).to(device)
    model = nn.parallel.DistributedDataParallel(model)
    batch = torch.randn(8 * (1 + rank), 64, device=device)  # rank 1 has twice the rows

    listener = CommunicationListener()
    try:
        profile = ModuleProfiler().profile(model, batch, backward=True, listeners=[listener])
    except Exception as exc:  # gather names the failed rank on every rank instead of waiting
        profile = exc
    # every rank calls it; rank 0 gets the DistributedProfile, the others None
    result = gather(profile, dst=0)
    assert not isinstance(profile, Exception)
    assert (profile.rank, profile.world_size) == (rank, dist.get_world_size())
    if result is not None:
        # inclusive MACs: the DDP wrapper (__root__) and the model (module) do no work of
        # their own; their rows show the work of the calls inside them
        stats = result.module_stats(["macs", "self_backward_comm_bytes"])
        print(stats[["module", "macs_min", "macs_median",
                     "macs_max", "macs_skew",
                     "self_backward_comm_bytes_sum"]].to_string(index=False))
        print(f"forward MACs over the ranks: {result.total_macs}, of the model's "
              f"{result.total_params} parameters")
        print(f"gradient all-reduce per rank: {profile.to_df()['self_backward_comm_bytes'].sum()} "
              "bytes")
    # leave together, then tear down: a rank that destroys its group while another still
    # communicates makes that one fail (gloo aborts the process)
    dist.barrier()


try:
    main()
finally:
    # DistributedDataParallel holds reference cycles (its hooks refer back to it): free it
    # now, while its process group exists. Left to a later garbage collection, its reducer
    # would be destroyed after destroy_process_group, and a rank aborted ("terminate called
    # without an active exception") on a loaded machine
    gc.collect()
    dist.destroy_process_group()
