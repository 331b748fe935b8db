"""Solver benchmark runs: ``python -m benchmarks.<name>``; tables go to ``benchmarks/results/``."""
