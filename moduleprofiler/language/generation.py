"""Generation, step by step: one profile per model call of ``model.generate(...)`` or of any
decode loop, split into prefill and decode, with the key/value cache each step leaves.

The whole generation is one profiled pass (the runner's hooks stay on the model throughout);
every outermost module call is one *step*: the model's first call is the prefill (the prompt),
each later call a decode step (one new token per sequence, or the whole sequence again when the
cache is off); an encoder-decoder's encoder, which ``generate`` calls on its own first, is an
``encode`` step. Each step's records form a :class:`~moduleprofiler.Profile` of their own, so
every view (tree, table, exports) works on a step. Work outside every model call (logits
processing, sampling, stopping criteria) is the whole run's ``outside_ops``.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pandas as pd
import torch
from torch import Tensor, nn

from moduleprofiler.call import Call
from moduleprofiler.core import Profiler
from moduleprofiler.devices import resolve_device
from moduleprofiler.errors import ProfilingError
from moduleprofiler.export.columns import ColumnSpec, register_column
from moduleprofiler.export.frame import count_series
from moduleprofiler.export.profile import Profile
from moduleprofiler.export.units import human_count, human_ms
from moduleprofiler.export.values import exact_sum
from moduleprofiler.language.cache import KVCacheSize, cache_of, check_count, kv_cache_size
from moduleprofiler.memory.peak import LiveBytesListener
from moduleprofiler.progress import Progress
from moduleprofiler.records import COUNTED_SOURCES, display_path, model_name
from moduleprofiler.runner import Listener
from moduleprofiler.state import preserved_state
from moduleprofiler.timing.clocks.stamps import make_stamps
from moduleprofiler.timing.listener import ClockListener
from moduleprofiler.timing.loop import Block, TimingOptions, measure
from moduleprofiler.validate import check_bool, check_listeners

Phase = Literal["encode", "prefill", "decode"]
_TOKEN_KEYS = ("decoder_input_ids", "decoder_inputs_embeds", "input_ids", "inputs_embeds")


@dataclass(frozen=True)
class Step:
    """One model call of a generation."""

    index: int
    phase: Phase
    path: str
    """Module path of the call (``""``: the model itself; ``"encoder"``...)."""
    profile: Profile
    """The step's own profile (its calls renumbered from 0)."""
    batch_size: int | None
    input_tokens: int | None
    """Tokens per sequence the call was given (1 for a decode step with the cache on)."""
    context_tokens: int | None
    """Tokens attended to after the call: the cache's length, else the input's."""
    kv_cache: KVCacheSize | None
    """The cache the call returned, measured when it returned (``None``: no cache)."""
    time_ms: float | None = None
    """Median wall time of the call over the timed generations (``time=True``)."""

    @property
    def max_live_bytes(self) -> int | None:
        """Most memory live during the call (``memory=True``), else ``None``."""
        roots = self.profile.roots
        return roots[0].metrics.get("max_live_bytes") if roots else None


