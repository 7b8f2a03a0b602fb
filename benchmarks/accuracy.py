"""Accuracy of moduleprofiler's FLOP totals against a reference, beside the peer tools.

Reference (as in the team's PEERS notes): ``torch.utils.flop_counter.FlopCounterMode`` with grad
enabled (no fused fast paths), the math SDPA backend (attention becomes ``bmm``) and oneDNN off
(the LSTM becomes ``addmm``). Ours runs the way users run it: ``no_grad``, eval, default
kernels — on CPU and on the meta device. Every number printed is ``tool FLOPs / reference FLOPs``
(tools that report MACs are doubled); parameters must equal ``sum(p.numel())`` (tied once).

    python benchmarks/accuracy.py                     # every torchvision classifier + the rest
    python benchmarks/accuracy.py --models resnet18 gpt2 lstm --peers
    python benchmarks/accuracy.py --quick             # a representative subset
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from moduleprofiler import ModuleProfiler

warnings.filterwarnings("ignore")
Build = Callable[[], tuple[nn.Module, Any]]


class FunctionalCustom(nn.Module):
    """Work done only through functional calls and ``@`` (invisible to module-formula tools)."""

    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(256, 512) * 0.02)
        self.w2 = nn.Parameter(torch.randn(512, 256) * 0.02)
        self.conv = nn.Parameter(torch.randn(64, 64, 3) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.linear(x, self.w1.t())
        h = torch.relu(h) @ self.w2
        seq = torch.nn.functional.conv1d(h.view(-1, 64, 4), self.conv, padding=1)
        scores = torch.softmax(h @ h.transpose(-1, -2), dim=-1)
        return scores @ h + seq.view_as(h)


class LSTMClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(64, 256, num_layers=2, batch_first=True)
        self.head = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def hf(name: str) -> Build:
    def build() -> tuple[nn.Module, Any]:
        import transformers

        if name == "gpt2":
            model: nn.Module = transformers.GPT2LMHeadModel(transformers.GPT2Config())
        else:
            model = transformers.BertModel(transformers.BertConfig())
        return model, {"input_ids": torch.randint(0, 1000, (1, 128))}

    return build


def builders(quick: bool) -> dict[str, Build]:
    import torchvision

    names = (["resnet18", "mobilenet_v2", "efficientnet_b0", "convnext_tiny", "vit_b_16",
              "swin_t", "regnet_y_400mf"] if quick
             else torchvision.models.list_models(module=torchvision.models))
    table: dict[str, Build] = {}
    for name in names:
        size = 299 if name == "inception_v3" else 224
        table[name] = (lambda n=name, s=size: (
            torchvision.models.get_model(n, weights=None), torch.randn(1, 3, s, s)))
    table["gpt2"] = hf("gpt2")
    table["bert"] = hf("bert")
    table["lstm"] = lambda: (LSTMClassifier(), torch.randn(1, 64, 64))
    table["transformer_encoder"] = lambda: (
        nn.TransformerEncoder(nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True), 6,
                              enable_nested_tensor=False),
        torch.randn(1, 128, 512))
    table["functional_custom"] = lambda: (FunctionalCustom(), torch.randn(1024, 256))
    return table


def call(model: nn.Module, example: Any) -> Any:
    return model(**example) if isinstance(example, dict) else model(example)


def reference_flops(model: nn.Module, example: Any) -> int:
    with torch.enable_grad(), sdpa_kernel(SDPBackend.MATH), \
            torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as fcm:
        call(model, example)
    return int(fcm.get_total_flops())


def ours(model: nn.Module, example: Any) -> tuple[int, int]:
    profile = ModuleProfiler().profile(model, example)
    return int(profile.total_flops), int(profile.total_params)


def on_meta(build: Build) -> tuple[int, int] | str:
    try:
        with torch.device("meta"):
            model, example = build()
    except Exception:
        # Some constructors compute with tensor values (torchvision's RegNet widths): build
        # on the CPU, then move the model and its input to meta.
        model, example = build()
        model = model.to("meta")
        example = ({key: value.to("meta") for key, value in example.items()}
                   if isinstance(example, dict) else example.to("meta"))
    try:
        return ours(model.eval(), example)
    except Exception as exc:  # report, keep going
        return f"FAIL {type(exc).__name__}: {exc}"


def peers(model: nn.Module, example: Any) -> dict[str, float]:
    """FLOPs by each installed peer (MAC-reporting tools doubled); NaN when it fails."""
    results: dict[str, float] = {}

    def attempt(name: str, fn: Callable[[], float]) -> None:
        try:
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                results[name] = float(fn())
        except Exception:
            results[name] = math.nan

    def fcm_nograd() -> float:
        with torch.no_grad(), FlopCounterMode(display=False) as fcm:
            call(model, example)
        return float(fcm.get_total_flops())

    attempt("fcm_nograd", fcm_nograd)
    args = tuple(example.values()) if isinstance(example, dict) else (example,)
    with contextlib.suppress(ImportError):
        from fvcore.nn import FlopCountAnalysis

        attempt("fvcore", lambda: 2 * FlopCountAnalysis(copy.deepcopy(model), args)
                .unsupported_ops_warnings(False).uncalled_modules_warnings(False).total())
    with contextlib.suppress(ImportError):
        from ptflops import get_model_complexity_info

        def ptflops_flops() -> float:
            options: dict[str, Any] = {"as_strings": False, "print_per_layer_stat": False,
                                       "verbose": False}
            if isinstance(example, dict):
                macs, _ = get_model_complexity_info(
                    copy.deepcopy(model), (1,), input_constructor=lambda _: example, **options)
            else:
                macs, _ = get_model_complexity_info(
                    copy.deepcopy(model), tuple(example.shape[1:]), **options)
            return 2 * float(macs)

        attempt("ptflops", ptflops_flops)
    with contextlib.suppress(ImportError):
        import thop

        attempt("thop", lambda: 2 * thop.profile(copy.deepcopy(model), inputs=args[:1],
                                                 verbose=False)[0])
    with contextlib.suppress(ImportError):
        import torchinfo

        attempt("torchinfo", lambda: 2 * torchinfo.summary(
            copy.deepcopy(model), input_data=list(args), verbose=0).total_mult_adds)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--peers", action="store_true", help="also run the peer tools")
    parser.add_argument("--no-meta", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    table = builders(args.quick and not args.models)
    if args.models:
        unknown = sorted(set(args.models) - set(table))
        if unknown:
            parser.error(f"unknown models: {unknown}")
        table = {name: table[name] for name in args.models}
    worst: dict[str, float] = {}
    header = f"{'model':<22} {'reference':>16} {'ours':>7} {'meta':>7} {'params':>6}"
    print(header + ("  peers (ratio)" if args.peers else ""))
    for name, build in table.items():
        model, example = build()
        model.eval()
        reference = reference_flops(model, example)
        flops, params = ours(model, example)
        ratio = flops / reference if reference else math.nan
        params_ok = params == sum(p.numel() for p in model.parameters())
        meta = "skip" if args.no_meta else on_meta(build)
        meta_ratio = meta[0] / reference if isinstance(meta, tuple) and reference else math.nan
        worst["ours"] = max(worst.get("ours", 0.0), abs(ratio - 1))
        if not math.isnan(meta_ratio):
            worst["ours_meta"] = max(worst.get("ours_meta", 0.0), abs(meta_ratio - 1))
        line = (f"{name:<22} {reference:>16,} {ratio:7.4f} "
                f"{meta_ratio if isinstance(meta, tuple) else math.nan:7.4f} "
                f"{'exact' if params_ok else 'WRONG':>6}")
        if isinstance(meta, str) and meta != "skip":
            line += f" [meta {meta}]"
        if args.peers:
            for tool, value in peers(model, example).items():
                peer_ratio = value / reference if reference else math.nan
                line += f"  {tool} {peer_ratio:.3f}"
                if not math.isnan(peer_ratio):
                    worst[tool] = max(worst.get(tool, 0.0), abs(peer_ratio - 1))
                else:
                    worst[tool] = math.inf
        print(line, flush=True)
    print("\nworst |ratio - 1| per tool:")
    for tool, value in worst.items():
        print(f"  {tool:<12} {value:.4%}")


if __name__ == "__main__":
    main()
