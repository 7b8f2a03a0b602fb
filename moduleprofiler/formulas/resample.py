"""resample formulas (placeholder until written)."""
