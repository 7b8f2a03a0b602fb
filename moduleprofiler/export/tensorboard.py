"""A profile in TensorBoard, without a training framework: per-module scalars, the model's
totals, the module tree and a summary of the HTML report, through
``torch.utils.tensorboard.SummaryWriter`` (the ``tensorboard`` extra).

Tags, under ``prefix`` (default ``"moduleprofiler"``):

* ``<prefix>/<module>/<column>``: one scalar per module at ``depth`` and numeric column;
* ``<prefix>/total/<column>``: the whole model's value of each column (under
  ``<prefix>/.total/<column>`` where a module written has the path ``total``, whose own
  scalars take those tags: :data:`SPARE_TOTAL_TAG`);
* ``<prefix>/tree``: the module tree as preformatted text;
* ``<prefix>/report``: the HTML report's summary, caveats and module table, as Markdown.

Scalars are written as 64-bit values (``double_precision=True``): a count of a few billion
MACs is exact there, where a 32-bit scalar rounds it to a multiple of 256. An unknown value
(a module without a formula, a time never measured) is skipped, never written as 0. A scalar
cannot say that it is a lower bound: where a total is one (work without a formula), the
report's text says so, and writing warns once, naming the totals and what had no formula.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from moduleprofiler.export.columns import column_spec
from moduleprofiler.export.frame import module_frame
from moduleprofiler.export.markdown import escape_markdown, render_markdown
from moduleprofiler.export.renamed import current_names
from moduleprofiler.export.report import report_context
from moduleprofiler.export.select import (
    BACKWARD_COLUMNS,
    column_total,
    extra_columns,
    profile_totals,
    table_view,
    tree_view,
    unknown_as_missing,
)
from moduleprofiler.export.text import render_text
from moduleprofiler.export.units import is_missing
from moduleprofiler.records import unknown_work
from moduleprofiler.validate import check_int, check_names
from moduleprofiler.warn import LowerBoundWarning, warn

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from moduleprofiler.records import ProfileData as Profile

__all__ = ["DEFAULT_PREFIX", "SPARE_TOTAL_TAG", "TOTAL_TAG", "tensorboard_columns",
           "write_tensorboard"]

DEFAULT_PREFIX = "moduleprofiler"
"""The first part of every tag this module writes."""

TOTAL_TAG = "total"
"""The model's totals' part of their tags: ``<prefix>/total/<column>``."""

SPARE_TOTAL_TAG = ".total"
"""The totals' part where a module written (at ``depth``) has the path :data:`TOTAL_TAG` (a
child named ``total``), whose scalars ``<prefix>/total/<column>`` are its own: a name no
module path can take (a path's names are never empty), so no two numbers share a tag."""

COUNT_COLUMNS = ("params", "macs", "flops", "ops")
"""The counts every profile has, each module's value including its children's."""


def _summary_writer_type() -> type[SummaryWriter]:
    """``torch.utils.tensorboard.SummaryWriter``, or an ImportError naming the extra: torch
    imports tensorboard only when that module is imported, so ``import moduleprofiler``
    never does."""
    try:
        from torch.utils.tensorboard import SummaryWriter as Writer
    except ImportError as exc:
        raise ImportError("profile.to_tensorboard needs tensorboard: pip install tensorboard "
                          '(from a moduleprofiler checkout: pip install ".[tensorboard]")') from exc
    return Writer


def tensorboard_columns(profile: Profile, columns: Sequence[str] | None = None) -> list[str]:
    """The numeric columns :func:`write_tensorboard` writes: ``columns`` (checked), or by
    default the counts (:data:`COUNT_COLUMNS`, the backward ones after a backward pass) and
    every measured time, memory or listener quantity the profile holds a value of."""
    frame = module_frame(profile)
    if columns is None:
        backward = [*BACKWARD_COLUMNS, "backward_flops"] if profile.backward else []
        return [name for name in dict.fromkeys([*COUNT_COLUMNS, *backward,
                                                *extra_columns(frame)])
                if name in frame and column_spec(name, frame[name].dtype).numeric]
    columns = current_names(check_names(columns, "columns") or [])
    for name in columns:
        if name not in frame:
            raise ValueError(f"columns: {name!r} is not a column of this profile "
                             f"(its module columns: {', '.join(frame.columns)})")
        if not column_spec(name, frame[name].dtype).numeric:
            raise ValueError(f"columns: {name!r} does not hold numbers, so it has no scalar")
    return list(columns)


def write_tensorboard(profile: Profile, writer: SummaryWriter, step: int = 0, *,
                      prefix: str = DEFAULT_PREFIX, depth: int = 1,
                      columns: Sequence[str] | None = None) -> None:
    """Write ``profile`` to ``writer`` (a ``torch.utils.tensorboard.SummaryWriter``) at
    ``step``: per-module scalars of the modules at ``depth`` (the root is 0), the model's
    totals, the module tree and the report summary (tags in the module docstring).

    ``columns``: the numeric module columns to write (default :func:`tensorboard_columns`).
    The writer is not flushed or closed: it is the caller's."""
    if not isinstance(writer, _summary_writer_type()):
        raise TypeError("writer must be a torch.utils.tensorboard.SummaryWriter, "
                        f"got {type(writer).__name__}")
    check_int(step, "step", 0, optional=False)
    check_int(depth, "depth", 0, optional=False)
    if not isinstance(prefix, str) or not prefix or prefix.endswith("/"):
        raise ValueError(f"prefix must be a non-empty tag without a trailing '/', got {prefix!r}")
    chosen = tensorboard_columns(profile, columns)
    # a module whose own work is unknown and whose children counted none has an unknown
    # inclusive count, not the 0 the frame's sum of nothing holds (as every view shows it)
    frame = unknown_as_missing(module_frame(profile))

    def scalar(tag: str, value: Any) -> None:
        if not is_missing(value):  # unknown is skipped, never written as 0
            writer.add_scalar(f"{prefix}/{tag}", float(value), step, new_style=True,
                              double_precision=True)

    rows = frame[frame["depth"] == depth]
    for _, row in rows.iterrows():
        for name in chosen:
            scalar(f"{row['module']}/{name}", row[name])
    total = SPARE_TOTAL_TAG if TOTAL_TAG in set(rows["module"]) else TOTAL_TAG
    if total == SPARE_TOTAL_TAG and chosen:
        warn(f"a module at depth {depth} is named {TOTAL_TAG!r}: its scalars are "
             f"'{prefix}/{TOTAL_TAG}/<column>', and the model's totals are written under "
             f"'{prefix}/{SPARE_TOTAL_TAG}/<column>'")
    known = profile_totals(profile)
    for name in chosen:
        scalar(f"{total}/{name}", column_total(frame, name, known))
    if profile.counted and not profile.complete:
        warn(f"TensorBoard's scalars under {prefix!r} hold lower bounds: "
             f"{unknown_work(profile)}", LowerBoundWarning)
    writer.add_text(f"{prefix}/tree", _preformatted(render_text(tree_view(profile), width=0)),
                    step)
    writer.add_text(f"{prefix}/report", report_markdown(profile), step)


def _preformatted(text: str) -> str:
    """``text`` in a fenced block, so TensorBoard's Markdown keeps its columns aligned; the
    fence is longer than any run of backticks in the text (the ASCII tree draws its last
    child with one), so none can close it early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def report_markdown(profile: Profile, title: str | None = None) -> str:
    """The HTML report in the Markdown TensorBoard's text plugin renders: its title, its
    summary, its caveats and its table of every module. Its charts, collapsible tree and
    sorting need CSS and scripts that TensorBoard's sanitizer removes, so they are left out:
    ``profile.save("report.html")`` writes the whole page."""
    context = report_context(profile, title)
    lines = [f"### {escape_markdown(context['title'])}", "",
             escape_markdown(context["subtitle"]), ""]
    lines += [f"* **{escape_markdown(card['label'])}**: {escape_markdown(card['text'])}"
              for card in context["cards"]]
    if context["notes"]:
        lines += ["", "**Caveats**", ""]
        lines += [f"* {escape_markdown(note)}" for note in context["notes"]]
    table = table_view(profile, ["module", "type", "calls", "params", "self_macs", "self_ops",
                                 "ops", "ops_pct",
                                 *extra_columns(module_frame(profile))])
    lines += ["", render_markdown(table)]
    return "\n".join(lines)

