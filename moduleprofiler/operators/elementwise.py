"""Element-wise arithmetic, activations, softmax, dropout and reductions.

Per-element costs are those of the module formulas (``formulas/activation.py``): one op per
add, multiply, divide, comparison or elementary function (exp, log, sqrt, erf, abs, ...), with
the activation constants shared so ``F.silu(x)`` and ``nn.SiLU()(x)`` count the same. ``tanh``
costs 7 and ``sigmoid`` 3 as operators too, because ``nn.Tanh`` / ``nn.Sigmoid`` (and the LSTM
and GRU cells, which are built from them) do.

Binary operators cost per *output* element, so broadcasting is counted as the work done. In-place
twins (``add_``) and ``out=`` overloads count the same as the plain operator. Reductions cost per
output group of ``n`` input elements: ``n - 1`` adds (or comparisons) for sum/max/..., ``n`` for
mean (the extra divide). Nothing here is matmul-type work: ``macs`` is 0 throughout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.formulas.activation import (
    GELU_ERF,
    GELU_TANH,
    GLU_PER_OUTPUT,
    PER_ELEMENT,
    RRELU_SAMPLE,
    SIGMOID,
    SOFTPLUS,
    TANH,
    log_softmax_along,
    softmax_along,
)
from moduleprofiler.formulas.distance import pnorm_ops
from moduleprofiler.operators._common import (
    ZERO,
    Args,
    BoundFormula,
    Count,
    aten,
    by_decomposition,
    first_tensor,
    named,
    numel,
    out_numel,
    register,
    stored_numel,
    through_table,
    with_inplace,
)
from moduleprofiler.operators.registry import MISSING, OperatorMap, decomposition_count
from moduleprofiler.storage import sparse_parts

# -- per-element factory -----------------------------------------------------------------------


def per_element(cost: int) -> BoundFormula:
    """A formula costing ``cost`` ops per output element (fvcore's ``elementwise_flop_counter``)."""

    def formula(args: Args, out: Any) -> Count:
        return cost * out_numel(out), 0

    return named(formula, f"per_element_{cost}", f"numel(out) * {cost}.")


# Unary functions evaluated once per element: 1 op each (the convention's "elementary function").
_UNARY_ONE = (
    "abs", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "erf", "erfc", "erfinv", "reciprocal", "sign", "sgn", "signbit", "floor", "ceil", "round",
    "trunc", "frac", "logical_not", "bitwise_not", "isnan", "isinf", "isneginf", "isposinf",
    "nan_to_num", "lgamma", "digamma", "i0", "sinc", "deg2rad", "rad2deg", "angle",
    # aliases that lower to one of the above
    "absolute", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctanh", "fix",
)  # fmt: skip
# Binary functions: one op per output element (a multiply, a comparison, a logical op, ...).
_BINARY_ONE = (
    "mul", "multiply", "eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less",
    "less_equal", "not_equal", "maximum", "minimum", "fmax", "fmin", "logical_and",
    "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_left_shift", "bitwise_right_shift", "atan2", "arctan2", "remainder", "fmod",
    "copysign", "heaviside", "nextafter", "clamp_min", "clamp_max", "bernoulli",
)  # fmt: skip
# Python's operator forms of the bitwise ops (``a & b``, ``mask |= other``), which composites
# such as ``isclose`` dispatch whole under ``torch.inference_mode``: one op per output element.
register(*aten("__and__", "__iand__", "__or__", "__ior__", "__xor__", "__ixor__", "__lshift__",
               "__ilshift__", "__rshift__", "__irshift__"))(per_element(1))
# NB: bernoulli's random draw is free (as in the dropout convention); the ``u < p`` test is 1.
# ``square`` is one multiply (x * x).
register(*with_inplace(*_UNARY_ONE, *_BINARY_ONE, "square"))(per_element(1))
# NB: floor_divide is a divide and a floor; xlogy a log and a multiply.
register(*with_inplace("floor_divide", "xlogy"))(per_element(2))
# NB: ldexp(x, e) = x * 2**e, the power and the multiply torch computes; frexp splits each
# element into mantissa and exponent, one function evaluation.
register(*with_inplace("ldexp"))(per_element(2))
register(*aten("frexp"))(per_element(1))
# hypot = sqrt(x*x + y*y): 2 multiplies, 1 add, 1 sqrt.
register(*with_inplace("hypot"))(per_element(4))

LOGIT = 3  # log(x / (1 - x)): subtract, divide, log
CLAMP_TO_EPS = 2  # logit's ``eps``: clamp x to [eps, 1 - eps], one comparison per bound


@register(*with_inplace("logit"))
def logit_ops(args: Args, out: Any) -> Count:
    """numel(out) * 3, + 2 per element with ``eps`` (BCE's gradient for its target is
    ``-logit(p)``)."""
    return (LOGIT + CLAMP_TO_EPS * int(args.get("eps") is not None)) * out_numel(out), 0


@register(*aten("equal"))
def equal_ops(args: Args, out: Any) -> Count:
    """numel(self): one comparison per element pair (0 when the shapes differ; NB: a kernel
    may stop at the first difference, this counts them all)."""
    first, second = args.get("self"), args.get("other")
    return (int(first.numel()) if tuple(first.shape) == tuple(second.shape) else 0), 0


# NB: negation flips a sign bit and costs nothing (as in the activation convention, where
# sigmoid(x) = 1 / (1 + exp(-x)) is 3 ops); ``positive`` returns its input.
register(*with_inplace("neg", "negative", "positive"))(per_element(0))


def _scale_ops(scale: Any) -> int:
    """1 per element when a scalar factor (``alpha``, ``value``) is not 1, else 0."""
    return 0 if isinstance(scale, (int, float)) and scale == 1 else 1


@register(*with_inplace("add", "sub", "subtract", "rsub"))
def add_ops(args: Args, out: Any) -> Count:
    """numel(out), doubled when ``alpha != 1`` (x + alpha * y is a multiply and an add); a
    sparse operand added into a dense one: its stored values (the dense operand is copied,
    and each stored value added to its element once)."""
    elements = out_numel(out)
    sparse = [operand for operand in (args.get("self"), args.get("other"))
              if isinstance(operand, Tensor) and sparse_parts(operand) is not None]
    result = first_tensor(out)
    if len(sparse) == 1 and isinstance(result, Tensor) and result.layout is torch.strided:
        elements = stored_numel(sparse[0])
    return (1 + _scale_ops(args.get("alpha", 1))) * elements, 0


@register(*with_inplace("div", "divide", "true_divide"))
def div_ops(args: Args, out: Any) -> Count:
    """numel(out); 2 per element with a rounding mode (divide, then floor or trunc)."""
    return (1 + int(args.get("rounding_mode") is not None)) * out_numel(out), 0


def power_ops(exponent: float) -> int:
    """Ops per element of ``x ** exponent`` for a constant exponent.

    NB: an integer exponent is evaluated by repeated squaring (x**2: 1 multiply, x**3: 2,
    x**4: 2), plus one reciprocal when negative; 0 and 1 cost nothing; any other exponent is one
    ``pow`` evaluation. This makes GPT-2's ``0.044715 * x**3`` GELU count what ``nn.GELU``
    (approximate='tanh') counts.
    """
    if math.isfinite(exponent) and exponent == int(exponent) and abs(exponent) < 2**31:
        n = abs(int(exponent))
        multiplies = n.bit_length() - 1 + bin(n).count("1") - 1 if n > 1 else 0
        return multiplies + int(exponent < 0)
    return 1


@register(*with_inplace("pow", "float_power"))
def pow_ops(args: Args, out: Any) -> Count:
    """numel(out) * power_ops(exponent) for a scalar exponent, numel(out) for a tensor one."""
    exponent = args.get("exponent")
    if isinstance(args.get("self"), Tensor) and isinstance(exponent, (int, float)):
        return power_ops(float(exponent)) * out_numel(out), 0
    return out_numel(out), 0


@register(*with_inplace("clamp", "clip"))
def clamp_ops(args: Args, out: Any) -> Count:
    """numel(out) per bound given: one comparison for min, one for max."""
    bounds = int(args.get("min") is not None) + int(args.get("max") is not None)
    return bounds * out_numel(out), 0


@register(*with_inplace("addcmul", "addcdiv"))
def addcmul_ops(args: Args, out: Any) -> Count:
    """numel(out) * 2 (t1 * t2, + self), plus numel(out) when ``value != 1``."""
    return (2 + _scale_ops(args.get("value", 1))) * out_numel(out), 0


# lerp = start + weight * (end - start): 3 per element.
register(*with_inplace("lerp"))(per_element(3))


# -- activations -------------------------------------------------------------------------------

_ACTIVATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (PER_ELEMENT[nn.ReLU], ("relu",)),
    (PER_ELEMENT[nn.Hardtanh], ("hardtanh", "relu6")),
    (PER_ELEMENT[nn.Threshold], ("threshold",)),
    (PER_ELEMENT[nn.LeakyReLU], ("leaky_relu",)),
    (PER_ELEMENT[nn.PReLU], ("_prelu_kernel", "prelu")),
    (PER_ELEMENT[nn.SELU], ("selu",)),
    (PER_ELEMENT[nn.CELU], ("celu",)),
    (SIGMOID, ("sigmoid",)),
    (TANH, ("tanh",)),
    (SOFTPLUS, ("softplus",)),
    (PER_ELEMENT[nn.LogSigmoid], ("log_sigmoid", "log_sigmoid_forward")),
    (PER_ELEMENT[nn.SiLU], ("silu",)),
    (PER_ELEMENT[nn.Mish], ("mish",)),
    (PER_ELEMENT[nn.Hardsigmoid], ("hardsigmoid",)),
    (PER_ELEMENT[nn.Hardswish], ("hardswish",)),
    (PER_ELEMENT[nn.Hardshrink], ("hardshrink",)),
    (PER_ELEMENT[nn.Softshrink], ("softshrink",)),
)
"""(ops per element, operators) priced like the module of the same activation (``relu6`` is
``nn.ReLU6``, a ``Hardtanh``; ``prelu`` is ``nn.PReLU``)."""

