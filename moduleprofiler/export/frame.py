"""Profile -> plain dict / tidy DataFrame (placeholder)."""
