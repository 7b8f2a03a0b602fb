"""The package's shape: no import cycles, no imports hidden inside functions, and the layers
import only downwards (the records never import the views, the engines never the 0.0.4 layer)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "moduleprofiler"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> tuple[set[str], list[str]]:
    """Runtime imports of moduleprofiler modules at module level, and those inside functions
    (``if TYPE_CHECKING:`` blocks are not runtime imports)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top: set[str] = set()
    nested: list[str] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            function = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            names: list[str] = []
            if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                names = [child.module]
            elif isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            for name in names:
                if name == "moduleprofiler" or name.startswith("moduleprofiler."):
                    (nested.append(name) if in_function else top.add(name))
            visit(child, function)

    visit(tree, False)
    return top, nested


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        top, _ = _imports(path)
        # ``from moduleprofiler.x import y`` where y is a submodule still depends on x's module
        graph[name] = {target for target in top if target in modules and target != name}
    return graph


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_imports_hidden_inside_functions() -> None:
    hidden = {
        _module_name(path): nested
        for path in PACKAGE.rglob("*.py")
        if (nested := _imports(path)[1])
    }
    assert hidden == {}


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


def test_layers_import_only_downwards() -> None:
    graph = _graph()
    forbidden = {
        "moduleprofiler.records": ("moduleprofiler.export", "moduleprofiler.memory",
                                   "moduleprofiler.timing", "moduleprofiler.legacy"),
        "moduleprofiler.runner": ("moduleprofiler.export", "moduleprofiler.legacy"),
        "moduleprofiler.export": ("moduleprofiler.legacy",),
        "moduleprofiler.memory": ("moduleprofiler.legacy", "moduleprofiler.export",
                                  "moduleprofiler.timing"),
        "moduleprofiler.timing": ("moduleprofiler.legacy", "moduleprofiler.memory"),
    }
    found = []
    for module, targets in graph.items():
        for layer, banned in forbidden.items():
            if module == layer or module.startswith(layer + "."):
                found.extend((module, t) for t in targets if t.startswith(banned))
    assert found == []
