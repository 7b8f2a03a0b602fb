"""distance formulas (placeholder until written)."""
