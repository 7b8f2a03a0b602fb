"""Loss functions of ``torch.nn``: the aten operators they reach, forward and backward.

Loss modules (``nn.MSELoss``, ``nn.CrossEntropyLoss``, ...) have no module formula; they are
counted by these operator formulas, in the convention of ``docs/conventions.md``: one op per add,
multiply, divide, comparison or elementary function, ``macs`` 0 throughout.

``n`` is the number of loss elements (input and target broadcast together). The reduction adds
``n - 1`` adds for ``'sum'`` and ``n`` (the adds and one divide) for ``'mean'``, as the
reduction operators count. In a gradient, the ``1 / n`` of ``'mean'`` is one more multiply per
element, unless the gradient already multiplies by a constant it folds into (MSE's 2, smooth
L1's ``1 / beta``, Huber's ``delta``, NLL's ``-1 / total_weight``).

Many losses are composites (cross-entropy, NLL, L1, KL divergence, the margin and embedding
losses, Poisson NLL) that reach the dispatcher as the operators below or as element-wise ones;
under ``inference_mode`` they arrive whole and are counted as their decomposition, so both paths
agree. Gaussian NLL, BCE-with-logits' backward and multilabel soft margin only ever dispatch
element-wise operators.

NB on data: a loss with a data-dependent branch (smooth L1, Huber, the margin losses) counts
the dearer branch for every element. Two losses depend on their targets' values: multilabel
margin (how many labels a row lists) and CTC (each sample's input and target length). On real
tensors they are read; on the meta device the maxima the shapes allow are assumed (see each
formula).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.formulas.activation import PER_ELEMENT
from moduleprofiler.operators._common import (
    ZERO,
    Args,
    Count,
    aten,
    by_decomposition,
    named,
    numel,
    register,
)

# at::Reduction
NONE, MEAN, SUM = 0, 1, 2


def reduction_ops(n: int, reduction: Any) -> int:
    """0 for 'none', n - 1 adds for 'sum', n for 'mean' (n - 1 adds and one divide)."""
    if n <= 0 or reduction == NONE:
        return 0
    return n if reduction == MEAN else n - 1


def _loss_numel(args: Args) -> int:
    """Elements of the loss: the input and the target broadcast together."""
    x, target = args.tensor("self"), args.tensor("target")
    if isinstance(x, Tensor) and target is not None:
        return math.prod(torch.broadcast_shapes(x.shape, target.shape))  # type: ignore[no-untyped-call]
    return numel(x)


def _pointwise_loss(per_element: int) -> Any:
    def formula(args: Args, out: Any) -> Count:
        n = _loss_numel(args)
        return per_element * n + reduction_ops(n, args.get("reduction", MEAN)), 0

    return named(formula, None, f"{per_element} * n + reduction.")


def _pointwise_gradient(per_element: int, mean_extra: int) -> Any:
    def formula(args: Args, out: Any) -> Count:
        per = per_element + (mean_extra if args.get("reduction", MEAN) == MEAN else 0)
        return per * _loss_numel(args), 0

    extra = f", {per_element + mean_extra} with 'mean'" if mean_extra else ""
    return named(formula, None, f"{per_element} * n{extra}.")


# -- element-wise losses -----------------------------------------------------------------------

MSE = 2            # (x - y)², a subtract and a multiply
MSE_BACKWARD = 3   # 2 * (x - y) * g: subtract, scale by 2 (or 2 / n), times the gradient
# NB: smooth L1 and Huber branch on |x - y|; the dearer branch is counted for every element.
SMOOTH_L1 = 6      # z = |x - y| (2), z < beta (1), 0.5 * z * z / beta (3)
HUBER = 5          # z = |x - y| (2), z < delta (1), 0.5 * z * z (2) [or delta * (z - delta/2)]
# x - y (1), two comparisons pick the branch (2), scale by norm / beta (or delta) (1), times g (1)
SMOOTH_L1_BACKWARD = HUBER_BACKWARD = 5
SOFT_MARGIN = 4            # log(1 + exp(-y * x)): multiply, exp, add, log
SOFT_MARGIN_BACKWARD = 6   # z = exp(-y x) (2), -y * z / (1 + z) (3), times g (1)
BCE = 8  # (y - 1) * max(log1p(-x), -100) - y * max(log(x), -100): 2 logs, 2 max, 2 mul, 2 sub
BCE_BACKWARD = 6  # g * (x - y) / max(x * (1 - x), eps): 2 subtracts, 2 multiplies, max, divide
LOG_SIGMOID = PER_ELEMENT[nn.LogSigmoid]
BCE_LOGITS = 3 + LOG_SIGMOID    # (1 - y) * x - log_sigmoid(x)
BCE_LOGITS_POS_WEIGHT = 4       # ((p - 1) * y + 1) * log_sigmoid(x): 3 ops, and the multiply

register(*aten("mse_loss"))(_pointwise_loss(MSE))
register(*aten("smooth_l1_loss"))(_pointwise_loss(SMOOTH_L1))
register(*aten("huber_loss"))(_pointwise_loss(HUBER))
register(*aten("soft_margin_loss"))(_pointwise_loss(SOFT_MARGIN))
register(*aten("mse_loss_backward"))(_pointwise_gradient(MSE_BACKWARD, 0))
register(*aten("smooth_l1_loss_backward"))(_pointwise_gradient(SMOOTH_L1_BACKWARD, 0))
register(*aten("huber_loss_backward"))(_pointwise_gradient(HUBER_BACKWARD, 0))
register(*aten("soft_margin_loss_backward"))(_pointwise_gradient(SOFT_MARGIN_BACKWARD, 1))


@register(*aten("binary_cross_entropy"))
def binary_cross_entropy_ops(args: Args, out: Any) -> Count:
    """n * 8 (+ n with a weight) + reduction."""
    n = _loss_numel(args)
    per = BCE + int(args.tensor("weight") is not None)
    return per * n + reduction_ops(n, args.get("reduction", MEAN)), 0


@register(*aten("binary_cross_entropy_backward"))
def binary_cross_entropy_backward_ops(args: Args, out: Any) -> Count:
    """n * 6, + n with a weight, + n with 'mean'."""
    per = (BCE_BACKWARD + int(args.tensor("weight") is not None)
           + int(args.get("reduction", MEAN) == MEAN))
    return per * _loss_numel(args), 0


@register(*aten("binary_cross_entropy_with_logits"))
def binary_cross_entropy_with_logits_ops(args: Args, out: Any) -> Count:
    """n * 6 (log_sigmoid 3, 1 - y, * x, -), + 4n with pos_weight, + n with weight, + reduction.

    Its backward dispatches element-wise operators (sigmoid, sub, mul), counted as those.
    """
    n = _loss_numel(args)
    per = (BCE_LOGITS + BCE_LOGITS_POS_WEIGHT * int(args.tensor("pos_weight") is not None)
           + int(args.tensor("weight") is not None))
    return per * n + reduction_ops(n, args.get("reduction", MEAN)), 0


# -- negative log likelihood -------------------------------------------------------------------
#
# The kernel picks -x[i, target[i]] per target (a gather and a negation: free), after testing
# the target against ``ignore_index`` (1 op). 'mean' divides the sum of the losses by the sum of
# the weights (the count of targets not ignored when there is no weight).

def nll_forward_ops(targets: int, weighted: bool, reduction: Any) -> int:
    """N * (1 + weighted) + (N - 1 for 'sum'; 2 * (N - 1) + 1 for 'mean')."""
    if targets == 0:
        return 0
    ops = targets * (1 + int(weighted))
    if reduction == SUM:
        ops += targets - 1
    elif reduction == MEAN:
        ops += 2 * (targets - 1) + 1
    return ops


def nll_backward_ops(targets: int, weighted: bool, reduction: Any) -> int:
    """N * (1 + weighted), + 1 for 'mean' (g / total_weight, once)."""
    if targets == 0:
        return 0
    return targets * (1 + int(weighted)) + int(reduction == MEAN)


@register(*aten("nll_loss_forward", "nll_loss2d_forward"))
def nll_loss_forward_ops(args: Args, out: Any) -> Count:
    """N * (1 + weighted) + (N - 1 for 'sum'; 2 * (N - 1) + 1 for 'mean'), N = numel(target)."""
    return nll_forward_ops(numel(args.tensor("target")), args.tensor("weight") is not None,
                           args.get("reduction", MEAN)), 0


@register(*aten("nll_loss_backward", "nll_loss2d_backward"))
def nll_loss_backward_ops(args: Args, out: Any) -> Count:
    """N * (1 + weighted), + 1 for 'mean' (g / total_weight, once)."""
    return nll_backward_ops(numel(args.tensor("target")), args.tensor("weight") is not None,
                            args.get("reduction", MEAN)), 0


# -- margin losses over classes ----------------------------------------------------------------

def _rows_classes(x: Any) -> tuple[int, int]:
    """(rows, C) of a (C,) or (N, C) input."""
    if not isinstance(x, Tensor) or x.dim() == 0:
        return (1, 1) if isinstance(x, Tensor) else (0, 0)
    classes = int(x.shape[-1])
    return (numel(x) // classes if classes else 0), classes


def _multi_margin_terms(args: Args) -> tuple[int, int]:
    """(rows, rows * (C - 1)): the hinge terms, one per class other than the target."""
    rows, classes = _rows_classes(args.tensor("self"))
    return rows, rows * max(classes - 1, 0)


def _multi_margin_extra(args: Args) -> int:
    """+1 per term for p = 2 (a square) and +1 with a class weight."""
    return int(args.number("p", 1.0) == 2.0) + int(args.tensor("weight") is not None)


@register(*aten("multi_margin_loss"))
def multi_margin_loss_ops(args: Args, out: Any) -> Count:
    """rows * (C - 1) * (4 + [p = 2] + [weight]) + reduction over rows.

    Per class i != y: margin - x[y] + x[i] (2), max(0, .) (1), the square (p = 2), the weight,
    and the add into the row's sum; per row one add fewer and a divide by C.
    """
    rows, terms = _multi_margin_terms(args)
    return terms * (4 + _multi_margin_extra(args)) + reduction_ops(
        rows, args.get("reduction", MEAN)), 0


@register(*aten("multi_margin_loss_backward"))
def multi_margin_loss_backward_ops(args: Args, out: Any) -> Count:
    """rows * (C - 1) * (4 + [p = 2] + [weight]), + numel with reduction 'none'.

    Per class i != y: the margin term again (2), the test (1), 2 * z * g (p = 2), the weight,
    and the subtract from the target's gradient; with 'none' every gradient element is then
    multiplied by its row's incoming gradient.
    """
    _, terms = _multi_margin_terms(args)
    ops = terms * (4 + _multi_margin_extra(args))
    if args.get("reduction", MEAN) == NONE:
        ops += numel(args.tensor("self"))
    return ops, 0


def multilabel_pairs(target: Tensor | None, classes: int) -> int:
    """Sum over rows of (labels listed) * (classes not labelled): the hinge terms computed.

    A row's labels are its target entries before the first -1. NB: on the meta device the
    labels are unknown and every row is taken to list C // 2 distinct labels, the most terms a
    row can have (C²/4).
    """
    if target is None or target.numel() == 0 or classes == 0:
        return 0
    rows = target.numel() // classes
    if target.device.type == "meta":
        half = classes // 2
        return rows * half * (classes - half)
    labels = target.detach().to("cpu", torch.long).reshape(rows, classes)
    listed = (labels >= 0).long().cumprod(dim=1).bool()
    marked = torch.zeros(rows, classes, dtype=torch.bool)
    row_index = torch.arange(rows).unsqueeze(1).expand(rows, classes)
    marked[row_index[listed], labels[listed]] = True
    pairs = listed.sum(dim=1) * (classes - marked.sum(dim=1))
    return int(pairs.sum())


@register(*aten("multilabel_margin_loss_forward", "multilabel_margin_loss"))
def multilabel_margin_loss_ops(args: Args, out: Any) -> Count:
    """4 * pairs + reduction over rows; pairs = sum of (labels) * (C - labels) over rows.

    Per pair (label j, other class i): 1 - (x[j] - x[i]) (2), max(0, .) (1) and the add into the
    row's sum; per row one add fewer and a divide by C.
    """
    rows, classes = _rows_classes(args.tensor("self"))
    pairs = multilabel_pairs(args.tensor("target"), classes)
    return 4 * pairs + reduction_ops(rows, args.get("reduction", MEAN)), 0


@register(*aten("multilabel_margin_loss_backward"))
def multilabel_margin_loss_backward_ops(args: Args, out: Any) -> Count:
    """5 * pairs + numel: per pair the term again (2), the test (1), two accumulates (2); then
    each gradient element times the incoming gradient."""
    _, classes = _rows_classes(args.tensor("self"))
    pairs = multilabel_pairs(args.tensor("target"), classes)
    return 5 * pairs + numel(args.tensor("self")), 0


# -- connectionist temporal classification -----------------------------------------------------
#
# The forward (alpha) recursion runs over T timesteps and S' = 2L + 1 extended-label states of
# each sample (L its target length): every step is a log-sum-exp of the three predecessors
# (2 comparisons for the max, 3 subtracts, 3 exps, 2 adds, 1 log, 1 add of the max back) plus
# the emission's log-probability: 13 ops. The loss is a log-sum-exp of the two final states (8).
# The backward runs the same recursion for beta, then per (t, s) adds alpha and beta and log-adds
# the result into its class's accumulator (1 + 8), and per (t, c) forms the gradient
# exp(lp) - exp(acc + nll - lp), times the incoming gradient (6).

CTC_STEP = 13
CTC_FINAL = 8
CTC_COMBINE = 9
CTC_GRADIENT = 6


def _lengths(value: Any) -> list[int] | None:
    """Per-sample lengths from an int list or a real tensor; ``None`` when unknown (meta)."""
    if isinstance(value, Tensor):
        if value.device.type == "meta":
            return None
        return [int(v) for v in value.reshape(-1).tolist()]
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return None


def ctc_shapes(args: Args, log_alpha: Tensor | None) -> tuple[list[tuple[int, int]], int]:
    """((T_b, S'_b) per sample, C). NB: lengths that cannot be read (tensors on meta) are the
    padded maxima: T of ``log_probs`` and S' of ``log_alpha`` (or of the padded targets)."""
    log_probs = args.tensor("log_probs")
    if log_probs is None or log_probs.dim() < 2:
        return [], 0
    steps, classes = int(log_probs.shape[0]), int(log_probs.shape[-1])
    batch = int(log_probs.shape[1]) if log_probs.dim() == 3 else 1
    inputs = _lengths(args.get("input_lengths")) or [steps] * batch
    targets = _lengths(args.get("target_lengths"))
    if targets is not None:
        states = [2 * length + 1 for length in targets]
    elif log_alpha is not None:
        states = [int(log_alpha.shape[-1])] * batch
    else:
        padded = args.tensor("targets")
        longest = 0 if padded is None else int(
            padded.shape[-1] if padded.dim() == 2 else padded.numel())
        states = [2 * longest + 1] * batch
    return list(zip(inputs, states, strict=False)), classes


def ctc_forward_ops(shapes: list[tuple[int, int]]) -> int:
    """Sum over samples of 13 * (T - 1) * S' + 8."""
    return sum(CTC_STEP * (steps - 1) * states + CTC_FINAL for steps, states in shapes if steps)


def ctc_backward_ops(shapes: list[tuple[int, int]], classes: int) -> int:
    """Sum over samples of 13 * (T - 1) * S' + 9 * T * S' + 6 * T * C."""
    return sum(CTC_STEP * (steps - 1) * states + CTC_COMBINE * steps * states
               + CTC_GRADIENT * steps * classes for steps, states in shapes if steps)


def _tensor_at(out: Any, index: int) -> Tensor | None:
    if isinstance(out, (tuple, list)) and len(out) > index and isinstance(out[index], Tensor):
        return out[index]
    return None


@register(*aten("_ctc_loss"))
def ctc_loss_forward_ops(args: Args, out: Any) -> Count:
    """Sum over samples of 13 * (T - 1) * (2L + 1) + 8 (the alpha recursion)."""
    shapes, _ = ctc_shapes(args, _tensor_at(out, 1))
    return ctc_forward_ops(shapes), 0


@register(*aten("_ctc_loss_backward"))
def ctc_loss_backward_ops(args: Args, out: Any) -> Count:
    """Sum over samples of 13 * (T - 1) * S' + 9 * T * S' + 6 * T * C (beta, gradient)."""
    shapes, classes = ctc_shapes(args, args.tensor("log_alpha"))
    return ctc_backward_ops(shapes, classes), 0


@register(*aten("_cudnn_ctc_loss"))
def cudnn_ctc_loss_ops(args: Args, out: Any) -> Count:
    """The forward and the backward formulas together: cuDNN returns the loss and its gradient
    from one call (the autograd backward then only multiplies by the incoming gradient)."""
    shapes, classes = ctc_shapes(args, None)
    return ctc_forward_ops(shapes) + ctc_backward_ops(shapes, classes), 0


@register(*aten("ctc_loss"))
def ctc_loss_ops(args: Args, out: Any) -> Count:
    """The composite ``ctc_loss`` as it lowers: ``_ctc_loss``, then B comparisons with
    ``zero_infinity``, and for 'mean' a clamp, a divide by the target length and the mean over B
    samples (3B), for 'sum' B - 1 adds."""
    shapes, _ = ctc_shapes(args, None)
    batch = len(shapes)
    ops = ctc_forward_ops(shapes) + batch * int(args.flag("zero_infinity"))
    reduction = args.get("reduction", MEAN)
    if reduction == MEAN:
        ops += 3 * batch
    elif reduction == SUM:
        ops += max(batch - 1, 0)
    return ops, 0


# -- linear cross-entropy ----------------------------------------------------------------------
#
# ``nn.LinearCrossEntropyLoss`` with ``options`` runs torch's chunked kernels, custom operators of
# the ``torch_nn`` namespace; without ``options`` it runs ``linear`` and ``cross_entropy``, counted
# by their operators. The chunked operators count what that reference counts. The scalar one
# also returns the gradients autograd will ask for (``compute_*_grad``): they are counted with
# it, as the reference's backward (the NLL and log-softmax gradients, the input and weight
# products, the bias sum); its autograd backward then only scales them (element-wise
# multiplies). The unreduced one returns the loss only; its backward dispatches aten operators.
# NB: label smoothing and probability targets add per-element work to the reference path that
# these counts leave out.

LOG_SOFTMAX = 4  # per logit, forward (rows * 4C) and backward


def _linear_cross_entropy(args: Args, reduction: Any, gradients: bool) -> Count:
    source, weight = args.tensor("input"), args.tensor("linear_weight")
    if source is None or weight is None or weight.dim() != 2 or numel(source) == 0:
        return ZERO
    classes, features = int(weight.shape[0]), int(weight.shape[1])
    rows = numel(source) // features
    logits = rows * classes
    bias, weighted = args.tensor("linear_bias") is not None, args.tensor("weight") is not None
    ops = logits * (2 * features - 1) + logits * int(bias) + LOG_SOFTMAX * logits
    ops += nll_forward_ops(rows, weighted, reduction)
    macs = logits * features
    if gradients and any(args.flag(f"compute_{name}_grad")
                         for name in ("input", "linear_weight", "linear_bias")):
        ops += nll_backward_ops(rows, weighted, reduction) + LOG_SOFTMAX * logits
        if args.flag("compute_input_grad"):
            ops, macs = ops + rows * features * (2 * classes - 1), macs + logits * features
        if args.flag("compute_linear_weight_grad"):
            ops, macs = ops + classes * features * (2 * rows - 1), macs + logits * features
        if args.flag("compute_linear_bias_grad"):
            ops += classes * (rows - 1)
    return ops, macs


def linear_cross_entropy_ops(args: Args, out: Any) -> Count:
    """linear (rows * C * (2 * in - 1), + rows * C with a bias) + log_softmax (rows * 4C) + NLL;
    macs = rows * C * in; plus the reference backward of the gradients it returns."""
    reduction = {"none": NONE, "mean": MEAN, "sum": SUM}.get(args.get("reduction"), MEAN)
    return _linear_cross_entropy(args, reduction, gradients=True)


def linear_cross_entropy_unreduced_ops(args: Args, out: Any) -> Count:
    """linear + log_softmax + NLL with reduction 'none'; macs = rows * C * in."""
    return _linear_cross_entropy(args, NONE, gradients=False)


try:  # registers the torch_nn:: operators (torch >= 2.14; a few milliseconds)
    import torch.nn.modules.linear_cross_entropy
except ImportError:  # pragma: no cover (older torch: no such loss)
    pass
for _name, _formula in (
    ("_linear_cross_entropy_batch_chunked", linear_cross_entropy_ops),
    ("_linear_cross_entropy_batch_chunked_no_reduction", linear_cross_entropy_unreduced_ops),
):
    if hasattr(torch.ops.torch_nn, _name):
        register(getattr(torch.ops.torch_nn, _name))(_formula)


# -- composites --------------------------------------------------------------------------------
#
# Under ``inference_mode`` these reach the dispatcher whole; elsewhere their parts do (the
# operators above, log_softmax, and element-wise operators). Counting the whole as its parts
# keeps both paths equal.
by_decomposition(*aten(
    "cross_entropy_loss", "nll_loss", "nll_loss_nd", "nll_loss2d", "l1_loss", "kl_div",
    "margin_ranking_loss", "hinge_embedding_loss", "cosine_embedding_loss",
    "triplet_margin_loss", "poisson_nll_loss",
))  # fmt: skip

