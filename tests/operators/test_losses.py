"""Loss operators (``operators/losses.py``), forward and backward, and the loss modules of
``torch.nn`` profiled end to end."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.operators._common import Count
from moduleprofiler.operators.registry import OperatorCounter
from tests.operators.helpers import count, on_meta

N, C = 4, 5  # n = 20 loss elements
torch.manual_seed(0)
X = torch.randn(N, C)
Y = torch.randn(N, C)
P = torch.rand(N, C) * 0.8 + 0.1  # probabilities for BCE
T = torch.rand(N, C)
SIGNS = torch.sign(torch.randn(N, C))
LABELS = torch.tensor([1, 0, 4, 2])
W = torch.rand(C)


def backward_count(loss_fn: Callable[[Tensor], Tensor], x: Tensor) -> Count:
    """(ops, macs) of the backward of ``loss_fn(x)`` only (x a fresh leaf requiring grad)."""
    leaf = x.detach().clone().requires_grad_()
    loss = loss_fn(leaf)
    counter = OperatorCounter()
    with counter:
        loss.backward()
    assert not counter.missing, dict(counter.missing)
    return counter.ops, counter.macs


# -- forward formulas --------------------------------------------------------------------------

FORWARD: list[tuple[str, Callable[[], Any], int]] = [
    # (x - y)²: 2 per element; 'mean' adds n = 20
    ("mse", lambda: F.mse_loss(X, Y), 2 * 20 + 20),
    ("mse_sum", lambda: F.mse_loss(X, Y, reduction="sum"), 2 * 20 + 19),
    ("mse_none", lambda: F.mse_loss(X, Y, reduction="none"), 2 * 20),
    # broadcast target (C,) against (N, C): the loss has 20 elements
    ("mse_broadcast", lambda: F.mse_loss(X, Y[0].expand(N, C)), 2 * 20 + 20),
    ("l1", lambda: F.l1_loss(X, Y), 2 * 20 + 20),  # sub, abs, mean
    ("smooth_l1", lambda: F.smooth_l1_loss(X, Y, beta=0.5), 6 * 20 + 20),
    ("huber", lambda: F.huber_loss(X, Y), 5 * 20 + 20),
    ("soft_margin", lambda: F.soft_margin_loss(X, SIGNS), 4 * 20 + 20),
    ("bce", lambda: F.binary_cross_entropy(P, T), 8 * 20 + 20),
    ("bce_weight", lambda: F.binary_cross_entropy(P, T, weight=W.expand(N, C)), 9 * 20 + 20),
    # (1 - y) * x - log_sigmoid(x): 3 + 3 per element
    ("bce_logits", lambda: F.binary_cross_entropy_with_logits(X, T), 6 * 20 + 20),
    # pos_weight: ((p - 1) * y + 1) * log_sigmoid: 4 more; weight: 1 more
    ("bce_logits_weights",
     lambda: F.binary_cross_entropy_with_logits(X, T, weight=W, pos_weight=W), 11 * 20 + 20),
    # 4 targets: 4 ignore_index tests, 'mean' sums losses (3) and weights (3) and divides (1)
    ("nll", lambda: F.nll_loss(X, LABELS), 4 + 3 + 3 + 1),
    ("nll_weight", lambda: F.nll_loss(X, LABELS, weight=W), 4 + 4 + 3 + 3 + 1),
    ("nll_sum", lambda: F.nll_loss(X, LABELS, reduction="sum"), 4 + 3),
    ("nll_none", lambda: F.nll_loss(X, LABELS, reduction="none"), 4),
    # nll_loss2d: 2 * 3 * 3 = 18 targets: 18 + 17 + 17 + 1
    ("nll_2d", lambda: F.nll_loss(torch.randn(2, C, 3, 3), torch.zeros(2, 3, 3, dtype=torch.long)),
     18 + 17 + 17 + 1),
    # log_softmax rows * 4D = 4 * 20 = 80, then the NLL's 11
    ("cross_entropy", lambda: F.cross_entropy(X, LABELS), 80 + 11),
    # 4 rows * (5 - 1) hinge terms * 4 ops, mean over 4 rows
    ("multi_margin", lambda: F.multi_margin_loss(X, LABELS), 16 * 4 + 4),
    # p = 2 (a square) and a weight: 6 per term
    ("multi_margin_p2_weight", lambda: F.multi_margin_loss(X, LABELS, p=2, weight=W), 16 * 6 + 4),
    # each row lists 2 labels (3, 0) before -1: 2 * 3 pairs, 4 ops each; 24 pairs
    ("multilabel_margin",
     lambda: F.multilabel_margin_loss(X, torch.tensor([[3, 0, -1, 1, 1]] * N)), 24 * 4 + 4),
    # a label listed twice is paired twice: 2 * (5 - 1 distinct) = 8 pairs per row
    ("multilabel_margin_repeat",
     lambda: F.multilabel_margin_loss(X, torch.tensor([[3, 3, -1, 1, 1]] * N)), 32 * 4 + 4),
]


@pytest.mark.parametrize("fn,expected", [(fn, e) for _, fn, e in FORWARD],
                         ids=[name for name, _, _ in FORWARD])
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_loss_forward(fn: Callable[[], Any], expected: int, mode: str) -> None:
    # inference_mode sees the composites whole (cross_entropy_loss, nll_loss_nd, l1_loss, ...),
    # no_grad their parts: both count the same
    assert count(fn, mode=mode) == (expected, 0)


COMPOSITES: list[tuple[str, Callable[[], Any]]] = [
    ("kl_div", lambda: F.kl_div(F.log_softmax(X, 1), F.softmax(Y, 1), reduction="batchmean")),
    ("kl_div_log_target", lambda: F.kl_div(X, Y, reduction="sum", log_target=True)),
    ("margin_ranking", lambda: F.margin_ranking_loss(X[:, 0], X[:, 1], SIGNS[:, 0])),
    ("hinge_embedding", lambda: F.hinge_embedding_loss(X, SIGNS)),
    ("cosine_embedding", lambda: F.cosine_embedding_loss(X, Y, SIGNS[:, 0])),
    ("triplet_margin", lambda: F.triplet_margin_loss(X, Y, -Y, swap=True)),
    ("poisson_nll", lambda: F.poisson_nll_loss(X, T)),
    ("poisson_nll_full", lambda: F.poisson_nll_loss(P, T * 3, log_input=False, full=True)),
    ("gaussian_nll", lambda: F.gaussian_nll_loss(X, Y, P)),
    ("multilabel_soft_margin", lambda: F.multilabel_soft_margin_loss(X, (T > 0.5).float())),
    ("cross_entropy_probabilities", lambda: F.cross_entropy(X, F.softmax(Y, 1))),
    ("cross_entropy_smoothing", lambda: F.cross_entropy(X, LABELS, label_smoothing=0.1)),
]


@pytest.mark.parametrize("fn", [fn for _, fn in COMPOSITES], ids=[n for n, _ in COMPOSITES])
def test_composite_losses_count_the_same_on_every_path(fn: Callable[[], Any]) -> None:
    # these lower to element-wise operators (already priced); inference_mode sees the
    # composite whole and counts its decomposition
    ops, macs = count(fn, mode="no_grad")
    assert ops > 0 and macs == 0
    assert count(fn, mode="inference_mode") == (ops, macs)
    assert count(fn, mode="grad") == (ops, macs)


def test_kl_div_counts_its_element_wise_parts() -> None:
    # log_target: exp(t) * (t - x): exp, subtract, multiply = 3 per element, sum 19
    assert count(lambda: F.kl_div(X, Y, reduction="sum", log_target=True)) == (3 * 20 + 19, 0)


def test_multilabel_margin_on_meta_assumes_the_most_pairs() -> None:
    target = torch.tensor([[1, -1, 0, 0, 0]] * N)
    # real: 1 label, 4 others: 4 pairs per row, 16 in all
    assert count(F.multilabel_margin_loss, X, target) == (16 * 4 + 4, 0)
    # meta: labels unknown, C // 2 = 2 labels per row: 2 * 3 = 6 pairs, 24 in all
    assert count(F.multilabel_margin_loss, on_meta(X), on_meta(target)) == (24 * 4 + 4, 0)


# -- CTC ---------------------------------------------------------------------------------------

STEPS, BATCH = 6, 2
LOG_PROBS = torch.randn(STEPS, BATCH, C).log_softmax(2)
CTC_TARGETS = torch.tensor([[1, 2, 0], [3, 1, 4]])  # padded; lengths 2 and 3
# sample 0: T = 6, S' = 2 * 2 + 1 = 5: 13 * 5 * 5 + 8 = 333
# sample 1: T = 4, S' = 2 * 3 + 1 = 7: 13 * 3 * 7 + 8 = 281
CTC_FORWARD = 333 + 281
# backward, per sample 13 * (T - 1) * S' + 9 * T * S' + 6 * T * C:
# 325 + 270 + 180 = 775 and 273 + 252 + 120 = 645
CTC_BACKWARD = 775 + 645


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("lengths", [torch.tensor, list], ids=["tensors", "lists"])
def test_ctc_loss(mode: str, lengths: Callable[[list[int]], Any]) -> None:
    loss = lambda: F.ctc_loss(LOG_PROBS, CTC_TARGETS, lengths([6, 4]), lengths([2, 3]))  # noqa: E731
    # 'mean': clamp and divide per sample, then the mean of 2: 3 * 2 = 6
    assert count(loss, mode=mode) == (CTC_FORWARD + 6, 0)


def test_ctc_loss_sum_with_zero_infinity() -> None:
    # zero_infinity: one comparison with inf per sample (2); 'sum' of 2: 1 add
    loss = lambda: F.ctc_loss(LOG_PROBS, CTC_TARGETS, torch.tensor([6, 4]),  # noqa: E731
                              torch.tensor([2, 3]), reduction="sum", zero_infinity=True)
    assert count(loss) == (CTC_FORWARD + 2 + 1, 0)


def test_ctc_loss_backward() -> None:
    # int lists reach _ctc_loss.default, tensors _ctc_loss.Tensor: the same count
    steps: Any = [6, 4]
    targets: Any = [2, 3]
    loss = lambda lp: F.ctc_loss(lp, CTC_TARGETS, steps, targets, reduction="sum")  # noqa: E731
    ops, _ = backward_count(loss, LOG_PROBS)
    assert ops == CTC_BACKWARD


# -- backward formulas -------------------------------------------------------------------------

BACKWARD: list[tuple[str, Callable[[Tensor], Tensor], Tensor, int]] = [
    # 2 * (x - y) * g: 3 per element, the 1/n of 'mean' folded into the 2
    ("mse", lambda x: F.mse_loss(x, Y), X, 3 * 20),
    ("smooth_l1", lambda x: F.smooth_l1_loss(x, Y), X, 5 * 20),
    ("huber", lambda x: F.huber_loss(x, Y, reduction="sum"), X, 5 * 20),
    # -y * z / (1 + z) * g with z = exp(-y x): 6, and the 1/n of 'mean': 7
    ("soft_margin", lambda x: F.soft_margin_loss(x, SIGNS), X, 7 * 20),
    ("soft_margin_sum", lambda x: F.soft_margin_loss(x, SIGNS, reduction="sum"), X, 6 * 20),
    # g * (x - y) / max(x (1 - x), eps): 6, and the 1/n of 'mean': 7
    ("bce", lambda p: F.binary_cross_entropy(p, T), P, 7 * 20),
    ("bce_weight_sum", lambda p: F.binary_cross_entropy(p, T, weight=W.expand(N, C),
                                                        reduction="sum"), P, 7 * 20),
    # 4 targets: 4 ignore tests, one divide by the total weight
    ("nll", lambda x: F.nll_loss(x, LABELS), X, 4 + 1),
    ("nll_weight_sum", lambda x: F.nll_loss(x, LABELS, weight=W, reduction="sum"), X, 8),
    # 16 hinge terms: margin term (2), test, subtract from the target's gradient
    ("multi_margin", lambda x: F.multi_margin_loss(x, LABELS), X, 16 * 4),
    # 'none': then every gradient element times its row's gradient (20)
    ("multi_margin_none", lambda x: F.multi_margin_loss(x, LABELS, reduction="none").sum(), X,
     16 * 4 + 20),
    # 24 pairs * 5, then 20 multiplies by the incoming gradient
    ("multilabel_margin",
     lambda x: F.multilabel_margin_loss(x, torch.tensor([[3, 0, -1, 1, 1]] * N)), X, 24 * 5 + 20),
]


@pytest.mark.parametrize("fn,x,expected", [(fn, x, e) for _, fn, x, e in BACKWARD],
                         ids=[name for name, _, _, _ in BACKWARD])
def test_loss_backward(fn: Callable[[Tensor], Tensor], x: Tensor, expected: int) -> None:
    assert backward_count(fn, x) == (expected, 0)


def test_cross_entropy_backward() -> None:
    # nll_loss_backward 4 + 1, then the log_softmax gradient 4 per element (80)
    assert backward_count(lambda x: F.cross_entropy(x, LABELS), X) == (5 + 80, 0)


def test_bce_with_logits_backward_is_element_wise() -> None:
    # its backward dispatches sigmoid (3), sub, mul (1 each) and the divide of 'mean' (1)
    assert backward_count(lambda x: F.binary_cross_entropy_with_logits(x, T), X) == (6 * 20, 0)


def _bce_backward_with_target_grad(weight: Tensor | None) -> Count:
    """(ops, macs) of the backward of BCE whose prediction and target both require grad."""
    p, t = P.clone().requires_grad_(), T.clone().requires_grad_()
    loss = F.binary_cross_entropy(p, t, weight=weight)
    counter = OperatorCounter()
    with counter:
        loss.backward()
    assert not counter.missing, dict(counter.missing)
    return counter.ops, counter.macs


def test_bce_backward_with_a_target_that_requires_grad() -> None:
    # d/dp: binary_cross_entropy_backward, 6 per element + 1 for 'mean': 7 * 20 = 140.
    # d/dt = -logit(p) * g / n: logit 3 per element (1 - p, divide, log: 60), neg_ free,
    # mul by the incoming gradient (20), div_ by n for 'mean' (20): 100. Total 240
    assert _bce_backward_with_target_grad(None) == (140 + 100, 0)
    # with a weight: + 1 per element in binary_cross_entropy_backward (20), and the target's
    # gradient is multiplied by it (mul, 20)
    assert _bce_backward_with_target_grad(W.expand(N, C)) == (240 + 20 + 20, 0)


def test_bce_loss_module_with_a_target_that_requires_grad_is_complete() -> None:
    class Bce(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.loss = nn.BCELoss()

        def forward(self, p: Tensor, t: Tensor) -> Tensor:
            return self.loss(p, t)  # type: ignore[no-any-return]

    inputs = (P.clone().requires_grad_(), T.clone().requires_grad_())
    profile = ModuleProfiler().profile(Bce(), inputs, backward=True, loss_fn=lambda out: out)
    assert profile.backward_unsupported_ops == {} and profile.complete
    # forward 8 * 20 + 20 (see FORWARD); backward 240 (test above)
    assert (profile.total_ops, profile.total_backward_ops) == (180, 240)


# -- the loss modules, profiled ----------------------------------------------------------------

class LossModel(nn.Module):
    """A Linear(3, C) head, an optional transform of its output, and a loss with its targets."""

    def __init__(self, loss: nn.Module, targets: Callable[[], tuple[Any, ...]],
                 transform: Callable[[Tensor], Any] | None = None) -> None:
        super().__init__()
        self.head = nn.Linear(3, C)
        self.loss = loss
        self.targets = targets
        self.transform = transform

    def forward(self, x: Tensor) -> Tensor:
        y = self.head(x)
        inputs = self.transform(y) if self.transform else y
        inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        return self.loss(*inputs, *self.targets())  # type: ignore[no-any-return]


def _nll_loss_2d() -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # deprecated alias of NLLLoss
        return nn.NLLLoss2d()


def _labels() -> tuple[Tensor]:
    return (LABELS,)


LOSS_MODELS: dict[str, LossModel] = {
    "CrossEntropyLoss": LossModel(nn.CrossEntropyLoss(), _labels),
    "NLLLoss": LossModel(nn.NLLLoss(), _labels, lambda y: F.log_softmax(y, 1)),
    "MSELoss": LossModel(nn.MSELoss(), lambda: (Y,)),
    "L1Loss": LossModel(nn.L1Loss(), lambda: (Y,)),
    "SmoothL1Loss": LossModel(nn.SmoothL1Loss(), lambda: (Y,)),
    "HuberLoss": LossModel(nn.HuberLoss(), lambda: (Y,)),
    "BCELoss": LossModel(nn.BCELoss(), lambda: (T,), torch.sigmoid),
    "BCEWithLogitsLoss": LossModel(nn.BCEWithLogitsLoss(pos_weight=W), lambda: (T,)),
    "KLDivLoss": LossModel(nn.KLDivLoss(reduction="batchmean"), lambda: (F.softmax(Y, 1),),
                           lambda y: F.log_softmax(y, 1)),
    "MarginRankingLoss": LossModel(nn.MarginRankingLoss(), lambda: (SIGNS[:, 0],),
                                   lambda y: (y[:, 0], y[:, 1])),
    "HingeEmbeddingLoss": LossModel(nn.HingeEmbeddingLoss(), lambda: (SIGNS,)),
    "SoftMarginLoss": LossModel(nn.SoftMarginLoss(), lambda: (SIGNS,)),
    "MultiLabelMarginLoss": LossModel(nn.MultiLabelMarginLoss(),
                                      lambda: (torch.tensor([[3, 0, -1, 1, 1]] * N),)),
    "MultiLabelSoftMarginLoss": LossModel(nn.MultiLabelSoftMarginLoss(),
                                          lambda: ((T > 0.5).float(),)),
    "MultiMarginLoss": LossModel(nn.MultiMarginLoss(p=2, weight=W), _labels),
    "CosineEmbeddingLoss": LossModel(nn.CosineEmbeddingLoss(), lambda: (Y, SIGNS[:, 0])),
    "TripletMarginLoss": LossModel(nn.TripletMarginLoss(), lambda: (Y, -Y)),
    "TripletMarginWithDistanceLoss": LossModel(nn.TripletMarginWithDistanceLoss(),
                                               lambda: (Y, -Y)),
    "PoissonNLLLoss": LossModel(nn.PoissonNLLLoss(), lambda: (T,)),
    "GaussianNLLLoss": LossModel(nn.GaussianNLLLoss(), lambda: (Y, P)),
    "CTCLoss": LossModel(nn.CTCLoss(), lambda: (torch.tensor([[1, 2]]), torch.tensor([N]),
                                                torch.tensor([2])),
                         lambda y: y.view(N, 1, C).log_softmax(2)),
    "NLLLoss2d": LossModel(_nll_loss_2d(), lambda: (LABELS.view(N, 1, 1),),
                           lambda y: F.log_softmax(y, 1).view(N, C, 1, 1)),
}
HAS_LINEAR_CE = hasattr(nn, "LinearCrossEntropyLoss")
"""nn.LinearCrossEntropyLoss is new in torch 2.14; its tests skip on older torch."""
needs_linear_ce = pytest.mark.skipif(not HAS_LINEAR_CE,
                                     reason="nn.LinearCrossEntropyLoss is new in torch 2.14")
if HAS_LINEAR_CE:
    LOSS_MODELS.update({
        "LinearCrossEntropyLoss": LossModel(nn.LinearCrossEntropyLoss(C, 7, bias=True), _labels),
        "LinearCrossEntropyLoss_chunked": LossModel(
            nn.LinearCrossEntropyLoss(C, 7, options=nn.LinearCrossEntropyOptions()), _labels),
        "LinearCrossEntropyLoss_chunked_none": LossModel(
            nn.LinearCrossEntropyLoss(C, 7, reduction="none",
                                      options=nn.LinearCrossEntropyOptions()), _labels),
    })


def test_every_loss_of_torch_nn_is_profiled() -> None:
    # guards the list against new losses upstream (AdaptiveLogSoftmaxWithLoss: see below)
    losses = {name for name in dir(nn) if isinstance(getattr(nn, name), type)
              and issubclass(getattr(nn, name), nn.modules.loss._Loss)}
    assert losses <= set(LOSS_MODELS)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name", sorted(LOSS_MODELS))
def test_loss_module_profiles_completely(name: str, backward: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # KLDivLoss' reduction notice
        profile = ModuleProfiler().profile(LOSS_MODELS[name], torch.randn(N, 3),
                                           backward=backward)
    assert profile.complete, (profile.unsupported_ops, profile.unsupported)
    assert profile.total_ops > 0


# -- linear cross-entropy ----------------------------------------------------------------------

def _linear_ce(chunked: bool, **kwargs: Any) -> Any:
    torch.manual_seed(0)
    options = nn.LinearCrossEntropyOptions() if chunked else None
    return nn.LinearCrossEntropyLoss(C, 7, options=options, **kwargs)


# 4 rows, 5 features, 7 classes: logits 28 * (2 * 5 - 1) = 252, log_softmax 4 * 28 = 112,
# NLL 4 + 3 + 3 + 1 = 11; macs 28 * 5 = 140
LINEAR_CE = 252 + 112 + 11


@needs_linear_ce
@pytest.mark.parametrize("chunked", [False, True], ids=["reference", "chunked"])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_linear_cross_entropy_forward(chunked: bool, reduction: str) -> None:
    loss = _linear_ce(chunked, reduction=reduction)
    # 'none': NLL 4 only
    expected = LINEAR_CE if reduction == "mean" else 252 + 112 + 4
    assert count(loss, X, LABELS) == (expected, 140)


@needs_linear_ce
def test_chunked_linear_cross_entropy_returns_its_gradients_with_the_forward() -> None:
    x = X.clone().requires_grad_()
    counter = OperatorCounter()
    with counter:
        total = _linear_ce(True)(x, LABELS)
    # the forward and the reference's backward: NLL 4 + 1, log_softmax 112, input gradient
    # 20 * (2 * 7 - 1) = 260 (140 macs), weight gradient 35 * (2 * 4 - 1) = 245 (140 macs)
    assert (counter.ops, counter.macs) == (LINEAR_CE + 5 + 112 + 260 + 245, 3 * 140)
    counter = OperatorCounter()
    with counter:
        total.backward()
    # autograd then scales the 20 + 35 stored gradient elements by the incoming gradient
    assert (counter.ops, counter.macs) == (55, 0)


def test_mse_loss_module_counts() -> None:
    profile = ModuleProfiler().profile(LOSS_MODELS["MSELoss"], torch.randn(N, 3), backward=True)
    # Linear(3, 5) on 4 rows: 4 * 5 * (2 * 3 - 1) + 20 = 120; MSE 2 * 20 + 20 = 60
    assert profile.total_ops == 120 + 60
    # mse_loss_backward 3 * 20 = 60; the head's weight gradient (5, 4) @ (4, 3):
    # 15 * (2 * 4 - 1) = 105, its bias gradient 5 * (4 - 1) = 15
    assert profile.total_backward_ops == 60 + 105 + 15


class AdaptiveHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(3, 16)
        # div_value 2: tail widths 16 // 2 = 8 and 16 // 4 = 4 (none of zero width)
        self.loss = nn.AdaptiveLogSoftmaxWithLoss(16, 20, [5, 10], div_value=2.0)

    def forward(self, x: Tensor) -> Tensor:
        return self.loss(self.head(x), torch.tensor([0, 7, 15, 3])).loss  # type: ignore[no-any-return]


def test_adaptive_log_softmax_with_loss_profiles_completely() -> None:
    # not a _Loss subclass; its clusters run gathers, log_softmax and nll-style selections
    model = AdaptiveHead()
    for backward in (False, True):
        assert ModuleProfiler().profile(model, torch.randn(N, 3), backward=backward).complete
