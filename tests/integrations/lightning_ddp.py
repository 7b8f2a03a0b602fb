"""Two CPU ranks (gloo) fit ``Tiny`` under DDP with the callback; run as a script (Lightning's
DDP launcher starts rank 1 by running this file again). ``argv[1]``: the output folder."""

from __future__ import annotations

import sys

import lightning as L
from lightning.pytorch.loggers import CSVLogger

from moduleprofiler.integrations.lightning import ModuleProfilerCallback
from tests.integrations.lightning_models import Tiny

if __name__ == "__main__":
    L.seed_everything(0)
    callback = ModuleProfilerCallback(start_step=1, num_steps=2)
    trainer = L.Trainer(max_steps=4, accelerator="cpu", devices=2, strategy="ddp",
                        logger=CSVLogger(sys.argv[1]), callbacks=[callback],
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(Tiny())
    result = callback.result
    ranks = None if result is None or result.distributed is None else \
        result.distributed.world_size
    files = [str(path) for path in result.files] if result else []
    # one write per line: the ranks share stdout
    sys.stdout.write(f"rank {trainer.global_rank}: result {result is not None}, "
                     f"ranks {ranks}, files {files}\n")
    sys.stdout.flush()
