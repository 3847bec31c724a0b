"""docs/torchrl.md runs as written: its ``distrl`` commands and every python snippet, in order, in a
directory holding the run its snippets read (``runs/impala-debug``, the shared debug run)."""

from __future__ import annotations

import re
import shlex

from helpers import ROOT
from distrl.train import console, main

PAGE = ROOT / "docs" / "torchrl.md"


def blocks() -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced block of the page, in order."""
    return re.findall(r"```(\w+)\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_the_page_has_a_snippet_per_open_door():
    langs = [lang for lang, _ in blocks()]
    assert langs.count("python") >= 5 and "bash" in langs


def test_readme_and_index_link_the_page():
    assert "docs/torchrl.md" in (ROOT / "README.md").read_text()
    assert "(torchrl.md)" in (ROOT / "docs" / "index.md").read_text()


def test_snippets_run(impala_debug_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "impala-debug").symlink_to(impala_debug_run)
    for lang, code in blocks():
        if lang == "bash":
            for line in code.strip().splitlines():
                words = shlex.split(line)
                assert words[0] == "distrl", line
                if words[1] == "train":  # the run itself is the shared fixture: the command must parse
                    assert main([*words[2:], "--print-config"]) == 0, capsys.readouterr().err
                else:
                    assert console(words[1:]) == 0, capsys.readouterr().err
        elif lang == "python":
            exec(compile(code, f"{PAGE.name} snippet", "exec"), {"__name__": "__snippet__"})
