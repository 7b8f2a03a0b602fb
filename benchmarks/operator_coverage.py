"""Which aten operators that torch's own test samples reach have no formula here.

Runs the samples of torch's OpInfo database (``op_db``: every public operator with sample
inputs, the set torch tests itself against) on the CPU in float32 through
``ModuleProfiler.profile``: each sample wrapped in a one-call module whose forward calls the
operator, profiled without gradients, under ``torch.inference_mode`` (where composite operators
arrive whole) and, where the OpInfo supports autograd, with ``backward=True``. ``EXTRA`` adds
samples of operators no OpInfo reaches (the weight-only quantized products, masked softmax).
It prints

* every aten operator that comes out without a formula (forward or backward), how many OpInfos
  reach it, an example, and whether ``FlopCounterMode`` has a formula for it;
* every operator ``FlopCounterMode`` has a formula for, per sample: our ``2 * macs`` against its
  FLOPs (forward and backward together), matched or not;
* samples that run without the profiler but raise under it (bugs: a formula or a pass that
  breaks a working program).

    PYTHONPATH=. python benchmarks/operator_coverage.py                  # 3 samples per OpInfo
    PYTHONPATH=. python benchmarks/operator_coverage.py --samples 1 --only special. logaddexp
    PYTHONPATH=. python benchmarks/operator_coverage.py --samples 100    # every sample

Samples on which the operator itself raises (without the profiler) are skipped, and so is any
sample past ``--seconds`` (both counted in the footer). Three samples per OpInfo take 40-60 s
on two cores; every sample (10,641) took 142 s to 10 minutes, by the machine's load, and
reached the same operators as three.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import signal
import sys
import time
import types
import unittest
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils import flop_counter
from torch.utils._pytree import tree_flatten, tree_unflatten

from moduleprofiler import ModuleProfiler
from moduleprofiler.dispatch import OperatorObserver
from moduleprofiler.loss import default_loss
from moduleprofiler.operators.registry import MISSING, PassFormulas, packet_of

warnings.filterwarnings("ignore")



def _op_db() -> list[Any]:
    """torch's OpInfo list. Its module imports ``expecttest`` for the base class of torch's own
    test cases, which this sweep never uses: a stand-in is put in its place when missing."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        stand_in = types.ModuleType("expecttest")
        stand_in.TestCase = unittest.TestCase  # type: ignore[attr-defined]
        sys.modules["expecttest"] = stand_in
    from torch.testing._internal.common_methods_invocations import op_db

    return list(op_db)


class Direct(nn.Module):
    """A hand-made sample: ``forward(*tensors)`` is ``fn(*tensors)``."""

    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *tensors: torch.Tensor) -> Any:
        return self.fn(*tensors)


def _int4_operands() -> tuple[torch.Tensor, ...]:
    weight = torch.randint(0, 16, (16, 64), dtype=torch.int32)
    packed = torch._convert_weight_to_int4pack_for_cpu(weight, 1)
    return torch.randn(4, 64), packed, torch.rand(2, 16, 2)


def _masked_softmax_operands() -> tuple[torch.Tensor, ...]:
    mask = torch.zeros(2, 3, 4, dtype=torch.bool)
    mask[..., -1] = True
    return torch.randn(2, 3, 4, requires_grad=True), mask


EXTRA: dict[str, tuple[Any, Any]] = {
    # name: (the call, a function making its tensors)
    "_int_mm": (torch._int_mm, lambda: (torch.randint(-128, 128, (32, 64), dtype=torch.int8),
                                        torch.randint(-128, 128, (64, 16), dtype=torch.int8))),
    "_weight_int8pack_mm": (torch._weight_int8pack_mm, lambda: (
        torch.randn(4, 64), torch.randint(-128, 128, (16, 64), dtype=torch.int8),
        torch.rand(16))),
    "_weight_int4pack_mm_for_cpu": (
        lambda x, w, scales: torch._weight_int4pack_mm_for_cpu(x, w, 32, scales), _int4_operands),
    "_masked_softmax": (lambda x, mask: torch._masked_softmax(x, mask, -1, 0),
                        _masked_softmax_operands),
}


class OpCall(nn.Module):
    """One OpInfo sample as a module: ``forward(*tensors)`` puts the tensors back in the
    sample's (input, args, kwargs) and calls the operator."""

    def __init__(self, op: Any, leaves: list[Any], spec: Any, slots: list[int]) -> None:
        super().__init__()
        self.op, self.leaves, self.spec, self.slots = op, leaves, spec, slots

    def forward(self, *tensors: torch.Tensor) -> Any:
        leaves = list(self.leaves)
        for slot, tensor in zip(self.slots, tensors, strict=True):
            leaves[slot] = tensor
        first, args, kwargs = tree_unflatten(leaves, self.spec)
        return self.op(first, *args, **kwargs)