for _cost, _names in _ACTIVATIONS:
    register(*with_inplace(*_names))(per_element(_cost))


@register(*with_inplace("elu"))
def elu_ops(args: Args, out: Any) -> Count:
    """numel * 3 (ELU); numel * 7 when ``scale`` or ``input_scale`` is not 1 (SELU, CELU).

    ``F.selu`` reaches the dispatcher as ``aten.elu`` with SELU's scale (``aten.selu`` arrives
    whole only under ``inference_mode``), and CELU lowers to ``elu`` with
    ``input_scale = 1 / alpha``, so the scales tell them apart. NB: a CELU with ``alpha = 1``
    lowered to ``elu`` is indistinguishable from ELU and counts 3.
    """
    plain = _scale_ops(args.get("scale", 1)) == 0 and _scale_ops(args.get("input_scale", 1)) == 0
    per = PER_ELEMENT[nn.ELU] if plain else PER_ELEMENT[nn.SELU]
    return per * out_numel(out), 0


@register(*with_inplace("gelu"))
def gelu_ops(args: Args, out: Any) -> Count:
    """numel * 5 (erf form), numel * 15 (approximate='tanh')."""
    per = GELU_TANH if args.get("approximate") == "tanh" else GELU_ERF
    return per * out_numel(out), 0


