"""The defragmentation problem as a CP-SAT model, solved to a proof on small states.

Per node *n* (size G, busy B) and movable job *j* (size s, GPUs c_jn on node n, weight w):

- ``move_j`` (bool): the job moves and pays w;
- ``y_jn`` (integer 0 … min(s, G)): its GPUs on node n afterwards, Σ_n y_jn = s · move_j;
- ``t_n``: the waiting job's GPUs on node n, Σ_n t_n = N;
- capacity: B_n + Σ_j c_jn (1 − move_j) + Σ_j y_jn + t_n ≤ G_n (jobs that may not move
  count as busy);
- admission of the waiting job and of every moved job, as the simulator admits: up to the
  largest node, one node (``one_n`` bool, Σ one_n = 1 or move_j, x_n = size · one_n); larger,
  whole nodes (``whole_n``: x_n = G_n) and at most one partly used node (``part_n``: x_n ≤
  (G_n − 1) · part_n, Σ part_n ≤ 1);
- minimise Σ_j w_j move_j (weights scaled to integers: milli-GPU-seconds).

Admission ``any`` needs no model: moving jobs frees no GPU, so the waiting job fits now or never.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tsched.defrag.model import Counts

__all__ = ["ExactResult", "solve_exact"]

SCALE = 1000  # weights in milli-GPU-seconds


class ExactResult:
    """CP-SAT's answer: ``status`` (``optimal``, ``feasible``, ``infeasible``, ``unknown``),
    the plan (node → GPUs for the waiting job, job → node → GPUs for moved ones), its cost and
    the proved bound."""

    def __init__(self) -> None:
        self.status = "unknown"
        self.target: dict[int, int] | None = None
        self.moved: dict[int, dict[int, int]] = {}
        self.cost = float("inf")
        self.bound = 0.0
        self.wall = 0.0


def _admit(model: Any, x: list[Any], total: Any, size: np.ndarray, n: int, active: Any) -> None:
    """Constrain node counts ``x`` (summing to ``total``) to a compact placement of ``n`` GPUs
    when ``active`` (a literal, or True)."""
    gmax = int(size.max())
    if n <= gmax:
        one = [model.NewBoolVar("") for _ in x]
        model.Add(sum(one) == (1 if active is True else active))
        for xi, oi, g in zip(x, one, size, strict=True):
            if g < n:
                model.Add(oi == 0)
            model.Add(xi == n * oi)
        return
    part = [model.NewBoolVar("") for _ in x]
    whole = [model.NewBoolVar("") for _ in x]
    model.Add(sum(part) <= 1)
    for xi, pi, wi, g in zip(x, part, whole, size, strict=True):
        g = int(g)
        model.Add(pi + wi <= 1)
        if g <= n:
            model.Add(xi == g).OnlyEnforceIf(wi)
        else:
            model.Add(wi == 0)
        model.Add(xi <= (g - 1) * pi + g * wi)
        model.Add(xi <= (g - 1)).OnlyEnforceIf(wi.Not())


def solve_exact(
    counts: Counts,
    n: int,
    *,
    time_limit: float = 10.0,
    hint: tuple[dict[int, int], dict[int, dict[int, int]]] | None = None,
    lower: float = 0.0,
    workers: int = 2,
) -> ExactResult:
    """Solve the compact defragmentation problem for a waiting job of ``n`` GPUs with CP-SAT
    (``lower``: a valid bound to start from; ``hint``: a plan to start from)."""
    from ortools.sat.python import cp_model

    start = time.perf_counter()
    out = ExactResult()
    size = counts.size
    nodes = range(len(size))
    model = cp_model.CpModel()
    movable = [k for k in range(len(counts.jobs)) if counts.movable[k]]
    move = {k: model.NewBoolVar(f"move{k}") for k in movable}
    y = {k: [model.NewIntVar(0, int(min(counts.jobs[k], size[i])), "") for i in nodes]
         for k in movable}  # fmt: skip
    t = [model.NewIntVar(0, int(min(n, size[i])), f"t{i}") for i in nodes]
    model.Add(sum(t) == n)
    _admit(model, t, n, size, n, True)
    for k in movable:
        model.Add(sum(y[k]) == int(counts.jobs[k]) * move[k])
        _admit(model, y[k], int(counts.jobs[k]), size, int(counts.jobs[k]), move[k])
    pinned = counts.pinned()
    for i in nodes:
        staying = sum(counts.held[k][i] * (1 - move[k]) for k in counts.on_node[i]
                      if counts.movable[k])  # fmt: skip
        model.Add(int(pinned[i]) + staying + sum(y[k][i] for k in movable) + t[i] <= int(size[i]))
    weight = {k: int(round(counts.weight[k] * SCALE)) for k in movable}
    objective = sum(weight[k] * move[k] for k in movable)
    model.Minimize(objective)
    if lower > 0:
        model.Add(objective >= int(np.floor(lower * SCALE + 1e-6)))
    if hint is not None:
        target, moved = hint
        for i in nodes:
            model.AddHint(t[i], target.get(i, 0))
        for k in movable:
            model.AddHint(move[k], int(k in moved))
            for i in nodes:
                model.AddHint(y[k][i], moved.get(k, {}).get(i, 0))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.05, float(time_limit))
    solver.parameters.num_search_workers = workers
    code = solver.Solve(model)
    out.wall = time.perf_counter() - start
    if code == cp_model.INFEASIBLE:
        out.status = "infeasible"
        return out
    out.bound = max(lower, solver.BestObjectiveBound() / SCALE)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return out
    out.status = "optimal" if code == cp_model.OPTIMAL else "feasible"
    out.target = {i: int(solver.Value(t[i])) for i in nodes if solver.Value(t[i])}
    out.moved = {k: {i: int(solver.Value(y[k][i])) for i in nodes if solver.Value(y[k][i])}
                 for k in movable if solver.Value(move[k])}  # fmt: skip
    out.cost = float(sum(counts.weight[k] for k in out.moved))
    if out.status == "optimal":
        out.bound = out.cost
    return out
