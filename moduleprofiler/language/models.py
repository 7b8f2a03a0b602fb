"""Transformers models by name, without downloads: the configuration class a ``model_type``
names (``AutoConfig.for_model``) or a local ``config.json``, with overrides, built on the meta
device (no memory, no real compute: exact counts of any size) or on a real one (timing).

Nothing here reads the Hugging Face Hub: ``AutoConfig.for_model`` and ``from_config`` build
from the classes installed with ``transformers``, and a local file is read as JSON.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from moduleprofiler.devices import resolve_device
from moduleprofiler.language.cache import check_count
from moduleprofiler.validate import check_choice

Task = Literal["auto", "causal-lm", "seq2seq-lm", "base"]
"""Which head to build: ``causal-lm`` (``AutoModelForCausalLM``), ``seq2seq-lm``
(``AutoModelForSeq2SeqLM``), ``base`` (``AutoModel``, no head); ``auto`` the base model of an
encoder-only type (BERT, RoBERTa: a masked-LM type that is no decoder), the seq2seq head of an
encoder-decoder type, else its base model (BART's causal-LM class is its decoder alone), and
for any other type the first of these that knows the configuration."""
TASKS: tuple[str, ...] = ("auto", "causal-lm", "seq2seq-lm", "base")
HF_PREFIX = "hf:"


class ConfigFieldError(ValueError):
    """A configuration override names a field the configuration class does not define (a
    typo such as ``nlayer`` for GPT-2's ``n_layer``), which Transformers would keep as an
    unused attribute while building the default-sized model."""

    def __init__(self, config_class: str, fields: tuple[str, ...],
                 close: dict[str, list[str]]) -> None:
        named = ", ".join(f"{field!r}" + (f" (did you mean {' or '.join(map(repr, close[field]))}?)"
                                          if close.get(field) else "") for field in fields)
        super().__init__(f"{config_class} defines no {named}")
        self.config_class = config_class
        self.fields = fields
        """The overrides it does not define, in the order given."""
        self.close = close
        """Each of ``fields`` -> the defined names closest to it (possibly none)."""


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:  # an optional dependency
        raise ImportError("models by name need transformers: pip install transformers") from exc
    return transformers


def hf_config(source: Any, **overrides: Any) -> Any:
    """A Transformers configuration from ``source``, with ``overrides`` applied.

    Args:
        source: a ``model_type`` (``"gpt2"``, ``"llama"``, ``"mixtral"``, ``"t5"``; an
            ``"hf:"`` prefix is allowed), a path to a ``config.json`` or to a folder holding
            one, or a configuration object (copied, never changed).
        overrides: configuration fields such as ``num_hidden_layers=2``.

    Raises:
        ValueError: no configuration class is registered under that name, or the file is not
            a configuration (it has no ``model_type``).
        FileNotFoundError: a path was given and holds no ``config.json``.
    """
    transformers = _transformers()
    if isinstance(source, transformers.PretrainedConfig):
        _check_overrides(type(source), overrides)
        fields = {**source.to_dict(), **overrides}
        return type(source).from_dict(fields)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a model type, a path or a PretrainedConfig, not "
                        f"{type(source).__name__}")
    text = str(source).removeprefix(HF_PREFIX)
    path = Path(text)
    if path.suffix == ".json" or path.is_dir() or os.sep in text or "/" in text:
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"no configuration file at {file}")
        fields = json.loads(file.read_text(encoding="utf-8"))
        model_type = fields.pop("model_type", None) if isinstance(fields, dict) else None
        if not model_type:
            raise ValueError(f"{file} has no model_type: not a Transformers configuration")
        # the file's own keys are its business (old names, extra metadata): only the
        # overrides given here are checked
        return _for_model(transformers, model_type, fields, overrides)
    return _for_model(transformers, text, {}, overrides)


def _for_model(transformers: Any, model_type: str, fields: dict[str, Any],
               overrides: dict[str, Any]) -> Any:
    if model_type not in transformers.CONFIG_MAPPING:
        raise ValueError(f"unknown model type {model_type!r}: transformers "
                         f"{transformers.__version__} has no configuration class of that name")
    _check_overrides(transformers.CONFIG_MAPPING[model_type], overrides)
    return transformers.AutoConfig.for_model(model_type, **{**fields, **overrides})


def _check_overrides(config_class: type, overrides: dict[str, Any]) -> None:
    """Refuse overrides ``config_class`` does not define: a ``PretrainedConfig`` accepts any
    keyword and keeps an unknown one as an attribute nothing reads, so a typo would build the
    default-sized model without a word. Defined: its fields, the generic names its
    ``attribute_map`` maps (``num_hidden_layers`` -> ``n_layer``), what a default instance
    holds, its attributes and properties (``num_labels``, ``attn_implementation``) and
    :data:`GENERIC_KEYWORDS`."""
    unknown = [key for key in overrides if not _defines(config_class, key)]
    if not unknown:
        return
    known = _defined_names(config_class)
    close = {key: difflib.get_close_matches(key, known, n=2) for key in unknown}
    raise ConfigFieldError(config_class.__name__, tuple(unknown), close)


GENERIC_KEYWORDS = ("torch_dtype", "rope_scaling", "rope_theta", "name_or_path",
                    "per_layer_config")
"""Keywords every configuration reads in ``PretrainedConfig.__post_init__`` (Transformers
5.24) without a field or attribute of that name."""


def _defines(config_class: type, key: str) -> bool:
    # class attributes and properties (num_labels, output_attentions), keywords stored under
    # a private name (attn_implementation -> _attn_implementation), and generation settings
    # (decoder_start_token_id): a configuration keeps them for generate(), which reads them
    return (key in GENERIC_KEYWORDS or hasattr(config_class, key)
            or hasattr(config_class, f"_{key}") or key in _defined_names(config_class)
            or key in _generation_names())


def _generation_names() -> set[str]:
    """What a default ``GenerationConfig`` holds (``decoder_start_token_id``, ...)."""
    try:
        return set(_transformers().GenerationConfig().to_dict())
    except Exception:  # an older or newer Transformers without it: the class's names decide
        return set()


def _defined_names(config_class: type) -> list[str]:
    fields = [f.name for f in dataclasses.fields(config_class)] \
        if dataclasses.is_dataclass(config_class) else []
    try:
        held = config_class().to_dict()
    except Exception:  # a configuration whose defaults need arguments: its fields still say
        held = {}
    return sorted({*fields, *getattr(config_class, "attribute_map", {}), *held}
                  - {"model_type"})


def _encoder_only(transformers: Any, config: Any) -> bool:
    """An encoder-only type: it has a masked-LM head, is not an encoder-decoder and its
    configuration does not ask for a decoder."""
    return (type(config) in transformers.AutoModelForMaskedLM._model_mapping
            and not getattr(config, "is_encoder_decoder", False)
            and not getattr(config, "is_decoder", False))


def hf_model(source: Any, *, task: Task = "auto", device: str | torch.device = "meta",
             dtype: torch.dtype | None = None, **overrides: Any) -> nn.Module:
    """Build a Transformers model from its configuration (see :func:`hf_config`), in eval
    mode. On the meta device (the default) any size costs no memory and profiles count
    exactly; build tiny overrides on ``"cpu"`` to time or generate.

    Weights are Transformers' random initialisation (on meta: none at all); nothing is
    downloaded.

    Raises:
        ValueError: an unknown model type or ``task``, a task the model has no class for,
            or a ``pad_token_id`` outside ``vocab_size`` (a smaller vocabulary than the
            configuration's own: the embedding's padding index must be one of its tokens).
    """
    check_choice(task, "task", TASKS)
    transformers = _transformers()
    config = hf_config(source, **overrides)
    _check_padding_token(config)
    auto = {"causal-lm": transformers.AutoModelForCausalLM,
            "seq2seq-lm": transformers.AutoModelForSeq2SeqLM, "base": transformers.AutoModel}
    # an encoder-decoder's causal-LM class (BartForCausalLM, WhisperForCausalLM) is its
    # decoder alone: the whole model is its seq2seq head, else its base model
    order = ("seq2seq-lm", "base", "causal-lm") if getattr(config, "is_encoder_decoder", False) \
        else ("causal-lm", "seq2seq-lm", "base")
    chosen = [task] if task != "auto" else [name for name in order
                                            if type(config) in auto[name]._model_mapping]
    if task == "auto" and _encoder_only(transformers, config):
        # BERT-like models also have a causal-LM head (BertLMHeadModel), which needs
        # is_decoder=True and is not how they are used: their base model is the default
        chosen = ["base"]
    if not chosen or type(config) not in auto[chosen[0]]._model_mapping:
        raise ValueError(f"transformers has no {task} model for {config.model_type!r}")
    kwargs = {} if dtype is None else {"dtype": dtype}
    with torch.device(device):
        model = auto[chosen[0]].from_config(config, **kwargs)
    return model.eval()  # type: ignore[no-any-return]


def _check_padding_token(config: Any) -> None:
    """Refuse a ``pad_token_id`` outside the vocabulary before the model is built: the
    embedding asserted ``Padding_idx must be within num_embeddings``, naming neither field
    (Phi-3's 32,000 or Whisper's 50,256 with ``vocab_size=100``)."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    for part in (config,) if text is config else (config, text):
        pad, vocab = getattr(part, "pad_token_id", None), getattr(part, "vocab_size", None)
        if isinstance(pad, int) and isinstance(vocab, int) and not -vocab <= pad < vocab:
            raise ValueError(f"{type(config).__name__}: pad_token_id={pad} is not a token of "
                             f"vocab_size={vocab} (the embedding's padding index must be one): "
                             "give pad_token_id= inside the vocabulary, or None")


def text_inputs(model: nn.Module, batch_size: int = 1, seq_len: int = 16, *,
                labels: bool = False, seed: int = 0) -> dict[str, torch.Tensor]:
    """Token inputs for a Transformers ``model`` on its device: ``input_ids`` of shape
    ``(batch_size, seq_len)`` drawn from its vocabulary (seed ``seed``), ``decoder_input_ids``
    of the same shape for an encoder-decoder, and ``labels`` (the inputs again) when asked, so
    that the model returns a training loss.

    Raises:
        ValueError: ``batch_size`` or ``seq_len`` is not a positive int, or the model's main
            input is not token ids (``model.main_input_name``: Whisper's ``input_features``).
    """
    check_count(batch_size, "batch_size", 1)
    check_count(seq_len, "seq_len", 1)
    main = getattr(model, "main_input_name", "input_ids")
    if main != "input_ids":  # Whisper takes input_features: token ids failed in its encoder
        raise ValueError(f"{type(model).__name__} takes {main}, not token ids: give it that "
                         "input yourself (text_inputs makes token ids)")
    config = getattr(model, "config", None)
    vocab = getattr(config.get_text_config(decoder=True), "vocab_size", None) if config else None
    device = resolve_device(model)  # an offloaded model's: where its hooks run it
    shape = (batch_size, seq_len)
    if device.type == "meta" or not vocab:
        ids = torch.zeros(shape, dtype=torch.long, device=device)
    else:
        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, vocab, shape, generator=generator).to(device)
    inputs = {"input_ids": ids}
    if getattr(config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"] = ids
    if labels:
        inputs["labels"] = ids
    return inputs
