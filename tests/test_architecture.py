"""The package's shape: no import cycles, no imports hidden inside functions, and the layers
import only downwards (the records never import the views, the core never the 0.0.4 layer in
``compat/``), and no package imports another package's private (``_``-named) module."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "moduleprofiler"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, type_checking: bool = False) -> tuple[set[str], list[str]]:
    """Imports of moduleprofiler modules at module level, and those inside functions: the
    runtime ones, and with ``type_checking`` those of ``if TYPE_CHECKING:`` blocks as well.
    ``from moduleprofiler.x import y`` names both ``x`` and ``x.y`` (``y`` may be a
    submodule); the caller keeps the names that are modules."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top: set[str] = set()
    nested: list[str] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test) \
                    and not type_checking:
                continue
            function = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            names: list[str] = []
            if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [child.module, *(f"{child.module}.{a.name}" for a in child.names)]
            elif isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            for name in names:
                if name == "moduleprofiler" or name.startswith("moduleprofiler."):
                    (nested.append(name) if in_function else top.add(name))
            visit(child, function)

    visit(tree, False)
    return top, nested


def _graph(type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the modules it imports at module level (with ``type_checking``, also inside
    ``if TYPE_CHECKING:``). A package's ``__init__`` that Python runs before any of its
    submodules is not an edge: only what a module names. Nor is the ``if TYPE_CHECKING:``
    block of ``moduleprofiler/__init__.py``: it declares the public names for type checkers,
    which ``__getattr__`` loads on first use; at run time the package imports none of them."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        top, _ = _imports(path, type_checking and name != "moduleprofiler")
        graph[name] = {target for target in top if target in modules and target != name}
    return graph


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


DEFERRED_IMPORTS = {"moduleprofiler.cli_options": ["moduleprofiler.cli", "moduleprofiler.cli.run"]}
"""The one import inside a function, on purpose: the command line's front answers
``--version``, ``--help`` and argument errors with the standard library alone and imports the
command (torch, pandas, Transformers: seconds) only once the options are fine."""


def test_no_imports_hidden_inside_functions() -> None:
    hidden = {
        _module_name(path): nested
        for path in PACKAGE.rglob("*.py")
        if (nested := _imports(path)[1])
    }
    assert hidden == DEFERRED_IMPORTS


def test_no_import_cycle_between_packages() -> None:
    graph = _graph()
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = _package(module)
        packages.setdefault(source, set()).update(
            _package(t) for t in targets if _package(t) != source and t != "moduleprofiler")
    cycles = []
    for source, targets in packages.items():
        for target in targets:
            if source in _reachable(packages, target):
                cycles.append((source, target))
    assert cycles == []


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    pending = [start]
    while pending:
        node = pending.pop()
        for target in graph.get(node, ()):
            if target not in seen:
                seen.add(target)
                pending.append(target)
    return seen


KNOWN_MODULE_CYCLES: set[str] = set()
"""Modules on an import cycle (type-checking imports included) still to be untangled; none
may be added."""


def test_no_import_cycle_between_modules_not_even_through_type_checking() -> None:
    """A cycle closed only by an ``if TYPE_CHECKING:`` import is still two modules that
    cannot be understood (or moved) one without the other: a view and its renderers, say.
    Package-wide, module by module."""
    graph = _graph(type_checking=True)
    on_a_cycle = {module for module in graph if module in _reachable(graph, module)}
    assert on_a_cycle <= KNOWN_MODULE_CYCLES, sorted(on_a_cycle - KNOWN_MODULE_CYCLES)


KNOWN_PACKAGE_CYCLES: set[str] = set()
"""Packages on an import cycle through type-checking imports, still to be untangled; none
may be added."""


def test_no_import_cycle_between_packages_not_even_through_type_checking() -> None:
    graph = _graph(type_checking=True)
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = _package(module)
        packages.setdefault(source, set()).update(
            _package(t) for t in targets if _package(t) != source and t != "moduleprofiler")
    on_a_cycle = {source for source in packages if source in _reachable(packages, source)}
    assert on_a_cycle <= KNOWN_PACKAGE_CYCLES, sorted(on_a_cycle - KNOWN_PACKAGE_CYCLES)


def test_the_format_table_is_whole_when_imported() -> None:
    """Every built-in format is written out in the table itself: no module registers one
    as a side effect of being imported, so no import order decides what a view can do."""
    calls = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            for call in ast.walk(node):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                        and isinstance(call, ast.Call) \
                        and ast.unparse(call.func).endswith("register_format"):
                    calls.append(_module_name(path))
    assert calls == []


def test_layers_import_only_downwards() -> None:
    graph = _graph()
    counting = "moduleprofiler.counting"
    forbidden = {
        # the records are data: below the runner that fills them and the views that show them
        "moduleprofiler.records": ("moduleprofiler.export", "moduleprofiler.memory",
                                   "moduleprofiler.timing", "moduleprofiler.runner"),
        "moduleprofiler.runner": ("moduleprofiler.export",),
        # the views name no producer
        "moduleprofiler.export": ("moduleprofiler.timing", "moduleprofiler.memory",
                                  "moduleprofiler.prediction", counting),
        # the module tree is the base layer's (moduleprofiler.modules), not the counting pass's
        "moduleprofiler.memory": ("moduleprofiler.timing", counting),
        "moduleprofiler.timing": ("moduleprofiler.memory", counting),
        "moduleprofiler.efficiency": (counting,),
    }
    found = []
    for module in graph:  # not even through another module
        for layer, banned in forbidden.items():
            if _in(module, (layer,)):
                found.extend((module, t) for t in _reachable(graph, module) if _in(t, banned))
    assert found == []


FACES = {
    "moduleprofiler",  # the public __init__: exports the ModuleProfiler that has both faces
    "moduleprofiler.profiler",  # 0.0.4's documented path of ModuleProfiler
    "moduleprofiler.utils",  # 0.0.4's path of its helpers
    "moduleprofiler.legacy", "moduleprofiler.legacy_timing",  # deprecated re-exports
}
"""The modules that may import ``moduleprofiler.compat``: re-exports only, no code."""

def _in(module: str, prefixes: tuple[str, ...] | set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_core_never_imports_compat() -> None:
    """Nothing but the 0.0.4 paths reaches ``compat/``, not even through another module: the
    engines, and the front ends built on :class:`moduleprofiler.core.Profiler` (the command
    line, ``language/``, the integrations)."""
    graph = _graph()
    compat = ("moduleprofiler.compat",)
    direct = sorted((module, target) for module, targets in graph.items()
                    for target in targets
                    if _in(target, compat) and not _in(module, compat) and module not in FACES)
    assert direct == []
    reaching = sorted(module for module in graph
                      if not _in(module, compat) and module not in FACES
                      and any(_in(t, compat) for t in _reachable(graph, module)))
    assert reaching == []


def test_the_0_0_4_face_modules_are_re_exports_only() -> None:
    """The old paths hold no code of their own: imports, ``__all__``, a docstring, aliases and
    the deprecation warning."""
    for name in FACES - {"moduleprofiler"}:
        path = PACKAGE.parent.joinpath(*name.split(".")).with_suffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = [node.name for node in tree.body
                   if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))]
        assert defined == [], name


