"""A3C and A2C: a parameter server applying workers' gradients (``recipe.py`` first)."""
