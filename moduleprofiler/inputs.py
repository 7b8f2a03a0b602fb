"""Turning the ``input`` a user passes into a call of their model."""

from __future__ import annotations

import inspect
import numbers
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from moduleprofiler.errors import error_chain
from moduleprofiler.shapes import call_input_shapes

Invocation = Callable[[], Any]


def orig_mod_of(module: nn.Module) -> nn.Module | None:
    """The module a ``torch.compile`` wrapper (``OptimizedModule``) holds; ``None`` for any
    other module. The class is read first: a model's own ``__getattr__`` is never asked for
    ``_orig_mod`` (one that raises something else than ``AttributeError`` for a name it
    does not know would end the pass)."""
    if type(module).__name__ != "OptimizedModule":
        return None
    original = getattr(module, "_orig_mod", None)
    return original if isinstance(original, nn.Module) else None


def unwrap_compiled(module: nn.Module) -> nn.Module:
    """The original module of a ``torch.compile``d one (``OptimizedModule``), else ``module``.

    Profiling goes through the original eager module, so module paths are the user's own
    (without the ``_orig_mod.`` prefix) and the compiled graph is left alone."""
    original = orig_mod_of(module)
    return module if original is None else original


def compiled_inside(model: nn.Module, modules: Iterable[nn.Module] | None = None,
                    callables: Sequence[Any] | None = None) -> tuple[nn.Module, ...]:
    """The modules of ``model`` whose calls run inside code ``torch.compile`` compiled: the
    original module of a ``torch.compile(module)`` wrapper with its descendants (the wrapper's
    own call is eager), a module compiled in place (``module.compile()``) with its
    descendants (its hooks run inside its compiled call), the descendants of a module whose
    ``forward`` was compiled on the instance, and a module with another method compiled there
    (a training step that calls it) with its descendants. A Python hook on one of them is
    either never called (installed after the compile) or traced into the compiled program,
    where Dynamo breaks the graph at it and compiles the pieces: the program would no longer
    be the user's. ``modules``: ``model.modules()`` where the caller has them already;
    ``callables``: the callables among their attributes, where the caller has them
    (:func:`~moduleprofiler.modules.held_values`)."""
    listed = list(model.modules() if modules is None else modules)
    # the usual case: nothing compiled, no module asked twice
    if not _may_compile(listed, callables):
        return ()
    inside: dict[int, nn.Module] = {}
    for module in listed:
        if id(module) in inside:
            continue
        original = orig_mod_of(module)
        if original is not None:
            inside.update((id(m), m) for m in original.modules())
        elif getattr(module, "_compiled_call_impl", None) is not None:
            inside.update((id(m), m) for m in module.modules())
        else:
            compiled = _compiled_methods(module)
            if compiled == {"forward"}:  # its own call is eager, what it calls is not
                inside.update((id(m), m) for m in module.modules() if m is not module)
            elif compiled:  # a compiled training step calls the module itself
                inside.update((id(m), m) for m in module.modules())
    return tuple(inside.values())


def _may_compile(modules: Sequence[nn.Module], callables: Sequence[Any] | None) -> bool:
    """Whether some module of ``modules`` is a ``torch.compile`` wrapper, is compiled in place
    or holds a compiled method: ``False`` where :func:`compiled_inside` finds nothing. Three
    model-wide sweeps, the attributes read once for the callables among them (``callables``:
    those, where the caller has them; ResNet-50's 151
    modules: about 75 against 125 µs for the loop of :func:`compiled_inside` over them)."""
    if any(cls.__name__ == "OptimizedModule" for cls in set(map(type, modules))):
        return True
    if any(getattr(module, "_compiled_call_impl", None) is not None for module in modules):
        return True
    if callables is None:
        callables = [value for module in modules for value in vars(module).values()
                     if callable(value)]
    return any(hasattr(value, "_torchdynamo_orig_callable") for value in callables)