PRIVATE_IMPORTS_TO_REMOVE: set[tuple[str, str]] = set()
"""Known imports of another package's private module, to be removed; none may be added."""


def test_no_package_imports_another_packages_private_module() -> None:
    graph = _graph()
    found = set()
    for module, targets in graph.items():
        for target in targets:
            *package, last = target.split(".")
            if last.startswith("_") and not last.startswith("__") and package != ["moduleprofiler"]:
                if not _in(module, (".".join(package),)):
                    found.add((module, target))
    assert found <= PRIVATE_IMPORTS_TO_REMOVE, sorted(found - PRIVATE_IMPORTS_TO_REMOVE)


def test_removed_dead_code_stays_out() -> None:
    """Helpers nothing called, and ``NotImplementedError`` stubs standing in
    for methods of another class in the profiler and its 0.0.4 face."""
    dead = {"types_in", "iter_groups", "profile_to_json"}
    found = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in dead:
                found.append((_module_name(path), node.name))
            if (_in(_module_name(path), ("moduleprofiler.compat", "moduleprofiler.core"))
                    and isinstance(node, ast.Raise) and node.exc is not None
                    and "NotImplementedError" == ast.unparse(node.exc).removesuffix("()")):
                found.append((_module_name(path), "raise NotImplementedError"))
    assert found == []


