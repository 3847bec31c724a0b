"""Config fields as a user reads them in ``RECIPE --help``: dotted name, type, default, doc.

The doc of a field is the ``#:`` comment written beside it in its dataclass (the one place it
is written), read from the source; a field without one shows an empty doc.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from functools import lru_cache
from typing import Any

_FIELD = re.compile(r"^\s+(\w+)\s*:[^=#]*(?:=[^#]*)?#:\s*(.*)$")


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """``{field name: its #: comment}`` of dataclass ``cls``."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # no source (a frozen app): names and defaults still print
        return {}
    return {m.group(1): m.group(2).strip() for m in map(_FIELD.match, source.splitlines()) if m}


def type_name(hint: Any) -> str:
    """``int``, ``float | None``, ``tuple[int, ...]``: the type as a user writes it."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Union and type(None) in args:
        return " | ".join(type_name(a) for a in args if a is not type(None)) + " | None"
    if isinstance(hint, type) and not args:
        return hint.__name__
    return str(hint).replace("typing.", "")


def config_fields(cfg: Any, prefix: str = "") -> list[tuple[str, str, Any, str]]:
    """``[(dotted name, type, value in cfg, doc)]`` for every leaf field of the config tree ``cfg``."""
    rows = []
    hints = typing.get_type_hints(type(cfg))
    docs = field_docs(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            rows += config_fields(value, f"{prefix}{f.name}.")
        elif f.name != "recipe":  # chosen by the command's first argument, not a field to set
            rows.append((prefix + f.name, type_name(hints[f.name]), value, docs.get(f.name, "")))
    return rows


def format_fields(cfg: Any) -> str:
    """The table ``RECIPE --help`` prints: one line per field, sections in config order."""
    rows = config_fields(cfg)
    shown = [(name, typ, ",".join(map(str, v)) if isinstance(v, tuple) else str(v), doc) for name, typ, v, doc in rows]
    w_name = max(len(r[0]) for r in shown)
    w_type = max(len(r[1]) for r in shown)
    w_val = min(max(len(r[2]) for r in shown), 24)
    return "\n".join(f"  {n:<{w_name}}  {t:<{w_type}}  {v:<{w_val}}  {d}".rstrip() for n, t, v, d in shown)
