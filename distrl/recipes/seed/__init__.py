"""SEED RL: batched inference on the learner, env-only workers (``recipe.py`` first)."""
