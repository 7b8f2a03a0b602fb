"""``measure_memory``: static bytes plus a measured inference pass and, optionally, a training
pass, with the model left exactly as it was."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any, Literal

import torch
from torch import nn

from moduleprofiler.codepaths import CodePathWarning, autocast_left_out, fast_path_changes
from moduleprofiler.devices import resolve_device, spanned_devices
from moduleprofiler.inputs import check_reusable, input_shapes_of, unwrap_compiled
from moduleprofiler.loss import LossFn
from moduleprofiler.memory.passes import PassProgress, PassResult, run_pass
from moduleprofiler.memory.peak import LiveBytesListener
from moduleprofiler.memory.placement import placed_on, to_device
from moduleprofiler.memory.report import MemoryReport
from moduleprofiler.memory.saved import SavedTensorsListener
from moduleprofiler.memory.static import module_bytes
from moduleprofiler.modules import module_infos
from moduleprofiler.progress import Progress
from moduleprofiler.records import CallPosition, CallRecord, ModuleInfo
from moduleprofiler.state import refuse_stepping_parameters
from moduleprofiler.validate import check_bool, check_choice, check_device, check_pass
from moduleprofiler.warn import warn


def _records(inference: PassResult, training: PassResult | None,
             infos: Sequence[ModuleInfo]) -> tuple[CallRecord, ...]:
    """One record per call of the inference pass with its memory columns, the training ones
    from the same call of the training pass (matched by module path and call number); no
    counts (``ops`` unknown). The columns are those the listeners declare
    (:attr:`SavedTensorsListener.columns`, then :attr:`LiveBytesListener.columns`, the
    parameters saved last); without a training pass, the saved activation bytes (unknown) and
    the inference pass's ``max_live_bytes``."""
    # the parameters saved last: a view that must hide a column to fit hides them first
    weights = SavedTensorsListener.param_column.name
    saved = tuple(spec.name for spec in SavedTensorsListener.columns if spec.name != weights)
    names = (*saved, *(spec.name for spec in LiveBytesListener.columns), weights) \
        if training is not None else (*saved, "max_live_bytes")
    trained = {(call["path"], call["call_number"]): call
               for call in (training.calls if training is not None else ())}
    by_path = {info.path: info for info in infos}
    records = []
    for call in inference.calls:
        match = trained.get((call["path"], call["call_number"]), {})
        metrics = {**match, "train_max_live_bytes": match.get("max_live_bytes"),
                   "max_live_bytes": call.get("max_live_bytes")}
        info = by_path.get(call["path"])
        records.append(CallRecord.uncounted(
            CallPosition(**{f.name: call[f.name] for f in dataclasses.fields(CallPosition)}),
            info.params if info else 0, info.self_params if info else 0,
            output_bytes=call["output_bytes"],
            metrics={name: metrics.get(name) for name in names}))
    return tuple(records)


