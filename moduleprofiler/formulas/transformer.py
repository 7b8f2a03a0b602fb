"""transformer formulas (placeholder until written)."""
