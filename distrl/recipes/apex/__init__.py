"""Ape-X: epsilon-ladder actors, prioritized replay shards, a double-DQN learner (``recipe.py`` first)."""
