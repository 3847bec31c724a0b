"""Python files loaded by path: a recipe defined outside ``distrl/`` (``path/to/file.py:NAME``) and
the role classes it names (``role("path/to/file.py:Class")``).

A file is loaded once per process under a module name derived from its resolved path
(:func:`module_name`), and registered in ``sys.modules`` under that name before it runs, so that
what the file defines can be found again by name: its dataclasses' string annotations (the config
machinery resolves them through ``sys.modules``), ``role(f"{__name__}:Class")`` strings pointing
back into the file, pickling. Every torchrun rank and every ``--resume`` loads the same path to the
same name, so a spec in a saved config means the same thing in every process.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
import threading
from pathlib import Path
from types import ModuleType

#: module names of loaded files start with this (never a real package: nothing else can shadow them)
PREFIX = "distrl_file_"
_LOCK = threading.Lock()  # a rank's threads may build roles from the same file at once


def is_file_spec(spec: str) -> bool:
    """Whether ``spec`` names a file (``x.py``, ``x.py:NAME``, or a path) rather than a registered name."""
    path = spec.rpartition(":")[0] if ":" in spec else spec
    return path.endswith(".py") or "/" in spec or ":" in spec


def split_spec(spec: str) -> tuple[Path, str]:
    """``(resolved path, NAME)`` of ``path/to/file.py:NAME``; ``ValueError`` in one line when the path
    does not end in ``.py``, the file is missing or ``NAME`` is not given."""
    path, sep, name = spec.rpartition(":")
    if not sep:
        path, name = spec, ""
    if not path.endswith(".py"):
        raise ValueError(f"{spec!r}: a recipe file must be a .py file, written path/to/file.py:NAME")
    if not name.isidentifier():
        raise ValueError(f"{spec!r}: name the object in the file, written {path}:NAME (e.g. {path}:recipe)")
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise ValueError(f"{spec!r}: no such file {resolved}")
    return resolved, name


def module_name(path: Path) -> str:
    """The module name a file is loaded under: its stem and a hash of its resolved path (stable
    across processes and runs, distinct for two files of one stem)."""
    path = Path(path).resolve()
    stem = re.sub(r"\W", "_", path.stem)
    return f"{PREFIX}{stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"


def load_file(path: Path) -> ModuleType:
    """The module of the Python file at ``path``, run once per process (see the module docstring).
    An error raised while the file runs propagates as it is (a bug in the user's file)."""
    path = Path(path).resolve()
    name = module_name(path)
    with _LOCK:
        module = sys.modules.get(name)
        if module is not None:
            return module
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]  # a broken file is not half-registered: the next load reports it again
            raise
        return module


def import_target(module: str) -> ModuleType:
    """``module`` imported: a dotted module name, or a ``.py`` path (``role("path/file.py:Class")``)."""
    if module.endswith(".py"):
        path = Path(module).expanduser().resolve()
        if not path.is_file():
            raise ImportError(f"no such role file {path}")
        return load_file(path)
    return importlib.import_module(module)
