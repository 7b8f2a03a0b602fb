"""Which device ``gather`` moves the profiles through: the rule that keeps two NCCL ranks from
waiting on one GPU (``collective_device``, a pure function of what the process knows)."""

from __future__ import annotations

import torch

from moduleprofiler.distributed.gather import collective_device


def test_cpu_backends_move_objects_on_the_cpu() -> None:
    assert collective_device("gloo", None, 0, 1, 2) == (None, None)
    # NCCL beside gloo: torch's object collectives take the CPU backend
    assert collective_device("cuda:nccl,cpu:gloo", None, 0, 1, 2) == (None, None)


def test_a_rank_that_never_set_its_device_uses_its_local_rank_and_is_told() -> None:
    # torchrun's LOCAL_RANK 1 on a 2-GPU host, current device still the default cuda:0 (the
    # example before the fix): cuda:0 is local rank 0's, so gather takes cuda:1 and warns
    device, warning = collective_device("nccl", None, 0, 1, 2)
    assert device == torch.device("cuda", 1)
    assert warning is not None and "torch.cuda.set_device(local_rank)" in warning


def test_a_chosen_device_is_kept() -> None:
    # set_device(1) on local rank 1: nothing to say
    assert collective_device("nccl", None, 1, 1, 2) == (torch.device("cuda", 1), None)
    # a deliberate mapping (local rank 1 on cuda:3) is the user's choice
    assert collective_device("nccl", None, 3, 1, 4) == (torch.device("cuda", 3), None)
    # local rank 0 on cuda:0
    assert collective_device("nccl", None, 0, 0, 2) == (torch.device("cuda", 0), None)
    # one visible GPU per process (CUDA_VISIBLE_DEVICES per rank): cuda:0 is this rank's own
    assert collective_device("nccl", None, 0, 1, 1) == (torch.device("cuda", 0), None)
    # init_process_group(device_id=...) binds the group: that device, whatever is current
    assert collective_device("nccl", torch.device("cuda", 1), 0, 1, 2) == \
        (torch.device("cuda", 1), None)


def test_the_warning_names_what_runs_the_collectives() -> None:
    # the timing loop's rank agreement moves its flags through the same device as gather
    device, warning = collective_device("nccl", None, 0, 1, 2, caller="the timing loop")
    assert device == torch.device("cuda", 1)
    assert warning is not None and warning.startswith("the timing loop: local rank 1 has cuda:0")
    assert "the timing loop runs them on cuda:1" in warning