# glu: a * sigmoid(b) for the two halves a, b of the input, per output element.
register(*aten("glu"))(per_element(GLU_PER_OUTPUT))


@register(*with_inplace("rrelu_with_noise", "rrelu"))
def rrelu_ops(args: Args, out: Any) -> Count:
    """numel * 4 (as LeakyReLU); numel * 7 in training (a slope drawn per element)."""
    per = PER_ELEMENT[nn.LeakyReLU] + (RRELU_SAMPLE if args.flag("training") else 0)
    return per * out_numel(out), 0


# -- softmax -----------------------------------------------------------------------------------

def _softmax_input(args: Args) -> tuple[Tensor | None, int]:
    """The first argument of a softmax and its ``dim`` (only _masked_softmax takes
    dim=None: the last dim)."""
    x, dim = args.first(), args.get("dim")
    return (x if isinstance(x, Tensor) else None), (dim if isinstance(dim, int) else -1)


@register(*aten("_softmax", "softmax", "_safe_softmax", "_masked_softmax", "special_softmax"))
def softmax_op_ops(args: Args, out: Any) -> Count:
    """rows * (4D - 1): D subtracts of the max, D exps, D - 1 adds, D divides (summed over the
    sequences of a nested tensor)."""
    x, dim = _softmax_input(args)
    return (0 if x is None else softmax_along(x, dim)), 0


