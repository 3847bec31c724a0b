"""Benchmarks (bench_*.py) run from a checkout; the experiment functions are in distrl/experiments/."""
