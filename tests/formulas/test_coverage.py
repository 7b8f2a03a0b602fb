"""Every computing module class of ``torch.nn`` resolves to an ops and a macs formula."""

from __future__ import annotations

import pytest
from torch import nn

import moduleprofiler.formulas  # noqa: F401  (registers the default formulas)
from moduleprofiler.registry import get_default_macs_map, get_default_ops_map, resolve

# Classes deliberately left without a formula, with the reason. Loss modules (subclasses of
# ``nn.modules.loss._Loss``) are skipped by rule below: they take a target, belong to training
# code, and their cost is outside what a model's forward computes.
EXCLUDED: dict[str, str] = {
    "Module": "the base class itself; a bare Module has no forward",
    "Container": "deprecated base class with no forward",
    "AdaptiveLogSoftmaxWithLoss": "a loss: needs the target; its Linear head and tail are "
    "children and are counted on their own records",
    "DataParallel": "a device wrapper, not a layer: the wrapped module is counted as its child",
}


def _candidate_names() -> list[str]:
    return sorted(set(nn.modules.__all__) | set(dir(nn)))


def _lookup(name: str) -> object:
    return getattr(nn, name, None) or getattr(nn.modules, name, None)


def computing_module_classes() -> list[type[nn.Module]]:
    """Public concrete nn.Module subclasses of torch.nn whose own forward computes something."""
    classes = []
    for name in _candidate_names():
        cls = _lookup(name)
        if name.startswith("_") or not isinstance(cls, type) or not issubclass(cls, nn.Module):
            continue
        if name in EXCLUDED or issubclass(cls, nn.modules.loss._Loss):
            continue
        # No forward of its own (ModuleList, ModuleDict, ParameterList, ParameterDict, RNNBase,
        # RNNCellBase): calling it raises, so there is never a call to count.
        if cls.forward is nn.Module.forward:  # type: ignore[comparison-overlap]
            continue
        classes.append(cls)
    return classes


CLASSES = computing_module_classes()


def test_the_walk_finds_the_usual_layers() -> None:
    # guards against the filter above silently emptying the list
    names = {cls.__name__ for cls in CLASSES}
    assert {"Linear", "Conv2d", "ReLU", "BatchNorm2d", "LazyLinear", "Sequential"} <= names
    assert len(CLASSES) > 100


def test_excluded_names_exist() -> None:
    # a stale allow-list entry (renamed or removed upstream) should be noticed
    assert all(_lookup(name) is not None for name in EXCLUDED)


@pytest.mark.parametrize("cls", CLASSES, ids=[cls.__name__ for cls in CLASSES])
def test_has_ops_and_macs_formula(cls: type[nn.Module]) -> None:
    assert resolve(get_default_ops_map(), cls) is not None, f"no ops formula for {cls.__name__}"
    assert resolve(get_default_macs_map(), cls) is not None, f"no macs formula for {cls.__name__}"
