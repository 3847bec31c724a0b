"""experiments/ stays a workshop a reader can walk: every script runs as ``python -m experiments.X``
from the checkout's root, so no file edits ``sys.path``; what several scripts share lives once in
``experiments/kit/`` under public names; imports run one way (no circle, the kit imports no
script), and no file reaches for another module's underscore-prefixed name.

Read from the source alone (``ast``), nothing imported: quick, and a broken script is reported as
the rule it breaks, not as an import error."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers import ROOT

EXPERIMENTS = ROOT / "experiments"
FILES = sorted(EXPERIMENTS.rglob("*.py"))


def module_name(path: Path) -> str:
    """``experiments/kit/measure.py`` -> ``experiments.kit.measure``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in FILES}


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def absolute(node: ast.ImportFrom, path: Path) -> str:
    """The module an ``ImportFrom`` reads from, relative imports resolved against ``path``'s package."""
    if not node.level:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(path: Path) -> set[str]:
    """The experiments modules ``path`` imports, anywhere in the file (a function-local import makes
    a circle as surely as one at the top)."""
    out = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom):
            source = absolute(node, path)
            for a in node.names:
                if f"{source}.{a.name}" in MODULES:  # ``from experiments import sf2_atari``
                    out.add(f"{source}.{a.name}")
                elif source in MODULES:
                    out.add(source)
    return out - {module_name(path)}


GRAPH = {name: imported_modules(path) for name, path in MODULES.items()}


def test_the_files_are_found():
    assert "experiments.kit.measure" in MODULES and "experiments.bench_atari" in MODULES, sorted(MODULES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_file_edits_sys_path(path):
    """``python -m experiments.X`` from the root finds distrl and experiments by itself."""
    hits = [
        node.lineno
        for node in ast.walk(tree(path))
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "path"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        )
        or (isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "path" for a in node.names))
    ]
    assert not hits, f"{path.relative_to(ROOT)} touches sys.path at lines {hits}: run it as python -m experiments.X"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_file_imports_another_modules_private_name(path):
    """A helper two scripts need is public in the kit, not borrowed by its underscore name."""
    hits = []
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.ImportFrom):
            hits += [
                f"{node.lineno}: from {absolute(node, path)} import {a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")
            ]
        if isinstance(node, ast.Import):
            hits += [
                f"{node.lineno}: import {a.name}"
                for a in node.names
                if a.name.startswith("experiments.")
                and any(p.startswith("_") and not p.startswith("__") for p in a.name.split("."))
            ]
    assert not hits, f"{path.relative_to(ROOT)} imports private names:\n" + "\n".join(hits)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of ``graph`` found by a depth-first walk, each as the modules around it."""
    found, state = [], {}  # state: 1 on the current path, 2 done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return found


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b", "a"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_circle_among_experiments_modules():
    circles = cycles(GRAPH)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_kit_imports_no_script():
    """The kit sits below every script: a script may import the kit, the kit never a script, so no
    circle can form through it."""
    wrong = {
        name: sorted(m for m in deps if not m.startswith("experiments.kit"))
        for name, deps in GRAPH.items()
        if name.startswith("experiments.kit")
    }
    wrong = {k: v for k, v in wrong.items() if v}
    assert not wrong, f"kit modules importing scripts: {wrong}"
