"""The recipe registry: every module of this package that defines ``RECIPE`` is a recipe.

Adding an architecture is adding one module here (see docs/concepts.md); nothing else lists them.
"""
from __future__ import annotations

import importlib
import pkgutil

from distrl.architectures.base import Recipe, RoleContext

RECIPE_NAMES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base"))


def get_recipe(name: str) -> Recipe:
    """The recipe called ``name``; ``ValueError`` listing the known ones otherwise."""
    if name not in RECIPE_NAMES:
        raise ValueError(f"unknown recipe {name!r}; known recipes: {', '.join(RECIPE_NAMES)}")
    return importlib.import_module(f"distrl.architectures.{name}").RECIPE


__all__ = ["Recipe", "RoleContext", "get_recipe", "RECIPE_NAMES"]
