"""The one way this package deprecates a name: a ``DeprecationWarning`` that says what to use
instead and the release that removes it (also listed in CHANGELOG.md, "Deprecations")."""

from __future__ import annotations

import warnings

from moduleprofiler.warn import caller_stacklevel

REMOVAL_VERSION = "0.3.0"
"""The release that removes every name deprecated in 0.1.x (two minor releases on, so a user
pinned to 0.2 sees the warning for a whole release before the name goes)."""


def warn_deprecated(what: str, instead: str, *, stacklevel: int | None = None) -> None:
    """Warn that ``what`` is deprecated: ``"<what> is deprecated and will be removed in
    moduleprofiler 0.3.0; <instead>"``, attributed to the user's line (the caller of the
    package: :func:`~moduleprofiler.warn.caller_stacklevel`). ``stacklevel``, counted from
    the caller of this function, only for a warning issued while a module is imported."""
    level = caller_stacklevel() if stacklevel is None else stacklevel + 1
    warnings.warn(f"{what} is deprecated and will be removed in moduleprofiler "
                  f"{REMOVAL_VERSION}; {instead}", DeprecationWarning, stacklevel=level)