@dataclass(frozen=True)
class GenerationProfile:
    """Every step of one generation, and the whole run's profile."""

    columns: ClassVar[tuple[ColumnSpec, ...]] = (
        register_column("step", "int", "step", aggregation="none",
                        description="position of the step in the generation, from 0"),
        register_column("phase", "text", "phase", aggregation="first",
                        description="encode (an encoder-decoder's encoder), prefill (the "
                        "model's first call, on the prompt) or decode (each later call)"),
        register_column("batch_size", "int", "batch", aggregation="first",
                        description="items processed side by side: the batch dimension of the "
                        "inputs (a generation step's sequences)"),
        register_column("input_tokens", "int", "tokens", aggregation="first",
                        description="tokens per sequence the step's call was given (1 for a "
                        "decode step with the cache on)"),
        register_column("context_tokens", "int", "context", aggregation="first",
                        description="tokens per sequence attended to after the step: the "
                        "cache's length, else the input's (per cache layer in "
                        "kv_cache_size().to_df(): the tokens it holds)"),
        register_column("time_ms", "time", "time", aggregation="inclusive", unit="ms",
                        description="median wall time of the step's model call, with "
                        "everything it called, over the timed generations"),
    )
    """The columns of :meth:`to_df` that are the steps' own (the counts, the cache and the
    live memory are the profiles' columns), declared with the result that writes them."""

    steps: tuple[Step, ...]
    profile: Profile
    """The whole run: every step's calls plus the work outside the model (``outside_ops``)."""
    output: Any = dataclasses.field(default=None, repr=False, compare=False)
    """What the generation returned (``generate``'s token ids)."""
    __hash__ = None  # type: ignore[assignment]  # equal by value, as a profile: no hash

    def __repr__(self) -> str:
        """One line: the model, its steps, the tokens and the run's totals (the dataclass's
        own repr dumped every step's profile)."""
        phases = ", ".join(f"{count} {phase}" for phase, count in (
            ("encode", sum(1 for s in self.steps if s.phase == "encode")),
            ("prefill", sum(1 for s in self.steps if s.phase == "prefill")),
            ("decode", len(self.decode))) if count)
        totals = self.totals()
        parts = [f"{len(self.steps)} steps ({phases})" if phases else "0 steps",
                 f"{self.new_tokens} new tokens x batch {self.batch_size}",
                 f"{human_count(totals['flops'])} FLOPs"]
        if totals["time_ms"] is not None:
            parts.append(human_ms(totals["time_ms"], "u"))
        if not totals["complete"]:
            parts.append("incomplete")
        return f"<GenerationProfile {totals['model']}: {', '.join(parts)}>"

    @property
    def prefill(self) -> tuple[Step, ...]:
        """The encode and prefill steps."""
        return tuple(step for step in self.steps if step.phase != "decode")

    @property
    def decode(self) -> tuple[Step, ...]:
        """The decode steps."""
        return tuple(step for step in self.steps if step.phase == "decode")

    @property
    def new_tokens(self) -> int:
        """Tokens generated per sequence: one per call of the generating module (the prefill
        and each decode step); a call of another module (a head a decode loop calls apart)
        adds none."""
        return len(self._generating())

    @property
    def batch_size(self) -> int:
        """Sequences generated side by side: the generating module's batch (with beam
        search, every beam; an encoder reads the prompts once, before the beams are made),
        1 when no step saw token inputs."""
        return next((step.batch_size for step in (*self._generating(), *self.steps)
                     if step.batch_size), 1)

    def _generating(self) -> tuple[Step, ...]:
        """The calls of the module whose first call is the prefill: one token each."""
        first = next((step for step in self.steps if step.phase == "prefill"), None)
        return () if first is None else tuple(
            step for step in self.steps if step.phase != "encode" and step.path == first.path)

    def to_df(self) -> pd.DataFrame:
        """One row per step: ``step``, ``phase``, ``module``, ``batch_size``, ``input_tokens``,
        ``context_tokens``, ``ops``, ``macs``, ``flops``, ``complete``, ``kv_cache_bytes``,
        ``time_ms``, ``max_live_bytes`` (unknown: empty; ``time_ms`` is a float column, NaN
        for an untimed step)."""
        rows = []
        for step in self.steps:
            profile = step.profile
            rows.append({
                "step": step.index, "phase": step.phase, "module": display_path(step.path),
                "batch_size": step.batch_size, "input_tokens": step.input_tokens,
                "context_tokens": step.context_tokens, "ops": profile.total_ops,
                "macs": profile.total_macs, "flops": profile.total_flops,
                "complete": profile.complete,
                "kv_cache_bytes": step.kv_cache.total_bytes if step.kv_cache else None,
                "time_ms": step.time_ms, "max_live_bytes": step.max_live_bytes})
        frame = pd.DataFrame(rows)
        if "time_ms" in frame:  # None in an object column otherwise, where floats need NaN
            frame["time_ms"] = frame["time_ms"].astype("float64")
        return frame

    SUMMARY_ONLY: ClassVar[dict[str, str]] = {
        "steps": "model calls of the run: an encoder's, the prefill and every decode step",
        "new_tokens": "tokens generated per sequence",
        "prefill_flops": "FLOPs of the steps before the first decode step (an encoder's and "
                         "the prefill)",
        "decode_flops": "FLOPs of the decode steps",
        "flops_per_token": "the run's FLOPs over the tokens generated (all sequences)",
        "macs_per_token": "the run's MACs over the tokens generated (all sequences)",
        "ms_per_token": "the timed steps' total time over the tokens generated (all sequences)",
        "outside_ops": "ops of work outside any module call (generate()'s own tensor code)",
    }
    """The totals of :meth:`summary` that are no column of the steps table (the others,
    ``model``, ``batch_size``, ``flops``, ``macs``, ``time_ms``, ``kv_cache_bytes`` and
    ``complete``, are the run's value of that column): docs/glossary.md lists them."""

    KEYS: ClassVar[dict[str, str]] = {
        "steps": "one object a step, the columns of to_df() (--generate's JSON)",
        "summary": "the run's totals, totals() (--generate's JSON)",
    }
    """The keys of the JSON the command line's ``--generate -f json`` writes, with their
    meaning (docs/glossary.md lists them)."""

    _INTEGER_TOTALS: ClassVar[tuple[str, ...]] = (
        "steps", "new_tokens", "batch_size", "prefill_flops", "decode_flops", "flops", "macs",
        "kv_cache_bytes", "outside_ops")
    _FLOAT_TOTALS: ClassVar[tuple[str, ...]] = (
        "flops_per_token", "macs_per_token", "time_ms", "ms_per_token")

    def summary(self) -> pd.DataFrame:
        """One row for the whole run, as every profile's ``summary()``: ``model`` (the root's
        type), then the totals of :meth:`totals` under the same names (counts ``Int64``,
        exact Python integers past 64 bits, ``<NA>`` when unknown; times and per-token values
        ``float64``, NaN when untimed)."""
        totals = self.totals()
        frame = pd.DataFrame([totals], columns=list(totals))
        for name in self._INTEGER_TOTALS:
            frame[name] = count_series([totals[name]], name)
        for name in self._FLOAT_TOTALS:
            frame[name] = pd.Series([totals[name]], dtype="float64")
        frame["complete"] = frame["complete"].astype(bool)
        return frame

    def totals(self) -> dict[str, Any]:
        """The run's totals as plain Python (``None`` when unknown), the row of
        :meth:`summary`: the model, steps, tokens generated, FLOPs and MACs of prefill and
        decode, per generated token (all sequences of the batch), time per token when timed,
        the final cache size and the work outside the model."""
        frame = self.to_df()
        prefill = frame[frame["phase"] != "decode"]
        tokens = self.new_tokens * self.batch_size
        model_flops, prefill_flops = exact_sum(frame["flops"]), exact_sum(prefill["flops"])
        macs = exact_sum(frame["macs"])
        times = frame["time_ms"].dropna()
        timed = len(times) == len(frame) and len(frame) > 0
        last_cache = next((s.kv_cache for s in reversed(self.steps) if s.kv_cache), None)
        return {
            "model": model_name(self.profile),
            "steps": len(self.steps), "new_tokens": self.new_tokens,
            "batch_size": self.batch_size,
            "prefill_flops": prefill_flops, "decode_flops": model_flops - prefill_flops,
            "flops": model_flops, "macs": macs,
            "flops_per_token": model_flops / tokens if tokens else None,
            "macs_per_token": macs / tokens if tokens else None,
            "time_ms": float(times.sum()) if timed else None,
            "ms_per_token": float(times.sum()) / tokens if timed and tokens else None,
            "kv_cache_bytes": last_cache.total_bytes if last_cache else None,
            "outside_ops": self.profile.outside_ops,
            "complete": self.profile.complete,
        }


