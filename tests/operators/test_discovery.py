"""Every aten operator the reference models dispatch, on every grad mode, is known: it has a
formula or is declared free. A new torch release that routes a model through a new kernel fails
here, naming the operator, instead of silently counting it as zero."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from moduleprofiler.operators.registry import MISSING, lookup
from tests.operators.helpers import MODES, counter_of

torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")


class OperatorRecorder(TorchDispatchMode):
    """Records every operator that reaches the dispatcher."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[torch._ops.OpOverload] = Counter()

    def __torch_dispatch__(self, func: torch._ops.OpOverload, types: Any,
                           args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        self.seen[func] += 1
        return func(*args, **(kwargs or {}))


def _gpt2() -> nn.Module:
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def _bert() -> nn.Module:
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, vocab_size=100,
                                     max_position_embeddings=32)
    return transformers.BertModel(config)


def _encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)


ModelCase = tuple[Callable[[], nn.Module], tuple[Any, ...], dict[str, Any]]
TOKENS = torch.randint(0, 100, (2, 8))
PADDING = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])

MODELS: dict[str, ModelCase] = {
    "resnet18": (lambda: torchvision.models.resnet18(weights=None),
                 (torch.randn(1, 3, 64, 64),), {}),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(weights=None),
                     (torch.randn(1, 3, 64, 64),), {}),
    # vit_b_16's architecture at 1 layer and width 64 (the full model runs the same kernels, 12
    # times wider and deeper, at 10x the test time)
    "vit": (lambda: torchvision.models.VisionTransformer(
        image_size=224, patch_size=16, num_layers=1, num_heads=4, hidden_dim=64, mlp_dim=128),
        (torch.randn(1, 3, 224, 224),), {}),
    "gpt2": (_gpt2, (TOKENS,), {}),
    "gpt2_masked": (_gpt2, (TOKENS,), {"attention_mask": torch.ones(2, 8, dtype=torch.long)}),
    "bert": (_bert, (TOKENS,), {"attention_mask": torch.ones(2, 8, dtype=torch.long)}),
    "lstm": (lambda: nn.LSTM(16, 32, num_layers=2), (torch.randn(5, 2, 16),), {}),
    "transformer_encoder": (_encoder, (torch.randn(2, 6, 32),), {}),
    "transformer_encoder_padded": (_encoder, (torch.randn(2, 6, 32),),
                                   {"src_key_padding_mask": PADDING}),
}
RUNS = [
    (name, mode, training)
    for name in MODELS
    for mode in MODES
    for training in (False, True)
    # training (dropout, batch statistics) once per model, under grad as it is trained
    if not training or mode == "grad"
]


@pytest.fixture(scope="module")
def built() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: make() for name, (make, _, _) in MODELS.items()}


@pytest.mark.parametrize(("name", "mode", "training"), RUNS)
def test_every_dispatched_operator_is_known(built: dict[str, nn.Module], name: str, mode: str,
                                            training: bool) -> None:
    model = built[name].train(training)
    _, args, kwargs = MODELS[name]
    recorder = OperatorRecorder()
    with warnings.catch_warnings(), MODES[mode](), recorder:
        warnings.simplefilter("ignore")
        model(*args, **kwargs)
    unknown = sorted(str(op) for op in recorder.seen if lookup(op) is MISSING)
    assert not unknown, f"{name} ({mode}, training={training}) dispatched unknown operators"
    assert recorder.seen  # the recorder saw the forward


@pytest.mark.parametrize("name", ["resnet18", "gpt2", "bert", "lstm"])
def test_operator_totals_do_not_depend_on_the_grad_mode(built: dict[str, nn.Module],
                                                        name: str) -> None:
    # No module formulas here: the operators alone give the same total on every kernel path
    # (oneDNN LSTM vs aten.lstm; CPU flash attention vs the composite SDPA).
    model = built[name].eval()
    _, args, kwargs = MODELS[name]
    totals = set()
    for mode in MODES:
        counter = counter_of(model, *args, mode=mode, **kwargs)
        totals.add((counter.ops, counter.macs))
    assert len(totals) == 1


@pytest.mark.parametrize("make", [_gpt2, _bert], ids=["gpt2", "bert"])
def test_operator_totals_on_meta_match_cpu(make: Callable[[], nn.Module]) -> None:
    # On meta, attention runs the decomposed math reference instead of the CPU flash kernel.
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cpu = make().eval()
        with torch.device("meta"):
            meta = make().eval()
    tokens = torch.zeros(2, 8, dtype=torch.long)
    on_cpu = counter_of(cpu, tokens)
    on_meta = counter_of(meta, tokens.to("meta"))
    assert on_cpu.calls["aten._scaled_dot_product_flash_attention_for_cpu.default"] == 2
    assert on_meta.calls["aten.bmm.default"] == 4
    assert (on_meta.ops, on_meta.macs) == (on_cpu.ops, on_cpu.macs)
