"""Profiles of three real models, built once per test session: ResNet-18 and ViT-B/16
(torchvision, random weights) and GPT-2 small (transformers ``GPT2Config()``, no download)."""

from __future__ import annotations

import functools

import torch

from moduleprofiler import ModuleProfiler, Profile


@functools.cache
def resnet18() -> Profile:
    from torchvision.models import resnet18 as build

    return ModuleProfiler().profile(build(weights=None), torch.randn(1, 3, 224, 224))


@functools.cache
def vit_b_16() -> Profile:
    from torchvision.models import vit_b_16 as build

    return ModuleProfiler().profile(build(weights=None), torch.randn(1, 3, 224, 224))


@functools.cache
def gpt2() -> Profile:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config()).eval()
    return ModuleProfiler().profile(model, torch.randint(0, 50257, (1, 16)))
