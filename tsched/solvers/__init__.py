"""Placement solvers: a registry of named methods behind one front door, :func:`solve`."""

from __future__ import annotations

from tsched.solvers.registry import SolverInfo, SolverOutput, get_solver, register, solve, solvers

__all__ = ["SolverInfo", "SolverOutput", "get_solver", "register", "solve", "solvers"]
