"""A copy of a model on the meta device (parameters and buffers as meta tensors: no memory, no
computation), optionally cast to a dtype; the user's model is not touched."""

from __future__ import annotations

import copy
import functools
import inspect
import re
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes

from moduleprofiler.errors import DeviceDtypeError, ProfilingError, error_chain
from moduleprofiler.inputs import make_invocation
from moduleprofiler.shapes import map_tensors
from moduleprofiler.storage import is_lazy


def _dtype_for(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    """``dtype`` for a floating ``tensor`` (when given), else the tensor's own."""
    return dtype if dtype is not None and tensor.dtype.is_floating_point else tensor.dtype


def _meta(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    if is_lazy(tensor):
        return _unmaterialised(tensor, "meta", dtype)
    return torch.empty_like(tensor, device="meta", dtype=_dtype_for(tensor, dtype))


def _unmaterialised(tensor: torch.Tensor, device: torch.device | str,
                    dtype: torch.dtype | None) -> torch.Tensor:
    """A new lazy parameter or buffer like ``tensor`` (which has no shape yet) on ``device``:
    the copy's lazy module materialises it in the copy's first forward, where ``tensor``
    stays as it is."""
    # torch's stubs leave out the ``device`` and ``dtype`` their constructors take
    kind: Any = UninitializedParameter if isinstance(tensor, UninitializedParameter) \
        else UninitializedBuffer
    return kind(requires_grad=tensor.requires_grad, device=device,  # type: ignore[no-any-return]
                dtype=_dtype_for(tensor, dtype))


def meta_copy(model: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """``model`` rebuilt on the meta device: its modules copied, each parameter and buffer
    replaced by a meta tensor of the same shape (and ``dtype`` for floating ones)."""
    return _copied(model, lambda tensor: _meta(tensor, dtype))


def _copied(model: nn.Module, convert: Callable[[torch.Tensor], torch.Tensor]) -> nn.Module:
    """``model``'s modules copied, each parameter and buffer replaced by ``convert`` of it
    (a parameter stays a parameter, with its ``requires_grad``)."""
    memo: dict[int, Any] = {}
    for parameter in model.parameters():
        converted = convert(parameter)
        memo[id(parameter)] = converted if is_lazy(converted) else nn.Parameter(
            converted, requires_grad=parameter.requires_grad)
    for buffer in model.buffers():
        memo[id(buffer)] = convert(buffer)
    for module in model.modules():
        # a tensor attribute computed with autograd (``torch.nn.utils.weight_norm``'s
        # ``weight``, recomputed by its pre-hook in every forward) cannot be deep-copied
        for value in vars(module).values():
            if isinstance(value, torch.Tensor) and value.grad_fn is not None \
                    and id(value) not in memo:
                memo[id(value)] = convert(value.detach())
    try:
        return _scripts_converted(copy.deepcopy(model, dict(memo)), convert)
    except Exception as exc:
        shared = _uncopyable(model, memo)
        if not shared:
            raise _not_copied(exc) from exc
    # the attributes that cannot be copied (a lock, a handle of an extension) are shared by
    # the copy: a forward on the meta device has nothing of them to compute
    for value in shared.values():
        memo[id(value)] = value
    try:
        return _scripts_converted(copy.deepcopy(model, memo), convert)
    except Exception as exc:
        raise _not_copied(exc) from exc


def _scripts_converted(copied: nn.Module, convert: Callable[[torch.Tensor], torch.Tensor]
                       ) -> nn.Module:
    """``copied`` with the parameters and buffers of its TorchScript modules replaced by
    ``convert`` of them: ``copy.deepcopy`` of a scripted module ignores the memo and copies
    its tensors where they are (a CPU weight met by a meta input fails in the interpreter)."""
    for module in copied.modules():
        if not isinstance(module, torch.jit.ScriptModule):
            continue
        for name, parameter in list(module.named_parameters(recurse=False)):
            setattr(module, name, nn.Parameter(convert(parameter.detach()),
                                               requires_grad=parameter.requires_grad))
        for name, buffer in list(module.named_buffers(recurse=False)):
            setattr(module, name, convert(buffer))
    return copied


_MODULE_STATE = frozenset(vars(nn.Module()))
"""The attributes every module holds (its tables of parameters, buffers, children and hooks):
never shared between a model and its copy."""


def _uncopyable(model: nn.Module, memo: dict[int, Any]) -> dict[str, Any]:
    """The attributes of ``model``'s modules (by ``path.name``) that ``copy.deepcopy`` refuses,
    but those every module holds; read only after the model's copy failed."""
    found: dict[str, Any] = {}
    for path, module in model.named_modules():
        for name, value in vars(module).items():
            if name in _MODULE_STATE or isinstance(value, torch.Tensor):
                continue
            try:
                copy.deepcopy(value, dict(memo))
            except Exception:
                found[f"{path}.{name}" if path else name] = value
    return found


def _not_copied(exc: Exception) -> ProfilingError:
    return ProfilingError(
        f"the model cannot be copied to the meta device, where predictions run: "
        f"copy.deepcopy(model) raised {type(exc).__name__}: {exc}")


def materialise_lazy(model: nn.Module, input: Any,
                     run: Callable[..., Any] | None = None) -> None:
    """Run a copy that holds lazy modules not yet materialised once on ``input`` (through
    ``run``, which calls it, when given), outside any pass: they take their shapes and run
    their initialisers here, not in the predicted pass, which would price initialisers that a
    model that has run once never runs again. Nothing runs for a copy without such modules."""
    if not any(isinstance(module, LazyModuleMixin) and module.has_uninitialized_params()
               for module in model.modules()):
        return
    with torch.no_grad():
        make_invocation(model, input, pred_fn=run)()


def cast_copy(model: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """``model`` copied where it is (its values kept), floating parameters and buffers cast to
    ``dtype``: what a prediction runs when the meta device cannot run the model."""
    return _copied(model, lambda tensor: _real(tensor, dtype))


def cast_input(value: Any, dtype: torch.dtype | None = None) -> Any:
    """``value`` with every tensor copied where it is (floating ones cast to ``dtype``)."""
    return _input_with(value, lambda tensor: _real(tensor, dtype))


def _real(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    if is_lazy(tensor):
        return _unmaterialised(tensor, tensor.device, dtype)
    return tensor.detach().to(dtype=_dtype_for(tensor, dtype), copy=True)


_META_TENSOR = re.compile(r"\bmeta\b[^.]*\btensor", re.IGNORECASE)
"""An error message that speaks of a meta tensor ("meta tensor", "1D meta Long tensor")."""


def meta_limit(error: BaseException) -> bool:
    """Whether ``error`` (or an exception it was raised from) is the meta device's limit
    rather than the model's: a meta kernel that refused (``torch._meta_registrations``), a
    value read from a tensor that has none (``.item()``, ``bool(tensor)``), or a tensor that
    must stay on the CPU ("'lengths' argument should be a 1D CPU int64 tensor, but got 1D meta
    Long tensor": ``pack_padded_sequence``'s lengths)."""
    for current in error_chain(error):
        if isinstance(current, DeviceDtypeError):  # refused on purpose: a device would too
            return False
        if _META_TENSOR.search(str(current)):
            return True
        trace = current.__traceback__
        while trace is not None:
            if trace.tb_frame.f_code.co_filename.endswith("_meta_registrations.py"):
                return True
            trace = trace.tb_next
    return False


def meta_input(value: Any, dtype: torch.dtype | None = None) -> Any:
    """``value`` with every tensor as a meta tensor (floating ones cast to ``dtype``)."""
    return _input_with(value, lambda tensor: _meta(tensor, dtype))


def _input_with(value: Any, convert: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` with every tensor replaced by ``convert`` of it (a floating one keeping its
    ``requires_grad``), in the containers :func:`~moduleprofiler.shapes.map_tensors` rebuilds
    (namedtuples, dataclass batches, a ``PackedSequence`` with its batch sizes on the CPU)."""
    def replace(item: torch.Tensor) -> torch.Tensor:
        converted = convert(item)
        return converted.requires_grad_(item.requires_grad) if \
            converted.is_floating_point() else converted
    return map_tensors(value, replace)


def _body_of(func: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of the Python function ``func`` whose own torch-function check is off (torch
    itself is not changed): called with the mode entered, the mode sees the calls inside it."""
    code = getattr(func, "__code__")  # noqa: B009  (a Python function of torch.nn.functional)
    body = types.FunctionType(code, {**func.__globals__,
                                     "has_torch_function": lambda *_: False},
                              func.__name__, func.__defaults__,
                              func.__closure__)
    body.__kwdefaults__ = func.__kwdefaults__
    return body


_ATTENTION_INSIDE = {F.multi_head_attention_forward: _body_of(F.multi_head_attention_forward)}
"""Python functions that run attention inside them: a mode is off while it handles a call, so
their body runs again with the mode on (``nn.MultiheadAttention``, the ``nn.Transformer``
layers)."""


class FusedAttentionOnMeta(TorchFunctionMode):
    """On the meta device ``scaled_dot_product_attention`` would run its unfused math
    (matmuls and a softmax), where a GPU runs one fused kernel: run the fused operator's meta
    kernel instead, so the operators seen are the ones a GPU runs (forward and backward)."""

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            fused = _fused_attention(*args, **kwargs)
            if fused is not None:
                return fused
        if func is F.multi_head_attention_forward:
            fast = _fast_path_attention(*args, **kwargs)
            if fast is not None:
                return fast
        body = _ATTENTION_INSIDE.get(func)
        if body is not None:
            with self:
                return body(*args, **kwargs)
        return func(*args, **kwargs)


_MHA = inspect.signature(F.multi_head_attention_forward)


def _fast_path_attention(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, None] | None:
    """What a GPU runs for ``nn.MultiheadAttention`` in inference where its fast path applies
    (self-attention, no gradient, no weights asked for, no masks or extra biases, an even
    number of heads): the packed input projection of the batch-first tokens with its bias
    (one ``addmm``), fused attention on the heads as views of it, and the output projection
    (another ``addmm``) of the attention's output, whose layout is already the tokens' (no
    copy); ``None`` where the fast path does not apply (the ordinary path then runs, as it does
    on a GPU). Whether the module is ``batch_first`` (also required) cannot be seen here: it is
    assumed."""
    bound = _MHA.bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    query = a["query"]
    if not (query is a["key"] is a["value"] and query.device.type == "meta"
            and query.dim() == 3 and not a["training"] and not a["need_weights"]
            and not torch.is_grad_enabled() and a["attn_mask"] is None
            and a["key_padding_mask"] is None and a["bias_k"] is None and a["bias_v"] is None
            and not a["use_separate_proj_weight"] and a["num_heads"] % 2 == 0
            and not a["add_zero_attn"]):
        return None
    length, batch, width = query.shape
    heads = a["num_heads"]
    # the module handed the batch-first tokens over transposed: the fast path takes them as
    # they came, rows of tokens
    tokens = query.transpose(0, 1).reshape(batch * length, width)
    packed = F.linear(tokens, a["in_proj_weight"], a["in_proj_bias"])
    q, k, v = packed.view(batch, length, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
    attended = _fused_attention(q, k, v, is_causal=bool(a["is_causal"]))
    if attended is None:
        return None
    out = F.linear(attended.transpose(1, 2).reshape(batch * length, width),
                   a["out_proj_weight"], a["out_proj_bias"])
    return out.view(batch, length, width).transpose(0, 1), None


def _fused_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                     is_causal: bool = False, scale: float | None = None,
                     enable_gqa: bool = False) -> torch.Tensor | None:
    if query.device.type != "meta" or query.dim() != 4 or key.dim() != 4:
        return None
    # grouped-query attention (fewer key/value heads) runs fused on a GPU in half precision
    # (flash and cuDNN attention take it; in fp32 only the unfused math does), the key/value
    # heads read once each; the fused operator's meta kernel takes them as they are
    grouped = (enable_gqa and query.shape[1] % key.shape[1] == 0
               and query.dtype in (torch.float16, torch.bfloat16))
    if key.shape[1] != query.shape[1] and not grouped:
        return None
    grad = torch.is_grad_enabled() and any(
        t.requires_grad for t in (query, key, value))
    if grad and key.shape[1] != query.shape[1] and not _meta_grouped_backward_fits():
        return None  # this torch's meta backward would fail: the unfused math instead
    try:
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, grad, dropout_p, is_causal, scale=scale)[0]
    except (RuntimeError, TypeError):
        return None


@functools.cache
def _meta_grouped_backward_fits() -> bool:
    """Whether this torch's meta kernel of the fused attention's backward gives grouped key
    and value heads gradients of their own shape (torch 2.11's gives them the query's head
    count, and autograd then refuses the gradient: training predictions of grouped-query
    models failed). Asked once, of the operators themselves, outside any mode of a pass."""
    with _disable_current_modes(), torch.no_grad():
        query = torch.empty(1, 4, 2, 8, device="meta", dtype=torch.bfloat16)
        key = torch.empty(1, 2, 2, 8, device="meta", dtype=torch.bfloat16)
        try:
            out, lse, seed, offset = torch.ops.aten._scaled_dot_product_efficient_attention(
                query, key, key, None, True)
            grads = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
                torch.empty_like(out), query, key, key, None, out, lse, seed, offset, 0.0,
                [True, True, True, False])
        except (RuntimeError, NotImplementedError):
            return False
    return all(grad.shape == key.shape for grad in grads[1:3])