@register(*aten("_log_softmax", "log_softmax", "special_log_softmax"))
def log_softmax_op_ops(args: Args, out: Any) -> Count:
    """rows * 4D: D subtracts of the max, D exps, D - 1 adds, 1 log, D subtracts."""
    x, dim = _softmax_input(args)
    return (0 if x is None else log_softmax_along(x, dim)), 0


def _sparse_rows(x: Tensor, dim: int) -> int | None:
    """Rows of a softmax along sparse ``dim`` of a COO tensor without dense dimensions: the
    distinct positions of its stored entries in the other dimensions (``None`` where that
    cannot be read: another layout, dense dimensions, the meta device's missing indices)."""
    if x.layout is not torch.sparse_coo or x.dense_dim() != 0 or x.device.type == "meta":
        return None
    indices = x._indices()
    others = torch.cat([indices[:dim], indices[dim + 1:]]) if indices.shape[0] > 1 else None
    return 1 if others is None else int(others.unique(dim=1).shape[1])


@register(*aten("_sparse_softmax"))
def sparse_softmax_ops(args: Args, out: Any) -> Count:
    """``torch.sparse.softmax``: the unstored entries are -inf, so each row softmaxes its
    stored values: 4 * nnz - rows (as a dense row of D: 4D - 1)."""
    x, dim = args.first(), args.get("dim")
    if not isinstance(x, Tensor) or not isinstance(dim, int):
        return MISSING  # type: ignore[return-value]
    rows = _sparse_rows(x, dim % x.dim())
    if rows is None:
        return MISSING  # type: ignore[return-value]
    return 4 * numel(x) - rows, 0


@register(*aten("_sparse_log_softmax"))
def sparse_log_softmax_ops(args: Args, out: Any) -> Count:
    """``torch.sparse.log_softmax``: 4 per stored value (a dense row's 4D)."""
    return 4 * numel(args.first()), 0


@register(*aten("_coalesce", "coalesce"))  # inference_mode dispatches the latter
def coalesce_ops(args: Args, out: Any) -> Count:
    """Summing the duplicate entries of a sparse tensor: one add per stored value merged
    away (the stored values in, less those out)."""
    merged = numel(args.first()) - numel(first_tensor(out))
    return max(merged, 0), 0


# -- dropout -----------------------------------------------------------------------------------
#
# As ``nn.Dropout`` in ``formulas/zero.py``: in training, per mask entry a Bernoulli test and a
# divide by (1 - p), then one multiply per element; alpha dropout 5 per mask entry and 2 per
# element. Feature dropout draws one mask entry per (sample, channel). Nothing in eval / p = 0.

_MASK, _APPLY = 2, 1
_ALPHA_MASK, _ALPHA_APPLY = 5, 2


def _feature_mask(x: Tensor) -> int:
    """Mask entries of feature dropout: one per (sample, channel) (torch: noise (N, C, 1, ...))."""
    return int(x.shape[0]) * int(x.shape[1]) if x.dim() >= 2 else numel(x)


def _dropout(alpha: bool, feature: bool, drawn: bool = False) -> BoundFormula:
    mask_cost, apply_cost = (_ALPHA_MASK, _ALPHA_APPLY) if alpha else (_MASK, _APPLY)

    def formula(args: Args, out: Any) -> Count:
        x = args.first()
        train = args.get("train")
        p = args.number("p", 0.0)
        if not isinstance(x, Tensor) or train is False or p == 0.0:
            return ZERO
        if p == 1.0 and not drawn:  # the composite multiplies by zero: no mask is drawn
            return numel(x), 0
        mask = _feature_mask(x) if feature else numel(x)
        return mask_cost * mask + apply_cost * numel(x), 0

    kind = ("alpha_" if alpha else "") + ("feature_" if feature else "")
    return named(formula, f"{kind}dropout_ops",
                 f"train and p > 0: {mask_cost} * mask + {apply_cost} * numel "
                 f"(mask = {'N * C' if feature else 'numel'})"
                 f"{'' if drawn else '; p = 1: numel (a multiply by zero)'}; else 0.")


