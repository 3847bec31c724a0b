"""README and docs say what exists, cite only what is in this repository, and their code parses.

Every command line of a ``bash``/``sh``/``console`` block in README.md and docs/*.md that starts
distrl (``distrl ...``, ``python -m distrl...``, ``python launch/...``, ``python -m experiments...``,
``torchrun ...``) is parsed in this process by the parser that would run it, and stopped right
after parsing: ``distrl train`` commands go further and build their config (``--print-config``).
An experiments script written as a path (``python experiments/X.py``) fails: it imports
``experiments.kit``, which only ``python -m experiments.X`` from the root finds.
Every ``python`` block compiles and its imports import. The site itself (``mkdocs build --strict``)
is built by an integration test.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import re
import runpy
import shlex
import sys

import pytest

from helpers import ROOT, child_env
from distrl.recipes import RECIPE_NAMES

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL = ("bash", "sh", "shell", "console")
#: a shell line starting with one of these is a distrl command the test parses
STARTS = ("distrl ", "python launch/", "python experiments/", "python -m distrl", "python -m experiments.", "torchrun ")


def test_readme_lists_exactly_the_recipes_that_exist():
    readme = (ROOT / "README.md").read_text()
    table = re.findall(r"^\| `(\w+)` \|", readme, flags=re.M)
    assert sorted(table) == sorted(RECIPE_NAMES)
    intro = readme.split("## ")[0].lower()
    count = ["one", "two", "three", "four", "five", "six", "seven", "eight"][len(RECIPE_NAMES) - 1]
    assert f"{count} recipes" in intro, f"the README's intro should say {count} recipes"


def test_no_page_or_module_cites_a_file_outside_the_repository():
    for path in DOCS + sorted((ROOT / "distrl").rglob("*.py")):
        assert "facts.md" not in path.read_text(), path


def test_no_page_points_at_an_issue_tracker_or_a_branch():
    """A reader of the docs has the repository, not its tracker: an issue number, "the issue" or a
    branch name says nothing to them."""
    pattern = re.compile(
        r"\bissues?\b|\bbranch [`'\"]|\b(?:on|in|from|to) (?:the |a )?[`'\"]?[\w/.-]+[`'\"]? branch\b"
        r"|/pull/\d|(?<![\w&])#\d+\b",
        re.I,
    )
    for path in DOCS:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            hits = [
                m.group(0) for m in pattern.finditer(line) if "pytorch/rl" not in line and "github.com" not in line
            ]  # upstream's issues are citable
            assert not hits, f"{path.relative_to(ROOT)}:{n}: {hits}: {line.strip()}"


def test_the_readmes_links_lead_somewhere():
    """The README is read on its own (mkdocs checks the pages' links, not the README's)."""
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


# ---- code blocks ----------------------------------------------------------------------------------


def fenced_blocks(path) -> list[tuple[str, int, str]]:
    """``(language, first line number, text)`` of every fenced code block of ``path``."""
    out, lang, start, body = [], None, 0, []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if lang is None:
                lang, start, body = stripped[3:].strip().split(" ")[0], n + 1, []
            else:
                out.append((lang, start, "\n".join(body)))
                lang = None
            continue
        if lang is not None:
            body.append(line)
    return out


def shell_lines(path) -> list[tuple[int, str]]:
    """``(line number, command line)`` of ``path``'s shell blocks: continuations joined, a ``$ ``
    prompt and a trailing comment removed."""
    out = []
    for lang, start, text in fenced_blocks(path):
        if lang not in SHELL:
            continue
        pending, first = "", start
        for n, line in enumerate(text.splitlines(), start):
            if not pending:
                first = n
            pending += line.rstrip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            command = pending.strip().removeprefix("$ ")
            pending = ""
            if command and not command.startswith("#"):
                out.append((first, command))
    return out


def doc_commands() -> list[tuple[str, list[str]]]:
    """``("page:line", words)`` of every distrl command in the shell blocks of README.md and docs/:
    each part of a line joined by ``&&``, ``;`` or ``|``, less leading ``VAR=value`` assignments."""
    out = []
    for path in DOCS:
        for n, line in shell_lines(path):
            words = shlex.split(line, comments=True)
            parts, part = [], []
            for w in [*words, "&&"]:
                if w in ("&&", ";", "|", "||"):
                    parts.append(part)
                    part = []
                else:
                    part.append(w)
            for part in parts:
                while part and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", part[0]):
                    part = part[1:]
                if " ".join(part).startswith(STARTS) or part[:1] == ["distrl"]:
                    out.append((f"{path.relative_to(ROOT)}:{n}", part))
    return out


class Parsed(Exception):
    """Raised by the patched argparse once a command line parsed: nothing after it runs."""

    def __init__(self, namespace):
        super().__init__("parsed")
        self.namespace = namespace


@contextlib.contextmanager
def stop_after_parsing():
    """Make the outermost ``parse_args``/``parse_known_args`` call raise :class:`Parsed` once it has
    parsed (a sub-parser's call returns as usual), so a script's ``main`` never gets past it."""
    depth = [0]
    originals = {name: getattr(argparse.ArgumentParser, name) for name in ("parse_args", "parse_known_args")}

    def wrap(original):
        def parse(self, *args, **kwargs):
            depth[0] += 1
            try:
                result = original(self, *args, **kwargs)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                raise Parsed(result)
            return result

        return parse

    for name, original in originals.items():
        setattr(argparse.ArgumentParser, name, wrap(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(argparse.ArgumentParser, name, original)


def run_parse_only(target) -> tuple[bool, str]:
    """``target()`` with argparse stopping after the parse: ``(parsed or exited 0, stderr)``. A sweep
    (``parse_known_args``: what it does not know goes to ``distrl train``) has those options checked
    as ``distrl train RECIPE ...`` would take them."""
    err = io.StringIO()
    with stop_after_parsing(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = target()
        except Parsed as p:
            parsed = p.namespace
        except SystemExit as e:
            return e.code in (0, None), err.getvalue()
        else:
            return (
                code == 0,
                err.getvalue() + f"\n(it ran to the end with status {code}: no argparse parser stopped it)",
            )
    if isinstance(parsed, tuple) and hasattr(parsed[0], "recipe"):
        ns, extra = parsed
        return check_train([ns.recipe, *extra, "--max-time-s", str(ns.max_time_s)])
    return True, err.getvalue()


def check_train(args: list[str]) -> tuple[bool, str]:
    """``distrl train ARGS``: the config the command builds (``--print-config``), or a failure that
    names only the reader's own module (``my_...``, which the page asks them to write)."""
    from distrl.train import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([*args, "--print-config"])
    text = err.getvalue()
    users_own = re.search(r"No module named 'my_\w+'", text) and text.count("\n") == 1
    return code == 0 or bool(users_own), text


def check_python(argv: list[str]) -> tuple[bool, str]:
    """``python ARGV``: a module (``-m``) or a script of this repository, parsed."""
    if argv[0] == "-m":
        module, rest = argv[1], argv[2:]
        if module == "distrl.train":
            return check_train(rest)
        if module == "distrl":
            return check_distrl(rest)
        if module.startswith("experiments."):
            path = ROOT / (module.replace(".", "/") + ".py")
            if not path.is_file():
                return False, f"no such module: {module} ({path.relative_to(ROOT)})"
            if not has_parser(path):
                return False, f"{module} has no argparse parser: this test would run it, not parse it"
        return run_argv([module, *rest], lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))
    script, rest = argv[0], argv[1:]
    if script == "launch/train.py":
        return check_train(rest)
    if script.startswith("experiments/"):
        module = script.removesuffix(".py").replace("/", ".")
        return False, f"write python -m {module}: run by path, {script} cannot import experiments.kit"
    path = ROOT / script
    if not path.is_file():
        return False, f"no such script: {script}"
    if not has_parser(path):
        return False, f"{script} has no argparse parser: this test would run it, not parse it"
    return run_argv([str(path), *rest], lambda: runpy.run_path(str(path), run_name="__main__"))


