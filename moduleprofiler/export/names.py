"""How modules are named in outputs: one name for the root, everywhere.

The records keep PyTorch's own module paths (``named_modules()``), where the root is ``""``:
that is what ``model.get_submodule(path)`` takes, so ``CallRecord.path``, ``ModuleInfo.path``
and the JSON document (a copy of the records) keep it.

Every output that *names* modules (the DataFrames' ``module`` column, text, Markdown, CSV,
LaTeX, the HTML report, notes, the command line, the 0.0.4 dicts) calls the root
``__root__`` (:data:`ROOT_NAME`). Why that name: the 0.0.4 dicts and DataFrames must keep
their ``"__root__"`` key, so any other choice would leave the same module with two names; an
empty name is read back as a missing value by CSV readers (``pandas.read_csv`` gives NaN) and
vanishes from text tables. A child registered under the attribute name ``__root__`` (legal but
unheard of) is named with a dot in front, ``.__root__`` (its path joined to the root's ``""``),
as is every module under it: no two modules share a name, no path starts with a dot (so a name
named again stays itself), and :func:`module_path` reads each back.
"""

from __future__ import annotations

from moduleprofiler.records import ROOT_NAME, display_path, module_path

__all__ = ["ELLIPSIS", "ROOT_NAME", "SHARED_MARK", "elide_label", "elide_name", "elide_path",
           "module_name", "module_path"]

ELLIPSIS = "..."
"""What stands for the elided middle of a shortened name (plain ASCII: it typesets as is in
every format)."""


module_name = display_path
"""The name of the module at ``path`` in outputs: ``""`` -> ``"__root__"`` (the one
definition is :func:`moduleprofiler.records.display_path`)."""


def elide_name(name: str, limit: int) -> str:
    """``name`` in at most ``limit`` characters, its middle replaced by :data:`ELLIPSIS`.

    A dotted module path keeps its first part and its last two whole parts when they fit
    (``encoder...encoder_layer_11.mlp``): the leaf and its parent say what the module is, the
    first part where it lives. When that drops the last block index, which is what tells
    repeated blocks apart, the path from that index on is kept whole and the start shortened
    (``transfor...10.mlp.c_fc``, not ``transformer...mlp.c_fc`` for ``h.10`` and ``h.11``
    alike); otherwise (and for any other name) a quarter of the room goes to
    the start and the rest to the end, where paths differ (``enc...ayer_0.self_attention``)."""
    if len(name) <= limit:
        return name
    room = limit - len(ELLIPSIS)
    if room < 2:
        return name[:limit]
    parts = name.split(".")
    if len(parts) > 3:
        tail = ".".join(parts[-2:])
        for part in reversed(parts[1:-2]):
            if len(parts[0]) + len(part) + 1 + len(tail) > room:
                break
            tail = f"{part}.{tail}"
        # the block index (h.10 / h.11) is what tells repeated blocks apart: a tail that lost
        # it keeps it, and the start gives up characters instead
        index = next((i for i in range(len(parts) - 3, 0, -1) if parts[i].isdigit()), None)
        if index is not None and not any(p.isdigit() for p in tail.split(".")):
            numbered = ".".join(parts[index:])
            if len(numbered) <= room:
                return f"{name[:room - len(numbered)]}{ELLIPSIS}{numbered}"
        elif len(parts[0]) + len(tail) <= room:
            return f"{parts[0]}{ELLIPSIS}{tail}"
    head = room // 4
    return f"{name[:head]}{ELLIPSIS}{name[len(name) - (room - head):]}"


SHARED_MARK = " [shared with {}]"
"""The mark a tree label gets when its module registers a parameter another module owns."""
_SHARED_OPEN, _SHARED_CLOSE = SHARED_MARK.split("{}")
_OWNER_FLOOR = 8
"""Fewest characters an elided owner keeps in a shared mark before the mark goes short."""


