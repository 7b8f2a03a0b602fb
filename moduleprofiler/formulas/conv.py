"""conv formulas (placeholder until written)."""