def measure_memory(
    module: nn.Module,
    input: Any = None,
    *,
    pred_fn: Callable[..., Any] | None = None,
    train: bool = False,
    loss_fn: LossFn | None = None,
    device: str | torch.device | None = None,
    emulate: Literal["cuda"] | None = None,
    progress: bool | None = None,
    keep_output: bool = True,
) -> MemoryReport:
    """Measure the memory of ``module`` on ``input``: parameter and buffer bytes, per-call output
    bytes, the peak of a no-grad forward and, with ``train=True``, the peak of forward + backward
    with the bytes autograd saves for backward per call.

    Args:
        module: the model; left exactly as it was (training flags, hooks, attributes,
            parameters, buffers and ``.grad`` of every parameter), even when the pass raises.
        input: as for :meth:`ModuleProfiler.profile`: a tensor (``module(x)``), a tuple or list
            (``module(*input)``), a dict (``module(**input)``), anything else (``module(input)``).
        pred_fn: called instead of ``module`` with the same unpacking; it must call ``module``.
        train: also run a training pass (train mode, gradients from no gradient at all, as after
            ``zero_grad(set_to_none=True)``); buffers such as BatchNorm statistics are put back.
        loss_fn: ``output -> scalar tensor`` for the training pass (default: the one default
            loss, :func:`moduleprofiler.loss.default_loss`).
        device: where to run. Default: ``meta`` if an input is on the meta device, else the
            device of the model's parameters. A different device
            (``"meta"`` to plan a model that does not fit, ``"cuda"`` for a CPU model) runs on
            temporary copies of the parameters and buffers; inputs are moved there too.
        emulate: ``"cuda"`` to plan a CUDA run on the meta device: dropout and
            ``scaled_dot_product_attention`` take the kernels CUDA would run, which keep less
            for backward than the CPU/meta ones (:mod:`moduleprofiler.memory.emulate`).
            Ignored on CUDA; refused on other devices.
        progress: a progress bar with the time left (``tqdm`` when installed) once the
            passes have run for 2 s: ``None`` (default) on a terminal or in Jupyter only,
            ``False`` never, ``True`` from the start. It counts module calls: the first pass's
            without a total, then the training pass's forward and backward.
        keep_output: the training pass holds the model's output until its backward is over,
            as a loop that names it does (``out = model(**batch); out.loss.backward()``, or
            ``output = model(x); loss = criterion(output, y); loss.backward()``): the output's
            bytes count towards the backward's peak unless autograd keeps them anyway.
            ``False``: the output is freed once the loss is taken, as in
            ``criterion(model(x), y).backward()``. The default is the loop most code writes,
            and the larger prediction of the two. :attr:`PassMemory.output_kept` says which.

    On CUDA the peaks come from the caching allocator (``torch.cuda.max_memory_allocated``
    after ``reset_peak_memory_stats``), each metered pass after an unmetered one of its kind,
    so that what the GPU's libraries allocate once (cuBLAS's workspaces) is in the baseline,
    as in a loop's second step; on CPU and meta from operator-level accounting of live
    storages (see ``docs/memory.md``).

    Raises:
        ProfilingError: the forward, the loss or the backward raised (the module path is
            named); ``train=True`` and a parameter carries a post-accumulate-grad hook (an
            optimizer stepping inside the backward, which the pass would run).
        LossError: ``train=True`` without ``loss_fn`` and no loss can be derived from the
            output.
    """
    check_pass(module, pred_fn=pred_fn, loss_fn=loss_fn, train=train, keep_output=keep_output)
    # a torch.compile wrapper is measured through its original module, as profile() counts
    # it: the paths are the user's own (no "_orig_mod." level), so the report merges into
    # that profile module by module
    module = unwrap_compiled(module)
    if train:
        refuse_stepping_parameters(module, "measure_memory(train=True)", "measure the "
                                   "inference pass (train=False), or your own step")
        check_reusable(input, "measure_memory(train=True)")  # inference, then training
    check_device(device)
    check_choice(emulate, "emulate", ("cuda", None))
    run_device = resolve_device(module, input, device)
    # A model split over devices of one type runs where its parts are (moving them onto one
    # device would measure another placement, or run out of memory there), and its peak is
    # the operator accounting's live bytes summed over those devices: each allocator has its
    # own peak, reached at its own moment, so no sum of theirs was ever live at once.
    spanned = spanned_devices(module, run_device) if device is None else ()
    if emulate == "cuda" and run_device.type not in ("meta", "cuda"):
        raise ValueError(
            f"emulate='cuda' runs CUDA's attention operators, which exist only on the meta and "
            f"cuda devices; got device {str(run_device)!r} (pass device='meta')"
        )
    if progress is not None:
        check_bool(progress, "progress")
    changed = fast_path_changes(module, eval=True, grad_enabled=False)
    if changed:
        warn(f"hooks disable the fused fast path of TransformerEncoderLayer at {changed}: the "
             "inference pass measures the unfused path, which keeps intermediates the fused "
             "kernel does not", CodePathWarning)
    ignored = autocast_left_out(run_device)
    if ignored:
        warn(f"torch.autocast({ignored[0]!r}) is on, but autocast does not reach the meta "
             "device: the passes run in the model's own dtypes, and the bytes are those of a "
             "run without autocast (measure on the device itself to see autocast's)",
             CodePathWarning)
    bar = Progress("measuring memory", progress, unit="calls")
    with nullcontext() if spanned else placed_on(module, run_device):
        inputs = input if spanned else to_device(input, run_device)
        options: dict[str, Any] = {"pred_fn": pred_fn, "loss_fn": loss_fn, "device": run_device,
                                   "emulate_cuda": emulate == "cuda" and run_device.type == "meta",
                                   "allocator": not spanned}
        try:
            if run_device.type == "cuda" and not spanned:
                # The device's libraries allocate once, on the first pass that needs them, and
                # then hold it: cuBLAS a workspace per stream and thread (32 MiB on an H200:
                # the first measurement of a process read an MLP's training step at 68 MB,
                # the next at 35), cuDNN its autotuning's. One unmetered pass of each kind
                # first, so the metered ones read the steady state of a loop's later steps.
                for warm_up_training in (False, True) if train else (False,):
                    run_pass(module, inputs, train=warm_up_training, keep_output=keep_output,
                             **options)
            inference = run_pass(module, inputs, train=False, **options, progress=PassProgress(
                bar, 0, None, "inference") if bar.enabled else None)
            training = None
            if train:  # the training pass: as many calls forward, and as many backward
                calls = len(inference.calls)
                training = run_pass(module, inputs, train=True, keep_output=keep_output,
                                    **options, progress=PassProgress(
                                        bar, calls, 3 * calls, "training")
                                    if bar.enabled else None)
        finally:
            bar.close()
    # read after the passes, as lazy modules materialise their parameters in the first one
    static = module_bytes(module)[""]
    infos = module_infos(module)
    records = _records(inference, training, infos)
    shapes, dtypes = input_shapes_of(input, pred_fn)  # what merge checks another pass by
    return MemoryReport(
        records=records, modules=infos, total_params=infos[0].params,
        total_buffers=infos[0].buffers,
        device=", ".join(map(str, spanned)) if spanned else str(run_device),
        param_bytes=static.param_bytes,
        buffer_bytes=static.buffer_bytes,
        trainable_param_bytes=static.trainable_param_bytes,
        inference=inference.memory,
        training=training.memory if training is not None else None,
        input_shapes=shapes, input_dtypes=dtypes,
    )