def elide_label(label: str, limit: int) -> str:
    """A tree label (``name (Type) [shared with owner]``) in at most ``limit`` characters.
    The mark of a shared parameter gives up characters first, its owner elided, then
    ``[shared]`` alone, so that the module's own name and type are not cut to keep the mark
    whole (a label is otherwise :func:`elide_name`'d, marks at its end kept)."""
    if len(label) <= limit or not label.endswith(_SHARED_CLOSE) or _SHARED_OPEN not in label:
        return elide_name(label, limit)
    base, owner = label[:-len(_SHARED_CLOSE)].rsplit(_SHARED_OPEN, 1)
    room = limit - len(base) - len(_SHARED_OPEN) - len(_SHARED_CLOSE)
    if room >= _OWNER_FLOOR:
        return base + SHARED_MARK.format(elide_name(owner, room))
    short = " [shared]"
    return elide_name(base, max(limit - len(short), 0)) + short if limit > len(short) + 5 \
        else elide_name(label, limit)


def _is_index(part: str) -> bool:
    """A block index (``11``) or a folded run of them (``0-11``)."""
    return part.replace("-", "").isdigit()


def elide_path(name: str, limit: int) -> str:
    """``name`` in at most ``limit`` characters where possible, shortened only at dots: whole
    middle parts of a dotted path are replaced by :data:`ELLIPSIS`, never part of a word
    (``transformer...0-11.mlp.c_fc``), so a typeset name stays readable.

    The last two parts (what the module is) are kept before the first one (where it lives),
    and the last block index in the middle (``h.10``/``h.11``, which tells repeated blocks
    apart) before either. A name with nothing to drop (one part, or a last part longer than
    ``limit``) keeps what it must and may stay longer than ``limit``: a word is never cut."""
    if len(name) <= limit:
        return name
    parts = name.split(".")
    if len(parts) < 2:
        return name
    middle = [i for i in range(1, len(parts) - 1) if _is_index(parts[i])]
    # the tail may start no later than the block index, when there is one
    last_start = middle[-1] if middle else len(parts) - 1
    starts = range(1, last_start + 1)
    # preferred first: the last two parts (what the module is) with the first part (where it
    # lives), then without it; then the last part alone; the longest tail first in each
    pairs = [s for s in starts if s <= len(parts) - 2]
    forms = [f"{parts[0]}{ELLIPSIS}{'.'.join(parts[s:])}" for s in pairs if s > 1]
    forms += [f"{ELLIPSIS}{'.'.join(parts[s:])}" for s in pairs]
    if last_start == len(parts) - 1:
        forms += [f"{parts[0]}{ELLIPSIS}{parts[-1]}", f"{ELLIPSIS}{parts[-1]}"]
    fitting = [form for form in forms if len(form) <= limit]
    if fitting:
        return fitting[0]
    shortest = min(forms, key=len)  # over the limit rather than a word cut or a block lost
    return shortest if len(shortest) < len(name) else name


def _shared_start(texts: list[str]) -> int:
    """How many characters all ``texts`` begin with."""
    shortest = min(map(len, texts))
    return next((i for i in range(shortest) if len({t[i] for t in texts}) > 1), shortest)


def distinct_names(names: list[str], limit: int) -> list[str]:
    """``names`` (different names whose :func:`elide_name` forms are one text) each in at
    most ``limit`` characters, showing where they differ: from two characters before their
    first difference on (two characters before it, room allowing), with the end they share
    cut to half of ``limit`` (``...h_alpha_o...projection_layer`` and
    ``...h_beta_ou...projection_layer``, not ``enc.blk...output_projection_layer`` twice:
    two modules read as one)."""
    shared_start = _shared_start(names)
    shared_end = _shared_start([name[::-1] for name in names])
    out = []
    for name in names:
        tail = min(shared_end, len(name) - shared_start, limit // 2)
        body_end = len(name) - tail
        room = limit - tail - 2 * len(ELLIPSIS)
        start = max(0, shared_start - min(2, room // 4))  # a little context, room allowing
        room += 0 if start else len(ELLIPSIS)
        if len(name) <= limit or room < 1:
            out.append(elide_name(name, limit))
        elif start + room >= body_end:  # the difference runs to the end: keep the end whole
            out.append(ELLIPSIS + name[len(name) - (limit - len(ELLIPSIS)):])
        else:
            out.append(f"{ELLIPSIS if start else ''}{name[start:start + room]}{ELLIPSIS}"
                       f"{name[body_end:]}")
    return out
