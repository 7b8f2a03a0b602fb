"""attention formulas (placeholder until written)."""
