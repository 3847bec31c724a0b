"""The import graph of ``distrl``: no cycle, no module reaching for another module's private name.

Every module under ``distrl/`` is parsed, not imported: each ``import`` and ``from ... import``
counts, at module level and inside functions (a lazy import is still a dependency), relative ones
resolved, plus ``importlib.import_module("literal")``. ``from pkg import name`` depends on the
submodule ``pkg.name`` when there is one, else on ``pkg`` (its ``__init__``). A parent package
initialised on the way to a submodule is not counted: Python has it half-built already, and a
package re-exporting its submodules is no cycle.

Run as a script (``python tests/test_imports.py``) to print the same reports.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "distrl"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


@dataclass(frozen=True)
class Import:
    """One dependency of a module: the module it needs, where, and the names it takes from it."""

    target: str
    line: int
    names: tuple[str, ...] = ()  # names taken by ``from target import ...`` (not submodules)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file of every module under ``root`` (a package is its ``__init__.py``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(module: str, path: Path, level: int, name: str | None) -> str:
    """The absolute name of ``from <level dots><name> import ...`` written in ``module``."""
    if level == 0:
        return name or ""
    base = module.split(".") if _is_package(path) else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports(module: str, path: Path, known: dict[str, Path]) -> list[Import]:
    """The distrl modules ``module`` imports, with line numbers, lazy and module-level alike."""
    tree = ast.parse(path.read_text(), str(path))
    out: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [Import(a.name, node.lineno) for a in node.names if a.name in known]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path, node.level, node.module)
            names = []
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in known:
                    out.append(Import(sub, node.lineno))
                else:
                    names.append(a.name)
            if names and base in known:
                out.append(Import(base, node.lineno, tuple(names)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in known
        ):
            out.append(Import(node.args[0].value, node.lineno))
    return [i for i in out if i.target != module]


def graph(known: dict[str, Path] | None = None) -> dict[str, dict[str, int]]:
    """module -> {module it imports: first line of such an import}."""
    known = modules() if known is None else known
    g: dict[str, dict[str, int]] = {m: {} for m in known}
    for m, path in known.items():
        for i in imports(m, path, known):
            g[m].setdefault(i.target, i.line)
    return g


def strongly_connected(g: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components of more than one module, each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)


def shortest_cycle(g: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """One shortest cycle through the component's first module: ``[a, b, ..., a]``."""
    members, start = set(component), component[0]
    parent = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(g[v]):
                if w == start:
                    path = [v]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, v, start]
                if w in members and w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError("a strongly connected component has a cycle")


def _file(module: str, known: dict[str, Path]) -> str:
    """``distrl/x/y.py`` (or ``distrl/x/__init__.py``) of a module."""
    path = known[module]
    depth = module.count(".") + 1 + _is_package(path)
    return "/".join(path.parts[-depth:])


def cycle_report(known: dict[str, Path] | None = None) -> list[str]:
    """One paragraph per import cycle: a shortest cycle, then every import (file:line) among the
    modules that cycle through each other, the imports one of which must go."""
    known = modules() if known is None else known
    g = graph(known)
    out = []
    for comp in strongly_connected(g):
        cycle = " -> ".join(shortest_cycle(g, comp))
        edges = "\n".join(
            f"    {a} -> {b}   ({_file(a, known)}:{g[a][b]})" for a in comp for b in sorted(g[a]) if b in comp
        )
        out.append(f"cycle {cycle}; every import among these modules:\n{edges}")
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(known: dict[str, Path] | None = None) -> list[str]:
    """``file:line: module imports X._name`` for every private name a module takes from another
    distrl module: ``from distrl.x import _name``, or ``x._name`` on a module it imported."""
    known = modules() if known is None else known
    out = []
    for m, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        bound: dict[str, str] = {}  # local name -> the distrl module it is
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in known:
                        bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(m, path, node.level, node.module)
                for a in node.names:
                    if f"{base}.{a.name}" in known:
                        bound[a.asname or a.name] = f"{base}.{a.name}"
                    elif base in known and base != m and _private(a.name):
                        out.append(f"{_file(m, known)}:{node.lineno}: {m} imports {base}.{a.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                owner = _dotted(node.value, bound)
                if owner in known and owner != m:
                    out.append(f"{_file(m, known)}:{node.lineno}: {m} uses {owner}.{node.attr}")
    return sorted(set(out))


def _dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """The module an expression like ``x`` or ``distrl.envs.gym`` names, through ``bound``."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, bound)
        return f"{base}.{node.attr}" if base else None
    return None


def test_no_import_cycle():
    cycles = cycle_report()
    assert not cycles, "import cycles among distrl's modules (lazy imports included):\n" + "\n".join(cycles)


def test_no_private_name_from_another_module():
    uses = private_uses()
    assert not uses, (
        "modules reaching for another module's private name (make it public, with a "
        "docstring, or move it where it belongs):\n" + "\n".join(uses)
    )


def test_the_parser_sees_what_it_must(tmp_path):
    """A cycle through a lazy import and a relative ``from . import``, and both forms of private use."""
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .a import thing\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from distrl.b import _hidden\n")
    (pkg / "b.py").write_text("from .sub import a\nfrom . import c\nx = c._secret\n")
    (pkg / "c.py").write_text("_secret = 1\n")
    known = modules(pkg)
    assert graph(known)["distrl.sub.a"] == {"distrl.b": 2}
    assert graph(known)["distrl.b"] == {"distrl.sub.a": 1, "distrl.c": 2}
    [report] = cycle_report(known)
    assert "distrl.b -> distrl.sub.a" in report and "distrl.sub.a -> distrl.b" in report
    uses = private_uses(known)
    assert [u.split(": ", 1)[1] for u in uses] == [
        "distrl.b uses distrl.c._secret",
        "distrl.sub.a imports distrl.b._hidden",
    ]


if __name__ == "__main__":
    print("\n".join(cycle_report()) or "no import cycle")
    print("\n".join(private_uses()) or "no private name taken from another module")
