"""How a prediction runs: the model copied to the meta device, one counted pass with the
:class:`~moduleprofiler.prediction.listener.PredictionListener` on it, the pass's steps through
the host and device chains, and, given a profile measured on another GPU, its times scaled by
the two devices' predictions. :meth:`moduleprofiler.Profiler.predict` documents the arguments
and calls :func:`predict` with its own counted pass."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import torch

from moduleprofiler.errors import ProfilingError, error_chain
from moduleprofiler.export.profile import Profile
from moduleprofiler.inputs import (
    InputSize,
    explained_random_input,
    given_input,
    require_input,
    unwrap_compiled,
)
from moduleprofiler.prediction.calibration import Calibration, common_rows
from moduleprofiler.prediction.compare import scaled
from moduleprofiler.prediction.device_model import DeviceModel
from moduleprofiler.prediction.listener import PredictionListener
from moduleprofiler.prediction.meta_copy import (
    FusedAttentionOnMeta,
    cast_copy,
    cast_input,
    materialise_lazy,
    meta_copy,
    meta_input,
    meta_limit,
)
from moduleprofiler.prediction.predict import (
    DEFAULT_HOST,
    DeviceSpec,
    HostSpec,
    PredictedProfile,
    dtype_of,
    finish_prediction,
    measured_device,
    resolve_device,
    resolve_host,
    with_fp32_math,
)
from moduleprofiler.records import ProfileData, display_path
from moduleprofiler.shapes import dtype_name, iter_tensors
from moduleprofiler.validate import check_bool, check_pass

CountedPass = Callable[..., Profile]
"""A profiler's ``profile`` method: the pass the prediction rides on, counted with that
profiler's formulas (``(model, input, pred_fn=, eval=, backward=, loss_fn=, listeners=)``)."""


# the pass runs outside the caller's inference mode: under it, composite operators reach the
# dispatch mode whole (aten.linear, not the addmm a GPU runs for it), and the copies made here
# would be inference tensors, which no backward can save
@torch.inference_mode(False)
def predict(count: CountedPass, module: torch.nn.Module, input: Any = None,
            device: DeviceSpec | DeviceModel = "H100 SXM", host: HostSpec = DEFAULT_HOST,
            dtype: str | torch.dtype | None = None, backward: bool = False, *,
            eval: bool | None = None, loss_fn: Callable[[Any], torch.Tensor] | None = None,
            input_size: InputSize | None = None, measured: ProfileData | None = None,
            measured_on: DeviceSpec | None = None, tf32: bool | None = None,
            log: Callable[[str], None] | None = None) -> PredictedProfile:
    """The :class:`PredictedProfile` of ``module`` on ``input`` for ``device`` (the arguments
    are those of :meth:`moduleprofiler.Profiler.predict`), its pass run by ``count``;
    ``log``: told what is predicted for which device."""
    if tf32 is not None:
        check_bool(tf32, "tf32")
    device_model, notes = resolve_device(device)
    device_model = with_fp32_math(device_model, tf32)
    host_model, host_notes = resolve_host(host, device_model)
    cast = dtype_of(dtype)
    if cast is not None and not cast.is_floating_point:  # torch refused it mid-copy, unnamed
        raise ValueError(f"dtype: {cast} is not a floating dtype; the model's floating "
                         "parameters and inputs are cast to it (fp32, bf16, fp16)")
    original = unwrap_compiled(check_pass(module))
    if input_size is None:  # the pass runs the copy through a closure, which checks nothing
        require_input(original, input)
    if measured is not None and not isinstance(measured, ProfileData):
        raise TypeError("measured must be a profile of time_modules() on a CUDA device, got "
                        f"{type(measured).__name__} {measured!r:.60}")
    # the device measured is known before any pass: a wrong one is said at once
    source = None if measured is None else resolve_device(measured_device(measured,
                                                                          measured_on))[0]
    model = meta_copy(original, cast)
    listener = PredictionListener(device_model, host_model)

    def fused(*args: Any, **kwargs: Any) -> Any:
        with FusedAttentionOnMeta():
            return model(*args, **kwargs)

    if log is not None:
        log(f"Predicting {type(module).__name__} on {device_model.peaks.name}")
    options = {"eval": not backward if eval is None else eval, "backward": backward,
               "loss_fn": loss_fn}
    with explained_random_input(input_size):
        try:
            given = meta_input(given_input(model, input, input_size), cast)
            materialise_lazy(model, given, fused)
            profile = count(model, given, pred_fn=fused, listeners=[listener], **options)
        except Exception as exc:
            kernel = _quantized_kernel(exc)
            if kernel is not None:
                raise _quantized_error(exc, kernel, original) from exc
            if not meta_limit(exc) or _holds_meta(input):  # no values to run on (a sweep's)
                raise
            # the model reads its data (a mask tested with ``.all()``, a count with
            # ``.item()``) or calls an operator whose meta kernel refuses it: count a cast copy
            # where the model is, on the real input, which takes the same path a GPU would
            copied = cast_copy(original, cast)
            listener = PredictionListener(device_model, host_model)
            real = cast_input(given_input(original, input, input_size), cast)
            try:
                materialise_lazy(copied, real)
                profile = count(copied, real, listeners=[listener], **options)
            except ProfilingError as copy_error:
                raise _copy_failed(exc, copy_error, cast) from copy_error
            notes = [*notes, "counted on a copy of the model on its own device: the meta "
                             f"device could not run it ({str(exc).splitlines()[0]})"]
    predicted = finish_prediction(profile, listener, device_model, host_model,
                                  notes + host_notes, tf32)
    if measured is None or source is None:
        return predicted
    # the ratio of the two devices' predictions, each from the rows both calibrations
    # measured: a shape measured on one card only would move one side of the ratio
    target_like, source_like = like_for_like(device_model, source)

    def again(model: DeviceModel) -> PredictedProfile:
        return predict(count, module, input, model, dtype=dtype, backward=backward, eval=eval,
                       loss_fn=loss_fn, input_size=input_size, tf32=tf32, log=log)

    reference = None if target_like is device_model else again(target_like)
    return scaled(predicted, again(source_like), measured, reference)


