"""Mixed-integer programming through PuLP (``method="milp"``), with CBC or HiGHS.

``options={"backend": "cbc"|"highs"}`` (default ``highs``). Two formulations:

**Hierarchical** (when GPUs of a node are interchangeable, see :mod:`tsched.solvers.node_model`):
binary ``x[w, k]`` (worker w on node k) with capacities, and per traffic pair e and domain g a
continuous ``s[e, g] ≤ y[i, g], s[e, g] ≤ y[j, g]`` where ``y[i, g] = Σ_{k∈g} x[i, k]``; the
objective maximises the savings ``Σ w_e Δ_level s[e, g]``. The best known lower bound enters as
a cut on the savings.

**Flat** (tiny raw QAPs): the Adams–Johnson linearisation, binary ``x[i, k]``, continuous
``y[e, k, l] ≥ 0`` with ``Σ_l y[e, k, l] = x[i, k]`` and ``Σ_k y[e, k, l] = x[j, l]``.

The bound reported is HiGHS's MIP dual bound; for CBC it is known only when CBC reports the
optimum (within the relative gap ``1e-9``). The objective is recomputed from the assignment.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

import numpy as np

from tsched.errors import InputError, SolverError
from tsched.problem import PlacementProblem, objective
from tsched.solvers.base import Assignment, Flag, SolverOutput, keep_better, register
from tsched.solvers.node_model import (
    HierarchicalView,
    assignment_from_nodes,
    prepare_exact,
    units_of,
)

__all__ = ["milp", "BACKENDS"]

#: MILP backends: name → what PuLP calls it.
BACKENDS = {"highs": "HiGHS", "cbc": "PULP_CBC_CMD"}
DEFAULT_TIME_LIMIT = 60.0
GAP = 1e-9
#: Largest facility count for the flat linearisation (pairs × locations² variables).
FLAT_LIMIT = 10


@register(
    "milp",
    exact=True,
    provides_bound=True,
    supports_hint=True,
    required_modules=("pulp",),
    extra="all",
    description="PuLP MILP (CBC or HiGHS): hierarchical model, flat linearisation if tiny",
    options={
        "backend": "'highs' (default) or 'cbc'",
        "model": "'hierarchical' or 'flat' (default: hierarchical when it applies)",
        "hint": "a starting assignment (location per worker)",
        "independent": "prove without tsched's lower bounds: no early stop, no cut on the "
        "objective (a check on the bounds; default false)",
    },
    kinds={"hint": Assignment(), "independent": Flag()},
)
def milp(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    import pulp

    backend = options.get("backend", "highs")
    if backend not in BACKENDS:
        raise InputError(
            f"method 'milp': option backend={backend!r} (valid: {', '.join(BACKENDS)})"
        )
    if BACKENDS[backend] not in pulp.listSolvers(onlyAvailable=True):
        from tsched.errors import SolverNotAvailableError

        raise SolverNotAvailableError(
            f"method 'milp': PuLP cannot find the {backend} backend; "
            "pip install 'tsched[all]' (highspy, pulp with CBC)"
        )
    start = time.perf_counter()
    limit = DEFAULT_TIME_LIMIT if time_limit is None else time_limit
    prep = prepare_exact(problem, "milp", options, limit, seed)
    if prep.proved is not None:
        return prep.proved
    view, why, hint, known = prep.view, prep.why, prep.hint, prep.known
    remaining = max(0.05, limit - (time.perf_counter() - start))
    if prep.model == "hierarchical":
        assert view is not None
        out = _hierarchical(problem, view, hint, known, remaining, backend)
        return keep_better(problem, out, hint)
    if problem.n_workers > FLAT_LIMIT:
        return SolverOutput(
            hint,
            message=f"milp: flat linearisation limited to {FLAT_LIMIT} workers ({why}); "
            "returning the greedy start",
            stats={"model": "none", "backend": backend},
        )
    return keep_better(problem, _flat(problem, hint, remaining, backend), hint)


def _var(prob: Any, name: str, **kwargs: Any) -> Any:
    """A variable attached to ``prob`` (PuLP ≥ 3.3), or a free-standing one on older PuLP."""
    import pulp

    if hasattr(prob, "add_variable"):
        return prob.add_variable(name, **kwargs)
    return pulp.LpVariable(name, **kwargs)


def _solver(backend: str, limit: float) -> Any:
    import pulp

    if backend == "highs":
        return pulp.HiGHS(msg=False, timeLimit=limit, gapRel=GAP, threads=1)
    coin = pulp.COIN_CMD(msg=False, timeLimit=limit, gapRel=GAP, warmStart=True)
    if coin.available():  # a CBC on PATH (e.g. pulp[cbc]): PuLP's preferred route
        return coin
    import warnings

    with warnings.catch_warnings():  # PuLP 3 deprecates its bundled CBC; it still works
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(msg=False, timeLimit=limit, gapRel=GAP, warmStart=True)


def _run(prob: Any, backend: str, limit: float) -> tuple[int, float | None, str]:
    """Solve; return (PuLP solution status, backend's bound on the objective or None, the
    backend's status in words)."""
    import pulp

    try:
        with _native_stdout_discarded():  # HiGHS prints a banner even when told not to
            prob.solve(_solver(backend, limit))
    except pulp.PulpSolverError as exc:
        raise SolverError(f"method 'milp' ({backend}) failed: {exc}") from exc
    text = pulp.LpStatus.get(prob.status, str(prob.status))
    bound = None
    if backend == "highs" and getattr(prob, "solverModel", None) is not None:
        model = prob.solverModel
        # PuLP calls a time-limit stop with a plan "Optimal" (its solution status says
        # feasible); HiGHS's own model status says what happened
        text = model.modelStatusToString(model.getModelStatus())
        info = model.getInfo()
        dual = getattr(info, "mip_dual_bound", None)
        if dual is not None and np.isfinite(dual):
            # PuLP hands HiGHS a maximisation as the minimisation of the negated objective
            bound = -float(dual) if prob.sense == pulp.LpMaximize else float(dual)
    return int(prob.sol_status), bound, text


@contextlib.contextmanager
def _native_stdout_discarded() -> Any:
    """Point file descriptor 1 at the null device for the duration: native libraries write
    there (HiGHS's banner, with ``msg=False`` too), which would corrupt a ``--json`` document
    on stdout and break ``--quiet``'s silence on stderr. Their errors reach tsched as PuLP's
    exceptions and statuses, not as text."""
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        sys.stdout.flush()  # what Python wrote meanwhile goes where the native writes went
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def _hierarchical(
    problem: PlacementProblem,
    view: HierarchicalView,
    hint: np.ndarray,
    known: float | None,
    limit: float,
    backend: str,
) -> SolverOutput:
    import pulp

    n, n_nodes = problem.n_workers, len(view.nodes)
    hint_nodes = units_of(view, hint)
    prob = pulp.LpProblem("placement", pulp.LpMaximize)
    x = [[_var(prob, f"x_{w}_{k}", cat="Binary") for k in range(n_nodes)] for w in range(n)]
    for w in range(n):
        prob += pulp.lpSum(x[w]) == 1
        for k in range(n_nodes):
            x[w][k].setInitialValue(int(hint_nodes[w] == k))
    for k in range(n_nodes):
        prob += pulp.lpSum(x[w][k] for w in range(n)) <= int(view.capacity[k])
    # domains per level: level 0 = nodes, then each nested network level below the top
    domains = [[[k] for k in range(n_nodes)]]
    for lev in range(view.groups.shape[1]):
        col = view.groups[:, lev]
        domains.append([list(np.flatnonzero(col == g)) for g in np.unique(col)])
    savings = []
    for e, (i, j) in enumerate(view.pairs):
        for lev, groups in enumerate(domains):
            gain = float(view.weight[e] * view.step[lev])
            if gain <= 0:
                continue
            for g, members in enumerate(groups):
                s = _var(prob, f"s_{e}_{lev}_{g}", lowBound=0, upBound=1)
                prob += s <= pulp.lpSum(x[i][k] for k in members)
                prob += s <= pulp.lpSum(x[j][k] for k in members)
                savings.append(gain * s)
    total = pulp.lpSum(savings)
    prob += total
    constant = view.constant
    if known is not None and savings:
        prob += total <= constant - known + 1e-9 * max(1.0, abs(constant))
    sol_status, dual, text = _run(prob, backend, limit)
    stats: dict[str, Any] = {"model": "hierarchical", "backend": backend, "solver_status": text}
    if sol_status not in (1, 2):
        return SolverOutput(
            assignment_from_nodes(problem, view, hint_nodes),
            message=f"milp ({backend}): {text}; returning the start",
            stats=stats,
        )
    node_of = np.array(
        [max(range(n_nodes), key=lambda k: x[w][k].value() or 0.0) for w in range(n)]
    )
    assignment = assignment_from_nodes(problem, view, node_of)
    # the model maximises savings: a bound on them is a bound on the cost, mirrored
    return _finish(
        problem,
        assignment,
        sol_status,
        None if dual is None else constant - dual,
        f"milp ({backend}) hierarchical: {text}",
        stats,
        savings_scale=constant,
    )


def _flat(problem: PlacementProblem, hint: np.ndarray, limit: float, backend: str) -> SolverOutput:
    import pulp

    n, mloc = problem.n_workers, problem.n_locations
    flow, dist = problem.flow_dense(), problem.distance()
    lin = problem.linear if problem.linear is not None else np.zeros((n, mloc))
    prob = pulp.LpProblem("qap", pulp.LpMinimize)
    x = [[_var(prob, f"x_{i}_{k}", cat="Binary") for k in range(mloc)] for i in range(n)]
    for i in range(n):
        prob += pulp.lpSum(x[i]) == 1
        for k in range(mloc):
            x[i][k].setInitialValue(int(hint[i] == k))
    for k in range(mloc):
        prob += pulp.lpSum(x[i][k] for i in range(n)) <= 1
    terms = [float(lin[i, k]) * x[i][k] for i in range(n) for k in range(mloc) if lin[i, k]]
    for i in range(n):
        for j in range(i + 1, n):
            if not (flow[i, j] or flow[j, i]):
                continue
            cost = flow[i, j] * dist + flow[j, i] * dist.T
            y = {
                (k, l): _var(prob, f"y_{i}_{j}_{k}_{l}", lowBound=0)
                for k in range(mloc)
                for l in range(mloc)
                if k != l
            }
            for k in range(mloc):
                prob += pulp.lpSum(y[k, l] for l in range(mloc) if l != k) == x[i][k]
                prob += pulp.lpSum(y[l, k] for l in range(mloc) if l != k) == x[j][k]
            terms += [float(cost[k, l]) * v for (k, l), v in y.items() if cost[k, l]]
    prob += pulp.lpSum(terms)
    sol_status, dual, text = _run(prob, backend, limit)
    stats = {"model": "flat", "backend": backend, "solver_status": text}
    if sol_status not in (1, 2):
        return SolverOutput(
            hint, message=f"milp ({backend}): {text}; returning the start", stats=stats
        )
    assignment = np.array(
        [max(range(mloc), key=lambda k: x[i][k].value() or 0.0) for i in range(n)], dtype=np.int64
    )
    return _finish(problem, assignment, sol_status, dual, f"milp ({backend}) flat: {text}", stats)


def _finish(
    problem: PlacementProblem,
    assignment: np.ndarray,
    sol_status: int,
    bound: float | None,
    message: str,
    stats: dict[str, Any],
    savings_scale: float | None = None,
) -> SolverOutput:
    """Result of a MILP run: the backend's bound, or — when only its optimality is known — the
    objective less the relative gap the backend was allowed (measured on the savings for the
    hierarchical model, whose objective is ``savings_scale`` − cost)."""
    value = objective(problem, assignment)
    proved = sol_status == 1
    if bound is None and proved:
        base = value if savings_scale is None else savings_scale - value
        bound = value - GAP * max(1.0, abs(base))
    proved = proved and bound is not None and value - bound <= 1e-6 * max(1.0, abs(value))
    return SolverOutput(
        assignment, bound=bound, proved_optimal=proved, message=message, stats=stats
    )
