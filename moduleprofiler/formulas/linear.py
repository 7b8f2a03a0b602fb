"""linear formulas (placeholder until written)."""
