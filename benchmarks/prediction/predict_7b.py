"""How long predicting a Llama-2-7B-sized decoder takes on this machine's CPU.

The model (hidden 4096, 32 layers, 32 heads, MLP 11008, vocabulary 32,000: 6.7 B parameters) is
built under ``torch.device("meta")``, so nothing is allocated. Each round times one
``Profiler().predict(model, ids, "H100 SXM", dtype="bf16")`` of a 1 x 512 token batch (the meta
copy, the counting pass and the pricing of every operator), beside a bare meta forward of the
same model in the same round; the script prints the minimum and the median of each, in seconds
and as multiples of the bare forward, after one warm-up round. One thread, as a laptop core.

    PYTHONPATH=. python benchmarks/prediction/predict_7b.py
    PYTHONPATH=. python benchmarks/prediction/predict_7b.py --rounds 9 --tokens 2048
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from moduleprofiler import Profiler


def llama_7b() -> torch.nn.Module:
    """Llama-2-7B's shapes on the meta device."""
    config = LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                         max_position_embeddings=4096)
    with torch.device("meta"):
        return LlamaForCausalLM(config).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=512)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    model = llama_7b()
    ids = torch.zeros(1, args.tokens, dtype=torch.long, device="meta")
    profiler = Profiler()

    def bare() -> None:
        with torch.no_grad():
            model(ids)

    def predict() -> None:
        profiler.predict(model, ids, "H100 SXM", dtype="bf16")

    times: dict[str, list[float]] = {"bare meta forward": [], "predict": []}
    for round_index in range(args.rounds + 1):
        for name, call in (("bare meta forward", bare), ("predict", predict)):
            start = time.perf_counter()
            call()
            if round_index:  # the first round warms caches and imports
                times[name].append(time.perf_counter() - start)
    result = profiler.predict(model, ids, "H100 SXM", dtype="bf16")
    params = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__}, 1 thread, {os.cpu_count()} CPUs, {args.rounds} rounds "
          f"after one warm-up; load average {os.getloadavg()[0]:.2f}")
    print(f"Llama-2-7B shapes: {params:,} parameters, 1 x {args.tokens} tokens, "
          f"predicted on an H100 SXM in bf16: device {result.predicted_device_ms:.2f} ms, "
          f"latency {result.predicted_latency_ms:.2f} ms")
    base = min(times["bare meta forward"])
    base_median = statistics.median(times["bare meta forward"])
    print(f"{'':20} {'min s':>7} {'x bare':>7} {'median s':>9} {'x bare':>7}")
    for name, values in times.items():
        print(f"{name:20} {min(values):7.3f} {min(values) / base:7.2f} "
              f"{statistics.median(values):9.3f} {statistics.median(values) / base_median:7.2f}")


if __name__ == "__main__":
    main()
