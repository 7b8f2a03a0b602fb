"""Transformers models by name, without downloads: the configuration class a ``model_type``
names (``AutoConfig.for_model``) or a local ``config.json``, with overrides, built on the meta
device (no memory, no real compute: exact counts of any size) or on a real one (timing).

Nothing here reads the Hugging Face Hub: ``AutoConfig.for_model`` and ``from_config`` build
from the classes installed with ``transformers``, and a local file is read as JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from moduleprofiler.validate import check_choice

Task = Literal["auto", "causal-lm", "seq2seq-lm", "base"]
"""Which head to build: ``causal-lm`` (``AutoModelForCausalLM``), ``seq2seq-lm``
(``AutoModelForSeq2SeqLM``), ``base`` (``AutoModel``, no head); ``auto`` the base model of an
encoder-only type (BERT, RoBERTa: a masked-LM type that is no decoder), else the first of these
that knows the configuration."""
TASKS: tuple[str, ...] = ("auto", "causal-lm", "seq2seq-lm", "base")
HF_PREFIX = "hf:"


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
        return _for_model(transformers, model_type, {**fields, **overrides})
    return _for_model(transformers, text, overrides)


def _for_model(transformers: Any, model_type: str, fields: dict[str, Any]) -> Any:
    if model_type not in transformers.CONFIG_MAPPING:
        raise ValueError(f"unknown model type {model_type!r}: transformers "
                         f"{transformers.__version__} has no configuration class of that name")
    return transformers.AutoConfig.for_model(model_type, **fields)


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
        ValueError: an unknown model type or ``task``, or a task the model has no class for.
    """
    check_choice(task, "task", TASKS)
    transformers = _transformers()
    config = hf_config(source, **overrides)
    auto = {"causal-lm": transformers.AutoModelForCausalLM,
            "seq2seq-lm": transformers.AutoModelForSeq2SeqLM, "base": transformers.AutoModel}
    chosen = [task] if task != "auto" else [name for name in ("causal-lm", "seq2seq-lm", "base")
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


def text_inputs(model: nn.Module, batch_size: int = 1, seq_len: int = 16, *,
                labels: bool = False, seed: int = 0) -> dict[str, torch.Tensor]:
    """Token inputs for a Transformers ``model`` on its device: ``input_ids`` of shape
    ``(batch_size, seq_len)`` drawn from its vocabulary (seed ``seed``), ``decoder_input_ids``
    of the same shape for an encoder-decoder, and ``labels`` (the inputs again) when asked, so
    that the model returns a training loss.

    Raises:
        ValueError: ``batch_size`` or ``seq_len`` is not a positive int.
    """
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    config = getattr(model, "config", None)
    vocab = getattr(config.get_text_config(decoder=True), "vocab_size", None) if config else None
    parameter = next(model.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
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
