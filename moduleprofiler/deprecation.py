"""The one way this package deprecates a name: a ``DeprecationWarning`` that says what to use
instead and the release that removes it (also listed in CHANGELOG.md, "Deprecations")."""

from __future__ import annotations

import warnings

REMOVAL_VERSION = "0.3.0"
"""The release that removes every name deprecated in 0.1.x (two minor releases on, so a user
pinned to 0.2 sees the warning for a whole release before the name goes)."""


def warn_deprecated(what: str, instead: str, *, stacklevel: int = 2) -> None:
    """Warn that ``what`` is deprecated: ``"<what> is deprecated and will be removed in
    moduleprofiler 0.3.0; <instead>"``. ``stacklevel`` counts from the caller of this function
    (2: the line that called the deprecated function)."""
    warnings.warn(f"{what} is deprecated and will be removed in moduleprofiler "
                  f"{REMOVAL_VERSION}; {instead}", DeprecationWarning, stacklevel=stacklevel + 1)