def _fresh(tensor: torch.Tensor) -> torch.Tensor:
    copy = tensor.detach().clone()
    return copy.requires_grad_(tensor.requires_grad) if copy.is_floating_point() else copy


@dataclass
class Sample:
    module: OpCall
    tensors: list[torch.Tensor]

    def inputs(self) -> tuple[torch.Tensor, ...]:
        return tuple(_fresh(tensor) for tensor in self.tensors)


def _sample(op: Any, sample: Any) -> Sample:
    leaves, spec = tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    return Sample(OpCall(op.op, leaves, spec, slots), [leaves[i] for i in slots])


def _differentiates(sample: Sample) -> list[torch.Tensor] | None:
    """Without the profiler: the sample's inputs when its forward and backward run (the
    default loss), else ``None``."""
    inputs = sample.inputs()
    wanted = [t for t in inputs if t.requires_grad]
    if not wanted:
        return None
    with torch.enable_grad():
        out = sample.module(*inputs)
        loss = default_loss(out)
        torch.autograd.grad(loss, wanted, allow_unused=True)
    return wanted


class PerOperator(OperatorObserver):
    """Our ``(ops, macs)`` per operator packet, as a pass applies the formulas."""

    def __init__(self) -> None:
        super().__init__(self._count)
        self.formulas = PassFormulas(None)
        self.macs: collections.Counter[str] = collections.Counter()

    def _count(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        counted = self.formulas.count(func, args, kwargs, out)
        if counted is not None and counted is not MISSING:
            self.macs[str(packet_of(func))] += counted[1]


def _run_all(sample: Sample, backward: bool, mode: Any) -> None:
    inputs = sample.inputs()
    with mode, torch.set_grad_enabled(backward):
        out = sample.module(*inputs)
        if backward:  # FlopCounterMode's module tracker refuses autograd.grad on leaves
            default_loss(out).backward()


def fcm_comparison(sample: Sample, backward: bool) -> dict[str, tuple[int, int]]:
    """Per operator FlopCounterMode has a formula for: (our 2 * macs, its FLOPs)."""
    reference = flop_counter.FlopCounterMode(display=False)
    _run_all(sample, backward, reference)
    ours = PerOperator()
    _run_all(sample, backward, ours)
    theirs = {str(packet): int(flops)
              for packet, flops in reference.get_flop_counts().get("Global", {}).items()}
    return {name: (2 * ours.macs.get(name, 0), flops) for name, flops in theirs.items()}


FCM_NOTES = {
    "aten.convolution_backward": "FlopCounterMode's weight gradient ignores groups "
                                 "(docs/operators.md, backward operators)",
}


class Timeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise Timeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Sweep:
    """What the sweep found, by operator."""

    unsupported: dict[tuple[str, str], set[str]] = field(
        default_factory=lambda: collections.defaultdict(set))
    fcm: dict[str, list[tuple[str, int, int]]] = field(
        default_factory=lambda: collections.defaultdict(list))
    raised: list[tuple[str, int, str, str]] = field(default_factory=list)
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    seconds: dict[str, float] = field(default_factory=dict)

    def run(self, op: Any, samples: int, seconds: float) -> None:
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        try:
            with time_limit(seconds):
                found = list(_take(op, samples))
        except Exception:  # sample generation itself failed or timed out
            self.counts["OpInfos whose samples could not be made"] += 1
            return
        self.counts["OpInfos run"] += 1
        started = time.perf_counter()
        for index, raw in enumerate(found):
            self.counts["samples"] += 1
            try:
                with time_limit(seconds):
                    self._sample(name, index, _sample(op, raw), op.supports_autograd)
            except Timeout:
                self.counts["samples past the time limit"] += 1
        self.seconds[name] = time.perf_counter() - started

    def run_extra(self, name: str, seconds: float) -> None:
        fn, make = EXTRA[name]
        try:
            tensors = list(make())
        except Exception:  # a kernel this build lacks (the int4 packing, say)
            self.counts["extra samples this build cannot make"] += 1
            return
        self.counts["extra samples"] += 1
        with time_limit(seconds):
            self._sample(name, 0, Sample(Direct(fn), tensors),
                         any(t.requires_grad for t in tensors))

    def _sample(self, name: str, index: int, sample: Sample, autograd: bool) -> None:
        try:
            with torch.no_grad():
                sample.module(*sample.inputs())
        except Timeout:
            raise
        except Exception:
            self.counts["samples the operator itself refuses"] += 1
            return
        profiler = ModuleProfiler()
        try:
            profile = profiler.profile(sample.module, tuple(sample.inputs()))
        except Timeout:
            raise
        except Exception as exc:
            self.raised.append((name, index, "forward", _why(exc)))
            return
        for op_name in profile.unsupported_ops:
            self.unsupported[(op_name, "forward")].add(name)
        try:
            with torch.inference_mode():
                profile = profiler.profile(sample.module, tuple(sample.inputs()))
        except Timeout:
            raise
        except Exception as exc:
            self.raised.append((name, index, "inference_mode", _why(exc)))
        else:
            for op_name in profile.unsupported_ops:
                self.unsupported[(op_name, "inference")].add(name)
        backward = False
        if autograd:
            try:
                backward = _differentiates(sample) is not None
            except Timeout:
                raise
            except Exception:
                self.counts["samples whose backward torch refuses"] += 1
        if backward:
            self.counts["samples with a backward"] += 1
            try:
                profile = profiler.profile(sample.module, tuple(sample.inputs()), backward=True)
            except Timeout:
                raise
            except Exception as exc:
                self.raised.append((name, index, "backward", _why(exc)))
                backward = False
            else:
                for op_name in profile.unsupported_ops:
                    self.unsupported[(op_name, "forward")].add(name)
                for op_name in profile.backward_unsupported_ops:
                    self.unsupported[(op_name, "backward")].add(name)
        try:
            compared = fcm_comparison(sample, backward)
        except Timeout:
            raise
        except Exception:
            self.counts["samples FlopCounterMode refuses"] += 1
            return
        for op_name, (ours, theirs) in compared.items():
            self.fcm[op_name].append((name, ours, theirs))


def _take(op: Any, samples: int) -> Iterator[Any]:
    generated = op.sample_inputs("cpu", torch.float32, requires_grad=op.supports_autograd)
    for index, sample in enumerate(generated):
        if index == samples:
            return
        yield sample


def _why(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    cause = exc.__cause__
    if cause is not None:
        text += f" <- {type(cause).__name__}: {cause}".replace("\n", " ")
    return text[:300]


def _fcm_has(op_name: str) -> str:
    packet = getattr(torch.ops.aten, op_name.removeprefix("aten."), None)
    return "yes" if packet is not None and packet in flop_counter.flop_registry else "no"


def report(sweep: Sweep, seconds: float) -> str:
    lines = ["Operators without a formula (Profile.unsupported_ops / backward_unsupported_ops;",
             "pass: forward under no_grad or with gradients, inference (under inference_mode),",
             "backward)", ""]
    rows = sorted(sweep.unsupported.items(), key=lambda item: (-len(item[1]), item[0]))
    header = f"{'operator':<44} {'pass':<9} {'OpInfos':>7}  {'FCM':<3}  example OpInfos"
    lines += [header, "-" * len(header)]
    for (op_name, direction), opinfos in rows:
        example = ", ".join(sorted(opinfos)[:3])
        lines.append(f"{op_name:<44} {direction:<9} {len(opinfos):>7}  {_fcm_has(op_name):<3}  "
                     f"{example}")
    if not rows:
        lines.append("(none)")
    lines += ["", "Operators FlopCounterMode counts: our 2 x macs against its FLOPs, per sample",
              "(forward and backward together)", ""]
    header = (f"{'operator':<44} {'samples':>7} {'matched':>7}  "
              "first difference (OpInfo: ours / FCM)")
    lines += [header, "-" * len(header)]
    for op_name in sorted(sweep.fcm):
        results = sweep.fcm[op_name]
        differ = [r for r in results if r[1] != r[2]]
        first = f"{differ[0][0]}: {differ[0][1]} / {differ[0][2]}" if differ else ""
        lines.append(f"{op_name:<44} {len(results):>7} {len(results) - len(differ):>7}  {first}")
        if differ:
            lines.append(f"{'':<62}differ: {', '.join(sorted({r[0] for r in differ}))}")
        if op_name in FCM_NOTES:
            lines.append(f"{'':<62}NB: {FCM_NOTES[op_name]}")
    lines += ["", "Samples that run without the profiler and raise under it", ""]
    lines += [f"{name} sample {index} ({where}): {why}"
              for name, index, where, why in sweep.raised] or ["(none)"]
    lines += ["", f"torch {torch.__version__}, CPU, float32, time limit {seconds:g} s per "
              f"sample; extra samples: {', '.join(EXTRA)}"]
    lines += [f"{key}: {value}" for key, value in sweep.counts.items()]
    slowest = sorted(sweep.seconds.items(), key=lambda item: -item[1])[:5]
    lines.append("slowest OpInfos: " + ", ".join(f"{name} {took:.1f} s" for name, took in slowest))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=3, help="samples per OpInfo (3)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="time limit per sample, and for making an OpInfo's samples (10)")
    parser.add_argument("--only", nargs="*", default=(),
                        help="only OpInfos whose name starts with one of these")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    started = time.perf_counter()
    sweep = Sweep()
    for op in _op_db():
        if torch.float32 not in op.supported_dtypes("cpu"):
            continue
        if args.only and not op.name.startswith(tuple(args.only)):
            continue
        sweep.run(op, args.samples, args.seconds)
    for name in EXTRA:
        if not args.only or name.startswith(tuple(args.only)):
            sweep.run_extra(name, args.seconds)
    sweep.counts["seconds"] = round(time.perf_counter() - started)
    print(report(sweep, args.seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