def has_parser(path) -> bool:
    """Whether the script at ``path`` parses its command line (argparse, or a distrl ``main`` that does)."""
    source = path.read_text()
    return "argparse" in source or bool(re.search(r"^from distrl\.[\w.]+ import main\b", source, re.M))


def run_argv(argv: list[str], target) -> tuple[bool, str]:
    saved = sys.argv
    sys.argv = argv
    try:
        return run_parse_only(target)
    finally:
        sys.argv = saved


def check_distrl(argv: list[str]) -> tuple[bool, str]:
    """``distrl ARGV``: ``train`` builds its config, every other subcommand is parsed."""
    if argv[:1] == ["train"]:
        return check_train(argv[1:])
    from distrl.train import console

    return run_parse_only(lambda: console(argv))


def check_torchrun(argv: list[str]) -> tuple[bool, str]:
    """``torchrun ARGV``: torchrun's own options by its parser, then what it would start."""
    from torch.distributed.run import get_args_parser

    err = io.StringIO()
    with stop_after_parsing(), contextlib.redirect_stderr(err):
        try:
            get_args_parser().parse_args(argv)
            return False, "torchrun's parser did not stop"
        except Parsed as p:
            ns = p.namespace
        except SystemExit:
            return False, "torchrun's options do not parse: " + err.getvalue().strip().splitlines()[-1]
    target = ["-m", ns.training_script] if ns.module else [ns.training_script]
    return check_python([*target, *ns.training_script_args])