class StepListener(Listener):
    """Reads, for every outermost call, the tokens it was given and the cache it returned
    (measured at once: a dynamic cache grows in place afterwards), which it also writes as
    the call's ``kv_cache_bytes`` column."""

    columns = (register_column(
        "kv_cache_bytes", "bytes", "KV cache", aggregation="max", unit="bytes", additive=False,
        description="bytes of the key/value cache an outermost call returned (keys and values "
                    "of every layer); per module the largest; per cache layer in "
                    "kv_cache_size().to_df()"),)

    def __init__(self) -> None:
        self.inputs: dict[int, tuple[int | None, int | None]] = {}
        self.caches: dict[int, KVCacheSize | None] = {}

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if call.parent is None:
            self.inputs[call.index] = _token_shape(args, kwargs)

    def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
             output: Any) -> None:
        if call.parent is None:
            cache = cache_of(output)
            size = None if cache is None else kv_cache_size(cache)
            self.caches[call.index] = size
            if size is not None:  # a column of the step's outermost call, in every view
                call.values["kv_cache_bytes"] = size.total_bytes


def profile_generation(
    model: nn.Module,
    inputs: Any = None,
    *,
    run: Callable[[], Any] | None = None,
    max_new_tokens: int | None = None,
    use_cache: bool | None = None,
    time: bool = False,
    memory: bool = False,
    repeats: int = 3,
    profiler: Profiler | None = None,
    listeners: Sequence[Listener] = (),
    **generate_kwargs: Any,
) -> GenerationProfile:
    """Profile a generation step by step.

    Args:
        model: the model (a Transformers model for ``generate``; any module for ``run``).
        inputs: what ``model.generate`` is given: token ids (a tensor) or a mapping of
            keyword arguments (``input_ids``, ``attention_mask``...: a dict, a tokenizer's
            ``BatchEncoding``).
        run: instead of ``generate``, a callable with no arguments running your own decode
            loop; every outermost call of ``model`` (or of its submodules) it makes is a step.
        max_new_tokens: passed to ``generate`` (with ``do_sample=False`` unless
            ``generate_kwargs`` says otherwise, a ``generation_config`` included); ignored
            with ``run``. ``None``: the ``generation_config`` given's, if it sets one, else 8.
            Generation stops early at an end-of-sequence token: pass ``min_new_tokens`` for a
            fixed number of steps.
        use_cache: passed to ``generate``, as ``max_new_tokens``; ``None``: the
            ``generation_config`` given's, else ``True``.
        time: also time every step: ``repeats`` more generations after one warm-up, in the
            measurement loop of every timing pass, with only a clock on the model (the
            runner's hooks and two clock reads, a few µs per module call); ``Step.time_ms`` is
            the median.
        memory: also measure the memory live during each step (``Step.max_live_bytes``).
        repeats: timed generations for ``time=True``.
        profiler: the :class:`~moduleprofiler.Profiler` (or
            :class:`~moduleprofiler.ModuleProfiler`) whose formulas count (default: a new one).
        listeners: extra listeners for the counted pass (e.g.
            :class:`~moduleprofiler.language.ExpertLoad`).
        generate_kwargs: more keyword arguments for ``generate``.

    Raises:
        ValueError, TypeError: a bad argument (named in the message).
        ProfilingError: the generation raised (the message names the module that failed),
            or ``run`` made no call of the model.
    """
    if use_cache is not None:
        check_bool(use_cache, "use_cache")
    check_bool(time, "time")
    check_bool(memory, "memory")
    if max_new_tokens is not None:
        check_count(max_new_tokens, "max_new_tokens", 1)
    check_count(repeats, "repeats", 1)
    listeners = check_listeners(listeners)
    if run is None:
        if not hasattr(model, "generate"):
            raise TypeError(f"{type(model).__name__} has no generate(): pass run= with your "
                            "own decode loop")
        if inputs is None:
            raise ValueError("inputs is required with generate (token ids or a dict)")
        options = {**_generate_defaults(generate_kwargs.get("generation_config"),
                                        max_new_tokens, use_cache), **generate_kwargs}
        # any mapping, as profile() takes: a tokenizer's BatchEncoding is no dict
        given = dict(inputs) if isinstance(inputs, Mapping) else {"inputs": inputs}
        run = _generate_call(model, given, options)
    elif not callable(run):
        raise TypeError(f"run must be a callable with no arguments, not {type(run).__name__}")
    elif inputs is not None:  # run calls the model itself: inputs would go nowhere
        raise ValueError("pass inputs (for generate) or run (your own decode loop), not both")
    steps = StepListener()
    extra: list[Listener] = [steps, *listeners]
    if memory:
        extra.append(LiveBytesListener())
    outputs: list[Any] = []
    invoke = run

    def remember() -> Any:
        outputs.append(invoke())
        return outputs[-1]

    whole = (profiler or Profiler()).profile(model, (), pred_fn=remember,
                                                  listeners=extra)
    if not any(record.parent is None for record in whole.records):
        # no step to show: every view of a GenerationProfile needs one (summary() raised
        # KeyError 'phase')
        raise ProfilingError(f"run made no call of the model ({type(model).__name__}) or of "
                             "its submodules: there is no step to profile")
    times = _step_times(model, run, repeats) if time else None
    return GenerationProfile(steps=_steps(whole, steps, times, _encoder_path(model)),
                             profile=whole,
                             output=outputs[0] if outputs else None)


