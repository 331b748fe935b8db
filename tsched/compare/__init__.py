"""Comparison runs: job completion time (JCT) records shared by simulated and executed runs."""
