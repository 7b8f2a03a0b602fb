"""huggingface formulas (placeholder until written)."""
