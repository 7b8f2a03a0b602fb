"""recurrent formulas (placeholder until written)."""