def check_command(words: list[str]) -> tuple[bool, str]:
    if words[0] == "distrl":
        return check_distrl(words[1:])
    if words[0] == "torchrun":
        return check_torchrun(words[1:])
    return check_python(words[1:])


COMMANDS = doc_commands()


def test_the_docs_hold_a_train_command_for_every_recipe():
    pages = {where.split(":")[0] for where, _ in COMMANDS}
    assert "README.md" in pages
    trained = set()
    for _, words in COMMANDS:
        for i, w in enumerate(words[:-1]):
            if (w == "train" and i and words[i - 1] == "distrl") or w in ("launch/train.py", "distrl.train"):
                trained.add(words[i + 1])
    assert trained >= set(RECIPE_NAMES), f"no train command for {set(RECIPE_NAMES) - trained}"


@pytest.mark.parametrize("where,words", COMMANDS, ids=[f"{w} {' '.join(c)[:60]}" for w, c in COMMANDS])
def test_every_command_in_the_docs_parses(where, words, monkeypatch):
    monkeypatch.chdir(ROOT)  # the pages' paths are relative to the repository's root
    ok, err = check_command(words)
    assert ok, f"{where}: {shlex.join(words)}\n{err}"


PYTHON_BLOCKS = [
    (f"{p.relative_to(ROOT)}:{n}", text) for p in DOCS for lang, n, text in fenced_blocks(p) if lang in ("python", "py")
]


@pytest.mark.parametrize("where,text", PYTHON_BLOCKS, ids=[w for w, _ in PYTHON_BLOCKS])
def test_every_python_block_compiles_and_its_imports_import(where, text):
    tree = compile(text, where, "exec", flags=ast.PyCF_ONLY_AST)
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    compile(text, where, "exec")
    exec(compile(ast.Module(body=imports, type_ignores=[]), where, "exec"), {})


def test_every_shell_block_of_a_page_names_its_language():
    """A fence without a language is neither checked nor highlighted: commands go in ``bash``,
    diagrams and outputs in ``text``."""
    for path in DOCS:
        for lang, n, _ in fenced_blocks(path):
            assert lang, f"{path.relative_to(ROOT)}:{n - 1}: a code block without a language"


# ---- the site -------------------------------------------------------------------------------------


def test_every_page_is_in_the_site_navigation():
    import yaml

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)

    def pages(nav):
        for item in nav:
            for value in item.values() if isinstance(item, dict) else [item]:
                yield from (pages(value) if isinstance(value, list) else [value])

    listed = set(pages(config["nav"]))
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md") if "_ext" not in p.parts}
    assert on_disk <= listed, f"pages missing from mkdocs.yml's nav: {sorted(on_disk - listed)}"


