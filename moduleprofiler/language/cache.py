"""Key/value caches: the bytes a cache holds, per layer and per token, read from its tensors,
and the size a configuration predicts for a context length.

Hugging Face caches (``DynamicCache``, ``StaticCache``, ``EncoderDecoderCache``, transformers
>= 5) keep one layer object per decoder layer with ``keys`` and ``values`` tensors of shape
``(batch, kv_heads, tokens, head_dim)``; a static cache allocates its full length up front, a
dynamic one grows by concatenation. The legacy form, a tuple of ``(key, value)`` pairs per
layer, is read too. Bytes are those of the distinct storages the tensors use: what the cache
really holds, views and shared storages counted once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd
import torch
from torch import Tensor

from moduleprofiler.export.columns import ColumnSpec, register_column
from moduleprofiler.export.renamed import renamed_columns
from moduleprofiler.shapes import dtype_named
from moduleprofiler.storage import distinct_bytes
from moduleprofiler.warn import warn


@dataclass(frozen=True)
class CacheLayer:
    """The cache of one attention layer."""

    layer: int
    """Position of the layer in the cache (0 = first decoder layer)."""
    kind: str
    """``"self"`` (the decoder's own keys and values) or ``"cross"`` (encoder outputs)."""
    key_bytes: int
    value_bytes: int
    tokens: int
    """Tokens the layer holds (for a static cache: the filled positions)."""
    capacity: int
    """Token positions its tensors have room for (``tokens`` for a dynamic cache,
    ``max_cache_len`` for a static one)."""
    window: int | None = None
    """Token positions a sliding-window (or chunked-attention) layer keeps at most: its bytes
    stop growing there (``None``: the layer keeps every token)."""
    position_bytes: int | None = None
    """Bytes of one token position's keys and values (``None``: not read)."""

    @property
    def bytes(self) -> int:
        """Keys plus values."""
        return self.key_bytes + self.value_bytes


@dataclass(frozen=True)
class KVCacheSize:
    """What a key/value cache holds: per layer, in total and per token position."""

    columns: ClassVar[tuple[ColumnSpec, ...]] = (
        register_column("layer", "int", "layer", aggregation="none",
                        description="position of an attention layer in a key/value cache, 0 "
                        "the first decoder layer (kv_cache_size().to_df())"),
        register_column("kind", "text", "kind", aggregation="none",
                        description="self (a cache layer of the decoder's own keys and values) "
                        "or cross (of the encoder's outputs) (kv_cache_size().to_df())"),
        register_column("capacity", "int", "capacity", aggregation="none",
                        description="token positions a cache layer's tensors have room for: "
                        "context_tokens for a dynamic cache, max_cache_len for a static one "
                        "(kv_cache_size().to_df())"),
        register_column("key_bytes", "bytes", "keys", aggregation="none", unit="bytes",
                        description="bytes of a cache layer's keys (distinct storages) "
                        "(kv_cache_size().to_df())"),
        register_column("value_bytes", "bytes", "values", aggregation="none", unit="bytes",
                        description="bytes of a cache layer's values (distinct storages) "
                        "(kv_cache_size().to_df())"),
        register_column("bytes_per_token", "bytes", "bytes/token", aggregation="none",
                        unit="bytes", description="a cache layer's kv_cache_bytes over its "
                        "capacity (kv_cache_size().to_df(); KVCacheSize.bytes_per_token is "
                        "the self-attention layers' together)"),
    )
    """The columns of :meth:`to_df` that are the cache's own (``context_tokens`` and
    ``kv_cache_bytes`` are a generation step's columns, the same quantities of one layer
    here), declared with the result that writes them."""

    RENAMED: ClassVar[dict[str, str]] = {"tokens": "context_tokens"}
    """Old column name -> new one: ``tokens`` held the tokens a layer holds, the quantity a
    generation's table calls ``context_tokens``. The old name still selects its column, with
    a ``DeprecationWarning``, until 0.3.0."""

    layers: tuple[CacheLayer, ...]
    cache_type: str

    @property
    def total_bytes(self) -> int:
        """Bytes of every layer's keys and values."""
        return sum(layer.bytes for layer in self.layers)

    @property
    def tokens(self) -> int:
        """Tokens held by the decoder's own (self-attention) layers: the context length."""
        return max((layer.tokens for layer in self.layers if layer.kind == "self"), default=0)

    @property
    def capacity(self) -> int:
        """Token positions the self-attention tensors have room for."""
        return max((layer.capacity for layer in self.layers if layer.kind == "self"), default=0)

    @property
    def bytes_per_token(self) -> float | None:
        """Self-attention bytes per token position over all layers (``None`` when empty)."""
        capacity = self.capacity
        if capacity == 0:
            return None
        return sum(layer.bytes for layer in self.layers if layer.kind == "self") / capacity

    def predict_bytes(self, tokens: int) -> int | None:
        """Bytes the cache would hold at a context of ``tokens``: each self-attention layer's
        bytes grow with the context, a sliding-window layer's up to its window only;
        cross-attention bytes (fixed by the encoder's input) stay as they are."""
        check_count(tokens, "tokens")
        if self.bytes_per_token is None:
            return None
        grown = 0.0
        for layer in self.layers:
            if layer.kind != "self":
                continue
            if layer.window is not None and layer.position_bytes is not None:
                grown += layer.position_bytes * min(tokens, layer.window)
            elif layer.capacity:
                grown += layer.bytes / layer.capacity * tokens
        cross = sum(layer.bytes for layer in self.layers if layer.kind == "cross")
        return round(grown) + cross

    def to_df(self) -> pd.DataFrame:
        """One row per layer: ``layer``, ``kind``, ``context_tokens`` (the tokens it holds;
        was ``tokens``), ``capacity``, ``key_bytes``, ``value_bytes``, ``kv_cache_bytes``
        and ``bytes_per_token`` (per token position)."""
        rows = [{"layer": layer.layer, "kind": layer.kind, "context_tokens": layer.tokens,
                 "capacity": layer.capacity, "key_bytes": layer.key_bytes,
                 "value_bytes": layer.value_bytes, "kv_cache_bytes": layer.bytes,
                 "bytes_per_token": layer.bytes / layer.capacity if layer.capacity else None}
                for layer in self.layers]
        return renamed_columns(pd.DataFrame(rows, columns=[
            "layer", "kind", "context_tokens", "capacity", "key_bytes", "value_bytes",
            "kv_cache_bytes", "bytes_per_token"]), self.RENAMED, "KVCacheSize.to_df()")


def kv_cache_size(cache: Any) -> KVCacheSize:
    """Measure a key/value cache from the tensors it holds.

    Args:
        cache: a Hugging Face ``Cache`` (``DynamicCache``, ``StaticCache``,
            ``EncoderDecoderCache``...), a model output that carries one as
            ``past_key_values``, or the legacy tuple of ``(key, value)`` pairs per layer.

    Raises:
        TypeError: ``cache`` is none of these.
    """
    if not _is_cache_like(cache) and _past_of(cache) is not None:
        cache = _past_of(cache)
    self_cache = getattr(cache, "self_attention_cache", None)
    if self_cache is not None:  # encoder-decoder: decoder keys/values plus the encoder's
        layers = [*_layers(self_cache, "self"),
                  *_layers(getattr(cache, "cross_attention_cache", None), "cross")]
    elif _is_cache_like(cache):
        layers = list(_layers(cache, "self"))
    else:
        raise TypeError(
            f"cache must be a transformers Cache, a model output with past_key_values or a "
            f"tuple of (key, value) pairs per layer, not {type(cache).__name__}")
    return KVCacheSize(layers=tuple(layers), cache_type=type(cache).__name__)


def cache_of(output: Any) -> Any:
    """The cache a model call returned (``past_key_values`` of an output object or dict),
    ``None`` when it returned none."""
    past = _past_of(output)
    return past if past is not None and _is_cache_like(past) else None


def predict_kv_cache_bytes(config: Any, tokens: int, batch_size: int = 1,
                           dtype: torch.dtype | None = None, *,
                           encoder_tokens: int | None = None) -> int:
    """The bytes of the key/value cache ``generate`` keeps (a dynamic cache) for a context of
    ``tokens`` positions, of a decoder described by a Transformers ``config``: per layer,
    ``2 x kv_heads x head_dim x positions held x batch_size x dtype size``.

    Each layer holds what its kind of attention keeps, read from the configuration as
    Transformers builds the cache (``layer_types``, else ``sliding_window``): a full-attention
    layer every token; a sliding-window (or chunked) layer its window at most (it keeps the
    last ``window - 1`` tokens as views of the ``window`` tokens a decode step joined); a layer
    without attention (a state-space or linear-attention layer, whose state does not grow
    with the context) none. Multi-query attention (``multi_query``: Falcon-7B, GPT-BigCode)
    caches one key/value head, Falcon's new decoder architecture one per query head (it
    repeats its key/value heads before caching them); DeepSeek-V3's latent attention (MLA)
    caches its compressed vector and rotary key, ``kv_lora_rank + qk_rope_head_dim`` values
    per token, instead of keys and values per head.

    An encoder-decoder (T5, BART, Whisper: ``config.is_encoder_decoder``) also caches every
    decoder layer's cross-attention keys and values of the ``encoder_tokens`` encoder
    positions: ``2 x layers x kv_heads x head_dim x encoder_tokens x batch_size x dtype
    size`` more. Without ``encoder_tokens`` the result is the self-attention part alone, and
    a ``UserWarning`` says what it leaves out.

    ``dtype`` defaults to the configuration's own (``config.dtype``, ``torch_dtype`` in older
    Transformers); a configuration that names none is assumed float32, with a
    ``UserWarning`` saying so.

    Raises:
        ValueError: ``tokens``, ``encoder_tokens`` or ``batch_size`` is negative,
            ``encoder_tokens`` is given for a model that is no encoder-decoder, the config
            does not say how many layers and heads the decoder has, or a layer's cache is of
            a kind this prediction does not model (another latent-attention layout, an indexed
            or compressed attention layer): measure a real cache with :func:`kv_cache_size`.
        TypeError: ``dtype`` is not a ``torch.dtype``.
    """
    check_count(tokens, "tokens")
    check_count(batch_size, "batch_size", 1)
    if dtype is not None and not isinstance(dtype, torch.dtype):  # torch's error named empty()
        raise TypeError(f"dtype must be a torch.dtype such as torch.bfloat16 or None, got "
                        f"{type(dtype).__name__} {dtype!r}")
    if encoder_tokens is not None:
        check_count(encoder_tokens, "encoder_tokens")
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    if encoder_tokens and not encoder_decoder:  # ignored in silence, it would read as counted
        raise ValueError(f"encoder_tokens={encoder_tokens}: {type(config).__name__} is no "
                         "encoder-decoder, so its cache holds no cross-attention part")
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layers = getattr(text, "num_decoder_layers", None) or getattr(text, "num_hidden_layers", None)
    if not layers:
        raise ValueError(f"config ({type(config).__name__}) does not give num_hidden_layers")
    held = _positions_held(config, text, layers, tokens)
    if not any(held) and tokens and not encoder_decoder:
        return 0  # no layer attends (a state-space model): nothing grows with the context
    heads = getattr(text, "num_attention_heads", None)
    if not heads:
        raise ValueError(f"config ({type(config).__name__}) does not give num_hidden_layers "
                         "and num_attention_heads")
    kv_values = 2 * _kv_heads(text, heads) * _head_dim(text, heads)  # keys and values, a token
    itemsize = torch.empty((), dtype=dtype or _config_dtype(config)).element_size()
    per_position = _self_values_per_token(config, text, kv_values) * batch_size * itemsize
    self_bytes = per_position * sum(held)
    if not encoder_decoder:
        return self_bytes
    per_encoder_token = layers * kv_values * batch_size * itemsize
    if encoder_tokens is None:
        warn(f"predict_kv_cache_bytes: {type(config).__name__} is an encoder-decoder, whose "
             f"cache also holds the cross-attention keys and values of every encoder token "
             f"({per_encoder_token:,} bytes per encoder token); without encoder_tokens= they "
             "are left out", UserWarning)
        return self_bytes
    return self_bytes + per_encoder_token * encoder_tokens


_WINDOWED = ("sliding_attention", "chunked_attention")
_NO_KEYS = ("linear_attention", "conv", "dummy")
"""Cache layer kinds that hold no keys and values of their own: a recurrent or convolution
state of fixed size, or a layer that reads another layer's cache."""
_LATENT_CACHED = ("deepseek_v3",)
"""Model types whose latent attention caches the compressed vector (``kv_lora_rank``) and the
rotary key (``qk_rope_head_dim``), one of each per token (read from their attention code)."""


def _positions_held(config: Any, text: Any, layers: int, tokens: int) -> list[int]:
    """Token positions each decoder layer's cache holds at a context of ``tokens``, by the layer
    kinds Transformers' ``DynamicCache(config=...)`` builds."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    kinds, given = get_layer_types_and_kwargs(text)
    # Transformers before 5.24 gives one set of arguments for every layer
    extras: list[Any] = [given] * len(kinds) if isinstance(given, Mapping) else list(given)
    if len(kinds) != layers and set(kinds) <= {"full_attention"}:
        kinds, extras = ["full_attention"] * layers, [{}] * layers  # T5's num_decoder_layers
    if len(extras) != len(kinds):  # never a layer left out of the sum in silence
        raise ValueError(f"config ({type(config).__name__}): Transformers gave {len(kinds)} "
                         f"cache layer kinds with {len(extras)} sets of arguments; measure a "
                         "real cache with kv_cache_size() and use KVCacheSize.predict_bytes")
    held = []
    for index, (kind, extra) in enumerate(zip(kinds, extras)):
        if kind == "full_attention":
            held.append(tokens)
        elif kind in _WINDOWED:
            # DynamicSlidingWindowLayer keeps its last window - 1 tokens as views of the
            # window's tokens the step concatenated: that storage is what memory holds
            held.append(min(tokens, int(extra["sliding_window"])))
        elif kind in _NO_KEYS:
            held.append(0)
        else:
            raise ValueError(f"config ({type(config).__name__}): decoder layer {index} is a "
                             f"{kind!r} layer, whose cache predict_kv_cache_bytes does not model; "
                             "measure a real cache with kv_cache_size() and use "
                             "KVCacheSize.predict_bytes")
    return held


def _kv_heads(text: Any, heads: int) -> int:
    """Key/value heads a layer caches: one for multi-query attention (``multi_query``), one
    per query head for Falcon's new decoder architecture (it caches its keys and values
    repeated to every head), else ``num_key_value_heads`` (Falcon: ``num_kv_heads``), else
    one per query head."""
    if getattr(text, "new_decoder_architecture", False):
        return heads
    if getattr(text, "multi_query", False):
        return 1
    return int(getattr(text, "num_key_value_heads", None) or getattr(text, "num_kv_heads", None)
               or heads)


def _head_dim(text: Any, heads: int) -> int:
    return int(getattr(text, "d_kv", None) or getattr(text, "head_dim", None)
               or text.hidden_size // heads)


def _self_values_per_token(config: Any, text: Any, kv_values: int) -> int:
    """Values a self-attention layer caches per token: keys and values of every key/value head,
    or a latent-attention model's compressed vector and rotary key."""
    rank = getattr(text, "kv_lora_rank", None)
    if not rank:
        return kv_values
    model_type = getattr(text, "model_type", "")
    if model_type not in _LATENT_CACHED:
        raise ValueError(f"config ({type(config).__name__}, model_type {model_type!r}) has "
                         f"latent attention (kv_lora_rank={rank}), whose cache layout "
                         "predict_kv_cache_bytes does not know for this model; measure a real "
                         "cache with kv_cache_size() and use KVCacheSize.predict_bytes")
    return int(rank) + int(text.qk_rope_head_dim)


