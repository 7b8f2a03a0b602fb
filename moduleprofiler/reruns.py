"""Module calls made inside the backward: an activation checkpoint's rerun of the forwards it
did not save.

``torch.utils.checkpoint`` runs a block's forward again inside the backward. With the hooks
installed over the backward, those module calls reach the runner while an autograd node runs.
They are no new forward calls: each is matched to the forward call it repeats (a
:class:`Rerun`), and what it does is that call's backward work:

* the operators it runs (the forward again) belong to the call it repeats;
* the autograd nodes it creates belong to the calls that created them in the rerun. A
  reentrant checkpoint (``use_reentrant=True``) differentiates that rebuilt graph in a nested
  backward inside its own node, so its backward is booked module by module like the forward's
  own graph (:meth:`Reruns.owner`). The other kind builds no graph that runs.

Matching. The outermost call of a rerun repeats a forward call of its module: the only one;
else the one the autograd node now running was created inside (a non-reentrant checkpoint
reruns when a node of the block needs what was not saved); else one made inside the call that
created the node, the first entered after the node was made (a reentrant checkpoint's node is
made by its caller just before it runs its function); else the last one entered before the
node's call (a checkpointed function calling several modules). A call inside a rerun repeats
the next not yet repeated call of its module inside the call its caller repeats. A call that
matches none (the rerun took another branch) repeats ``None``: its work stays with the
enclosing call.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from torch import nn

from moduleprofiler.autograd_nodes import (
    REENTRANT_CHECKPOINT_NODE,
    STOP,
    sequence_number,
    walk_nodes,
)
from moduleprofiler.call import Call
from moduleprofiler.shapes import iter_tensors


@dataclass(slots=True)
class Rerun:
    """One module call made inside the backward."""

    module: nn.Module
    call: Call | None
    """The forward call it repeats (``None``: none matches)."""
    outer: Call | None
    """The call whose backward work ran until it started: the call the enclosing rerun
    repeats, or, for the outermost, the one that created the autograd node running it."""
    exception: BaseException | None
    """The exception being handled when it started (a failure is a newer one)."""


class Reruns:
    """The module calls of the backward, matched to the forward calls of one pass."""

    def __init__(self) -> None:
        self.frames: list[Rerun] = []
        """The reruns running now, outermost first."""
        self.count = 0
        """Module calls made inside the backward since the last :meth:`reset`."""
        self.rebuilds = False
        """Whether the outermost rerun now running is a reentrant checkpoint's, whose graph a
        nested backward differentiates."""
        self._children: dict[int, list[Call]] | None = None
        self._by_module: dict[int, list[Call]] | None = None
        self._entered: dict[int, int] | None = None
        self._used: dict[tuple[int, int], int] = {}
        self._node: Any = None
        """The autograd node whose run the current rerun is part of (kept alive)."""
        self._starts: list[int] = []
        self._calls: list[Call | None] = []
        self._rebuilt: dict[int, tuple[Any, Call | None]] = {}
        """By ``id``: each node of the graph the current checkpoint rebuilt (kept alive, so that
        its id is not reused) and its call; ``None`` for a node found not to be one."""

    def reset(self) -> None:
        """Forget the previous pass (its calls and the nodes its reruns rebuilt)."""
        self.frames.clear()
        self.count = 0
        self._children = self._by_module = self._entered = None
        self._used = {}
        self._node = None
        self.rebuilds = False
        self._starts, self._calls = [], []
        self._rebuilt = {}

    def enter(self, module: nn.Module, node: Any, node_owner: Call | None,
              calls: list[Call], seq_starts: list[int], seq_calls: list[Call | None],
              exception: BaseException | None) -> Rerun:
        """A module call starts inside the backward, while autograd runs ``node`` (created by
        ``node_owner``); ``calls`` and the sequence lists are the forward's."""
        frames = self.frames
        if frames:
            enclosing = frames[-1]
            outer = enclosing.call if enclosing.call is not None else enclosing.outer
            call = None if enclosing.call is None else self._next_child(enclosing.call, module,
                                                                       calls)
        else:
            if node is not self._node:  # a new node's run: the previous one's reruns are over
                self._node = node
                self._used = {}
                self._starts, self._calls = [], []
                # the nodes owned so far stay owned: a checkpoint nested in another one reruns
                # inside the outer one's nested backward, before the rest of it runs
                self.rebuilds = type(node).__name__ == REENTRANT_CHECKPOINT_NODE
            outer = node_owner
            call = self._repeated(node, node_owner, module, calls, seq_starts, seq_calls)
        rerun = Rerun(module, call, outer, exception)
        frames.append(rerun)
        self.count += 1
        return rerun

    def mark(self, sequence: int, call: Call | None) -> None:
        """Autograd's sequence counter at a rerun's hook event, and the call whose nodes
        are created from then on (after an outermost rerun call: the call that made the
        checkpoint, whose function goes on between its module calls)."""
        self._starts.append(sequence)
        self._calls.append(call)

    def own_graph(self, output: Any) -> None:
        """After an outermost rerun call of a reentrant checkpoint: give each node of the graph
        it rebuilt so far, reachable from ``output``, the call that created it (a checkpointed
        function may call several modules, and work of its own between them)."""
        starts, calls, rebuilt = self._starts, self._calls, self._rebuilt
        if len(starts) < 2:
            return
        low, high = starts[0], starts[-1]

        def visit(node: Any, _: None) -> Any:
            if id(node) in rebuilt:  # owned by an earlier walk, and so is what it reaches
                return STOP
            number = sequence_number(node)
            if number is None or not low <= number < high:  # made before the rerun (or a
                return STOP                                 # leaf's accumulation)
            rebuilt[id(node)] = (node, calls[bisect.bisect_right(starts, number) - 1])
            return None

        walk_nodes(((t.grad_fn, None) for t in iter_tensors(output) if t.grad_fn is not None),
                   visit)

    @property
    def owns_nodes(self) -> bool:
        """Whether some rerun of this pass rebuilt nodes that :meth:`owner` knows."""
        return bool(self._rebuilt)

    def owner(self, node: Any) -> Call | None:
        """The call whose rerun created ``node`` (``None``: no rerun did, as far as can be
        told). A node made after the last module call of the checkpointed function (its last
        residual add) is reached by no walk: it is the rebuilt graph's when it leads, within a
        few nodes, to one (a node of the forward's graph cannot: the rerun's inputs are
        detached), and then belongs to the call that made the checkpoint."""
        entry = self._rebuilt.get(id(node))
        if entry is not None and entry[0] is node:
            return entry[1]
        starts = self._starts
        number = sequence_number(node)
        if not starts or number is None or number < starts[-1]:
            return None
        owner = self._calls[-1] if self._leads_to_rebuilt(node) else None
        self._rebuilt[id(node)] = (node, owner)
        return owner

    def _leads_to_rebuilt(self, node: Any, steps: int = 8) -> bool:
        low, rebuilt = self._starts[0], self._rebuilt
        pending, seen = [node], 0
        while pending and seen < steps:
            current = pending.pop()
            seen += 1
            for child, _ in current.next_functions:
                if child is None:
                    continue
                entry = rebuilt.get(id(child))
                if entry is not None and entry[0] is child:
                    return entry[1] is not None
                number = sequence_number(child)
                if number is not None and number >= low:
                    pending.append(child)
        return False

    def _repeated(self, node: Any, owner: Call | None, module: nn.Module, calls: list[Call],
                  seq_starts: list[int], seq_calls: list[Call | None]) -> Call | None:
        """The forward call of ``module`` that the outermost rerun repeats, while autograd
        runs ``node`` (created by ``owner``)."""
        candidates = self._calls_of(module, calls)
        if len(candidates) <= 1 or owner is None:
            return candidates[0] if candidates else None
        ancestors: set[int] = set()
        walk: Call | None = owner
        while walk is not None:
            ancestors.add(walk.index)
            walk = None if walk.parent is None else calls[walk.parent]
        around = [c for c in candidates if c.index in ancestors]
        if around:  # the node belongs to the block being rerun (a non-reentrant checkpoint)
            return around[-1]
        inside = [c for c in candidates if c.index > owner.index and _within(c, owner, calls)]
        if inside:  # the node is the checkpoint's own, made by its caller (reentrant)
            made = sequence_number(node)
            made = -1 if made is None else made
            entered = self._entered_at(seq_starts, seq_calls)
            later = [c for c in inside if entered.get(c.index, -1) > made]
            return (later or inside)[0]
        # the node belongs to a later call of the rerun block (a checkpointed function that
        # calls several modules): the last call of ``module`` before it
        before = [c for c in candidates if c.index <= owner.index]
        return before[-1] if before else candidates[0]

    def _next_child(self, parent: Call, module: nn.Module, calls: list[Call]) -> Call | None:
        key = (parent.index, id(module))
        used = self._used.get(key, 0)
        self._used[key] = used + 1
        matching = [c for c in self._children_of(parent, calls) if c.module is module]
        return matching[used] if used < len(matching) else None

    def _children_of(self, parent: Call, calls: list[Call]) -> list[Call]:
        if self._children is None:  # built on the first rerun of a pass
            self._children = {}
            for call in calls:
                if call.parent is not None:
                    self._children.setdefault(call.parent, []).append(call)
        return self._children.get(parent.index, [])

    def _calls_of(self, module: nn.Module, calls: list[Call]) -> list[Call]:
        if self._by_module is None:
            self._by_module = {}
            for call in calls:
                self._by_module.setdefault(id(call.module), []).append(call)
        return self._by_module.get(id(module), [])

    def _entered_at(self, seq_starts: list[int], seq_calls: list[Call | None]
                    ) -> dict[int, int]:
        """Autograd's sequence counter when each forward call started (a call's first hook
        event is its start)."""
        if self._entered is None:
            self._entered = {}
            for sequence, call in zip(seq_starts, seq_calls, strict=True):
                if call is not None:
                    self._entered.setdefault(call.index, sequence)
        return self._entered


def _within(call: Call, ancestor: Call, calls: list[Call]) -> bool:
    """Whether ``call`` was made inside ``ancestor``."""
    walk: Call | None = call
    while walk is not None and walk.index > ancestor.index:
        walk = None if walk.parent is None else calls[walk.parent]
    return walk is ancestor
