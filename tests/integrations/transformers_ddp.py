"""Two CPU ranks (gloo, under torchrun) train a tiny GPT-2 with the Trainer and the callback;
``argv[1]``: the output folder."""

from __future__ import annotations

import gc
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from moduleprofiler.integrations.transformers import ModuleProfilerCallback
from tests.integrations.test_transformers import CONFIG, Tokens

if __name__ == "__main__":
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**CONFIG))
    args = TrainingArguments(output_dir=sys.argv[1], max_steps=4, per_device_train_batch_size=4,
                             use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True,
                             ddp_backend="gloo")
    callback = ModuleProfilerCallback(start_step=1, num_steps=2)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[callback])
    trainer.train()
    result = callback.result
    ranks = None if result is None or result.distributed is None else \
        result.distributed.world_size
    # one write per line: the ranks share stdout
    sys.stdout.write(f"rank {trainer.args.process_index}: result {result is not None}, "
                     f"ranks {ranks}\n")
    sys.stdout.flush()
    # the process group goes down before the interpreter: gloo's threads otherwise race its
    # exit ("terminate called without an active exception")
    del trainer, callback, result
    gc.collect()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
