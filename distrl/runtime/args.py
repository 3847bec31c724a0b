"""The command-line helpers every ``distrl`` entry point shares (``train``, ``compare``, ``sweep``,
``plot``, ``export``): one-line usage errors, defaults in ``--help``, a positive count type."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions as written (examples keep their lines), and ``(default: ...)`` after every option's
    help, except where the help names its default itself or there is no value to show (``None``, an
    off flag, an empty list: the help says what happens then)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is None or action.default is False or action.default == [] or "default" in text.lower():
            return text
        return super()._get_help_string(action)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit status 2 (the usage text is behind
    --help), and ``--help`` shows defaults (:class:`HelpFormatter`): the parser of every ``distrl``
    subcommand."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def positive_int(text: str) -> int:
    """argparse type of a count of at least 1 (``--nproc``): 0 or less is a usage error, never one process."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def probability(text: str) -> float:
    """argparse type of a probability in ``[0, 1)`` (``--sticky-actions``: 1 would never act)."""
    try:
        p = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not 0.0 <= p < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {p}")
    return p
