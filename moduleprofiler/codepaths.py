"""Code paths that hooks change: what a hooked pass runs that the model without hooks does not.

``nn.TransformerEncoderLayer`` (in eval mode, without grad) takes a fused fast path
(``torch._transformer_encoder_layer_fwd``) only when none of its submodules has forward hooks.
A hooked pass, every pass of moduleprofiler, runs the unfused path instead: its times and its
memory describe that path, not the one the model takes unhooked. Counting is not affected (the
two paths do the same arithmetic). :func:`fast_path_changes` finds those layers, so that the
timing and memory passes can say so.
"""

from __future__ import annotations

import torch
from torch import nn

from moduleprofiler.inputs import orig_mod_of
from moduleprofiler.records import display_path


class CodePathWarning(UserWarning):
    """A pass runs the model on different kernels than it runs on its own: hooks turn off a
    fused path, or the caller's ``torch.autocast`` does not reach the meta device."""


_AUTOCAST_TYPES = ("cpu", "cuda", "xpu", "mps", "hpu")


def autocast_left_out(device: torch.device) -> list[str]:
    """The device types whose ``torch.autocast`` is on but does not apply on ``device``: on
    the meta device, every one (autocast casts only tensors of its own device type, and the
    meta device has no autocast), so the passes run in the model's own dtypes."""
    if device.type != "meta":
        return []
    return [kind for kind in _AUTOCAST_TYPES
            if torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind)]


def fast_path_changes(root: nn.Module, eval: bool, grad_enabled: bool) -> list[str]:
    """Paths of ``TransformerEncoderLayer`` modules that would take their fused fast path
    without hooks and cannot with them (the layer checks for hooks on its submodules).

    The input-independent conditions of ``TransformerEncoderLayer.forward`` are checked; the
    input ones (3-D input, supported device) are assumed to hold.
    """
    if grad_enabled:
        return []
    if not torch.backends.mha.get_fastpath_enabled():
        return []
    if torch.is_autocast_enabled():
        return []
    found = []
    for path, module in root.named_modules():
        if not isinstance(module, nn.TransformerEncoderLayer):
            continue
        attn = module.self_attn
        training = False if eval else module.training
        if (not training and attn.batch_first and attn.in_proj_bias is not None
                and attn._qkv_same_embed_dim
                and getattr(module, "activation_relu_or_gelu", False)
                and module.norm1.eps == module.norm2.eps and attn.num_heads % 2 == 0):
            found.append(display_path(path))
    return found


def eager_module(module: nn.Module) -> tuple[nn.Module, str | None]:
    """The module whose calls a hooked timing pass times, and a note when it is not
    ``module`` itself.

    A ``torch.compile(model)`` wrapper runs one compiled graph; hooks on its modules break
    that graph at every module, so per-module times of it would describe neither the compiled
    model nor the eager one. Its original module (``_orig_mod``) is timed instead, eagerly,
    and the note says so. A submodule compiled in place (``block.compile()``) cannot be
    unwrapped without changing it: ``ValueError`` (the compiled clock times such a model).
    """
    original = orig_mod_of(module)
    if original is not None:
        return original, (
            "the model is torch.compile'd: hooks would break its compiled graph at every "
            "module, so the per-module times are of its original module run eagerly "
            "(_orig_mod); benchmark() of the compiled model gives its real latency, and "
            "time_modules with clock='auto' or 'compiled' its forward's per-module time "
            "compiled")
    for path, sub in module.named_modules():
        if getattr(sub, "_compiled_call_impl", None) is not None:
            raise ValueError(
                f"module {display_path(path)!r} was compiled in place (.compile()): hooks "
                "would break its compiled graph at every module and time pieces of it. "
                "time_modules with clock='auto' or 'compiled' times the forward of a model "
                "with compiled submodules per module, compiled; for this clock, time the "
                "model before calling .compile()")
    return module, None