def like_for_like(target: DeviceModel, source: DeviceModel) -> tuple[DeviceModel, DeviceModel]:
    """``target`` and ``source`` priced from the tables and rows both calibrations measured
    (:func:`~moduleprofiler.prediction.calibration.common_rows`): the same objects where
    nothing differs, else fresh models (no cached prices) on the common rows, which borrow no
    table from another device (a table neither has is priced by the same stand-in on both)."""
    mine, theirs = common_rows(target.calibration, source.calibration)
    if mine is target.calibration and theirs is source.calibration:
        return target, source

    def fresh(model: DeviceModel, calibration: Calibration) -> DeviceModel:
        return dataclasses.replace(model, calibration=calibration, donor=None, borrowed=set(),
                                   unmeasured=set(), stood_in=set(), no_peak=set(), _tables={},
                                   _cache={})

    return fresh(target, mine), fresh(source, theirs)


def _copy_failed(meta: Exception, copy: ProfilingError, cast: torch.dtype | None
                 ) -> ProfilingError:
    """Both passes failed: the meta device's and its stand-in's, a copy of the model run where
    the model is (in the predicted dtype: a CPU may lack a kernel for it, as torchvision's
    ``nms`` lacks one for bfloat16)."""
    dtype = "" if cast is None else f" in {dtype_name(cast)}"
    return ProfilingError(
        f"predict() could not run the model on the meta device ({str(meta).splitlines()[0]}), "
        f"nor a copy of it{dtype} where it is: {str(copy).splitlines()[0]}. Predict another "
        "dtype, or move the model to a device whose kernels take it", copy.path)


_QUANTIZED_KERNEL = re.compile(r"\b(quantized::\w+)")


def _quantized_kernel(error: BaseException) -> str | None:
    """The quantized kernel (``quantized::linear_dynamic``) that ``error`` says has no meta
    (fake) implementation, else ``None``."""
    for current in error_chain(error):
        if isinstance(current, NotImplementedError):
            found = _QUANTIZED_KERNEL.search(str(current))
            if found is not None:
                return found[1]
    return None


def _quantized_error(error: Exception, kernel: str, model: torch.nn.Module) -> ProfilingError:
    """What to do about a quantized model, whose kernels cannot run on the meta device."""
    path = error.path if isinstance(error, ProfilingError) else None
    where = ""
    if path is not None:
        try:
            module = model.get_submodule(path)
        except AttributeError:
            module = None
        if module is not None:
            cls = type(module)
            where = f"module {display_path(path)!r} ({cls.__module__}.{cls.__qualname__}) "
    return ProfilingError(
        f"{where}runs the quantized kernel {kernel}: predict() runs the model on the meta "
        "device, and quantized kernels have no meta implementation. Predict the float model "
        "instead (the one before quantize_dynamic() or convert()); profile() counts the "
        "quantized one on its own device", path)


def _holds_meta(value: Any) -> bool:
    """Whether some tensor of ``value`` is on the meta device (it has no values)."""
    return any(tensor.is_meta for tensor in iter_tensors(value))
