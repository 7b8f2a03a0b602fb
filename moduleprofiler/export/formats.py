"""``Profile.save``: one entry point for every file format, picked from the suffix."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moduleprofiler.export.frame import profile_frame
from moduleprofiler.export.io import Buffer, PathLike, emit, format_name, infer_format
from moduleprofiler.export.tables import printable

if TYPE_CHECKING:
    from moduleprofiler.export.profile import Profile
    from moduleprofiler.records import Aggregate

_RENDER_OPTIONS = {
    "latex": ("caption", "label", "position", "environment", "escape_caption"),
    "text": ("color", "unicode"),
}


def profile_csv(profile: Profile, buf: Buffer = None, *,
                aggregate: Aggregate = "call") -> str | None:
    """The tidy frame of ``aggregate`` as CSV: raw numbers, shapes as Python literals,
    unknown values as empty cells."""
    return emit(printable(profile_frame(profile, aggregate)).to_csv(index=False), buf)


def _split(options: dict[str, Any],
           names: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    render = {key: options.pop(key) for key in list(options) if key in names}
    return render, options


def export_profile(profile: Profile, format: str, buf: Buffer = None,
                   **options: Any) -> str | None:
    """``profile`` in ``format`` (csv, json, markdown, html, latex, text). ``options`` go to
    the view (``max_depth``, ``columns``, ...) or to the renderer (``caption``, ``title``)."""
    name = format_name(format)
    if name == "json":
        return profile.to_json(buf, **options)
    if name == "csv":
        return profile_csv(profile, buf, **options)
    if name == "html":
        return profile.to_html(buf, **options)
    render, view_options = _split(dict(options), _RENDER_OPTIONS.get(name, ()))
    if name == "text":
        return profile.tree(**view_options).to_text(buf, **render)
    view = profile.table(**view_options)
    return view.to_latex(buf, **render) if name == "latex" else view.to_markdown(buf)


def save_profile(profile: Profile, path: PathLike, format: str | None = None,
                 **options: Any) -> None:
    """Write ``profile`` to ``path`` in ``format`` (default: inferred from the suffix)."""
    export_profile(profile, format if format is not None else infer_format(path), path,
                   **options)
