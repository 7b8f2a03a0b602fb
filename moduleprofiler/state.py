"""Leaving the user's model exactly as we found it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


@contextmanager
def preserved_training_flags(root: nn.Module, eval: bool = False) -> Iterator[None]:
    """Optionally switch ``root`` to eval mode; afterwards restore every module's own
    ``training`` flag (not just the root's), even if the body raises.

    ``nn.Module.train(mode)`` would set every descendant to the same mode, which destroys a
    deliberately frozen ``BatchNorm`` inside a training model, so each flag is put back one by
    one.
    """
    flags = [(module, module.training) for module in root.modules()]
    try:
        if eval:
            root.eval()
        yield
    finally:
        for module, training in flags:
            if module.training is not training:
                module.training = training
