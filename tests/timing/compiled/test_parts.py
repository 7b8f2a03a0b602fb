"""An eager model with compiled submodules taken apart: which submodules are compiled, and the
shadow program that runs them through recorded compiles without touching the model."""

from __future__ import annotations

import torch
from torch import nn

from moduleprofiler.timing.compiled.parts import PartlyCompiled, compiled_parts
from tests.timing.helpers import no_hooks_left, residual_model


def test_the_outermost_compiled_submodules_are_found_in_both_forms():
    model = residual_model()
    model[0] = torch.compile(model[0])
    model[2].compile(options={"epilogue_fusion": False})
    model[2].fc.compile()  # inside a compiled part: that part's business
    parts = compiled_parts(model)
    assert [(part.path, part.original_path) for part in parts] == [
        ("0", "0._orig_mod"), ("2", "2")]
    assert parts[0].original is model[0]._orig_mod and parts[1].original is model[2]
    assert parts[1].settings.inductor == {"epilogue_fusion": False}
    assert compiled_parts(residual_model()) == []


def test_the_shadow_computes_what_the_model_computes_and_leaves_it_alone():
    model = residual_model()
    model[2].compile()
    own_call = model[2]._compiled_call_impl
    before = {path: dict(vars(sub)) for path, sub in model.named_modules()}
    partly = PartlyCompiled.of(model)
    assert partly is not None
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert torch.allclose(partly.shadow(x), model(x))
    # the compiled part ran through the recorded compile: its kernels carry the model's paths
    graphs = partly.recorder.graphs
    assert len(graphs) == 1
    assert {module for kernel in graphs[0].kernels for module in kernel.modules} == {
        "2", "2.fc", "2.act"}
    # the shadow's modules are new objects; the model's are as they were
    assert partly.shadow is not model and partly.shadow[0] is not model[0]
    assert partly.shadow[0].fc.weight is model[0].fc.weight
    assert {path: dict(vars(sub)) for path, sub in model.named_modules()} == before
    assert model[2]._compiled_call_impl is own_call and no_hooks_left(model)


def test_a_module_registered_twice_has_one_shadow():
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.ReLU(), shared, torch.compile(nn.Linear(4, 4)))
    partly = PartlyCompiled.of(model)
    assert partly is not None
    assert partly.shadow[0] is partly.shadow[2]


class Sliced(nn.Module):
    """Calls a slice of its layers, as Hugging Face decoders do (the slice is a new list)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:2]:
            x = layer(x)
        return x


def test_a_slice_of_a_list_holding_a_compiled_part_is_called_through_it():
    model = Sliced()
    model.layers[1].compile()
    partly = PartlyCompiled.of(model)
    assert partly is not None
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert torch.allclose(partly.shadow(x), model(x))
    assert len(partly.recorder.graphs) == 1  # layers.1 ran through the recorded compile
    assert partly.shadow.layers[1].weight is model.layers[1].weight
