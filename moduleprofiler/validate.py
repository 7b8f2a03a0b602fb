"""Argument checks for the public entry points, in one place and one message style.

Every check names the argument and says what was expected and what was given, and raises a
``TypeError`` (wrong kind of value) or ``ValueError`` (right kind, wrong value); a registry key is
a :class:`~moduleprofiler.errors.RegistryError`, a formula result that is not a count a
:class:`~moduleprofiler.errors.FormulaError` naming the module path and the formula. The entry
points call these at their boundary, so a bad argument never escapes as an ``AttributeError``
from deep inside a pass, and is never silently accepted.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn

from moduleprofiler.devices import as_device
from moduleprofiler.errors import FormulaError, RegistryError
from moduleprofiler.records import display_path
from moduleprofiler.runner import Listener

DEFAULT_KEY = "default"
"""The formula-map key of 0.0.4's fallback ops function (a module type without a formula)."""
EXCLUDED_KEY = "excluded"
"""The formula-map key of 0.0.4's function for modules excluded from counting."""


def _kind(value: object) -> str:
    """How a value is named in messages: ``None``, ``a function``, ``a Tensor``, ``int 3``."""
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return f"a Tensor of shape {tuple(value.shape)}"
    if isinstance(value, type):
        return f"the class {value.__qualname__}"
    if callable(value) and hasattr(value, "__name__"):
        return f"the function {value.__name__}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


# -- arguments --------------------------------------------------------------------------------
def check_module(module: object, name: str = "module") -> nn.Module:
    """``module`` if it is an ``nn.Module``, else ``TypeError``."""
    if not isinstance(module, nn.Module):
        if type(module).__name__ == "ExportedProgram":  # torch.export's: not callable
            hint = (" (an exported program: pass torch.export.unflatten(program) for its "
                    "modules, or program.module())")
        elif callable(module) and not isinstance(module, type):
            hint = " (pass the model, and the function as pred_fn)"
        else:
            hint = ""
        raise TypeError(f"{name} must be a torch.nn.Module, got {_kind(module)}{hint}")
    return module


def check_callable(value: object, name: str, expected: str = "a callable") -> None:
    """``None`` or a callable, else ``TypeError``."""
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be {expected} or None, got {_kind(value)}")


def check_bool(value: object, name: str) -> None:
    """``True`` or ``False`` (a string such as ``"False"`` would be silently true)."""
    if not isinstance(value, bool) and type(value).__name__ != "bool_":
        raise TypeError(f"{name} must be True or False, got {_kind(value)}")


