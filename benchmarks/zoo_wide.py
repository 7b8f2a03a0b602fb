"""Wide zoo: forward AND backward counts, per module, on the CPU, against FlopCounterMode.

``benchmarks/zoo.py`` checks the forward total of every timm and Hugging Face model on the meta
device. This sweep checks what it does not, on a chosen sample of architectures (timm families,
torchvision models, Hugging Face tiny configs), each run for real on the CPU in training mode:

* forward: ``2 * macs`` of every module call (inclusive, summed over a module's calls) against
  ``FlopCounterMode``'s per-module FLOPs; the first (deepest) module where they differ is named;
* backward: ``2 * total_backward_macs`` of ``profile(..., eval=False, backward=True)`` against
  ``FlopCounterMode`` around ``torch.autograd.grad`` of the same default loss over every leaf
  that requires grad, as ``loss.backward()`` and moduleprofiler's backward differentiate. The
  reference gets formulas it lacks: groups in ``convolution_backward`` (its own ignores them:
  a depthwise convolution's backward would read ``channels`` times too high) and
  ``aten._grouped_mm`` (mixture-of-experts layers, which it counts as 0); it runs with the math
  attention backend (it has no formula for the CPU's fused attention kernel) and both run with
  oneDNN off (it has none for oneDNN's LSTM either);
* completeness: ``Profile.complete``, the unsupported operators and modules (unknown is never 0);
* the model left as it was (parameters, buffers, gradients, training flags), and a profile that
  never raises where ``model(x)`` runs.

One line per model, statuses: ``match`` (forward per module and backward equal, complete),
``differs`` (a count differs: ``fwd`` / ``bwd`` / ``module`` say where), ``incomplete``,
``error`` (moduleprofiler raised where the plain model ran), ``skip`` (package missing, or the
model could not be built or fed without moduleprofiler), ``harmed`` (the model changed).

    PYTHONPATH=. python3 benchmarks/zoo_wide.py                 # everything installed
    PYTHONPATH=. python3 benchmarks/zoo_wide.py --filter levit  # a few
    PYTHONPATH=. python3 benchmarks/zoo_wide.py --out benchmarks/results/zoo_wide.txt

Families whose package (timm, transformers, torchvision) is missing are skipped, not failed.
Nothing is downloaded: timm ``pretrained=False``, torchvision ``weights=None``, Hugging Face
configs built locally (``benchmarks/zoo.py``'s shrunk configs and inputs).
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse
import contextlib
import importlib.util
import re
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent

# timm: (name, input size); small variants, small images where the model allows it
TIMM = [
    ("convnextv2_atto", 64), ("efficientformer_l1", 224), ("efficientformerv2_s0", 224),
    ("fastvit_t8", 64), ("mobileone_s0", 64), ("repvit_m0_9", 64), ("levit_128s", 224),
    ("coatnet_nano_rw_224", 224), ("maxvit_nano_rw_256", 256), ("edgenext_xx_small", 64),
    ("ghostnetv2_100", 64), ("hgnetv2_b0", 64), ("hgnet_tiny", 64), ("inception_next_atto", 64),
    ("poolformerv2_s12", 64), ("caformer_s18", 64), ("nf_resnet26", 64), ("nfnet_l0", 64),
    ("regnetx_002", 64), ("regnety_002", 64), ("res2net50_14w_8s", 64), ("skresnet18", 64),
    ("cspresnet50", 64), ("cspdarknet53", 64), ("dla34", 64), ("hrnet_w18_small", 64),
    ("tresnet_m", 224), ("xcit_nano_12_p16_224", 64), ("pvt_v2_b0", 64),
    ("twins_svt_small", 64), ("crossvit_tiny_240", 240), ("beit_base_patch16_224", 64),
    ("eva02_tiny_patch14_224", 224), ("deit3_small_patch16_224", 64), ("volo_d1_224", 224),
    ("tiny_vit_5m_224", 224), ("rdnet_tiny", 64), ("mambaout_femto", 64),
    ("mobilevitv2_050", 64), ("efficientvit_b0", 64), ("efficientvit_m0", 224),
    ("gcvit_xxtiny", 224), ("davit_tiny", 64), ("nest_tiny", 224), ("sequencer2d_s", 224),
    ("halonet26t", 256), ("botnet26t_256", 256), ("lambda_resnet26t", 256), ("cait_xxs24_224", 64),
    ("convit_tiny", 224), ("pit_ti_224", 224), ("tnt_s_patch16_224", 224),
    ("visformer_tiny", 224), ("mixer_s16_224", 224), ("resmlp_12_224", 224),
    ("gmlp_ti16_224", 224), ("hiera_tiny_224", 224), ("swinv2_cr_tiny_ns_224", 224),
    ("ese_vovnet19b_dw", 64), ("selecsls42b", 64), ("rexnet_100", 64), ("fbnetv3_b", 64),
    ("lcnet_050", 64), ("mobilenetv4_conv_small", 64), ("ghostnet_100", 64),
    ("tinynet_e", 64), ("resnest14d", 64), ("gernet_s", 64), ("densenet121", 64),
    ("xception41", 64), ("coat_tiny", 224), ("mvitv2_tiny", 224), ("focalnet_tiny_srf", 64),
    ("vit_relpos_small_patch16_224", 64), ("vit_small_patch16_rope_224", 224),
    ("fastvit_mci0", 256), ("starnet_s1", 64), ("shvit_s1", 224), ("vitamin_small_224", 224),
    ("nextvit_small", 224), ("csatv2", 224), ("mobilenetv5_300m", 256), ("hgnetv2_b0", 64),
    ("eva02_tiny_patch14_224", 224), ("samvit_base_patch16", 256), ("dpn48b", 64),
    ("inception_v3", 299), ("inception_v4", 299), ("nasnetalarge", 331), ("sebotnet33ts_256", 256),
    ("vovnet39a", 64), ("sam2_hiera_tiny", 256), ("efficientnet_b0", 64), ("fasternet_t0", 64),
]

TORCHVISION = [
    ("resnet18", 64), ("mobilenet_v3_small", 64), ("efficientnet_b0", 64), ("regnet_x_400mf", 64),
    ("shufflenet_v2_x0_5", 64), ("squeezenet1_1", 64), ("mnasnet0_5", 64), ("densenet121", 64),
    ("convnext_tiny", 64), ("swin_t", 64), ("swin_v2_t", 64), ("vit_b_16", 224),
    ("maxvit_t", 224), ("googlenet", 64), ("inception_v3", 299), ("alexnet", 224), ("vgg11", 64),
    ("wide_resnet50_2", 64), ("resnext50_32x4d", 64),
]

HF = [
    "mamba", "mamba2", "rwkv", "falcon", "falcon_mamba", "phi", "phi3", "gemma2", "gemma3_text",
    "qwen3_moe", "deepseek_v3", "deepseek_v2", "bloom", "mpt", "big_bird", "longformer",
    "reformer", "funnel", "deberta-v2", "convbert", "perceiver", "swinv2", "dinov2", "sam",
    "detr", "mask2former", "segformer", "wav2vec2", "hubert", "whisper", "clip", "siglip",
    "blip-2", "llava", "idefics2", "pix2struct", "t5", "bart", "gpt_neox", "mixtral", "jamba",
    "bamba", "zamba2", "recurrent_gemma", "xlstm", "olmoe", "granitemoe", "dbrx", "mllama",
    "led", "bigbird_pegasus", "xlnet", "transfo-xl", "ctrl", "gpt2", "opt", "llama",
    "mistral", "qwen2", "cohere", "starcoder2", "stablelm", "persimmon", "fuyu", "nemotron",
    "dac", "encodec", "mimi", "speecht5", "seamless_m4t", "clap", "owlvit", "owlv2",
    "grounding-dino", "deformable_detr", "rt_detr", "conditional_detr", "yolos", "vitdet",
    "beit", "data2vec-vision", "levit", "mobilevit", "convnextv2", "efficientnet", "regnet",
    "resnet", "bit", "dinat", "nat", "cvt", "poolformer", "focalnet", "hiera", "upernet",
    "dpt", "depth_anything", "vitmatte", "timesformer", "videomae", "vivit", "patchtst",
    "informer", "autoformer", "time_series_transformer", "esm", "canine", "lxmert",
    "visual_bert", "layoutlmv3", "markuplm", "splinter", "roformer", "nystromformer", "yoso",
    "mra", "ibert", "mega", "fnet", "squeezebert", "mobilebert", "electra", "rembert",
    "ernie", "xmod", "umt5", "mt5", "longt5", "switch_transformers", "pegasus_x", "prophetnet",
    "wav2vec2-conformer", "fastspeech2_conformer", "llava_next", "qwen2_vl", "qwen2_5_vl",
    "paligemma", "idefics3", "smolvlm", "gemma3", "chameleon", "kosmos-2", "git", "vilt",
    "aya_vision", "mistral3", "internvl", "llava_onevision", "blip", "instructblip",
    "got_ocr2", "janus", "emu3", "flava", "bridgetower", "align", "altclip", "chinese_clip",
    "x_clip", "groupvit", "conditional_detr", "table-transformer", "mobilevitv2",
    "efficientformer", "swiftformer", "pvt_v2", "glpn", "dab-detr", "d_fine", "rt_detr_v2",
    "sew", "sew-d", "unispeech", "unispeech-sat", "wavlm", "data2vec-audio", "speech_to_text",
    "moonshine", "musicgen", "pop2piano", "univnet", "vits", "clvp", "seamless_m4t_v2",
]


# vision-language models: fed their images too (benchmarks/zoo.py feeds the text alone first)
WITH_IMAGES = {"llava", "llava_next", "qwen2_vl", "qwen2_5_vl", "paligemma", "idefics2",
               "idefics3", "smolvlm", "gemma3", "chameleon", "kosmos-2", "git", "vilt",
               "aya_vision", "mistral3", "internvl", "llava_onevision", "fuyu", "blip", "blip-2",
               "instructblip", "pix2struct", "mllama", "got_ocr2", "janus", "emu3"}

# Hugging Face configs benchmarks/zoo.py leaves at full size (RWKV: 640 M parameters)
TINY: dict[str, dict[str, Any]] = {
    "rwkv": {"vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
             "attention_hidden_size": 64, "intermediate_size": 128, "context_length": 32},
    # multi-head latent attention (low-rank queries and keys/values, a rotary part), a dense
    # first layer, then 4 routed experts (top-2) and a shared one
    "deepseek_v3": {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
                    "moe_intermediate_size": 32, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 32,
                    "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
                    "v_head_dim": 8, "n_routed_experts": 4, "num_experts_per_tok": 2,
                    "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1,
                    "topk_group": 1},
}


class Timeout(BaseException):
    """The per-model alarm (a BaseException: models' ``except Exception`` don't swallow it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise Timeout()


def _zoo() -> Any:
    """``benchmarks/zoo.py`` as a module, for its Hugging Face configs and inputs."""
    spec = importlib.util.spec_from_file_location("zoo", HERE / "zoo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call(model: Any, inputs: Any) -> Any:
    return model(**inputs) if isinstance(inputs, dict) else model(inputs)


def state_of(model: torch.nn.Module) -> dict[str, Any]:
    """Everything a profile must leave as it was."""
    return {
        "params": {n: p.detach().clone() for n, p in model.named_parameters()},
        "buffers": {n: b.detach().clone() for n, b in model.named_buffers()},
        "grads": {n: None if p.grad is None else p.grad.clone()
                  for n, p in model.named_parameters()},
        "training": {n: m.training for n, m in model.named_modules()},
        "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()},
    }


def same_state(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """The first difference between two ``state_of`` snapshots, or None."""
    for key in ("training", "requires_grad"):
        if a[key] != b[key]:
            return key
    for key in ("params", "buffers", "grads"):
        if a[key].keys() != b[key].keys():
            return f"{key} names"
        for name, value in a[key].items():
            other = b[key][name]
            if (value is None) != (other is None):
                return f"{key} {name}"
            if value is not None and not torch.equal(value, other):
                if value.is_floating_point() and torch.isnan(value).any() \
                        and torch.equal(value.nan_to_num(), other.nan_to_num()):
                    continue
                return f"{key} {name}"
    return None


def grouped_conv_backward_flop(grad_out_shape: Any, x_shape: Any, w_shape: Any, _bias: Any,
                               _stride: Any, _padding: Any, _dilation: Any, transposed: bool,
                               _output_padding: Any, groups: int, output_mask: Any,
                               out_shape: Any, **kwargs: Any) -> int:
    """FlopCounterMode's ``convolution_backward`` formula, with groups: its own formula ignores
    them (a depthwise convolution's backward reads ``channels`` times too high). Each gradient
    asked for costs what the forward convolution costs (its FLOPs, FlopCounterMode's
    ``conv_flop_count`` of the forward shapes)."""
    from torch.utils.flop_counter import conv_backward_flop, conv_flop_count

    if groups == 1:
        return int(conv_backward_flop.__wrapped__(  # type: ignore[attr-defined]
            grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
            _output_padding, groups, output_mask, out_shape))
    forward = conv_flop_count(list(x_shape), list(w_shape), list(grad_out_shape), transposed)
    return int(forward * (int(bool(output_mask[0])) + int(bool(output_mask[1]))))


def grouped_mm_flop(a_shape: Any, b_shape: Any, *args: Any, out_shape: Any = None,
                    **kwargs: Any) -> int:
    """``aten._grouped_mm`` (mixture-of-experts layers), which FlopCounterMode has no formula
    for (it counts 0): 2 FLOPs per multiply-accumulate of each group's product. Groups split
    the rows (2-D x 3-D), the columns (3-D x 2-D) or the contraction (2-D x 2-D: the weight
    gradient), or are a batch (3-D x 3-D)."""
    a, b = list(a_shape), list(b_shape)
    if len(a) == 2 and len(b) == 3:
        return 2 * a[0] * a[1] * b[2]
    if len(a) == 3 and len(b) == 2:
        return 2 * a[1] * a[2] * b[1]
    if len(a) == 2 and len(b) == 2:
        return 2 * a[0] * a[1] * b[1]
    return 2 * a[0] * a[1] * a[2] * b[2]


MAPPING = {torch.ops.aten.convolution_backward: grouped_conv_backward_flop,
           torch.ops.aten._grouped_mm: grouped_mm_flop}


def leaves(loss: torch.Tensor) -> list[torch.Tensor]:
    """Every leaf tensor ``loss.backward()`` would give a gradient: the parameters, and tensors
    a forward makes with ``requires_grad_()`` (MRA's CPU stand-in for its attention kernel)."""
    found: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    stack = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            found[id(variable)] = variable
        stack.extend(next_node for next_node, _ in node.next_functions)
    return list(found.values())


def oracle(model: torch.nn.Module, inputs: Any) -> tuple[int, dict[str, int], int | None]:
    """FlopCounterMode: forward FLOPs, per-module forward FLOPs (our paths), backward FLOPs of
    the default loss over every leaf that requires grad (None: no loss)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from moduleprofiler.loss import default_loss

    # the math backend: FlopCounterMode has no formula for the CPU's fused attention kernel
    # (``aten._scaled_dot_product_flash_attention_for_cpu``, which it counts as 0)
    torch.manual_seed(0)  # the same random routing (router jitter) as the profiled run
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False,
                                                       custom_mapping=MAPPING) as counter:
        output = call(model, inputs)
    per_module: dict[str, int] = {}
    for name, counts in counter.get_flop_counts().items():
        if name == "Global":
            continue
        path = name.split(".", 1)[1] if "." in name else ""
        per_module[path] = int(sum(counts.values()))
    forward = int(counter.get_total_flops())
    try:
        loss = default_loss(output)
    except Exception:
        return forward, per_module, None
    params = leaves(loss)
    torch.manual_seed(0)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False,
                                                       custom_mapping=MAPPING) as counter:
        torch.autograd.grad(loss, params, allow_unused=True)
    return forward, per_module, int(counter.get_total_flops())


def ours(model: torch.nn.Module, inputs: Any) -> tuple[Any, dict[str, int]]:
    from moduleprofiler import ModuleProfiler

    torch.manual_seed(0)
    # in training mode, as the reference ran (``profile`` puts the model in eval mode by default)
    profile = ModuleProfiler().profile(model, inputs, eval=False, backward=True)
    per_module: dict[str, int] = {}
    for record in profile.records:
        if record.macs is not None:
            per_module[record.path] = per_module.get(record.path, 0) + 2 * int(record.macs)
    return profile, per_module


def first_difference(mine: dict[str, int], theirs: dict[str, int]) -> str | None:
    """The deepest module whose forward FLOPs differ (only modules FlopCounterMode names)."""
    worst = None
    for path, flops in theirs.items():
        if path in mine and mine[path] != flops:
            if worst is None or path.count(".") > worst.count("."):
                worst = path
    if worst is None:
        return None
    return f"{worst or '<root>'}: ours {mine[worst]:,} ref {theirs[worst]:,}"


def describe(inputs: Any) -> str:
    """``x(2,3,64,64)`` or ``input_ids(1,16),pixel_values(1,3,30,30)``."""
    if isinstance(inputs, dict):
        return ",".join(f"{key}{tuple(value.shape)}" for key, value in inputs.items()
                        if isinstance(value, torch.Tensor))
    return f"x{tuple(inputs.shape)}" if isinstance(inputs, torch.Tensor) else type(inputs).__name__


def check(label: str, make: Callable[[], torch.nn.Module],
          feeds: Callable[[torch.nn.Module], list[Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"model": label}
    try:
        model = make()
        model.train()
        inputs = None
        for candidate in feeds(model):
            try:
                with torch.no_grad():
                    call(model, candidate)
                inputs = candidate
                break
            except Timeout:
                raise
            except Exception as exc:
                row["skip"] = f"feed: {type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
        if inputs is None:
            row.setdefault("skip", "feed: no input")
            row["status"] = "skip"
            return row
        row.pop("skip", None)
        row["input"] = describe(inputs)
        ref_fwd, ref_modules, ref_bwd = oracle(model, inputs)
    except Timeout:
        raise
    except Exception as exc:
        message = " ".join(str(exc).split())[:120]
        row.update(status="skip", skip=f"build/oracle: {type(exc).__name__}: {message}")
        return row
    before = state_of(model)
    try:
        profile, modules = ours(model, inputs)
        if (profile.total_flops, profile.total_backward_macs) != (
                ref_fwd, None if ref_bwd is None else ref_bwd // 2):
            # a model whose shapes depend on values (VITS's durations) can take other shapes
            # on the CPU's fused attention than on the reference's math one: again on that one
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.MATH):
                again, modules_again = ours(model, inputs)
            if (again.total_flops, again.total_backward_macs) != (
                    profile.total_flops, profile.total_backward_macs):
                profile, modules = again, modules_again
                row["note"] = "shapes depend on values: compared on the math attention backend"
    except Timeout:
        raise
    except Exception as exc:
        message = " ".join(str(exc).split())[:300]
        row.update(status="error", error=f"{type(exc).__name__}: {message}",
                   where=traceback.format_exc().strip().splitlines()[-3][:200])
        return row
    harmed = same_state(before, state_of(model))
    fwd = profile.total_flops
    bwd = None if profile.total_backward_macs is None else 2 * profile.total_backward_macs
    row.update(ref_fwd=ref_fwd, fwd=fwd, ref_bwd=ref_bwd, bwd=bwd, complete=profile.complete,
               unsupported_ops=sorted(str(op) for op in profile.unsupported_ops),
               unsupported=list(profile.unsupported)[:4])
    problems = []
    if harmed:
        problems.append(f"harmed: {harmed}")
    if fwd != ref_fwd:
        problems.append(f"fwd {fwd:,} vs {ref_fwd:,}")
    else:
        where = first_difference(modules, ref_modules)
        if where:
            problems.append(f"module {where}")
    if ref_bwd is not None and bwd != ref_bwd:
        problems.append(f"bwd {bwd:,} vs {ref_bwd:,}" if bwd is not None else "bwd None")
    row["problems"] = problems
    row["status"] = ("harmed" if harmed else "differs" if problems
                     else "incomplete" if not profile.complete else "match")
    return row


def timm_models() -> Iterator[tuple[str, Callable[[], Any], Callable[[Any], list[Any]]]]:
    try:
        import timm
    except ImportError:
        return
    known = set(timm.list_models())
    seen = set()
    for name, size in TIMM:
        if name in seen or name not in known:
            continue
        seen.add(name)

        def make(name: str = name, size: int = size) -> Any:
            try:
                return timm.create_model(name, pretrained=False, img_size=size)
            except TypeError:
                return timm.create_model(name, pretrained=False)

        def feeds(model: Any, size: int = size) -> list[Any]:
            return [torch.randn(2, 3, size, size), torch.randn(2, 3, 224, 224)]

        yield f"timm:{name}", make, feeds


def torchvision_models() -> Iterator[tuple[str, Callable[[], Any], Callable[[Any], list[Any]]]]:
    try:
        import torchvision
    except ImportError:
        return
    for name, size in TORCHVISION:
        def make(name: str = name) -> Any:
            kwargs = {"aux_logits": False, "init_weights": False} if name in (
                "googlenet", "inception_v3") else {}
            return torchvision.models.get_model(name, weights=None, **kwargs)

        def feeds(model: Any, size: int = size) -> list[Any]:
            return [torch.randn(2, 3, size, size), torch.randn(2, 3, 224, 224)]

        yield f"tv:{name}", make, feeds


def hf_models() -> Iterator[tuple[str, Callable[[], Any], Callable[[Any], list[Any]]]]:
    try:
        from transformers import CONFIG_MAPPING
    except ImportError:
        return
    zoo = _zoo()
    for model_type in HF:
        if model_type not in CONFIG_MAPPING:
            continue

        def make(model_type: str = model_type) -> Any:
            if model_type in TINY:  # configs benchmarks/zoo.py does not shrink
                config = CONFIG_MAPPING[model_type](**TINY[model_type])
                return zoo.hf_model_class(model_type, config)._from_config(config)
            config = zoo.hf_config(model_type, "small")
            return zoo.hf_model_class(model_type, config)._from_config(config)

        def feeds(model: Any, model_type: str = model_type) -> list[Any]:
            candidates = list(zoo.hf_candidates(model, model_type))
            if model_type in WITH_IMAGES:  # the fullest input first: images merged into text
                candidates.sort(key=lambda c: -len(c) if isinstance(c, dict) else 0)
            return candidates

        yield f"hf:{model_type}", make, feeds


def handmade_models() -> Iterator[tuple[str, Callable[[], Any], Callable[[Any], list[Any]]]]:
    """Inputs benchmarks/zoo.py's candidates do not make: LLaVA given an image, its features
    merged into the token embeddings where the image tokens are (``masked_scatter``)."""
    try:
        import transformers
    except ImportError:
        return
    image, patch, token = 32, 8, 199

    def llava() -> Any:
        vision = transformers.CLIPVisionConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            image_size=image, patch_size=patch, projection_dim=32)
        text = transformers.LlamaConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=token + 1)
        config = transformers.LlavaConfig(vision_config=vision, text_config=text,
                                          image_token_id=token)
        return transformers.LlavaForConditionalGeneration(config)

    def with_image(model: Any) -> list[Any]:
        ids = torch.tensor([[1, 2] + [token] * (image // patch) ** 2 + [3, 4]])
        return [{"input_ids": ids, "pixel_values": torch.randn(1, 3, image, image),
                 "attention_mask": torch.ones_like(ids)}]

    yield "hf:llava+image", llava, with_image


def line(row: dict[str, Any]) -> str:
    extra = row.get("skip") or row.get("error") or "; ".join(
        row.get("problems", []) + ([row["note"]] if "note" in row else []))
    if row.get("unsupported_ops") or row.get("unsupported"):
        extra += f" unknown: ops {row.get('unsupported_ops')} modules {row.get('unsupported')}"
    counts = ""
    if "fwd" in row:
        counts = f"fwd {row['fwd']:,} ref {row['ref_fwd']:,} bwd {row['bwd']} ref {row['ref_bwd']}"
    return (f"{row['model']:<36} {row['status']:<10} {row.get('seconds', 0):5.1f}s "
            f"{row.get('input', '')} {counts} {extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filter", help="regular expression searched in the model label")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per model")
    parser.add_argument("--out", type=Path, help="also write the lines to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    pattern = re.compile(args.filter, re.IGNORECASE) if args.filter else None
    signal.signal(signal.SIGALRM, _alarm)
    lines = [f"# torch {torch.__version__}; " + ", ".join(
        f"{name} {importlib.import_module(name).__version__}" for name in
        ("timm", "transformers", "torchvision") if importlib.util.find_spec(name))]
    print(lines[0], flush=True)
    statuses: dict[str, int] = {}
    for source in (timm_models, torchvision_models, hf_models, handmade_models):
        for label, make, feeds in source():
            if pattern and not pattern.search(label):
                continue
            torch.manual_seed(0)
            start = time.monotonic()
            signal.alarm(args.timeout)
            try:
                # oneDNN off, as benchmarks/zoo.py runs: FlopCounterMode has no formula for
                # oneDNN's LSTM (``mkldnn_rnn_layer``, counted as 0), whose backward also
                # computes every gradient where autograd's decomposed one skips those of
                # inputs that need none (moduleprofiler counts each kernel as it ran)
                with torch.backends.mkldnn.flags(enabled=False):
                    row = check(label, make, feeds)
            except Timeout:
                row = {"model": label, "status": "timeout"}
            finally:
                signal.alarm(0)
            row["seconds"] = time.monotonic() - start
            statuses[row["status"]] = statuses.get(row["status"], 0) + 1
            lines.append(line(row))
            print(lines[-1], flush=True)
    lines.append("# " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))
    print(lines[-1])
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
