"""The 25 moduleprofiler 0.0.4 passes (placeholder)."""


class LegacyPasses:
    """Placeholder."""
