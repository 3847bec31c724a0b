"""Sample Factory: double-buffered rollout workers, batched inference, shared-memory slots,
APPO (``recipe.py`` first)."""