def config_dtype(config: Any) -> torch.dtype | None:
    """The dtype a Transformers configuration names (``dtype``, ``torch_dtype`` in older
    Transformers), ``None`` when it names none."""
    for name in ("dtype", "torch_dtype"):
        value = config.__dict__.get(name) if hasattr(config, "__dict__") else None
        if isinstance(value, str):
            value = dtype_named(value)
        if isinstance(value, torch.dtype):
            return value
    return None


def _config_dtype(config: Any) -> torch.dtype:
    """The dtype a configuration names, else float32 with a warning saying it was assumed."""
    named = config_dtype(config)
    if named is not None:
        return named
    warn(f"predict_kv_cache_bytes: the configuration ({type(config).__name__}) names no "
         "dtype, so float32 (4 bytes) was assumed; pass dtype= (e.g. torch.bfloat16) for the "
         "dtype the model runs in", UserWarning)
    return torch.float32


# -- reading the cache objects -------------------------------------------------------------------
def check_count(value: object, name: str, least: int = 0) -> None:
    """An int (not a bool) of at least ``least``, 0 or 1, else a ``ValueError`` naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{name} must be a {'positive' if least else 'non-negative'} int, got "
                         f"{value!r}")


def _past_of(output: Any) -> Any:
    """``past_key_values`` (or ``cache``, the newer name) of an output object or dict."""
    for name in ("past_key_values", "cache"):
        found = output.get(name) if isinstance(output, dict) else getattr(output, name, None)
        if found is not None:
            return found
    return None


def _is_cache_like(value: Any) -> bool:
    if hasattr(value, "layers") or hasattr(value, "self_attention_cache"):
        return True
    return isinstance(value, (tuple, list)) and all(
        isinstance(pair, (tuple, list)) and len(pair) >= 2 and isinstance(pair[0], Tensor)
        for pair in value)


def _layers(cache: Any, kind: str) -> Iterator[CacheLayer]:
    if cache is None:
        return
    entries = cache.layers if hasattr(cache, "layers") else cache
    for index, entry in enumerate(entries):
        if isinstance(entry, (tuple, list)):
            keys, values, filled = entry[0], entry[1], None
        else:
            keys, values = getattr(entry, "keys", None), getattr(entry, "values", None)
            filled = _filled(entry)
        if not isinstance(keys, Tensor) or not isinstance(values, Tensor):
            continue  # not initialised yet, or a layer without attention (a linear-attention state)
        capacity = keys.shape[-2] if keys.dim() >= 2 else 0
        window = getattr(entry, "sliding_window", None) if getattr(entry, "is_sliding", False) \
            else None
        yield CacheLayer(layer=index, kind=kind, key_bytes=distinct_bytes([keys]),
                         value_bytes=distinct_bytes([values]),
                         tokens=capacity if filled is None else filled, capacity=capacity,
                         window=window if isinstance(window, int) else None,
                         position_bytes=_position_bytes(keys) + _position_bytes(values))


def _position_bytes(tensor: Tensor) -> int:
    """Bytes of one token position (dimension -2) of a cache tensor."""
    if tensor.dim() < 2 or tensor.shape[-2] == 0:
        return 0
    return tensor.numel() // tensor.shape[-2] * tensor.element_size()


def _filled(layer: Any) -> int | None:
    """Positions a cache layer has filled (a static layer counts them in a tensor, which on
    the meta device has no value: ``None``)."""
    try:
        return int(layer.get_seq_length())
    except (AttributeError, RuntimeError, NotImplementedError, TypeError, ValueError):
        return None
