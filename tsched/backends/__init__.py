"""Thin executors that turn a plan into running work: Ray (placement groups)."""
