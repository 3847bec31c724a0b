"""A griffe extension for the API reference (mkdocs.yml loads it; the site does not copy it).

distrl's docstrings are written for a reader of the source: config fields are documented by a
``#:`` comment beside them (what ``distrl train RECIPE --help`` prints, see
``distrl/cli/help.py``), and prose cross-references use Sphinx roles (``:class:`~a.B```).
griffe reads neither, so this extension turns a ``#:`` comment into the attribute's docstring and
a role into inline code, before mkdocstrings renders anything.
"""

from __future__ import annotations

import ast
import re

import griffe

# :class:`~distrl.config.Config` -> `Config`; :func:`override` -> `override`
_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|obj|exc|const|ref|py:\w+):`(~?)([^`]+)`")


def _role_to_code(m: re.Match) -> str:
    tilde, target = m.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


def _comment_doc(attr: griffe.Attribute, agent: griffe.Visitor | griffe.Inspector) -> str | None:
    """The ``#:`` comment beside ``attr`` (trailing its last line) or on the lines just above it."""
    code = getattr(agent, "code", None)  # the visitor holds the module's source; the inspector none
    lines = code.splitlines() if isinstance(code, str) else None
    if not lines or attr.lineno is None:
        return None
    last = lines[(attr.endlineno or attr.lineno) - 1]
    if "#: " in last:
        return last.split("#: ", 1)[1].strip()
    above, i = [], attr.lineno - 2
    while i >= 0 and lines[i].strip().startswith("#:"):
        above.insert(0, lines[i].strip()[2:].strip())
        i -= 1
    return " ".join(above) or None


class DistrlDocstrings(griffe.Extension):
    """``#:`` field comments become docstrings; Sphinx roles become inline code."""

    def on_attribute_instance(
        self,
        *,
        node: ast.AST | griffe.ObjectNode,
        attr: griffe.Attribute,
        agent: griffe.Visitor | griffe.Inspector,
        **kwargs,
    ) -> None:
        if attr.docstring is None:
            doc = _comment_doc(attr, agent)
            if doc:
                attr.docstring = griffe.Docstring(_ROLE.sub(_role_to_code, doc), lineno=attr.lineno, parent=attr)

    def on_instance(
        self,
        *,
        node: ast.AST | griffe.ObjectNode,
        obj: griffe.Object,
        agent: griffe.Visitor | griffe.Inspector,
        **kwargs,
    ) -> None:
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = _ROLE.sub(_role_to_code, obj.docstring.value)
