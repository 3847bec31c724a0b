"""The recipe registry: every sub-package of this package is a recipe, its ``recipe.py`` defines
``RECIPE`` (the rank table, the config dataclass, the presets).

Adding an architecture is adding one folder here (see docs/design.md); nothing else lists them.
A recipe defined outside ``distrl/`` is named by path instead, ``path/to/file.py:NAME`` (NAME the
module-level :class:`Recipe`; its module's public functions are the presets, as in a ``recipe.py``):
every function here takes such a spec wherever it takes a name (docs/custom_recipe.md).
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from distrl.runtime.context import Recipe, RoleContext
from distrl.recipes.files import is_file_spec, load_file, split_spec

RECIPE_NAMES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg))


def _resolve(spec: str):
    """``(module, Recipe)`` of a registered name or a ``file.py:NAME`` spec; ``ValueError`` in one line."""
    if not is_file_spec(spec):
        if spec not in RECIPE_NAMES:
            raise ValueError(
                f"unknown recipe {spec!r}; known recipes: {', '.join(RECIPE_NAMES)}, "
                "or path/to/file.py:NAME for one of your own"
            )
        module = importlib.import_module(f"distrl.recipes.{spec}.recipe")
        return module, module.RECIPE
    path, name = split_spec(spec)
    module = load_file(path)
    obj = getattr(module, name, None)
    if obj is None:
        raise ValueError(f"{spec!r}: {path.name} defines no {name!r}")
    if not isinstance(obj, Recipe):
        raise ValueError(f"{spec!r}: {name} is a {type(obj).__name__}, not a distrl.recipes.Recipe")
    return module, obj


def recipe_module(spec: str):
    """The module of recipe ``spec``: ``distrl/recipes/<name>/recipe.py``, or the file of a
    ``path/to/file.py:NAME`` spec; its presets are what ``--experiment`` picks."""
    return _resolve(spec)[0]


def get_recipe(spec: str) -> Recipe:
    """The recipe named ``spec`` (a registered name or ``path/to/file.py:NAME``); ``ValueError`` in
    one line otherwise (unknown name, missing file, not ``.py``, no ``NAME``, not a ``Recipe``)."""
    return _resolve(spec)[1]


def recipe_spec(spec: str) -> str:
    """The canonical form of ``spec``, what ``Config.recipe`` holds: a registered name as it is, a
    file spec with its path resolved (``/abs/path/file.py:NAME``), so that another working directory
    (``--resume``) or rank loads the same file, and two spellings of one file compare equal."""
    if not is_file_spec(spec):
        return spec
    path, name = split_spec(spec)
    return f"{path}:{name}"


def recipe_name(spec: str) -> str:
    """The short name progress lines and W&B show: a registered name as it is, a file spec's
    ``Recipe.name`` (``seed_apex``, not ``/abs/path/seed_apex.py:recipe``)."""
    return spec if not is_file_spec(spec) else get_recipe(spec).name


def file_spec(file: str | Path, name: str) -> str:
    """The spec of ``name`` in ``file``; a recipe file's presets write ``Config(recipe=file_spec(__file__,
    "recipe"), ...)`` so that a config names the recipe that made it."""
    return f"{Path(file).resolve()}:{name}"


__all__ = [
    "Recipe",
    "RoleContext",
    "get_recipe",
    "recipe_module",
    "recipe_spec",
    "recipe_name",
    "file_spec",
    "RECIPE_NAMES",
]