def _compiled_methods(module: nn.Module) -> set[str]:
    """The methods compiled on the instance itself (``module.forward =
    torch.compile(module.forward)``, or Lightning's compiled ``forward`` and ``training_step``
    of a LightningModule given to ``Trainer.fit`` compiled): the names of its attributes that
    ``torch.compile`` wrapped."""
    return {name for name, value in vars(module).items()
            if callable(value) and hasattr(value, "_torchdynamo_orig_callable")}


def make_invocation(
    module: nn.Module, input: Any, pred_fn: Callable[..., Any] | None = None,
    target: Callable[..., Any] | None = None,
) -> Invocation:
    """A zero-argument callable that runs the model on ``input``.

    * a tensor ``x`` -> ``module(x)``
    * a tuple or list -> ``module(*input)``
    * a dict -> ``module(**input)``
    * anything else -> ``module(input)``

    With ``pred_fn`` the same unpacking applies to ``pred_fn`` instead of ``module`` (``pred_fn``
    must call the same module instance, whose hooks do the profiling). ``target``: another
    callable of ``module``'s arguments called instead (its eager call past a compiled one, a
    compiled program of it).
    """
    if target is None:
        target = pred_fn if pred_fn is not None else module
    if isinstance(input, Tensor):
        return lambda: target(input)
    if isinstance(input, Mapping):
        kwargs = dict(input)
        return lambda: target(**kwargs)
    if unpacks(input):
        args = tuple(input)
        if args and all(_is_size(value) for value in args):  # the torchinfo habit: a shape
            return _hinted(target, args, SHAPE_HINT.format(shape=args, count=len(args)))
        if isinstance(input, list):
            return _hinted(target, args, LIST_HINT.format(count=len(args)))
        return lambda: target(*args)
    if input is None:
        if pred_fn is None:
            require_input(module, input)
        if target is pred_fn:
            # a closure over its own inputs (``pred_fn=lambda: model(q, k, v)``) is called as
            # written; one that takes an argument gets None, as 0.0.4 called it
            if _takes_no_argument(pred_fn):
                return pred_fn
            return _hinted(target, (None,), PRED_FN_NO_INPUT_HINT)
        return _hinted(target, (None,), NO_INPUT_HINT)
    return lambda: target(input)


def require_input(module: nn.Module, input: Any) -> None:
    """Refuse a missing ``input`` for a model whose ``forward`` requires an argument, before
    anything runs.

    Raises:
        TypeError: ``input`` is ``None`` and ``module.forward`` has a required positional
            parameter.
    """
    if input is None and _requires_argument(module):
        raise TypeError(f"no input given, and {type(module).__name__}.forward requires an "
                        f"argument: pass input= (a tensor, tuple or dict); {INPUT_SIZE_TAKERS} "
                        "also take input_size=(1, 3, 224, 224) for a random tensor of that "
                        "shape")


LIST_HINT = ("hint: input was a list, so it was spread into {count} positional argument(s) "
             "(module(*input)); a model that takes the list itself (torchvision's detection "
             "models take a list of images) needs input=(the_list,)")
"""Noted on an exception raised by a call whose ``input`` was a list: the unpacking rule that
surprises users of list-taking models."""


INPUT_SIZE_TAKERS = "profile() and predict()"
"""The passes that take ``input_size`` besides ``input``, named wherever a message suggests it:
the timing and memory passes and the 0.0.4 methods take ``input`` only."""

NO_INPUT_HINT = ("hint: no input was given, so the model was called with None; pass "
                 f"input= (a tensor, tuple or dict); {INPUT_SIZE_TAKERS} also take "
                 "input_size=(1, 3, 224, 224) for a random tensor of that shape")
"""Noted on an exception raised by a call made without ``input``."""

PRED_FN_NO_INPUT_HINT = ("hint: no input was given, so pred_fn was called with None as its one "
                         "argument; pass input= (what pred_fn takes), or a pred_fn that takes "
                         "no argument (pred_fn=lambda: model(x, y))")
"""Noted on an exception raised by a ``pred_fn`` that takes an argument, called without
``input``."""

