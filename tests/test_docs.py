"""README and docs say what exists, cite only what is in this repository, and their commands parse."""
from __future__ import annotations

import re
import shlex

import pytest

from helpers import ROOT
from distrl.recipes import RECIPE_NAMES

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_lists_exactly_the_recipes_that_exist():
    readme = (ROOT / "README.md").read_text()
    table = re.findall(r"^\| `(\w+)` \|", readme, flags=re.M)
    assert sorted(table) == sorted(RECIPE_NAMES)
    intro = readme.split("## ")[0].lower()
    count = ["one", "two", "three", "four", "five", "six"][len(RECIPE_NAMES) - 1]
    assert f"{count} recipes exist" in intro, f"the README's intro should say {count} recipes exist"


def test_no_page_or_module_cites_a_file_outside_the_repository():
    for path in DOCS + sorted((ROOT / "distrl").rglob("*.py")):
        assert "facts.md" not in path.read_text(), path


def shell_lines(path) -> list[str]:
    """The command lines of ``path``'s shell code blocks (bash, sh, console or unnamed fences), with
    continuation lines joined."""
    out, fence, pending = [], None, ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = line.strip()[3:] if fence is None else None
            continue
        if fence not in ("bash", "sh", "shell", "console", ""):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        out.append(pending.lstrip("$ "))
        pending = ""
    return out


ENTRIES = ("train", "distrl.train", "launch/train.py")


def train_commands() -> list[tuple[str, list[str]]]:
    """``(page, arguments)`` of every ``distrl train``, ``-m distrl.train`` and ``launch/train.py``
    command in the README's and docs' shell blocks (two commands side by side on a line count twice)."""
    out = []
    for path in DOCS:
        for line in shell_lines(path):
            for part in line.split("&&"):
                if "train" not in part:  # diagrams share unnamed fences with commands
                    continue
                words = shlex.split(part, comments=True)
                starts = [i for i, w in enumerate(words)
                          if w in ENTRIES and (w != "train" or (i and words[i - 1] == "distrl"))]
                for i, j in zip(starts, [*starts[1:], len(words)]):
                    args = words[i + 1:j]
                    while args and not args[-1].startswith("-") and args[-1] in ("torchrun", "python", "distrl"):
                        args.pop()  # the next command's launcher on the same line
                    out.append((path.name, args))
    return out


def test_the_docs_hold_train_commands_for_every_recipe():
    pages = {page for page, _ in train_commands()}
    assert "README.md" in pages
    assert {args[0] for _, args in train_commands() if args} >= set(RECIPE_NAMES)


@pytest.mark.parametrize("page,args", train_commands(), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_every_train_command_in_the_docs_parses(page, args, capsys):
    """Each command, as the page writes it, builds a valid config (``--print-config``); a command
    that names the reader's own module (``my_...``) may stop there, and only there."""
    from distrl.train import main

    code, err = main([*args, "--print-config"]), capsys.readouterr().err
    users_own = re.search(r"No module named 'my_\w+'", err) and err.count("\n") == 1
    assert code == 0 or (code == 2 and users_own), f"{page}: {' '.join(args)}: {err}"
