"""On a CUDA GPU: the same totals (ops, macs, backward macs) on CUDA as on the CPU, whichever
kernels each device picks (cuDNN convolutions and RNNs, flash / memory-efficient attention).

    PYTHONPATH=. python3 benchmarks/gpu_counts.py
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from moduleprofiler import ModuleProfiler

warnings.filterwarnings("ignore")


def models() -> dict[str, Callable[[], tuple[nn.Module, Any]]]:
    import torchvision
    import transformers

    def gpt2() -> tuple[nn.Module, Any]:
        config = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=8)
        return transformers.GPT2LMHeadModel(config), {"input_ids": torch.randint(0, 500, (2, 64))}

    def bert() -> tuple[nn.Module, Any]:
        config = transformers.BertConfig(num_hidden_layers=4, hidden_size=256,
                                         num_attention_heads=8, intermediate_size=1024)
        return transformers.BertModel(config), {"input_ids": torch.randint(0, 500, (2, 64))}

    layer = nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True)
    return {
        "resnet18": lambda: (torchvision.models.resnet18(), torch.randn(2, 3, 224, 224)),
        "mobilenet_v2": lambda: (torchvision.models.mobilenet_v2(), torch.randn(2, 3, 224, 224)),
        "vit_b_16": lambda: (torchvision.models.vit_b_16(), torch.randn(2, 3, 224, 224)),
        "gpt2": gpt2,
        "bert": bert,
        "lstm": lambda: (nn.LSTM(64, 128, num_layers=2, batch_first=True), torch.randn(4, 32, 64)),
        "transformer_encoder": lambda: (nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                                        torch.randn(2, 64, 256)),
    }


def to(value: Any, device: str) -> Any:
    if isinstance(value, dict):
        return {key: item.to(device) for key, item in value.items()}
    return value.to(device)


def totals(model: nn.Module, example: Any, backward: bool) -> tuple[Any, ...]:
    profile = ModuleProfiler().profile(model, example, backward=backward)
    return (profile.total_ops, profile.total_macs, profile.total_backward_macs, profile.complete,
            sorted(profile.unsupported_ops), sorted(profile.backward_unsupported_ops))


def main() -> None:
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    all_equal = True
    for name, build in models().items():
        torch.manual_seed(0)
        model, example = build()
        model.eval()
        cpu = totals(model, example, backward=True)
        cuda_model = model.to("cuda")
        cuda = totals(cuda_model, to(example, "cuda"), backward=True)
        cuda_nograd = totals(cuda_model, to(example, "cuda"), backward=False)
        same = cpu[:2] == cuda[:2] == cuda_nograd[:2] and cpu[2] == cuda[2]
        all_equal &= same
        print(f"{name:<20} ops cpu {cpu[0]:>16,} cuda {cuda[0]:>16,} | macs cpu {cpu[1]:>15,} "
              f"cuda {cuda[1]:>15,} | bwd macs cpu {cpu[2]:>15,} cuda {cuda[2]:>15,} | "
              f"{'SAME' if same else 'DIFFERENT'} complete cpu={cpu[3]} cuda={cuda[3]} "
              f"unsupported cuda={cuda[4] + cuda[5]}")
    print("every total equal on CPU and CUDA:", all_equal)


if __name__ == "__main__":
    main()
