"""Bring-any-model check: odd torch.nn constructs and recent Transformers architectures.

``benchmarks/zoo.py`` and ``zoo_wide.py`` compare FLOPs over whole model zoos. This sweep
checks the other promises on models users bring that those zoos rarely hold (parametrizations,
pruning masks, ``torch.fx`` graphs, dynamic quantization, shared and out-of-order children,
structured outputs; mixture-of-experts, state-space, encoder-decoder and multimodal Transformers
built from tiny configs). For every model, on the CPU:

* ``flops``: ``profile.total_flops`` (``2 * macs``) against ``FlopCounterMode`` on the same
  input (it counts mm / bmm / addmm / conv / attention only, so our number may exceed it only
  by the MACs of layers it has no formula for, such as a dynamic quantized Linear);
* ``params``: ``total_params`` against the number of unique parameters (tied weights once);
* ``state``: parameters, buffers (BatchNorm statistics too), gradients, ``requires_grad``,
  training flags and hook tables unchanged after a pass in training mode (``eval=False``, with
  ``backward=True`` where the model has parameters) and after a pass whose forward raises;
* ``unknown``: an incomplete profile lists what it could not count (never a silent 0);
* ``views``: ``to_df`` (per call, module and type), ``tree``, Markdown, LaTeX, HTML and JSON.

    PYTHONPATH=. python benchmarks/model_zoo_check.py                    # everything
    PYTHONPATH=. python benchmarks/model_zoo_check.py --filter moe       # a few
    PYTHONPATH=. python benchmarks/model_zoo_check.py --out benchmarks/results/model_zoo_check.txt

Nothing is downloaded: Transformers models are built from their config class with tiny sizes.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse
import collections
import contextlib
import contextvars
import copy
import dataclasses
import importlib.util
import io
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from moduleprofiler import ModuleProfiler

HERE = Path(__file__).resolve().parent
NAME: contextvars.ContextVar[str] = contextvars.ContextVar("NAME", default="")
Build = Callable[[], tuple[nn.Module, Any]]
ZOO: dict[str, Build] = {}


def model(name: str) -> Callable[[Build], Build]:
    """Register a builder returning ``(model, input)``; ``input`` unpacks as in ``profile``."""
    def register(build: Build) -> Build:
        ZOO[name] = build
        return build
    return register


# -- torch.nn constructs -------------------------------------------------------------------------
def _mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


@model("nn:weight_norm")
def _weight_norm() -> tuple[nn.Module, Any]:
    net = _mlp()
    nn.utils.parametrizations.weight_norm(net[0])
    return net, torch.randn(3, 8)


@model("nn:orthogonal")
def _orthogonal() -> tuple[nn.Module, Any]:
    net = _mlp()
    nn.utils.parametrizations.orthogonal(net[2])
    return net, torch.randn(3, 8)


@model("nn:spectral_norm")
def _spectral_norm() -> tuple[nn.Module, Any]:
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                        nn.Linear(8 * 6 * 6, 4))
    nn.utils.parametrizations.spectral_norm(net[0])
    return net, torch.randn(2, 3, 8, 8)


class _Symmetric(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.triu() + x.triu(1).transpose(-1, -2)


@model("nn:parametrize_custom")
def _parametrize_custom() -> tuple[nn.Module, Any]:
    net = _mlp()
    net[2] = nn.Linear(16, 16)
    torch.nn.utils.parametrize.register_parametrization(net[2], "weight", _Symmetric())
    return net, torch.randn(3, 8)


@model("nn:pruned")
def _pruned() -> tuple[nn.Module, Any]:
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))
    torch.nn.utils.prune.l1_unstructured(net[0], "weight", amount=0.5)
    torch.nn.utils.prune.random_structured(net[3], "weight", amount=0.25, dim=0)
    return net, torch.randn(2, 3, 8, 8)


@model("nn:fx_graph_module")
def _fx() -> tuple[nn.Module, Any]:
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                        nn.Linear(8 * 6 * 6, 4))
    return torch.fx.symbolic_trace(net), torch.randn(2, 3, 8, 8)


class _JitInside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8, 8)
        self.scripted = torch.jit.script(nn.Sequential(nn.Linear(8, 16), nn.ReLU()))
        self.tail = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tail(self.scripted(self.head(x)))


@model("nn:jit_script_inside")
def _jit_inside() -> tuple[nn.Module, Any]:
    return _JitInside(), torch.randn(3, 8)


@model("nn:quantized_dynamic")
def _quantized() -> tuple[nn.Module, Any]:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(8, 16, batch_first=True)
            self.fc = nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.lstm(x)[0])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = torch.ao.quantization.quantize_dynamic(Net().eval(), {nn.Linear, nn.LSTM},
                                                     dtype=torch.qint8)
    return net, torch.randn(2, 5, 8)


@model("nn:channels_last")
def _channels_last() -> tuple[nn.Module, Any]:
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.Conv2d(8, 8, 3, groups=4), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    net = net.to(memory_format=torch.channels_last)
    return net, torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)


class _Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.GELU())
        self.alias = self.block  # the same module under two names

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.alias(self.block(self.block(x)))


@model("nn:shared_3x")
def _shared() -> tuple[nn.Module, Any]:
    return _Shared(), torch.randn(3, 8)


class _OutOfOrder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Linear(4, 2)
        self.b = nn.Linear(8, 4)
        self.a = nn.Linear(6, 8)
        self.unused = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(self.b(self.a(x)))


@model("nn:out_of_order")
def _out_of_order() -> tuple[nn.Module, Any]:
    return _OutOfOrder(), torch.randn(5, 6)


class _VarArgs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, *args: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
        out = sum(self.fc(a) for a in args)
        return out + sum(self.fc(v) * 2 for v in kwargs.values())


@model("nn:varargs_kwargs")
def _varargs() -> tuple[nn.Module, Any]:
    return _VarArgs(), (torch.randn(2, 4), torch.randn(2, 4))


@model("nn:kwargs_only")
def _kwargs_only() -> tuple[nn.Module, Any]:
    return _VarArgs(), {"p": torch.randn(2, 4), "q": torch.randn(2, 4)}


@dataclasses.dataclass
class _Out:
    logits: torch.Tensor
    hidden: list[torch.Tensor]


class _Pair(NamedTuple):
    first: torch.Tensor
    rest: dict[str, list[torch.Tensor]]


class _Structured(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.dec = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> tuple[_Out, _Pair]:
        h = self.enc(x)
        out = _Out(self.dec(h), [h, h * 2])
        return out, _Pair(h, {"all": [h, out.logits], "none": []})


@model("nn:structured_outputs")
def _structured() -> tuple[nn.Module, Any]:
    return _Structured(), torch.randn(3, 4)


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.body = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0), 2,
            enable_nested_tensor=False)
        self.head = nn.Linear(8, 20, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(ids)))


@model("nn:tied_transformer")
def _tied() -> tuple[nn.Module, Any]:
    return _Tied(), torch.randint(0, 20, (2, 6))


@model("nn:rnn_family")
def _rnns() -> tuple[nn.Module, Any]:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(6, 8, num_layers=2, bidirectional=True, batch_first=True)
            self.lstm = nn.LSTM(16, 4, proj_size=2, batch_first=True)
            self.cell = nn.RNNCell(2, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.lstm(self.gru(x)[0])[0]
            return self.cell(h[:, -1])

    return Net(), torch.randn(2, 5, 6)


@model("nn:multihead_attention")
def _mha() -> tuple[nn.Module, Any]:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, kdim=6, vdim=4, batch_first=True)

        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return self.attn(q, k, v)[0]

    return Net(), (torch.randn(2, 3, 8), torch.randn(2, 5, 6), torch.randn(2, 5, 4))


@model("nn:transformer_full")
def _transformer() -> tuple[nn.Module, Any]:
    net = nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True)
    return net, (torch.randn(2, 5, 8), torch.randn(2, 3, 8))


@model("nn:sparse_embedding")
def _sparse_embedding() -> tuple[nn.Module, Any]:
    return nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 2)), \
        torch.tensor([[1, 2, 1]])


class _ParameterHolders(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ws = nn.ParameterList([nn.Parameter(torch.randn(4, 4)) for _ in range(2)])
        self.d = nn.ParameterDict({"bias": nn.Parameter(torch.randn(4))})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for w in self.ws:
            x = x @ w
        return x + self.d["bias"]


@model("nn:parameter_list")
def _parameter_list() -> tuple[nn.Module, Any]:
    return _ParameterHolders(), torch.randn(2, 4)


class _Checkpointed(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.a, self.b, self.reentrant = nn.Linear(4, 8), nn.Linear(8, 2), reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint
        return self.b(checkpoint(self.a, x, use_reentrant=self.reentrant))


@model("nn:checkpoint_reentrant")
def _checkpoint_reentrant() -> tuple[nn.Module, Any]:
    return _Checkpointed(True), torch.randn(3, 4, requires_grad=True)


@model("nn:checkpoint_non_reentrant")
def _checkpoint() -> tuple[nn.Module, Any]:
    return _Checkpointed(False), torch.randn(3, 4)


@model("nn:static_quantized")
def _static_quantized() -> tuple[nn.Module, Any]:
    import torch.ao.quantization as tq

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
            self.conv, self.relu = nn.Conv2d(3, 4, 3), nn.ReLU()
            self.fc = nn.Linear(4 * 6 * 6, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.dequant(self.fc(self.relu(self.conv(self.quant(x))).flatten(1)))

    net = Net().eval()
    net.qconfig = tq.get_default_qconfig("fbgemm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tq.prepare(net, inplace=True)
        net(torch.randn(2, 3, 8, 8))
        tq.convert(net, inplace=True)
    return net, torch.randn(2, 3, 8, 8)


@model("nn:export_module")
def _exported() -> tuple[nn.Module, Any]:
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                        nn.Linear(4 * 6 * 6, 2)).eval()
    x = torch.randn(2, 3, 8, 8)
    return torch.export.export(net, (x,)).module(), x


@model("nn:nested_padding_mask")
def _nested() -> tuple[nn.Module, Any]:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.encoder(x, src_key_padding_mask=mask)

    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    return Net(), (torch.randn(2, 5, 8), mask)


# -- Transformers (tiny configs) -----------------------------------------------------------------
TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            head_dim=8, pad_token_id=0)


def _hf(model_type: str, inputs: Callable[[Any], Any] | None = None,
        task: str = "base", **settings: Any) -> Build:
    def build() -> tuple[nn.Module, Any]:
        import transformers
        default = transformers.AutoConfig.for_model(model_type)
        tiny = {key: value for key, value in TINY.items() if hasattr(default, key)}
        config = transformers.AutoConfig.for_model(model_type, **{**tiny, **settings})
        auto = {"base": transformers.AutoModel,
                "lm": transformers.AutoModelForCausalLM}[task]
        torch.manual_seed(0)
        net = auto.from_config(config)
        vocab = getattr(config, "vocab_size", 64) or 64
        made = inputs(config) if inputs else {"input_ids": torch.randint(3, min(vocab, 60),
                                                                          (2, 7))}
        return net, made
    return build


def _hf_checkpointed(model_type: str) -> Build:
    def build() -> tuple[nn.Module, Any]:
        net, inputs = _hf(model_type, task="lm")()
        net.gradient_checkpointing_enable()  # active in training mode: the train pass
        return net, {**inputs, "labels": inputs["input_ids"]}
    return build


def _pixels(size: int = 32, channels: int = 3) -> Callable[[Any], Any]:
    return lambda config: {"pixel_values": torch.randn(2, channels, size, size)}


def _seq2seq(config: Any) -> Any:
    return {"input_ids": torch.randint(3, 60, (2, 7)),
            "decoder_input_ids": torch.randint(3, 60, (2, 4))}


MOE = dict(num_local_experts=4, num_experts_per_tok=2)
HF: dict[str, Build] = {
    "mixtral": _hf("mixtral", **MOE),
    "qwen2_moe": _hf("qwen2_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                     shared_expert_intermediate_size=24),
    "qwen3_moe": _hf("qwen3_moe", num_experts=4, num_experts_per_tok=2,
                     moe_intermediate_size=16),
    "olmoe": _hf("olmoe", num_experts=4, num_experts_per_tok=2),
    "granitemoe": _hf("granitemoe", **MOE),
    "deepseek_v3": _hf("deepseek_v3", n_routed_experts=4, num_experts_per_tok=2,
                       moe_intermediate_size=16, n_group=1, topk_group=1, first_k_dense_replace=1,
                       q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4,
                       v_head_dim=8, n_shared_experts=1, head_dim=4),
    "gpt_oss": _hf("gpt_oss", **MOE),
    "minimax": _hf("minimax", **MOE),
    "ernie4_5_moe": _hf("ernie4_5_moe", num_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=16),
    "glm4_moe": _hf("glm4_moe", n_routed_experts=4, num_experts_per_tok=2,
                    moe_intermediate_size=16),
    "hunyuan_v1_moe": _hf("hunyuan_v1_moe", num_experts=4, num_experts_per_tok=2,
                          moe_intermediate_size=16),
    "lfm2": _hf("lfm2"),
    "mamba": _hf("mamba", state_size=4, expand=2, conv_kernel=4, time_step_rank=4,
                 use_mambapy=True),
    "mamba2": _hf("mamba2", num_heads=8, head_dim=8, state_size=4, n_groups=1, expand=2,
                  conv_kernel=4, chunk_size=8),
    "falcon_mamba": _hf("falcon_mamba", state_size=4, expand=2, conv_kernel=4,
                        time_step_rank=4, use_mambapy=True),
    "rwkv": _hf("rwkv", attention_hidden_size=32, context_length=64),
    "jamba": _hf("jamba", mamba_d_state=4, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=4,
                 num_experts=2, num_experts_per_tok=1, attn_layer_period=2, attn_layer_offset=1,
                 expert_layer_period=2, expert_layer_offset=1, use_mamba_kernels=False),
    "t5": _hf("t5", _seq2seq, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
              num_decoder_layers=2, relative_attention_num_buckets=8),
    "bart": _hf("bart", _seq2seq, d_model=32, encoder_layers=1, decoder_layers=1,
                encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
                decoder_ffn_dim=48),
    "whisper": _hf("whisper", lambda c: {"input_features": torch.randn(1, 16, 3000),
                                         "decoder_input_ids": torch.randint(3, 60, (1, 4))},
                   d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48,
                   num_mel_bins=16, max_source_positions=1500),
    "vit": _hf("vit", _pixels(), image_size=32, patch_size=8),
    "dinov2": _hf("dinov2", _pixels(), image_size=32, patch_size=8),
    "siglip_vision": _hf("siglip_vision_model", _pixels(), image_size=32, patch_size=8),
    "clip": _hf("clip", lambda c: {"input_ids": torch.randint(3, 60, (2, 7)),
                                   "pixel_values": torch.randn(2, 3, 32, 32)},
                text_config={"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
                             "num_hidden_layers": 1, "num_attention_heads": 4,
                             "projection_dim": 16},
                vision_config={"hidden_size": 32, "intermediate_size": 48, "image_size": 32,
                               "patch_size": 8, "num_hidden_layers": 1,
                               "num_attention_heads": 4, "projection_dim": 16},
                projection_dim=16),
    "modernbert": _hf("modernbert", global_attn_every_n_layers=2, local_attention=4),
    "gemma2": _hf("gemma2", sliding_window=4, attn_logit_softcapping=50.0,
                  final_logit_softcapping=30.0, task="lm"),
    "gemma3_text": _hf("gemma3_text", sliding_window=4, task="lm"),
    "phi3": _hf("phi3"),
    "qwen2": _hf("qwen2"),
    "llama_rope_scaling": _hf("llama", rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                         "rope_theta": 10000.0}),
    "llama_rope_yarn": _hf("llama", rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                                      "rope_theta": 10000.0,
                                                      "original_max_position_embeddings": 16}),
    "gpt2_tied_lm": _hf("gpt2", n_embd=32, n_layer=2, n_head=4, task="lm"),
    "llama_grad_checkpointing": _hf_checkpointed("llama"),
}
ZOO.update({"hf:" + name: build for name, build in HF.items()})


# -- the checks ----------------------------------------------------------------------------------
def invoke(net: nn.Module, inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return net(**inputs)
    if isinstance(inputs, tuple):
        return net(*inputs)
    return net(inputs)


def state_of(net: nn.Module) -> dict[str, Any]:
    """Every tensor's value, ``requires_grad`` and grad, training flags and hook tables."""
    state: dict[str, Any] = {}
    for path, module in net.named_modules():
        state["mod:" + path] = (module.training, sorted(vars(module)),
                                len(module._forward_hooks), len(module._forward_pre_hooks))
    for name, p in net.named_parameters(remove_duplicate=False):
        grad = None if p.grad is None else p.grad.clone()
        state["p:" + name] = (p.detach().clone(), p.requires_grad, grad)
    for name, b in net.named_buffers(remove_duplicate=False):
        state["b:" + name] = (b.detach().clone(),)
    return state


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.is_quantized or b.is_quantized:
            return a.is_quantized == b.is_quantized and torch.equal(a.int_repr(), b.int_repr())
        return a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    keys = before.keys() | after.keys()
    return sorted(k for k in keys if k not in before or k not in after
                  or not _same(before[k], after[k]))


