"""norm formulas (placeholder until written)."""
