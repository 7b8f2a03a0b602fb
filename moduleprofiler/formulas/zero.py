"""zero formulas (placeholder until written)."""
