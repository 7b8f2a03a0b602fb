"""Training-framework integrations (``docs/integrations/``).

This package imports no framework: :class:`StepWindow` is the shared core the callbacks drive;
each framework's callback lives in its own module, imported by the user
(``moduleprofiler.integrations.lightning``, ``moduleprofiler.integrations.transformers``).
"""

from moduleprofiler.integrations.window import (
    PROFILE_NAME,
    REPORT_NAME,
    StepWindow,
    WindowResult,
    WindowWarning,
    module_scalars,
)

__all__ = ["PROFILE_NAME", "REPORT_NAME", "StepWindow", "WindowResult", "WindowWarning",
           "module_scalars"]
