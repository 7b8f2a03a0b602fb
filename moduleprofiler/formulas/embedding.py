"""embedding formulas (placeholder until written)."""
