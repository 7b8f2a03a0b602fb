"""Results on the meta device for operators whose meta kernel refuses what a GPU runs.

torch's meta kernel of a grouped matrix product (``_grouped_mm``, a mixture-of-experts layer's
experts in one kernel) checks the dtypes of CUDA's first kernels, bfloat16 and float16, while a
GPU runs float32 as well: counting or predicting an fp32 mixture-of-experts model on the meta
device failed in its experts. The stand-in takes the shape of the result from torch's own meta
kernel on bfloat16 copies of the operands and gives it the operands' dtype; the operator is still
reported with its own operands, so its count and price are those of the call the model made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

aten = torch.ops.aten


def _grouped_mm(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor | None:
    if not (len(args) > 1 and isinstance(args[0], Tensor) and isinstance(args[1], Tensor)
            and args[0].device.type == "meta" and args[0].dtype == torch.float32):
        return None
    half = tuple(arg.to(torch.bfloat16) if isinstance(arg, Tensor) and arg.dtype == torch.float32
                 else arg for arg in args)
    shape = aten._grouped_mm.default(*half, **kwargs).shape
    return torch.empty(shape, dtype=kwargs.get("out_dtype") or torch.float32, device="meta")


_STAND_INS: dict[Any, Callable[[tuple[Any, ...], dict[str, Any]], Any]] = {
    aten._grouped_mm.default: _grouped_mm}


def meta_stand_in(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The result of ``func(*args, **kwargs)`` on the meta device where its meta kernel
    refused it and a GPU would not; ``None`` where no stand-in applies (the refusal stands)."""
    stand_in = _STAND_INS.get(func)
    return None if stand_in is None else stand_in(args, kwargs)
