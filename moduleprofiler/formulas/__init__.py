"""Ops / macs / io-size formulas for every ``torch.nn`` module that computes.

Each file holds one layer family and registers its formulas with the decorators of
:mod:`moduleprofiler.registry` when imported. The counting convention is stated once, in
``docs/conventions.md``.
"""

from moduleprofiler.formulas import (  # noqa: F401  (imported for their registrations)
    activation,
    attention,
    conv,
    distance,
    embedding,
    huggingface,
    linear,
    norm,
    pooling,
    recurrent,
    resample,
    transformer,
    zero,
)
