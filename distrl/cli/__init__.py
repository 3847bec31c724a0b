"""The command line: ``distrl train``'s options (``options.py``), the config help (``help.py``),
the plan of a run and its ranks (``runner.py``), the single-machine launcher (``launcher.py``)."""


def __getattr__(name: str):
    # ``from distrl.cli import build_config`` (0.2.0's module, now options.py) keeps working; the import
    # waits for the first use so that ``distrl.cli.launcher`` stays free of the recipes.
    import importlib

    if name.startswith("_"):
        raise AttributeError(name)
    return getattr(importlib.import_module("distrl.cli.options"), name)