def _generate_defaults(config: Any, max_new_tokens: int | None,
                       use_cache: bool | None) -> dict[str, Any]:
    """The options ``generate`` is given beside the caller's: the ones named, and where a
    ``generation_config`` is given nothing it sets (``generate``'s keywords override it, so a
    default here would silently replace its length, cache and sampling)."""
    if config is None:
        return {"max_new_tokens": 8 if max_new_tokens is None else max_new_tokens,
                "use_cache": True if use_cache is None else use_cache, "do_sample": False}
    options: dict[str, Any] = {} if use_cache is None else {"use_cache": use_cache}
    if max_new_tokens is not None or getattr(config, "max_new_tokens", None) is None:
        options["max_new_tokens"] = 8 if max_new_tokens is None else max_new_tokens
    return options


def _generate_call(model: nn.Module, given: dict[str, Any],
                   options: dict[str, Any]) -> Callable[[], Any]:
    generate: Callable[..., Any] = model.generate  # type: ignore[assignment]
    return lambda: generate(**given, **options)


def _token_shape(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int | None, int | None]:
    """``(batch, tokens)`` of a call's token input (ids or embeddings), ``(None, None)``."""
    tensor = next((kwargs[key] for key in _TOKEN_KEYS if isinstance(kwargs.get(key), Tensor)),
                  None)
    if tensor is None:
        tensor = next((arg for arg in args if isinstance(arg, Tensor)), None)
    if tensor is None or tensor.dim() < 2:
        return None, None
    return int(tensor.shape[0]), int(tensor.shape[1])