SHAPE_HINT = ("hint: input={shape} was spread into {count} int argument(s); for a random "
              "tensor of that shape pass input_size={shape} (" + INPUT_SIZE_TAKERS
              + " take it)")
"""Noted on an exception raised by a call whose ``input`` was a tuple or list of ints: a shape
meant as ``input_size`` (torchinfo's, ptflops' and DeepSpeed's habit)."""


def _requires_argument(module: nn.Module) -> bool:
    """Whether ``module.forward`` has a positional parameter without a default."""
    signature = _forward_signature(type(module))
    if signature is None:
        return False
    parameters = list(signature.parameters.values())[1:]  # drop ``self``
    return any(p.default is inspect.Parameter.empty and p.kind in (
        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        for p in parameters)


def _takes_no_argument(function: Callable[..., Any]) -> bool:
    """Whether ``function()`` binds: every parameter has a default or is variadic (a
    callable whose signature cannot be read is taken to need its argument)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return False
    try:
        signature.bind()
    except TypeError:
        return False
    return True


def _is_size(value: object) -> bool:
    # numpy's integers too: shapes read from an array (``np.array([2, 4])``, ``arr.shape``)
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _hinted(target: Callable[..., Any], args: tuple[Any, ...], hint: str) -> Invocation:
    """``target(*args)``, with ``hint`` noted on any exception it raises."""
    def invoke() -> Any:
        try:
            return target(*args)
        except Exception as exc:
            add_note(exc, hint)
            raise
    return invoke


InputSize = Sequence[int] | Sequence[Sequence[int]]
"""One shape, ``(1, 3, 224, 224)``, or one shape per argument, ``[(2, 4), (2, 5)]``."""


def given_input(module: nn.Module, input: Any, input_size: InputSize | None) -> Any:
    """What a pass runs ``module`` on: ``input``, or instead a :func:`random_input` of
    ``input_size``.

    Raises:
        ValueError: both are given.
    """
    if input_size is None:
        return input
    if input is not None:
        raise ValueError("pass input or input_size, not both")
    return random_input(module, input_size)


def random_input(module: nn.Module, input_size: InputSize) -> Tensor | tuple[Tensor, ...]:
    """Random input of ``input_size`` for ``module``, as torchinfo and ptflops make it: one
    tensor for one shape (``(1, 3, 224, 224)``), a tuple of tensors for a sequence of shapes
    (``[(2, 4), (2, 5)]``, called as ``module(x, y)``). Values are standard normal (seed 0,
    the global generator untouched), of the dtype of the model's first floating parameter or
    buffer (else float32), on the device of its first parameter or buffer (else the CPU).

    Raises:
        TypeError: ``input_size`` is not a sequence of ints or of sequences of ints.
        ValueError: a size is below 1 (a tensor with no elements profiles as 0 ops).
    """
    if isinstance(input_size, np.ndarray):  # a shape held in an array: its ints
        input_size = input_size.tolist()
    if isinstance(input_size, (str, bytes, Tensor)) or not isinstance(input_size, Sequence) \
            or not input_size:
        raise TypeError(f"input_size must be a shape such as (1, 3, 224, 224), or a list of "
                        f"shapes for several inputs, got {input_size!r}")
    several = not all(_is_size(size) for size in input_size)
    given: list[Any] = list(input_size) if several else [input_size]
    shapes: list[tuple[int, ...]] = []
    for shape in given:
        if isinstance(shape, np.ndarray):
            shape = shape.tolist()
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or not shape \
                or not all(_is_size(size) for size in shape):
            raise TypeError(f"input_size must be a shape such as (1, 3, 224, 224), or a list "
                            f"of shapes for several inputs, got {input_size!r}")
        if any(size < 1 for size in shape):
            raise ValueError(f"input_size {tuple(shape)} has a size below 1: a tensor without "
                             "elements runs no work")
        shapes.append(tuple(int(size) for size in shape))
    tensors = [*module.parameters(), *module.buffers()]
    floating = next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)
    device = tensors[0].device if tensors else torch.device("cpu")
    generator = torch.Generator().manual_seed(0)
    made = tuple(torch.empty(shape, dtype=floating, device=device) if device.type == "meta"
                 else torch.randn(shape, generator=generator, dtype=floating).to(device)
                 for shape in shapes)
    return made if several else made[0]


_INTEGER_INPUT = re.compile(r"\b(Long|Int|int32|int64|index|indices)\b")
"""What torch says when a floating-point tensor reaches an operator that takes integers
(``embedding``: "Expected tensor for argument #1 'indices' to have one of the following scalar
types: Long, Int")."""


def wants_integers(error: BaseException) -> bool:
    """Whether ``error`` (or one it was raised from) is an operator refusing floating-point
    input where it takes integers: token ids for an ``nn.Embedding``."""
    return any(_INTEGER_INPUT.search(str(link)) for link in error_chain(error))


@contextmanager
def explained_random_input(input_size: InputSize | None) -> Iterator[None]:
    """Run the block; where it fails on the random floating-point input that ``input_size``
    stands for, at an operator that takes integers (token ids for an ``nn.Embedding``), the
    error gets a note saying where that input came from and what to pass instead."""
    try:
        yield
    except Exception as exc:
        if input_size is not None and wants_integers(exc):
            add_note(exc, f"input_size={input_size!r} stands for random floating-point "
                          "input; a model that takes token ids or other integers needs "
                          "input= instead (e.g. input=torch.randint(0, vocab_size, "
                          f"{tuple(input_size)!r}))")
        raise


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` once (Python 3.11+; on 3.10 the same ``__notes__`` list, which
    :class:`~moduleprofiler.errors.ProfilingError` messages show on every version)."""
    notes = getattr(exc, "__notes__", None) or []
    if note in notes:
        return
    try:
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        else:
            exc.__notes__ = [*notes, note]  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception type that takes no attributes
        pass


def check_reusable(input: Any, runs: str) -> None:
    """Refuse an ``input`` that the first run of the model uses up: an iterator (a generator,
    ``iter(list)``, ``map``, a data loader's iterator) given as the input or as one of the
    arguments it is spread into. ``runs``: what needs the input more than once, as the message
    names it: a pass that runs the model again (its later runs would get an exhausted iterator,
    and the time or memory of a model doing nothing would be reported as the model's), or
    ``predict``, which copies the input's tensors to the meta device before the run (an
    iterator's are made by the run).

    Raises:
        TypeError: naming the argument and what to pass instead.
    """
    if isinstance(input, Mapping):
        arguments: Iterable[tuple[str, Any]] = (
            (f"input[{key!r}]", value) for key, value in input.items())
    elif unpacks(input):
        arguments = ((f"input[{index}]", value) for index, value in enumerate(input))
    else:
        arguments = (("input", input),)
    for where, value in arguments:
        if isinstance(value, Iterator):
            raise TypeError(
                f"{where} is an iterator ({type(value).__name__}), which the model's first "
                f"run uses up; {runs} needs it more than once: pass a list or a tuple of its "
                "items instead")


def unpacks(input: object) -> bool:
    """Whether :func:`make_invocation` spreads ``input`` into positional arguments: a tuple
    (not a namedtuple, which is one value) or a list."""
    return isinstance(input, (tuple, list)) and not _is_namedtuple(input)


def forward_binds(module: nn.Module, count: int) -> bool | None:
    """Whether ``module.forward`` takes ``count`` positional arguments (its other parameters
    left to their defaults); ``None`` when its signature cannot be read."""
    signature = _forward_signature(type(module))
    if signature is None:
        return None
    try:
        signature.bind(None, *range(count))  # ``None`` for ``self``
    except TypeError:
        return False
    return True


def _is_namedtuple(value: object) -> bool:
    return isinstance(value, tuple) and hasattr(value, "_fields")


_SIGNATURES: dict[type, inspect.Signature | None] = {}


def _forward_signature(cls: type) -> inspect.Signature | None:
    if cls not in _SIGNATURES:
        try:
            _SIGNATURES[cls] = inspect.signature(cls.forward)  # type: ignore[attr-defined]
        except (TypeError, ValueError):
            _SIGNATURES[cls] = None
    return _SIGNATURES[cls]


class _Arg:
    """Stands for positional argument ``index`` while a call pattern is bound once."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Kwarg:
    """Stands for keyword argument ``name`` while a call pattern is bound once."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


_ARG, _KWARG, _CONST = 0, 1, 2
Plan = tuple[tuple[int, Any], ...]
"""Where each formula input comes from: ``(_ARG, index)``, ``(_KWARG, name)`` or
``(_CONST, default)``."""
_PLANS: dict[tuple[type, int, tuple[str, ...]], Plan | None] = {}


def _plan(cls: type, n_args: int, names: tuple[str, ...]) -> Plan | None:
    """How :func:`formula_inputs` merges a call of ``cls`` with ``n_args`` positional arguments
    and keyword arguments ``names``; ``None``: no signature, or the call does not bind to it.

    Binding depends on the argument count and names only, never on the values, so it is done
    once per call pattern, on stand-ins, and every later call just picks its values."""
    signature = _forward_signature(cls)
    if signature is None:
        return None
    try:
        bound = signature.bind(None, *[_Arg(i) for i in range(n_args)],
                               **{name: _Kwarg(name) for name in names})
    except TypeError:
        return None
    arguments = bound.arguments

    def source(value: Any) -> tuple[int, Any]:
        return (_ARG, value.index) if isinstance(value, _Arg) else (_KWARG, value.name)

    parameters = list(signature.parameters.values())[1:]  # drop ``self``
    last_given = -1
    for position, parameter in enumerate(parameters):
        if parameter.name in arguments:
            last_given = position
    plan: list[tuple[int, Any]] = []
    for parameter in parameters[: last_given + 1]:
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            plan.extend(source(value) for value in arguments.get(parameter.name, ()))
        elif parameter.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        ):
            if parameter.name in arguments:
                plan.append(source(arguments[parameter.name]))
            elif parameter.default is not inspect.Parameter.empty:
                plan.append((_CONST, parameter.default))
            else:
                plan.append((_CONST, None))
    return tuple(plan)


def formula_inputs(
    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...]:
    """The ``inputs`` tuple a formula sees: positional arguments, with keyword arguments that
    name positional parameters of ``forward`` merged in signature order (defaults filled in up
    to the last one given). ``mha(q, k, v, need_weights=False)`` therefore gives the formula
    ``(q, k, v, None, False)``, and a kwargs-only call ``linear(input=x)`` gives ``(x,)``.
    """
    if not kwargs:
        return args
    key = (type(module), len(args), tuple(kwargs))
    try:
        plan = _PLANS[key]
    except KeyError:
        plan = _PLANS[key] = _plan(*key)
    if plan is None:
        return args + tuple(kwargs.values())
    return tuple([args[value] if kind == _ARG else kwargs[value] if kind == _KWARG else value
                  for kind, value in plan])


def input_shapes_of(input: Any, pred_fn: Callable[..., Any] | None = None
                    ) -> tuple[Any, tuple[str, ...]]:
    """The shape tree and dtypes of the arguments :func:`make_invocation` calls the model
    with for ``input``, in the form the root call's ``input_shapes`` and ``input_dtypes``
    columns hold them (the positional arguments as a tuple, keyword arguments as one dict
    after them): computed once per pass from the input, without running anything, so that
    a pass that records no call's shapes (a timing, a memory pass) says what it ran on.

    ``(None, ())`` with ``pred_fn`` (what the model is called with is up to it) or without
    ``input``: unknown, not checked."""
    if pred_fn is not None or input is None:
        return None, ()
    if isinstance(input, Mapping):
        return call_input_shapes((), dict(input))
    return call_input_shapes(tuple(input) if unpacks(input) else (input,), {})
