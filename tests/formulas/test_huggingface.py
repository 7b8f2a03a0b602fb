"""Hugging Face Conv1D formulas, with a real transformers Conv1D and a tiny GPT-2."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import moduleprofiler
from moduleprofiler.formulas.huggingface import CONV1D_KEYS
from moduleprofiler.registry import qualified_name
from tests.conftest import fcm_flops, macs_of, ops_of, profile_of

transformers = pytest.importorskip("transformers")
from transformers.pytorch_utils import Conv1D  # noqa: E402


def test_key_is_the_real_class_name() -> None:
    assert qualified_name(Conv1D) in CONV1D_KEYS


def test_conv1d_ops_and_macs() -> None:
    # Conv1D(nf=7, nx=5) is Linear(5, 7) with a transposed weight; rows = 2*3 = 6;
    # ops = 6*7*(2*5-1) + 6*7 bias = 420 = 2*rows*nx*nf; macs = 6*5*7 = 210
    module = Conv1D(7, 5)
    x = torch.randn(2, 3, 5)
    assert ops_of(module, x) == 420
    assert macs_of(module, x) == 210


@pytest.mark.parametrize("shape", [(2, 3, 5), (4, 5), (5,)])
def test_conv1d_macs_match_flop_counter(shape: tuple[int, ...]) -> None:
    module = Conv1D(7, 5)
    x = torch.randn(*shape)
    assert 2 * macs_of(module, x) == fcm_flops(module, x)


def test_tiny_gpt2_conv1d_macs() -> None:
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16)
    model = transformers.GPT2Model(config).eval()
    ids = torch.randint(0, 100, (2, 5))
    records = [r for r in profile_of(model, ids).records if r.type_name == "Conv1D"]
    # rows = 2*5 = 10; c_attn 32x96 + attn.c_proj 32x32 + c_fc 32x128 + mlp.c_proj 128x32
    # = 3072 + 1024 + 4096 + 4096 = 12288 per row; 10 rows -> 122880 macs, 245760 ops
    assert len(records) == 4
    assert sum(r.self_macs for r in records) == 122880
    assert sum(r.self_ops for r in records) == 245760


def test_moduleprofiler_does_not_import_transformers() -> None:
    # The formulas are keyed by dotted name so that no module-level import of transformers is
    # needed anywhere in the package (checked on the source, as this test process has
    # imported transformers itself).
    package = Path(moduleprofiler.__file__).parent
    for source in package.rglob("*.py"):
        for node in ast.parse(source.read_text()).body:
            names = (
                [alias.name for alias in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )
            assert not any(name.split(".")[0] == "transformers" for name in names), source


class _SpelledOutGELU(torch.nn.Module):
    """NewGELUActivation's forward on a class without a formula: counted operator by
    operator."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from transformers.activations import NewGELUActivation

        return NewGELUActivation.forward(self, x)  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(2, 3, 5), (7,), (1, 4, 6, 2)])
def test_new_gelu_counts_what_its_operators_and_nn_gelu_tanh_count(shape: tuple[int, ...]) -> None:
    from transformers.activations import NewGELUActivation

    x = torch.randn(*shape)
    numel = x.numel()
    formula = profile_of(NewGELUActivation(), x).records[0]
    # 15 per element: x**3 (2 multiplies), * 0.044715, + x, * sqrt(2/pi), tanh (7), + 1,
    # * x, * 0.5; e.g. 2*3*5 = 30 elements -> 450
    assert formula.self_ops == 15 * numel and formula.self_macs == 0
    assert formula.ops_source == "formula"
    operators = profile_of(_SpelledOutGELU(), x).records[0]
    assert operators.ops_source == "operator"
    assert operators.self_ops == formula.self_ops  # the operator path counted the same
    assert ops_of(torch.nn.GELU(approximate="tanh"), x) == formula.self_ops