def test_the_api_reference_has_every_recipe():
    page = (ROOT / "docs" / "api" / "recipes.md").read_text()
    missing = [name for name in RECIPE_NAMES if f"::: distrl.recipes.{name}.recipe" not in page]
    assert not missing, f"docs/api/recipes.md lacks {missing}"


def test_mkdocs_build_strict(jobs, tmp_path):
    """``mkdocs build --strict``, as .ci/run runs it: no broken link, no missing page, every API
    object the reference names still exists."""
    pytest.importorskip("mkdocs", reason='mkdocs is not installed (pip install -e ".[docs]")')
    job = jobs.start(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", tmp_path / "site"],
        env=child_env(NO_MKDOCS_2_WARNING="1"),
    )
    assert job.wait(180) == 0, job.tail()


# ---- exit statuses --------------------------------------------------------------------------------


def code_exit_statuses() -> set:
    """Every exit status distrl's code can end a process with: the integers handed to ``sys.exit``,
    ``os._exit`` or ``SystemExit``, returned by a ``main``/``console`` or by a function whose docstring
    says it returns an exit status, held by a module constant named ``*EXIT*``, and ``"128 + N"``
    where a status is 128 plus a signal's number (a stop signal's own: 143, 130, 129, 131)."""
    from distrl.runtime.signals import STOP_SIGNALS

    files = sorted((ROOT / "distrl").rglob("*.py"))  # a worker's own status (an env that hangs) lives in roles/

    def ints(node) -> set:
        """The integers ``node`` can evaluate to as written: a literal, either branch of ``a if c else
        b``, any operand of ``a or b``, a dict's or tuple's items (not a call's arguments)."""
        if isinstance(node, ast.Constant):
            return {node.value} if type(node.value) is int else set()
        if isinstance(node, ast.IfExp):
            return ints(node.body) | ints(node.orelse)
        parts = {ast.BoolOp: "values", ast.Dict: "values", ast.Tuple: "elts"}.get(type(node))
        return set().union(*(ints(n) for n in getattr(node, parts))) if parts else set()

    found = set()
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                if name in ("sys.exit", "os._exit", "SystemExit", "exit"):
                    found |= ints(ast.Tuple(elts=node.args, ctx=ast.Load()))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node) or ""
                if node.name in ("main", "console") or "exit status" in " ".join(doc.split()):
                    for ret in ast.walk(node):
                        if isinstance(ret, ast.Return) and ret.value is not None:
                            found |= ints(ret.value)
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
                if 128 in (ints(node.left) | ints(node.right)):
                    found.add("128 + N")
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and "EXIT" in t.id for t in targets) and node.value is not None:
                    found |= ints(node.value)
    if "128 + N" in found:
        found |= {128 + int(s) for s in STOP_SIGNALS}
    return found


def test_troubleshooting_lists_every_exit_status_the_code_uses():
    """docs/troubleshooting.md's "Exit statuses" section names every status the code ends with, and
    its table lists none the code does not."""
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    section = page.split("\n## Exit statuses\n", 1)[1].split("\n## ", 1)[0]
    used = code_exit_statuses()
    assert {0, 1, 2, 143} <= used, f"the scan of the code found too little: {sorted(used, key=str)}"
    missing = [s for s in used if not re.search(rf"(?<![\w.]){re.escape(str(s))}(?![\w.])", section)]
    assert not missing, f"exit statuses the code uses that troubleshooting.md does not list: {missing}"
    listed = set()
    for row in re.findall(r"^\| ([^|]+) \|", section, flags=re.M):
        if row.strip() not in ("status", "---"):
            listed |= {s.strip() for s in row.split(",")}
    stale = sorted(s for s in listed if s not in {str(u) for u in used})
    assert not stale, f"troubleshooting.md lists exit statuses the code never uses: {stale}"