def test_every_deprecation_goes_through_one_helper() -> None:
    """A ``DeprecationWarning`` is raised by ``deprecation.warn_deprecated`` only, so every one
    names what to use instead and the release that removes it."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "deprecation.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [(_module_name(path), node.lineno) for node in ast.walk(tree)
                  if isinstance(node, ast.Name) and node.id == "DeprecationWarning"]
    assert found == []


def test_warnings_go_through_the_helper_that_names_the_users_line() -> None:
    """Every warning issued during a call goes through :func:`moduleprofiler.warn.warn`, whose
    stacklevel walks out of the package, or :func:`moduleprofiler.deprecation.warn_deprecated`
    (which uses it, and takes an explicit level for the import-time deprecations of the
    legacy modules: Python attributes those to the import)."""
    direct = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
              if "warnings.warn(" in path.read_text(encoding="utf-8")}
    assert direct == {"warn.py", "deprecation.py"}


def test_no_subclass_changes_a_methods_meaning() -> None:
    """A ``# type: ignore[override]`` says a subclass is another class under the same name:
    none in the package."""
    found = [(_module_name(path), number) for path in PACKAGE.rglob("*.py")
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if "type: ignore[override]" in line]
    assert found == []


def _subclasses(cls: type) -> list[type]:
    return [cls, *(sub for direct in cls.__subclasses__() for sub in _subclasses(direct))]


def test_every_result_summary_module_and_to_df_mean_what_a_profiles_do() -> None:
    """Every result type (timing, memory, prediction: each a ``Profile``) has
    ``summary()``, ``module()`` and ``to_df()`` of one signature and one return type, the
    profile's: a model table, a module's facts and a per-call frame by default."""
    import inspect
    import typing

    import moduleprofiler.memory
    import moduleprofiler.prediction
    import moduleprofiler.timing  # noqa: F401  (the result types are their subclasses)
    from moduleprofiler.export.profile import Profile

    results = _subclasses(Profile)
    names = {cls.__name__ for cls in results}
    assert {"ModuleTiming", "TrainingTiming", "MemoryReport", "PredictedProfile"} <= names
    differ = []
    for method in ("summary", "module", "to_df"):
        base = getattr(Profile, method)
        expected = (inspect.signature(base), typing.get_type_hints(base).get("return"))
        for cls in results:
            own = getattr(cls, method)
            got = (inspect.signature(own), typing.get_type_hints(own).get("return"))
            if got != expected:
                differ.append(f"{cls.__name__}.{method}{got[0]}")
    assert differ == []


def test_only_the_devices_module_calls_torch_cuda() -> None:
    """What differs per device is asked of :mod:`moduleprofiler.devices`: no other module
    reads ``torch.cuda`` (docstrings may name it)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.Attribute) and ast.unparse(node) == "torch.cuda"
               for node in ast.walk(tree)):
            found.add(path.relative_to(PACKAGE).as_posix())
    assert found == {"devices.py"}


CLOCKS = PACKAGE / "timing" / "clocks"
CLOCK_SHAPES = {"Clock", "Readings", "StampSource"}
"""The clocks package's shared shapes, which every pass may name; its other classes are
particular clocks (and their stamp sources and listeners), named only inside it."""


def test_passes_talk_to_the_clock_protocol_only() -> None:
    """No module outside ``timing/clocks`` names a particular clock: a pass asks its clock
    (``clock.settle()``, ``clock.readings(...)``), never which clock it has (the ``if
    clocks.kernels is not None`` branches the kernel clock once threaded through the passes)."""
    particular = {node.name for path in CLOCKS.glob("*.py")
                  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                  if isinstance(node, ast.ClassDef)} - CLOCK_SHAPES
    assert {"CpuClock", "EventClock", "KernelClock", "CudaStamps"} <= particular
    found = []
    for path in PACKAGE.rglob("*.py"):
        if CLOCKS in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([node.id] if isinstance(node, ast.Name) else
                     [node.attr] if isinstance(node, ast.Attribute) else
                     [alias.name for alias in node.names] if isinstance(node, ast.ImportFrom)
                     else [])
            found += [(_module_name(path), name) for name in names if name in particular]
            if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute)
                    and node.left.attr == "kernels"
                    and isinstance(node.ops[0], (ast.Is, ast.IsNot))):  # a clock as a flag
                found.append((_module_name(path), ast.unparse(node)))
    assert found == []


