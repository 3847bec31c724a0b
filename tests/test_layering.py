"""The package's floors (docs/design.md, "Layout"): imports run down only, no module imports itself
back through others, and the top of ``distrl/`` stays small. An AST walk, no imports executed.

An import under ``if TYPE_CHECKING:`` is an annotation, never executed, and is not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "distrl"

#: bottom to top: a package imports from its own floor's package or from floors below, never above
FLOORS = [
    {"config", "data"},  # typed settings, TensorDict keys and wire formats
    {"runtime"},  # what a rank runs inside: context, supervisor, checkpoints, faults
    {"transport", "envs"},  # how ranks talk; where observations come from
    {"nn", "logging"},  # networks; metrics, progress, plots
    {"algorithms"},  # value estimators and losses
    {"roles", "replay"},  # the roles recipes share; replay as a service
    {"recipes"},  # the six architectures
    {"cli"},  # the command line: options, plan, launcher
    {"studies", "fleet", "train"},  # many runs; the TorchRL collector fleet; the entry point
]
FLOOR = {pkg: i for i, floor in enumerate(FLOORS) for pkg in floor}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """``(line, module)`` of every executed ``import distrl...`` / ``from distrl... import``, nested ones
    included (an import inside a function is a dependency all the same)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.startswith("distrl."))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("distrl."):
            yield node.lineno, node.module
            # ``from distrl.runtime import faults`` imports the module distrl.runtime.faults
            yield from (
                (node.lineno, f"{node.module}.{a.name}")
                for a in node.names
                if (ROOT.parent / f"{node.module}.{a.name}".replace(".", "/")).with_suffix(".py").exists()
            )
        stack.extend(ast.iter_child_nodes(node))


def _graph() -> dict[str, set[tuple[int, str]]]:
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = set()
        for line, target in _imports(ast.parse(path.read_text(), str(path))):
            while target not in modules and "." in target:  # ``from distrl.x.y import Name`` -> distrl.x.y
                target = target.rpartition(".")[0]
            if target in modules and target != name:
                deps.add((line, target))
        graph[name] = deps
    return graph


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "__init__"


def test_imports_run_down_the_floors():
    graph, up = _graph(), []
    for mod, deps in graph.items():
        src = _package(mod)
        if src not in FLOOR:
            continue
        for line, dep in deps:
            dst = _package(dep)
            if dst == src or dst not in FLOOR:
                continue
            if FLOOR[dst] > FLOOR[src] or (FLOOR[dst] == FLOOR[src]):
                up.append(f"{mod}:{line} imports {dep} ({src} is on floor {FLOOR[src]}, {dst} on {FLOOR[dst]})")
    assert not up, "imports that climb (or cross a floor) instead of running down:\n" + "\n".join(sorted(up))


def test_every_package_has_a_floor():
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    packages |= {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"}
    assert packages <= set(FLOOR), f"give these a floor in FLOORS: {sorted(packages - set(FLOOR))}"


def test_no_import_cycles():
    graph = {m: {d for _, d in deps} for m, deps in _graph().items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(" -> ".join(path[path.index(d) :] + [d]))
            elif d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_top_of_the_package_stays_small():
    top = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(top) <= 8, f"{len(top)} modules at the top of distrl/ (at most 8): {top}"
    long = [
        f"{p.relative_to(ROOT.parent)}: {n}" for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > 350
    ]
    assert not long, "files over 350 lines:\n" + "\n".join(long)
    recipes = [
        f"{p.relative_to(ROOT.parent)}: {n}"
        for p in (ROOT / "recipes").glob("*/recipe.py")
        if (n := len(p.read_text().splitlines())) > 200
    ]
    assert not recipes, "recipe.py files over 200 lines:\n" + "\n".join(recipes)
