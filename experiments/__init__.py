"""The workshop beside the library: benchmarks and tools run from a checkout, never installed.

- ``bench_*.py`` and the other scripts here (``baselines``, ``torchrl_atari``, ``sf2_atari``,
  ``eval_atari``, ``torchrl_loop``) run from the checkout's root as modules,
  ``python -m experiments.bench_impala --help``: the root is then on ``sys.path``, so no script
  edits it.
- ``kit/`` holds what several scripts share, written once under public names: clocks and rates,
  distrl runs, TorchRL's collector layouts and the env-only limit, CartPole's yardstick, Pong's
  pieces. The kit imports no script, and no script imports another's underscore names
  (``tests/test_experiments_imports.py`` checks both, and that no import circles).
- ``examples/custom/`` is a recipe composed outside ``distrl/`` (``docs/custom_recipe.md``),
  named by path: ``distrl train experiments/examples/custom/seed_apex.py:recipe``.

The experiment functions (presets) of the shipped recipes are in each recipe's
``distrl/recipes/<name>/recipe.py``.
"""
