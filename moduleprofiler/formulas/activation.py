"""activation formulas (placeholder until written)."""
