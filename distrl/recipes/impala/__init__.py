"""IMPALA: actors ship trajectories, a V-trace learner (``recipe.py`` first)."""