def _declares_columns(path: Path) -> bool:
    """Whether the module registers columns when imported (a ``register_column`` or
    ``register_quantity`` call outside its functions and classes)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = [node for node in tree.body
           if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return any(isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in (
        "register_column", "register_quantity", "_column")
        for statement in top for node in ast.walk(statement))


def test_no_module_is_imported_only_for_the_columns_it_registers() -> None:
    """Columns register because the code that uses them imports their block (a clock's
    ``columns``, a result's ``COLUMNS``), never through an import kept only for its side
    effect (``# noqa: F401``): then whether a column exists would depend on what else had been
    imported first."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    found = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            text = "\n".join(lines[node.lineno - 1:node.end_lineno])
            if "noqa: F401" not in text:
                continue
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)])
            found += [(_module_name(path), name) for name in names
                      if name in modules and _declares_columns(modules[name])]
    assert found == []


NOT_A_PROFILE: dict[str, str] = {
    "GenerationProfile": "many passes' profiles (one per step) and the run's: summary() is the "
                         "run's one-row table and totals() its dict; to_df() one row per step "
                         "(each step an outermost call of the run, its calls in the step's "
                         "Profile)",
    "LatencyResult": "one hook-free measurement of the whole model (as torch.utils.benchmark's "
                     "Measurement): no module, no rows; it is summary()'s latency argument",
    "PredictionSweep": "one row per batch size and dtype, each a whole predicted pass: "
                       "to_df() is that table",
    "DistributedProfile": "one Profile per rank: summary() the group's one-row table, module() "
                          "a module's facts (the same on every rank holding it), to_df() one "
                          "row per rank and module, totals() its dict of whole-run numbers",
    "ExpertLoad": "a listener that counts the tokens each expert gets: to_df() one row per "
                  "layer and expert",
    "KVCacheSize": "the layers of one key/value cache: to_df() one row per layer",
    "TrainingProfiler": "the live profiler of a training loop: result() is its Profile; its "
                        "summary() is deprecated (report()), its to_df() too (per module: "
                        "result().to_df('module'))",
}
"""Public classes with ``summary()``, ``module()`` or ``to_df()`` that are no ``Profile``, and
what their rows are (reviewed by hand: a new one fails until it is listed here)."""

DEPRECATED_SUMMARY = {"TrainingProfiler"}
"""``summary()`` methods kept only as a deprecated alias of another name (``report()``)."""


def test_results_that_are_no_profile_keep_the_meaning_of_summary_module_and_to_df() -> None:
    """A result that is no ``Profile`` (a generation, a sweep, a distributed run) means by
    ``summary()`` what a profile does, a one-row ``DataFrame`` (``GenerationProfile.summary()``
    returned a dict), by ``module()`` a module's facts, by ``to_df()`` a ``DataFrame``; and it
    is listed in ``NOT_A_PROFILE`` with what its rows are."""
    import importlib
    import inspect
    import typing

    import pandas as pd

    from moduleprofiler.export.profile import Profile

    packages = ("moduleprofiler", "moduleprofiler.timing", "moduleprofiler.memory",
                "moduleprofiler.efficiency", "moduleprofiler.prediction",
                "moduleprofiler.language", "moduleprofiler.distributed",
                "moduleprofiler.export", "moduleprofiler.integrations")
    found: dict[str, type] = {}
    for package in packages:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            cls = getattr(module, name, None)
            if inspect.isclass(cls) and not issubclass(cls, Profile) and any(
                    callable(inspect.getattr_static(cls, method, None))
                    for method in ("summary", "module", "to_df")):
                found[cls.__name__] = cls
    # returned by sweep() and predict_sweep(), exported by no package
    found["PredictionSweep"] = importlib.import_module(
        "moduleprofiler.prediction.sweep").PredictionSweep
    assert sorted(set(found) - set(NOT_A_PROFILE)) == []
    # LatencyResult has none of the three methods: listed for what it is, not checked
    assert sorted(set(NOT_A_PROFILE) - set(found)) == ["LatencyResult"]
    wrong = []
    for name, cls in found.items():
        for method, expected in (("summary", pd.DataFrame), ("to_df", pd.DataFrame)):
            own = inspect.getattr_static(cls, method, None)
            if own is None or (method == "summary" and name in DEPRECATED_SUMMARY):
                continue
            hints = typing.get_type_hints(own)
            required = [p for p in list(inspect.signature(own).parameters.values())[1:]
                        if p.default is inspect.Parameter.empty
                        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            if hints.get("return") is not expected or required:
                wrong.append(f"{name}.{method}")
        own_module = inspect.getattr_static(cls, "module", None)
        if callable(own_module) and inspect.signature(own_module) != inspect.signature(
                Profile.module):
            wrong.append(f"{name}.module")
    assert wrong == []
