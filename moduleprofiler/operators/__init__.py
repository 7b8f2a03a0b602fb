"""Operator-level accounting: formulas for aten operators in the counting convention of the
module formulas (``docs/conventions.md``; per-family rules in ``docs/operators.md``).

Importing this package registers every family. Register your own operators (aten or
``torch.library`` custom ops) with :func:`register_operator` / :func:`register_free`.
"""

from moduleprofiler.operators import (  # noqa: F401  (imported for their registrations)
    attention,
    backward,
    communication,
    elementwise,
    fake_quant,
    free,
    linalg,
    losses,
    matmul,
    norm,
    pooling,
    quantized,
    recurrent,
    sampling,
    selection,
    special,
    spectral,
    vision,
)
from moduleprofiler.operators.registry import (
    FREE_OPERATORS,
    MISSING,
    OPERATOR_FORMULAS,
    built_ins_registered,
    lookup,
    register_free,
    register_operator,
    unregister_operator,
)

__all__ = [
    "FREE_OPERATORS",
    "MISSING",
    "OPERATOR_FORMULAS",
    "lookup",
    "register_free",
    "register_operator",
    "unregister_operator",
]

built_ins_registered()  # every family is registered: a change from here on is the user's
