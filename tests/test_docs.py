"""README and docs say what exists, cite only what is in this repository, and their commands parse."""
from __future__ import annotations

import re
import shlex

import pytest

from conftest import ROOT
from distrl.architectures import RECIPE_NAMES

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


def readme_commands() -> list[list[str]]:
    """The arguments of every ``distrl train``, ``-m distrl.train`` and ``launch/train.py`` command
    in the README's code blocks."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    out = []
    for line in "\n".join(blocks).splitlines():
        for part in line.split("&&"):
            words = shlex.split(part)
            for entry in ("train", "distrl.train", "launch/train.py"):
                if entry in words and (entry != "train" or words[words.index(entry) - 1] == "distrl"):
                    out.append(words[words.index(entry) + 1:])
    return out


@pytest.mark.parametrize("args", readme_commands(), ids=" ".join)
def test_readme_commands_parse(args, capsys):
    from distrl.train import main

    assert main([*args, "--print-config"]) == 0, capsys.readouterr().err