# NB: native_dropout's ``train=None`` means training (the kernel drops), so only False is eval.
# It draws its mask even for p = 1, where the composites multiply by zero.
register(*aten("native_dropout"))(_dropout(alpha=False, feature=False, drawn=True))
register(*with_inplace("dropout"))(_dropout(alpha=False, feature=False))
register(*with_inplace("feature_dropout"))(_dropout(alpha=False, feature=True))
register(*with_inplace("alpha_dropout"))(_dropout(alpha=True, feature=False))
register(*with_inplace("feature_alpha_dropout"))(_dropout(alpha=True, feature=True))


# -- reductions --------------------------------------------------------------------------------

def reduction(per_group: Callable[[int], int], doc: str) -> BoundFormula:
    """A formula costing ``per_group(n)`` for each output element that reduces ``n`` inputs."""

    def formula(args: Args, out: Any) -> Count:
        groups = out_numel(out)
        total = numel(args.first())
        if groups == 0 or total == 0:
            return ZERO
        return groups * per_group(total // groups), 0

    return named(formula, "reduction_ops", f"outputs * ({doc}), n = inputs per output.")


register(*aten("sum", "nansum", "prod", "amax", "amin", "argmax", "argmin", "any", "all"))(
    reduction(lambda n: n - 1, "n - 1: adds, multiplies or comparisons")
)


def _max_min_overloads(binary: bool) -> list[torch._ops.OpOverload]:
    """max / min overloads that reduce (``max(x)``, ``max(x, dim)``) or, with ``binary``, the
    element-wise ones that take a second tensor (``max.other``, ``max.out``)."""
    found = []
    for packet in (torch.ops.aten.max, torch.ops.aten.min):
        for name in packet.overloads():
            overload = getattr(packet, name)
            takes_tensor = "Tensor" in str(overload._schema.arguments[0].type)
            if takes_tensor and (name in ("other", "out")) == binary:
                found.append(overload)
    return found


register(*_max_min_overloads(binary=False))(reduction(lambda n: n - 1, "n - 1 comparisons"))
register(*_max_min_overloads(binary=True))(per_element(1))
register(*aten("mean"))(reduction(lambda n: n, "n: n - 1 adds + 1 divide"))
# nanmean as its kernel computes it: nansum(x) / (~isnan(x)).sum(): per value a NaN test and
# its negation (2n), two sums (2(n - 1)) and the divide
register(*aten("nanmean"))(reduction(lambda n: 4 * n - 1, "4n - 1"))
# hash_tensor combines each group's values (their bits xor-ed): n - 1 per output
register(*aten("hash_tensor"))(reduction(lambda n: n - 1, "n - 1: combinations"))
register(*aten("aminmax"))(reduction(lambda n: 2 * (n - 1), "2 * (n - 1) comparisons"))
register(*aten("count_nonzero"))(reduction(lambda n: 2 * n - 1, "2n - 1: n tests, n - 1 adds"))
# NB: variance as the norm formulas decompose it: mean (n), mean of squares (2n), E[x²] - mean²
# (2); the standard deviation adds one sqrt. ``var_mean`` returns the mean it computed anyway.
register(*aten("var", "var_mean"))(reduction(lambda n: 3 * n + 2, "3n + 2"))
register(*aten("std", "std_mean"))(reduction(lambda n: 3 * n + 3, "3n + 3"))
# logsumexp as softmax counts it: n subtracts of the max, n exps, n - 1 adds, 1 log, 1 add back.
register(*aten("logsumexp"))(reduction(lambda n: 3 * n + 1, "3n + 1"))


def _norm_order(args: Args) -> float:
    order = args.get("ord", args.get("p"))
    return float(order) if isinstance(order, (int, float)) else 2.0


@register(*aten("norm", "linalg_vector_norm"))
def norm_ops(args: Args, out: Any) -> Count:
    """outputs * pnorm_ops(n, p): p=2: 2n; p in {0, 1, inf}: 2n - 1; else 3n (as distances)."""
    groups, total = out_numel(out), numel(args.first())
    if groups == 0 or total == 0:
        return ZERO
    return groups * pnorm_ops(total // groups, _norm_order(args)), 0


@register(*with_inplace("renorm"))
def renorm_ops(args: Args, out: Any) -> Count:
    """slices * (pnorm_ops(M, p) + 3) + numel: the p-norm of each of the ``size(dim)`` slices of
    ``M`` elements, its test against ``maxnorm`` and factor ``maxnorm / (norm + 1e-7)`` (a
    comparison, an add, a divide), and one multiply per element."""
    x, dim = args.first(), args.get("dim")
    if not isinstance(x, Tensor) or numel(x) == 0:
        return ZERO
    slices = int(x.shape[dim]) if x.dim() and isinstance(dim, int) else 1
    size = numel(x) // slices
    return slices * (pnorm_ops(size, args.number("p", 2.0)) + 3) + numel(x), 0


@register(*aten("dist"))
def dist_ops(args: Args, out: Any) -> Count:
    """n + pnorm_ops(n, p): the ``n`` differences of the broadcast operands and their p-norm."""
    first, second = args.get("self"), args.get("other")
    if not isinstance(first, Tensor) or not isinstance(second, Tensor):
        return ZERO
    elements = torch.broadcast_shapes(first.shape, second.shape).numel()
    return elements + pnorm_ops(elements, args.number("p", 2.0)), 0


@register(*aten("trace"))
def trace_ops(args: Args, out: Any) -> Count:
    """min(rows, columns) - 1 adds: the sum of the diagonal."""
    x = args.first()
    if not isinstance(x, Tensor) or x.dim() != 2:
        return ZERO
    return max(min(int(x.shape[0]), int(x.shape[1])) - 1, 0), 0


def cumulative_steps(args: Args) -> int:
    """numel - lines: a running sum (or product, max) of n values takes n - 1 steps per line
    along ``dim``."""
    x = args.first()
    dim = args.get("dim")
    if not isinstance(x, Tensor) or numel(x) == 0:
        return 0
    size = int(x.shape[dim]) if x.dim() and isinstance(dim, int) else 1
    return numel(x) - numel(x) // size


@register(*with_inplace("cumsum", "cumprod", "cummax", "cummin"))
def cumulative_ops(args: Args, out: Any) -> Count:
    """numel - lines: one add (multiply, comparison) per step of the running result."""
    return cumulative_steps(args), 0


# -- scatter / index accumulation --------------------------------------------------------------

@register(*with_inplace("scatter_add", "scatter_reduce", "index_add", "index_reduce"))
def scatter_ops(args: Args, out: Any) -> Count:
    """numel(index) (scatter) or numel(source) (index_add): one add per value accumulated."""
    values = args.tensor("index") if args.tensor("src") is not None else args.tensor("source")
    return numel(values), 0


@register(*with_inplace("scatter"))
def scatter_reduce_ops(args: Args, out: Any) -> Count:
    """numel(index) with ``reduce=`` (one add or multiply per value); 0 for a plain scatter."""
    return (numel(args.tensor("index")) if args.get("reduce") is not None else 0), 0


@register(*with_inplace("put"))
def put_ops(args: Args, out: Any) -> Count:
    """numel(source) with ``accumulate=True`` (one add per value; ``take``'s gradient); 0 for a
    plain write."""
    return (numel(args.tensor("source")) if args.flag("accumulate") else 0), 0


@register(*aten("_unsafe_masked_index_put_accumulate"))
def masked_index_put_accumulate_ops(args: Args, out: Any) -> Count:
    """numel(values): one add per value accumulated (the masked ones are added as zeros)."""
    return numel(args.tensor("values")), 0


@register(*aten("segment_reduce"))
def segment_reduce_ops(args: Args, out: Any) -> Count:
    """numel(data) - numel(out): n - 1 adds (multiplies, comparisons) per segment and trailing
    element, n with ``initial`` (it enters every segment); ``"mean"`` + 1 divide per output.

    NB: segment lengths are data: an empty segment costs nothing where this takes 1 off."""
    data = args.first()
    if not isinstance(data, Tensor):
        return ZERO
    values, outputs = numel(data), out_numel(out)
    ops = values if args.get("initial") is not None else max(values - outputs, 0)
    return ops + (outputs if args.get("reduce") == "mean" else 0), 0


@register(*with_inplace("index_put", "_index_put_impl"))
def index_put_ops(args: Args, out: Any) -> Count:
    """numel(values) with ``accumulate=True`` (one add per value); 0 for a plain write."""
    return (numel(args.tensor("values")) if args.flag("accumulate") else 0), 0


# -- composites counted as their decomposition -------------------------------------------------
#
# Distances lower to the operators above; counting them as their parts keeps ``inference_mode``
# (which sees the composite) and ``no_grad`` (which sees the parts) equal. NB: these are not the
# module formulas' counts: ``F.cosine_similarity`` runs two norms, two clamps, two divides, a
# multiply and a sum (8D + 1 per row) where ``nn.CosineSimilarity``'s formula prices 6D + 3.
by_decomposition(*aten(
    "cosine_similarity", "pairwise_distance", "frobenius_norm", "norm_except_dim", "_weight_norm",
    "isfinite", "diff", "sum_to_size", "trapezoid", "trapz", "cumulative_trapezoid",
    "isclose", "isreal", "cov", "corrcoef", "gradient", "quantile", "nanquantile",
    "nonzero_numpy", "to_sparse", "to_sparse_csr", "to_sparse_csc", "to_sparse_bsr",
    "to_sparse_bsc", "vander",
    # selections whose lowering computes on indices or masks: take_along_dim wraps negative
    # indices (a remainder per index), combinations compares index pairs (lt and a mask product)
    "take_along_dim", "combinations",
))  # fmt: skip


def _allclose(table: OperatorMap | None) -> BoundFormula:
    """``allclose``'s formula, its ``isclose`` counted with the formulas of ``table``."""

    def allclose_ops(args: Args, out: Any) -> Count:
        """``isclose`` (counted as its decomposition: per element the equality test, and with
        a tolerance ``|a - b| <= atol + rtol * |b|`` and the finiteness test) and the ``all``
        over its ``n`` results, ``n - 1``."""
        first, second = args.get("self"), args.get("other")
        if not isinstance(first, Tensor) or not isinstance(second, Tensor):
            return ZERO
        close = decomposition_count(
            torch.ops.aten.isclose.default, (first, second),
            {name: args.get(name) for name in ("rtol", "atol", "equal_nan")}, table)
        if close is MISSING:  # type: ignore[comparison-overlap]
            return MISSING  # type: ignore[return-value]
        elements = torch.broadcast_shapes(first.shape, second.shape).numel()
        return close[0] + max(elements - 1, 0), close[1]

    return allclose_ops


# ``allclose`` has a kernel of its own (it always arrives whole), which reads a value: its
# ``isclose`` is counted as that one's decomposition, with the counting pass's table
register(*aten("allclose"))(through_table(_allclose))


@register(*aten("_weight_norm_interface"))
def weight_norm_ops(args: Args, out: Any) -> Count:
    """3 * numel(v) + groups: the 2-norm of each group (2M), g / norm per group, v * that.

    Groups are the slices along ``dim`` (``dim=-1``: the whole tensor is one group), as in
    ``norm_except_dim``, which the unfused ``_weight_norm`` lowers to.
    """
    v, dim = args.first(), args.get("dim", 0)
    if not isinstance(v, Tensor) or numel(v) == 0:
        return ZERO
    groups = 1 if dim == -1 or v.dim() == 0 else int(v.shape[dim])
    return 3 * numel(v) + groups, 0


@register(*aten("one_hot"))
def one_hot_ops(args: Args, out: Any) -> Count:
    """2 * (n - 1) for n indices: the min and max that validate them (the scatter is free).

    NB: this is what the CPU lowering dispatches; on meta torch compares every index with every
    class instead, which no_grad then counts.
    """
    n = numel(args.first())
    return (2 * (n - 1) if n else 0), 0
