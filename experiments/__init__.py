"""Benchmarks (bench_*.py) run from a checkout; the experiment functions (presets) are in each
recipe's ``distrl/recipes/<name>/recipe.py``."""
