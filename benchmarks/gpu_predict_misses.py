"""Where ``predict`` misses most on the models benchmarks/gpu_front_door.py found far off: ViT-B/16
at 64 x 64 in fp32 (predicted 0.45 of the measured device time) and a bidirectional LSTM
(6.5 times). Prints, per module, the kernel clock's device time, the prediction and their
ratio, and the operators the prediction saw in the worst module.

    PYTHONPATH=. python3 benchmarks/gpu_predict_misses.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import torch
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_front_door import Tagger

from moduleprofiler import OperatorListener, Profiler, TimingOptions


def main() -> None:
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 12)
    profiler = Profiler()
    device = torch.cuda.get_device_name()
    cases = [("vit_b_16 fp32", torchvision.models.vit_b_16(image_size=64),
              torch.randn(4, 3, 64, 64)),
             ("lstm_tagger fp32", Tagger(), torch.randint(0, 1000, (4, 32)))]
    for name, model, example in cases:
        model = model.cuda().eval()
        x = example.cuda()
        measured = profiler.time_modules(model, x, TimingOptions(max_seconds=2.0))
        predicted = profiler.predict(model, x, device=device, measured=measured)
        frame = predicted.to_df("module")
        columns = ["module", "type", "device_ms", "predicted_device_ms",
                   "predicted_to_measured"]
        shown = frame[[c for c in columns if c in frame.columns]]
        print(f"== {name}")
        print(shown[frame["depth"] <= 4].head(16).to_string(index=False))
        with torch.no_grad():
            ops = profiler.profile(model, x, listeners=[OperatorListener()])
        first = "encoder.layers.encoder_layer_0" if "vit" in name else "lstm"
        print(ops.by_operator(first))


if __name__ == "__main__":
    main()
