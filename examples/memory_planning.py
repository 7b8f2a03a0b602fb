"""Plan the memory of a training step before you have the hardware for it.

The model is built on the meta device (no memory is allocated, whatever its size), and
``measure_memory`` counts what a CUDA training step would hold: parameters, inputs, the
activations autograd saves for backward, the gradients, and the peak of them all, with the
module call that is running at the peak. The largest batch that fits a memory budget follows.

    python examples/memory_planning.py            # a 24-layer, 1024-wide transformer, 40 GiB
    python examples/memory_planning.py --fast     # a tiny one (seconds; run by the tests)
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moduleprofiler.memory import measure_memory, parameter_memory, state_dict_bytes

GIB = 2**30


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention (``scaled_dot_product_attention``)
    and a GELU MLP, each with dropout and a residual connection."""

    def __init__(self, width: int, heads: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width), nn.Dropout(dropout))

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, width = x.shape
        q, k, v = (self.qkv(self.norm1(x)).view(batch, seq, 3, self.heads, -1)
                   .permute(2, 0, 3, 1, 4))
        attended = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, seq, width))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    """Token embedding, a stack of blocks, a final norm and a vocabulary head."""

    def __init__(self, vocab: int, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.Sequential(*(Block(width, heads) for _ in range(layers)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids: Tensor) -> Tensor:
        return self.head(self.norm(self.blocks(self.embed(ids))))


def next_token_loss(logits: Tensor) -> Tensor:
    """Cross-entropy against (dummy) next tokens: what a language-model step computes."""
    targets = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def training_peak(model: nn.Module, batch: int, seq: int, vocab: int) -> int:
    """Predicted peak bytes of one CUDA training step at ``batch`` x ``seq`` tokens."""
    ids = torch.randint(0, vocab, (batch, seq), device="meta")
    report = measure_memory(model, ids, train=True, loss_fn=next_token_loss, device="meta",
                            emulate="cuda")
    assert report.training is not None
    return report.training.peak_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="a tiny model (seconds)")
    options = parser.parse_args()
    if options.fast:
        vocab, width, layers, heads, seq, budget = 1000, 64, 2, 4, 32, 0.05 * GIB
    else:
        vocab, width, layers, heads, seq, budget = 32000, 1024, 24, 16, 1024, 40 * GIB

    with torch.device("meta"):  # nothing is allocated, however large the model
        model = TinyLM(vocab, width, layers, heads)

    param_bytes = int(parameter_memory(model)["param_bytes"].iloc[0])  # the root row
    print(f"parameters: {param_bytes / GIB:.3f} GiB "
          f"(serialized state_dict ~{state_dict_bytes(model) / GIB:.3f} GiB)")

    ids = torch.randint(0, vocab, (1, seq), device="meta")
    report = measure_memory(model, ids, train=True, loss_fn=next_token_loss, device="meta",
                            emulate="cuda")
    print(report)
    calls = report.to_df()
    top = calls[calls["depth"] == 2].nlargest(3, "saved_bytes")  # the blocks
    print("calls saving the most for backward (batch 1):")
    print(top[["module", "type", "saved_bytes", "output_bytes"]].to_string(index=False))

    # The peak grows with the batch: double until over budget, then bisect.
    low, high = 0, 1
    while training_peak(model, high, seq, vocab) <= budget:
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        if training_peak(model, middle, seq, vocab) <= budget:
            low = middle
        else:
            high = middle
    print(f"largest batch of {seq} tokens within {budget / GIB:.2f} GiB: {low}")


if __name__ == "__main__":
    main()