def check_str(value: object, name: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {_kind(value)}")


def check_names(value: object, name: str) -> list[str] | None:
    """``None``, or a list or tuple of strings (column names) as a list: a bare string would be
    read letter by letter, and a number among the names failed deep inside a view as an
    ``AttributeError``; each is a ``TypeError`` naming ``name`` (and the item's position)."""
    if value is None:
        return None
    if isinstance(value, str):
        raise TypeError(f"{name} must be a list of column names, got the str {value!r} "
                        f"(one column: [{value!r}])")
    if isinstance(value, (bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of column names or None, got {_kind(value)}")
    names = list(value)
    for position, item in enumerate(names):
        if not isinstance(item, str):
            raise TypeError(f"{name}[{position}] must be a column name (a str), got "
                            f"{_kind(item)}")
    return names


def check_choice(value: object, name: str, allowed: Sequence[object]) -> None:
    """One of ``allowed`` (a ``Literal`` option), else ``ValueError``."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; "
                         f"got {_kind(value)}")


def check_int(value: object, name: str, minimum: int, *, optional: bool = True) -> None:
    """An ``int`` of at least ``minimum`` (or ``None`` when ``optional``): ``max_depth=-1``
    is a ``ValueError``, ``max_depth=1.5`` a ``TypeError``."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int{' or None' if optional else ''}, "
                        f"got {_kind(value)}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


def check_sizes(values: object, name: str) -> list[int]:
    """One positive ``int`` or several (a sweep's ``batch_sizes``), as a list."""
    sizes = [values] if isinstance(values, int) else list(cast(Iterable[Any], values))
    if not sizes or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in sizes):
        raise ValueError(f"{name} must be positive ints, got {sizes!r}")
    return sizes


def check_real(value: object, name: str, expected: str = "a number", *,
               optional: bool = False) -> None:
    """A real number, not a ``bool`` (or ``None`` when ``optional``), else a ``TypeError``
    saying what ``name`` must be (``expected``): a string would fail later as an unnamed
    comparison."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {expected}{' or None' if optional else ''}, "
                        f"got {_kind(value)}")


def check_bounded(value: object, name: str, *, minimum: float | None = None,
                  above: float | None = None, below: float | None = None,
                  finite: bool = True) -> None:
    """A real number (see :func:`check_real`) that is at least ``minimum``, greater than
    ``above``, less than ``below`` (each where given) and, with ``finite``, neither infinite
    nor NaN, else a ``ValueError`` naming ``name`` (NaN fails every bound: a comparison with
    it is false, so it would pass a check written the other way round)."""
    check_real(value, name)
    number = float(cast(float, value))  # a real number, as checked
    if finite and not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if minimum is not None and not number >= minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if above is not None and not number > above:
        raise ValueError(f"{name} must be greater than {above}, got {value}")
    if below is not None and not number < below:
        raise ValueError(f"{name} must be less than {below}, got {value}")


def check_percent(value: object, name: str) -> None:
    """``None`` or a number from 0 to 100."""
    if value is None:
        return
    check_real(value, name, "a number (a percentage)", optional=True)
    if not 0 <= float(cast(float, value)) <= 100:  # a real number, as checked
        raise ValueError(f"{name} must be a percentage from 0 to 100, got {value}")


def check_device(value: object, name: str = "device") -> None:
    """``None``, a ``torch.device`` or a string torch accepts as a device."""
    if value is None or isinstance(value, torch.device):
        return
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, a torch.device or None, got {_kind(value)}")
    as_device(value, name)


def check_listeners(listeners: object) -> tuple[Any, ...]:
    """A sequence of :class:`~moduleprofiler.runner.Listener` instances, as a tuple."""
    if isinstance(listeners, Listener):
        raise TypeError("listeners must be a sequence of Listener instances, got one Listener: "
                        "pass listeners=[listener]")
    if isinstance(listeners, (str, bytes, Mapping)) or not isinstance(listeners, Iterable):
        raise TypeError(f"listeners must be a sequence of Listener instances, got "
                        f"{_kind(listeners)}")
    items = tuple(listeners)
    for position, item in enumerate(items):
        if not isinstance(item, Listener):
            hint = " (an instance, not the class)" if isinstance(item, type) and issubclass(
                item, Listener) else ""
            raise TypeError(f"listeners[{position}] must be a moduleprofiler.Listener "
                            f"instance{hint}, got {_kind(item)}")
    return items


def check_exclusions(items: object, name: str = "exclude_from_ops") -> list[Any]:
    """Module classes (``nn.Module`` subclasses) or module instances, as a list."""
    if items is None:
        return []
    if isinstance(items, (str, bytes, Mapping, nn.Module, type)) or not isinstance(
            items, Iterable):
        raise TypeError(f"{name} must be a list of module classes or module instances, got "
                        f"{_kind(items)}")
    out = list(items)
    for position, item in enumerate(out):
        if isinstance(item, nn.Module):
            continue
        if item is nn.Module:  # every module is one: nothing would be counted
            raise RegistryError(
                f"{name}[{position}] is torch.nn.Module, the base class of every module: it "
                "would exclude every module, the model itself included, and count nothing; "
                "name the classes of the modules to exclude, or the modules themselves")
        if isinstance(item, type) and issubclass(item, nn.Module):
            continue
        raise TypeError(f"{name} takes module classes or module instances; {name}[{position}] "
                        f"is {_kind(item)}")
    return out


_UNREAD: dict[str, dict[str, str]] = {
    "macs_fn_map": {
        DEFAULT_KEY: "a module without a MACs formula gets the MACs of the aten operators it "
                     "runs; 'default' is a key of ops_fn_map and io_size_fn_map",
        EXCLUDED_KEY: "an excluded module's MACs are not counted; 'excluded' is a key of "
                      "ops_fn_map"},
    "io_size_fn_map": {
        EXCLUDED_KEY: "an excluded module's io sizes are traced as any other's (by its type's "
                      "function, else 'default'); 'excluded' is a key of ops_fn_map"},
}
"""The 0.0.4 string keys a map other than ``ops_fn_map`` has no use for, with what the pass
does instead (accepted, they would be silently ignored)."""


def check_formula_map(table: object, name: str) -> None:
    """A module formula map: a mapping from ``nn.Module`` subclasses, dotted class names or the
    ``"default"``/``"excluded"`` keys to functions (``None``: no entry)."""
    if not isinstance(table, Mapping):
        raise TypeError(f"{name} must be a mapping (a dict) from module classes to functions, "
                        f"got {_kind(table)}")
    for key, fn in table.items():
        if isinstance(key, type):
            if not issubclass(key, nn.Module):
                raise ValueError(f"{name} has the key {key.__qualname__}, which is not a "
                                 "subclass of torch.nn.Module")
            if key is nn.Module:
                raise RegistryError(base_module_key(name))
        elif isinstance(key, str):
            if key not in (DEFAULT_KEY, EXCLUDED_KEY) and "." not in key:
                raise ValueError(
                    f"{name} has the string key {key!r}: string keys are 'default', 'excluded' "
                    "or a dotted class name such as 'transformers.pytorch_utils.Conv1D'")
            if key in _UNREAD.get(name, ()):
                raise RegistryError(f"{name} has the key {key!r}, which no pass reads: "
                                    f"{_UNREAD[name][key]}")
        else:
            hint = " (use its class)" if isinstance(key, nn.Module) else ""
            raise ValueError(f"{name} keys are module classes, dotted class names, 'default' "
                             f"or 'excluded'; got {_kind(key)}{hint}")
        if fn is not None and not callable(fn):
            label = key.__qualname__ if isinstance(key, type) else repr(key)
            raise TypeError(f"{name}[{label}] must be a function (module, inputs, output), "
                            f"got {_kind(fn)}")


def check_operator_map(table: object, name: str = "operator_fn_map") -> None:
    """An operator map: ``torch.ops`` operators (packets or overloads) to formulas
    ``(args, kwargs, out) -> (ops, macs)``, ``None`` for a free operator."""
    if not isinstance(table, Mapping):
        raise TypeError(f"{name} must be a mapping (a dict) from torch.ops operators to "
                        f"formulas, got {_kind(table)}")
    for key, fn in table.items():
        if not isinstance(key, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
            raise ValueError(f"{name} keys are operators such as torch.ops.aten.mm or "
                             f"torch.ops.aten.add.Tensor; got {_kind(key)}")
        if fn is not None and not callable(fn):
            raise TypeError(f"{name}[{key}] must be a function (args, kwargs, out) -> "
                            f"(ops, macs) or None (free), got {_kind(fn)}")


def check_registration(register: str, fn: object) -> None:
    """What a ``register_*`` decorator is applied to must be a function."""
    if not callable(fn) or isinstance(fn, type):
        raise TypeError(f"{register}(...) decorates a function (module, inputs, output); "
                        f"got {_kind(fn)}")


def base_module_key(where: str) -> str:
    """Why ``nn.Module`` is refused as a key of ``where`` (a map or a ``register_*``)."""
    if "macs" in where:
        instead = "register the formula for your module's own class"
    elif "io_size" in where:
        instead = "the function of every module type without one of its own is the 'default' key"
    else:
        instead = ("the formula of every module type without one of its own is the 'default' "
                   "key (what it returns for a module holding others is the ops outside them)")
    return (f"{where} got the key torch.nn.Module, the base class of every module: every "
            f"module class replaces its forward, so a formula for it prices no module's work; "
            f"{instead}")


def check_registry_key(register: str, key: object) -> None:
    """A key given to a ``register_*`` decorator: a module class or a dotted class name."""
    if callable(key) and not isinstance(key, type):
        raise RegistryError(f"{register} takes module types and returns the decorator: write "
                            f"@{register}(MyModule), not @{register}; got {_kind(key)}")


# -- formula results --------------------------------------------------------------------------
def count_value(value: object, *, formula: str, path: str | None, type_name: str) -> int | None:
    """A formula's result as a count: ``None`` (unknown) or a non-negative int.

    Accepted: ints, integral floats (``7920.0``, 0.0.4 formulas returned those), one-element
    tensors and numpy scalars holding such a number. Anything else (a bool, a fraction, a
    negative number, NaN or infinity, a tensor of several elements, a string) is a
    :class:`~moduleprofiler.errors.FormulaError` naming the module path and the formula.

    Callers check ``type(value) is int and value >= 0`` first: this is the slow path.
    ``path`` is ``None`` for work outside every module call.
    """
    if value is None:
        return None
    where = ("outside every module call" if path is None
             else f"for module {display_path(path)!r} ({type_name})")

    def reject(why: str) -> FormulaError:
        return FormulaError(f"{formula} {where} returned {_kind(value)}: {why}", path)

    number: object = value
    if isinstance(number, torch.Tensor):
        if number.numel() != 1:
            raise reject("a count is one number, not a tensor of several elements")
        if number.device.type == "meta":
            raise reject("a meta tensor has no value; return an int")
        number = number.item()
    if isinstance(number, bool) or type(number).__name__ == "bool_":
        raise reject("a count is a number, not a bool")
    if isinstance(number, numbers.Integral):
        count = int(number)
    elif isinstance(number, numbers.Real):
        real = float(number)
        if math.isnan(real) or math.isinf(real):
            raise reject("a count must be finite")
        if not real.is_integer():
            raise reject("a count must be a whole number")
        count = int(real)
    else:
        raise reject("a count is an int (or None for unknown)")
    if count < 0:
        raise reject("a count cannot be negative")
    return count


def io_size_pair(value: object, *, function: Callable[..., Any], path: str, module: object
                 ) -> tuple[Any, Any]:
    """An io-size function's result as ``(input_size, output_size)``: a tuple or list of two
    items (0.0.4's contract). Anything else is a :class:`~moduleprofiler.errors.FormulaError`
    naming the module path and the function, not an unpacking error from inside the pass (the
    message is built only then: this runs on every call)."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return value[0], value[1]
    raise FormulaError(
        f"io-size function {formula_name(function)!r} for module {display_path(path)!r} "
        f"({type(module).__name__}) returned {_kind(value)}: an io-size function returns a "
        "pair (input_size, output_size)", path)


def operator_pair(value: object, operator: object, call: Any, backward: bool = False
                  ) -> tuple[Any, Any]:
    """An operator formula's result as its two entries ``(ops, macs)`` (a tuple or a list of
    two), or a :class:`~moduleprofiler.errors.FormulaError` naming the module call it ran in
    (``call``; ``None``: outside every call)."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return value[0], value[1]
    where = ("outside every module call" if call is None
             else f"in module {display_path(call.path)!r} ({type(call.module).__name__})")
    raise FormulaError(f"{'backward ' if backward else ''}operator formula for {operator} "
                       f"{where} returned {_kind(value)}: an operator formula returns "
                       f"(ops, macs)", None if call is None else call.path)


def operator_counts(ops: object, macs: object, operator: object, call: Any,
                    backward: bool = False) -> tuple[int, int]:
    """An operator formula's ``(ops, macs)`` as two non-negative ints (see :func:`count_value`;
    ``None`` is not allowed: an operator's count is known, or the operator is missing from the
    map). ``call`` is the module call the operator ran in (``None``: outside every call)."""
    path = None if call is None else call.path
    type_name = "" if call is None else type(call.module).__name__
    formula = f"{'backward ' if backward else ''}operator formula for {operator}"
    counts = []
    for what, value in (("ops", ops), ("macs", macs)):
        count = count_value(value, formula=f"{formula} ({what})", path=path,
                            type_name=type_name)
        if count is None:
            where = ("outside every module call" if path is None
                     else f"in module {display_path(path)!r} ({type_name})")
            raise FormulaError(f"{formula} returned None for {what} {where}: an operator count "
                               "is an int; leave the operator out of the map if it is unknown",
                               path)
        counts.append(count)
    return counts[0], counts[1]


def formula_name(fn: Callable[..., Any]) -> str:
    """A formula's name for messages (any callable, also one without ``__name__``)."""
    return getattr(fn, "__name__", None) or repr(fn)


def check_pass(module: object, *, pred_fn: object = None, loss_fn: object = None,
               **flags: object) -> nn.Module:
    """The arguments every pass shares: the model, ``pred_fn``, ``loss_fn`` and on/off
    options (given by name as keywords)."""
    check_module(module)
    check_callable(pred_fn, "pred_fn", "a function that calls the module")
    check_callable(loss_fn, "loss_fn", "a function from the model's output to a scalar tensor")
    for name, value in flags.items():
        check_bool(value, name)
    return module  # type: ignore[return-value]


class CheckedMaps:
    """The formula maps of one profiler that have been checked, each as the object and size it
    had then. The maps are public attributes users edit between passes; a pass re-checks only a
    map that was replaced, or grew or shrank, since (a value swapped in place for something
    that is not a function fails with a typed error when the pass calls it)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[object, int]] = {}

    def remember(self, name: str, table: Mapping[Any, Any]) -> None:
        """Record ``table`` as checked (a map this package built)."""
        self._seen[name] = (table, len(table))

    def check(self, name: str, table: object, checker: Callable[[object, str], None]) -> None:
        """``checker(table, name)`` unless this very map, at this size, was checked before."""
        seen = self._seen.get(name)
        if seen is not None and seen[0] is table and seen[1] == len(table):  # type: ignore[arg-type]
            return
        checker(table, name)
        self.remember(name, table)  # type: ignore[arg-type]