def _encoder_path(model: nn.Module) -> str | None:
    """Module path of an encoder-decoder's encoder (``get_encoder()``), else ``None``: the
    one module whose calls are ``encode`` steps."""
    if not getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return None
    get_encoder = getattr(model, "get_encoder", None)
    encoder = get_encoder() if callable(get_encoder) else None
    return next((path for path, module in model.named_modules()
                 if module is encoder and module is not model), None)


def _phase(path: str, encoder: str | None, generating: str | None,
           previous: Phase | None) -> Phase:
    """An outermost call's phase: the encoder's calls encode; the first call of any other
    module is the prefill and that module generates, each later call of it a decode step; a
    call of yet another module (a head a decode loop calls apart) belongs to the model call
    before it."""
    if path == encoder:
        return "encode"
    if generating is None:
        return "prefill"
    if path == generating:
        return "decode"
    return previous if previous is not None and previous != "encode" else "prefill"


def _steps(whole: Profile, listener: StepListener, times: list[float | None] | None,
           encoder: str | None = None) -> tuple[Step, ...]:
    records = whole.records
    starts = [position for position, record in enumerate(records) if record.parent is None]
    steps: list[Step] = []
    generating: str | None = None
    for number, start in enumerate(starts):
        end = starts[number + 1] if number + 1 < len(starts) else len(records)
        base = records[start].index
        own = tuple(dataclasses.replace(
            record, index=record.index - base,
            parent=None if record.parent is None else record.parent - base)
            for record in records[start:end])
        complete = all(record.ops_source in COUNTED_SOURCES for record in own)
        profile = dataclasses.replace(
            whole, records=own, outside_ops=0, outside_macs=0, _by_path={},
            # the operators without a formula are known for the run, not per call: a step
            # whose calls are all counted has none
            unsupported_ops=dict(whole.unsupported_ops) if not complete else {})
        top = records[start]
        phase = _phase(top.path, encoder, generating, steps[-1].phase if steps else None)
        if generating is None and phase == "prefill":
            generating = top.path
        batch, tokens = listener.inputs.get(base, (None, None))
        cache = listener.caches.get(base)
        context = cache.tokens if cache is not None and cache.tokens else tokens
        steps.append(Step(index=number, phase=phase, path=top.path, profile=profile,
                          batch_size=batch, input_tokens=tokens, context_tokens=context,
                          kv_cache=cache,
                          time_ms=times[number] if times and number < len(times) else None))
    return tuple(steps)


def _step_times(model: nn.Module, run: Callable[[], Any], repeats: int) -> list[float | None]:
    """Median time per step over ``repeats`` generations after one warm-up: the measurement
    loop with one block, the generation under a clock listener (each step is an outermost
    call; wall time on the CPU, CUDA events on a GPU)."""
    device = resolve_device(model)
    if device.type == "meta":
        return []
    clock = ClockListener.on(model, make_stamps(device))
    samples: list[list[float]] = []
    totals: list[float] = []  # whole generations (ns): the loop's series

    def generate(count: int, keep: bool) -> None:
        with clock.installed():
            for _ in range(count):
                clock.begin()
                clock.run(run)
                times = clock.resolve(clock.snapshot())
                if keep:
                    steps = times.call_fwd_inclusive[times.call_parent < 0]
                    samples.append([float(ns) / 1e6 for ns in steps])
                    totals.append(float(steps.sum()))

    options = TimingOptions(num_iters=repeats + 1, drop_first=1, warmup_seconds=0.0,
                            progress=False)
    measure(options.plan(1), [Block(generate, dropped=True)], lambda: {"generations": totals},
            device, Progress("timing generation steps", False), options,
            state=[preserved_state(model, eval=True), torch.no_grad()])
    longest = max(len(times) for times in samples)
    return [statistics.median(times[step] for times in samples if step < len(times))
            for step in range(longest)]