def _twin(net: nn.Module) -> nn.Module:
    """A copy to run outside the profiler (the model itself where it cannot be copied)."""
    try:
        return copy.deepcopy(net)
    except Exception:  # pruned weights are not leaves: no deepcopy
        return net


def _zoo_wide() -> Any:
    """``benchmarks/zoo_wide.py`` as a module, for its FlopCounterMode reference (the math
    attention backend, formulas for ``_grouped_mm`` and grouped convolutions' backward)."""
    spec = importlib.util.spec_from_file_location("zoo_wide", HERE / "zoo_wide.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ZOO_WIDE = _zoo_wide()


def oracle_flops(net: nn.Module, inputs: Any) -> tuple[int, dict[str, int]]:
    """FlopCounterMode's FLOPs (total, per module path) of an eval-mode forward of a copy, with
    ``zoo_wide``'s settings: the math attention backend (it has no formula for the CPU's fused
    attention kernel) and its formula for ``_grouped_mm`` (mixture-of-experts layers)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    twin = _twin(net)
    training = [m.training for m in twin.modules()]
    try:
        with contextlib.suppress(NotImplementedError):  # torch.export's modules refuse eval()
            twin.eval()
        # grad mode on: under no_grad, nn.TransformerEncoderLayer takes its fused fast path,
        # one aten operator FlopCounterMode has no formula for (it would read 0)
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(
                display=False, custom_mapping=ZOO_WIDE.MAPPING) as counter:
            invoke(twin, inputs)
    finally:
        for m, flag in zip(twin.modules(), training):
            m.training = flag
    per_module = {name.split(".", 1)[1] if "." in name else "": int(sum(counts.values()))
                  for name, counts in counter.get_flop_counts().items() if name != "Global"}
    return int(counter.get_total_flops()), per_module


class _Raise(Exception):
    pass


def _last_leaf(net: nn.Module, inputs: Any) -> nn.Module | None:
    """The last leaf module a forward of a copy calls (that of ``net`` by its path)."""
    order: list[str] = []
    twin = _twin(net)
    with contextlib.ExitStack() as stack:
        for path, m in twin.named_modules():
            if not list(m.children()) and not isinstance(m, torch.jit.ScriptModule):
                stack.enter_context(m.register_forward_hook(
                    lambda mod, i, o, path=path: order.append(path)))
        with torch.no_grad():
            invoke(twin, inputs)
    return net.get_submodule(order[-1]) if order else None


def views(profile: Any) -> list[str]:
    failed = []
    checks: dict[str, Callable[[], Any]] = {
        "df": lambda: profile.to_df(), "df_module": lambda: profile.to_df(aggregate="module"),
        "df_type": lambda: profile.to_df(aggregate="type"), "tree": lambda: str(profile.tree()),
        "repr": lambda: str(profile), "md": profile.to_markdown, "latex": profile.to_latex,
        "html": profile.to_html, "json": profile.to_json,
    }
    for name, render in checks.items():
        try:
            if render() is None:
                failed.append(name)
        except Exception as exc:
            failed.append(f"{name}:{type(exc).__name__}:{str(exc)[:60]}")
    return failed


def check(name: str, build: Build) -> dict[str, Any]:
    row: dict[str, Any] = {"model": name, "problems": [], "notes": []}
    problems: list[str] = row["problems"]
    notes: list[str] = row["notes"]
    try:
        net, inputs = build()
        reference, ref_modules = oracle_flops(net, inputs)
    except Exception as exc:
        row["status"] = "skip"
        problems.append(f"build: {type(exc).__name__}: {str(exc)[:100]}")
        return row
    profiler = ModuleProfiler()
    with contextlib.suppress(NotImplementedError):  # torch.export's modules refuse train()
        net.train()
    before = state_of(net)
    try:
        profile = profiler.profile(net, inputs)
    except Exception as exc:
        row["status"] = "error"
        problems.append(f"profile: {type(exc).__name__}: {str(exc)[:160]}")
        row["trace"] = traceback.format_exc()
        return row
    if changed(before, state_of(net)):
        problems.append(f"state(eval pass): {changed(before, state_of(net))[:4]}")
    ours = profile.total_flops
    row["flops"], row["ref"] = ours, reference
    if ours != reference and name in EXPLAINED:
        notes.append(EXPLAINED[name])
    elif ours is None or ours < reference:
        problems.append(f"flops {ours} < ref {reference}")
    elif ours != reference and profile.complete:
        mine: dict[str, int] = {}
        for record in profile.records:
            if record.macs is not None:
                mine[record.path] = mine.get(record.path, 0) + 2 * int(record.macs)
        where = ZOO_WIDE.first_difference(mine, ref_modules)
        problems.append(f"flops {ours} != ref {reference} ({where})")
    unique = sum(p.numel() for p in net.parameters())
    row["params"], row["unique"] = profile.total_params, unique
    if profile.total_params != unique and name in EXPLAINED:
        pass  # packed weights: not parameters, read by moduleprofiler.packed
    elif profile.total_params != unique and profile.params_complete:
        problems.append(f"params {profile.total_params} != unique {unique}")
    if profile.uncalled:
        notes.append(f"not called: {list(profile.uncalled)}")
    if not profile.complete and not (profile.unsupported or profile.unsupported_ops
                                     or profile.unknown_params
                                     or any(r.self_macs is None for r in profile.records)):
        problems.append("incomplete but nothing listed")
    row["complete"] = profile.complete
    row["unknown"] = (list(profile.unsupported_types) + list(profile.unsupported_ops)
                      + list(profile.unknown_params))
    problems.extend("view " + v for v in views(profile))
    # a training pass: training flags, BatchNorm statistics, grads must come back as they were
    has_grad = any(p.requires_grad for p in net.parameters())
    for p in net.parameters():
        if p.requires_grad:
            p.grad = torch.ones_like(p)
    before = state_of(net)
    try:
        trained = profiler.profile(net, inputs, eval=False, backward=has_grad)
        if trained.backward_unsupported_ops:
            row["unknown"] += [f"backward {op}" for op in trained.backward_unsupported_ops]
    except Exception as exc:
        problems.append(f"train pass: {type(exc).__name__}: {str(exc)[:160]}")
        row["trace"] = traceback.format_exc()
    if changed(before, state_of(net)):
        problems.append(f"state(train pass): {changed(before, state_of(net))[:4]}")
    # a forward that raises in its last leaf, after the rest of the model ran
    leaf = _last_leaf(net, inputs)
    if leaf is not None:
        def boom(*_: Any) -> None:
            raise _Raise("boom")
        handle = leaf.register_forward_hook(boom)
        before = state_of(net)
        try:
            profiler.profile(net, inputs, eval=False)
            problems.append("raising forward did not raise")
        except Exception as exc:
            if not isinstance(exc.__cause__, _Raise) and not isinstance(exc, _Raise):
                problems.append(f"raising forward: {type(exc).__name__}: {str(exc)[:100]}")
        if changed(before, state_of(net)):
            problems.append(f"state(raising pass): {changed(before, state_of(net))[:4]}")
        handle.remove()
    problems.extend(front_door(net, inputs))
    row["status"] = "PROBLEM" if problems else "partial" if row["unknown"] else "ok"
    return row


EXPLAINED = {
    "nn:orthogonal": "+ linalg_householder_product (the parametrization), no formula in the "
                     "reference",
    "nn:spectral_norm": "+ mv and vdot (sigma = u . W v in eval), no formula in the reference",
    "nn:nested_padding_mask": "under no_grad the encoder's fast path runs on the 8 real tokens "
                              "(nested tensors: 2 x 4640 macs), the reference's grad mode on "
                              "all 10 padded ones (2 x 5920)",
    "nn:static_quantized": "+ quantized::conv2d / linear, no formula in the reference; params "
                           "from the packed weights (not nn.Parameters)",
    "nn:quantized_dynamic": "+ quantized::linear_dynamic / quantized_lstm, no formula in the "
                            "reference; params from the packed weights (not nn.Parameters)",
}
"""Models whose FLOPs differ from the reference's for a reason checked by hand: work
FlopCounterMode has no formula for, or another code path (the reference runs in grad mode)."""

EXPECTED_ERRORS = {("nn:quantized_dynamic", "predict_backward"), ("nn:sparse_embedding", "predict"),
                   ("nn:sparse_embedding", "predict_backward")}
"""Front-door passes refused on purpose, with a typed error (no gradients to take, no meta
kernel for a quantized LSTM's backward or for sparse tensors)."""


def front_door(net: nn.Module, inputs: Any) -> list[str]:
    """``Profiler``'s other passes run without raising (a short timing loop) and render."""
    from moduleprofiler import Profiler, TimingOptions
    from moduleprofiler.errors import ProfilingError

    profiler = Profiler()
    quick = TimingOptions(num_iters=4, warmup_seconds=0.0, measure_overhead=False,
                          max_seconds=1.0)
    trainable = any(p.requires_grad for p in net.parameters())
    passes: dict[str, Callable[[], Any]] = {
        "memory": lambda: profiler.measure_memory(net, inputs),
        "time_modules": lambda: profiler.time_modules(net, inputs, quick),
        "predict": lambda: profiler.predict(net, inputs),
    }
    if trainable:
        passes["memory_train"] = lambda: profiler.measure_memory(net, inputs, train=True)
        passes["train_step_times"] = lambda: profiler.train_step_times(net, inputs, quick)
        passes["predict_backward"] = lambda: profiler.predict(net, inputs, backward=True)
    failed = []
    for what, run in passes.items():
        try:
            result = run()
            str(result)
            result.to_df()
        except ProfilingError:
            if (NAME.get(), what) not in EXPECTED_ERRORS:
                failed.append(f"{what}: {traceback.format_exc(limit=0).strip()[:160]}")
        except Exception as exc:
            failed.append(f"{what}: {type(exc).__name__}: {str(exc)[:160]}")
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filter", default="", help="substring of the model names to run")
    parser.add_argument("--out", default=None, help="also write the table to this file")
    parser.add_argument("--trace", action="store_true", help="print tracebacks of errors")
    args = parser.parse_args()
    torch.manual_seed(0)
    lines = [f"# torch {torch.__version__}; " + _versions(),
             f"{'model':28} {'status':8} {'ours FLOPs':>12} {'ref FLOPs':>12} "
             f"{'params':>8} {'unique':>8} {'complete':8} unknown / problems"]
    print(*lines, sep="\n", flush=True)
    counts: collections.Counter[str] = collections.Counter()
    for name, build in ZOO.items():
        if args.filter not in name:
            continue
        start = time.perf_counter()
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            NAME.set(name)
            row = check(name, build)
        counts[row["status"]] += 1
        line = (f"{name:28} {row['status']:8} {_n(row.get('flops')):>12} {_n(row.get('ref')):>12} "
                f"{_n(row.get('params')):>8} {_n(row.get('unique')):>8} "
                f"{row.get('complete', '')!s:8} {row.get('unknown', [])} "
                f"{'; '.join(row['problems'] + row['notes'])} "
                f"({time.perf_counter() - start:.1f}s)")
        lines.append(line)
        print(line, flush=True)
        if args.trace and "trace" in row:
            print(row["trace"])
    lines.append("# " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    print(lines[-1])
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


def _n(value: Any) -> str:
    return "" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def _versions() -> str:
    try:
        import transformers
        return f"transformers {transformers.__version__}"
    except ImportError:
        return "transformers missing"


if __name__ == "__main__":
    sys.exit(main())
