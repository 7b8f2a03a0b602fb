"""The one default loss (``moduleprofiler.loss.default_loss``) every backward pass uses."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from moduleprofiler import LossError, ProfilingError
from moduleprofiler.loss import default_loss


@dataclass
class Output:
    logits: torch.Tensor
    hidden: torch.Tensor


def test_default_loss_rule_in_order():
    t = torch.ones(2, requires_grad=True)
    scalar = (t * 4).sum()
    assert default_loss(scalar) is scalar  # 1. a scalar output is the loss
    # 2. a ".loss" / ["loss"] scalar wins over everything else in the output
    assert default_loss({"loss": (t * 3).sum(), "logits": t}).item() == 6.0
    assert default_loss(SimpleNamespace(loss=(t * 5).sum(), logits=t)).item() == 10.0
    # 3. else the sum of every floating tensor that requires grad: 2 * 2 + 2 * 3 = 10
    assert default_loss((t * 2, t * 3)).item() == 10.0
    assert default_loss(Output(logits=t * 1, hidden=t * 2)).item() == 6.0  # 2 + 4
    # tensors that need no grad, and integer tensors, are left out: 2 * 1 = 2
    assert default_loss([t * 1, torch.ones(3), torch.ones(2, dtype=torch.long)]).item() == 2.0


def test_a_hugging_face_style_output_differentiates_its_loss_alone():
    # return_dict=False: (loss, logits), the loss first, as the Trainer reads outputs[0].
    # The sum took loss + logits.sum(): 6 + (1 + 1) = 8, where training differentiates 6
    t = torch.ones(2, requires_grad=True)
    loss, logits = (t * 3).sum(), t * 1
    assert default_loss((loss, logits)) is loss
    assert default_loss([loss, logits]) is loss
    # a first item that is no scalar loss: the rule's sum, 2 x 2 + 6 = 10
    assert default_loss((logits * 2, loss)).item() == 10.0
    # a ModelOutput given labels holds .loss (and is a mapping): the loss alone
    transformers = pytest.importorskip("transformers")
    output = transformers.modeling_outputs.CausalLMOutput(loss=loss, logits=logits)
    assert default_loss(output) is loss
    assert default_loss(output.to_tuple()) is loss


def test_the_backward_of_a_loss_first_tuple_is_that_of_its_loss():
    class LossAndLogits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            logits = self.linear(x)
            return torch.nn.functional.cross_entropy(logits, torch.tensor([0, 2])), logits

    from moduleprofiler import ModuleProfiler

    torch.manual_seed(0)
    model, x = LossAndLogits(), torch.randn(2, 4)
    default = ModuleProfiler().profile(model, x, backward=True)
    given = ModuleProfiler().profile(model, x, backward=True, loss_fn=lambda out: out[0])
    # the same backward as the loss_fn a user would write; summing the logits in added the
    # gradient of logits.sum() to the loss's at the logits: 2 x 3 = 6 more adds
    assert default.total_backward_ops == given.total_backward_ops
    assert default.total_backward_macs == given.total_backward_macs
    summed = ModuleProfiler().profile(model, x, backward=True,
                                      loss_fn=lambda out: out[0] + out[1].sum())
    assert summed.total_backward_ops == given.total_backward_ops + 6


def test_no_loss_is_a_clear_error():
    for output in ("text", torch.ones(2), (torch.ones(1),)):
        with pytest.raises(LossError, match="loss_fn") as info:
            default_loss(output)
        # a profiling error and a TypeError, so both kinds of handler catch it
        assert isinstance(info.value, ProfilingError) and isinstance(info.value, TypeError)


def test_an_output_of_inference_mode_names_it_instead_of_asking_for_loss_fn():
    with torch.inference_mode():
        output = torch.ones(2) * 2
    # outside the block too: the output is an inference tensor, no loss_fn can help
    with pytest.raises(LossError, match=r"computed under torch.inference_mode\(\)") as info:
        default_loss(output)
    assert "loss_fn" not in str(info.value)


@pytest.mark.parametrize("run", ["profile", "measure_memory", "train_step_times"])
def test_a_loss_fn_that_returns_no_scalar_or_raises_is_named(run: str) -> None:
    from moduleprofiler import Profiler, TimingOptions

    model = torch.nn.Linear(4, 4)
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.randn(2, 4)
    passes = {
        "profile": lambda loss_fn: Profiler().profile(model, x, backward=True, loss_fn=loss_fn),
        "measure_memory": lambda loss_fn: Profiler().measure_memory(model, x, train=True,
                                                                    loss_fn=loss_fn),
        "train_step_times": lambda loss_fn: Profiler().train_step_times(
            model, x, TimingOptions(num_iters=4, drop_first=1, warmup_seconds=0.0,
                                    measure_overhead=False, progress=False),
            loss_fn=loss_fn),
    }
    # a 2 x 4 output is no loss: torch's "grad can be implicitly created only for scalar
    # outputs" named neither the argument nor the fix
    with pytest.raises(LossError, match=r"loss_fn returned a tensor of shape \(2, 4\): .* "
                                        r"one-element loss"):
        passes[run](lambda out: out)
    with pytest.raises(LossError, match=r"loss_fn raised AttributeError: .*'foo'") as raised:
        passes[run](lambda out: out.foo)
    assert isinstance(raised.value.__cause__, AttributeError)
    # the model is as it was, and it has no gradients
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())
