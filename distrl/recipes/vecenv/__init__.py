"""On-device vectorized environments with synchronous PPO, data parallel over ranks (``recipe.py`` first)."""
