"""pooling formulas (placeholder until written)."""
