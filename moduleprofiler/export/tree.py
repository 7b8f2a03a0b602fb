"""The shape of a module tree from module names (dotted paths, the root named ``__root__``):
each shown module's nearest shown ancestor, and the ``|--``/``\\`--`` prefixes that draw it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from moduleprofiler.export.names import module_path


@dataclass(frozen=True)
class Branches:
    """The four pieces a tree is drawn with."""

    tee: str
    last: str
    pipe: str
    blank: str


ASCII_BRANCHES = Branches("|-- ", "`-- ", "|   ", "    ")
UNICODE_BRANCHES = Branches("├─ ", "└─ ", "│  ", "   ")


def parents(names: Sequence[str]) -> list[int | None]:
    """For each module name, the index of its nearest ancestor among ``names`` (``None`` if
    none). The root (``__root__`` or ``""``) is the ancestor of every other module."""
    paths = [module_path(name) for name in names]
    position = {path: i for i, path in enumerate(paths)}
    out: list[int | None] = []
    for path in paths:
        parent: int | None = None
        rest = path
        while rest:
            rest = rest.rpartition(".")[0]
            if rest in position:
                parent = position[rest]
                break
        out.append(parent)
    return out


def relative_name(path: str, ancestor: str | None) -> str:
    """``path`` relative to ``ancestor`` (``"layer1.0.conv1"`` under ``"layer1"`` is
    ``"0.conv1"``; under the root it is itself)."""
    if ancestor is None or not module_path(ancestor):
        return path
    return path[len(ancestor) + 1:] if path.startswith(ancestor + ".") else path


def prefixes(paths: Sequence[str], branches: Branches = ASCII_BRANCHES) -> list[str]:
    """The drawing in front of each row, rows given in pre-order (parents before children)."""
    parent_of = parents(paths)
    children: dict[int | None, list[int]] = {}
    for index, parent in enumerate(parent_of):
        children.setdefault(parent, []).append(index)
    out = [""] * len(paths)

    def walk(index: int, lead: str, last: bool, top: bool) -> None:
        out[index] = "" if top else lead + (branches.last if last else branches.tee)
        kids = children.get(index, [])
        extension = "" if top else (branches.blank if last else branches.pipe)
        for position, child in enumerate(kids):
            walk(child, lead + extension, position == len(kids) - 1, False)

    for root in children.get(None, []):
        walk(root, "", True, True)
    return out



def squeeze_prefixes(drawn: Sequence[str], room: int) -> list[str]:
    """``drawn`` (the rows' drawings from :func:`prefixes`) in at most ``room`` characters
    each: a prefix deeper than that has its outer levels replaced by a count of them, the
    same number of inner levels kept on every such row (``[+172] |   `-- ``), so that a row
    deeper than the width says how deep it is instead of running past the line or reading
    as a row of another depth. Prefixes that fit are returned as they are."""
    deep = [d for d in drawn if len(d) > room]
    if not deep:
        return list(drawn)
    unicode = deep[0].endswith((UNICODE_BRANCHES.tee, UNICODE_BRANCHES.last))
    unit = len(UNICODE_BRANCHES.tee if unicode else ASCII_BRANCHES.tee)
    deepest = max(len(d) for d in deep) // unit
    kept, marker = 1, 0
    for marker in range(len("[+1] "), room + 1):  # the count's width, the same on every row
        kept = max((room - marker) // unit, 1)
        if len(f"[+{deepest - kept}] ") <= marker:
            break
    return [d if len(d) <= room else
            f"[+{len(d) // unit - kept}]".ljust(marker) + d[len(d) - kept * unit:]
            for d in drawn]
