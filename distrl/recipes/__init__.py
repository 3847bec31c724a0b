"""The recipe registry: every sub-package of this package is a recipe, its ``recipe.py`` defines
``RECIPE`` (the rank table, the config dataclass, the presets).

Adding an architecture is adding one folder here (see docs/design.md); nothing else lists them.
"""
from __future__ import annotations

import importlib
import pkgutil

from distrl.recipes.base import Recipe, RoleContext

RECIPE_NAMES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg))


def recipe_module(name: str):
    """The module ``distrl/recipes/<name>/recipe.py``: ``RECIPE`` and the presets ``--experiment`` picks."""
    if name not in RECIPE_NAMES:
        raise ValueError(f"unknown recipe {name!r}; known recipes: {', '.join(RECIPE_NAMES)}")
    return importlib.import_module(f"distrl.recipes.{name}.recipe")


def get_recipe(name: str) -> Recipe:
    """The recipe called ``name``; ``ValueError`` listing the known ones otherwise."""
    return recipe_module(name).RECIPE


__all__ = ["Recipe", "RoleContext", "get_recipe", "recipe_module", "RECIPE_NAMES"]
