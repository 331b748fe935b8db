"""OR-Tools CP-SAT models (``method="cpsat"``).

Two formulations, chosen per problem (``options={"model": "hierarchical"|"flat"}`` to force one):

**Hierarchical** (clusters with interchangeable GPUs per node, see
:mod:`tsched.solvers.node_model`): an integer ``node[w]`` per worker, capacities per node, and per
traffic pair one boolean per level "shares this domain" (reified equalities of ``node`` and of its
domain via element constraints). The objective maximises the savings ``Σ w_e Δ_ℓ same_ℓ(e)``.
Interchangeable siblings are ordered by their lowest worker (symmetry breaking; the hint is
relabelled to match): nodes with the same free GPUs in the same domains, and whole domains with the
same multiset of nodes under the same parent, counting only the levels that cost something. The
best known lower bound enters as a cut on the savings.

**Flat** (raw QAPs and small clusters): the Adams–Johnson linearisation, assignment booleans
``x[i, k]`` and pair booleans ``y[e, k, l]`` tied to them by ``Σ_l y = x[i, k]``.

Float costs are scaled to integers; savings coefficients are rounded *up* (and flat costs carry an
explicit rounding-error allowance), so the reported bound stays a valid bound of the float
objective, which is always recomputed from the assignment. A solution callback records the
anytime curve (seconds, objective) in ``result.stats["anytime"]``.

Reproducibility: the time limit is given to CP-SAT both as *deterministic* time (its own work
unit, close to seconds) with interleaved workers and as wall time. When the deterministic limit
(or the end of the search) comes first, the same seed and input give the same answer; when the
wall clock stops it, ``stats["reproducible"]`` is False. Presolve counts against the limit.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from tsched.problem import PlacementProblem, objective
from tsched.solvers.base import Assignment, Count, Flag, SolverOutput, keep_better, register
from tsched.solvers.node_model import (
    HierarchicalView,
    assignment_from_nodes,
    prepare_exact,
    units_of,
)

__all__ = ["cpsat", "DEFAULT_TIME_LIMIT"]

DEFAULT_TIME_LIMIT = 60.0
#: Largest coefficient after scaling float costs to integers.
SCALE_TARGET = 1e7
#: Most that the scaled savings may add up to, so that their sum is exact in a double.
SCALE_LIMIT = 2.0**52
#: Relative gap under which a plan counts as proved (:func:`_result`).
PROOF_TOLERANCE = 1e-6
#: Largest facility count for the flat model (it has pairs × locations² booleans).
FLAT_LIMIT = 16

_OPTIONS = {
    "model": "'hierarchical' or 'flat' (default: hierarchical when it applies)",
    "workers": "CP-SAT search workers (default 2)",
    "hint": "a starting assignment (location per worker); default: the greedy solution",
    "symmetry_breaking": "order identical nodes and domains (default true)",
    "independent": "prove without tsched's lower bounds: no early stop, no cut on the "
    "objective (a check on the bounds; default false)",
}


@register(
    "cpsat",
    exact=True,
    provides_bound=True,
    supports_hint=True,
    required_modules=("ortools",),
    extra="all",
    description="OR-Tools CP-SAT: hierarchical worker->node model or flat QAP model",
    options=_OPTIONS,
    kinds={
        "workers": Count(1, 64),
        "hint": Assignment(),
        "symmetry_breaking": Flag(),
        "independent": Flag(),
    },
)
def cpsat(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    start = time.perf_counter()
    limit = DEFAULT_TIME_LIMIT if time_limit is None else time_limit
    prep = prepare_exact(problem, "cpsat", options, limit, seed)
    if prep.proved is not None:
        return prep.proved
    view, why, hint = prep.view, prep.why, prep.hint
    remaining = max(0.01, limit - (time.perf_counter() - start))
    workers = int(options.get("workers", 2))
    if prep.model == "hierarchical":
        assert view is not None
        symmetry = bool(options.get("symmetry_breaking", True))
        out = _solve_hierarchical(
            problem, view, hint, remaining, seed, workers, symmetry, prep.known
        )
        return keep_better(problem, out, hint)
    if problem.n_workers > FLAT_LIMIT:
        return SolverOutput(
            hint,
            message=f"cpsat: flat model limited to {FLAT_LIMIT} workers ({why}); "
            "returning the greedy start",
            stats={"model": "none"},
        )
    return keep_better(problem, _solve_flat(problem, hint, remaining, seed, workers), hint)


def _recorder(evaluate: Any) -> Any:
    """A CP-SAT solution callback recording (seconds, float objective) of each improving
    solution in ``.curve`` (built here so that OR-Tools is imported only when CP-SAT runs)."""
    from ortools.sat.python import cp_model

    class Recorder(cp_model.CpSolverSolutionCallback):
        def __init__(self) -> None:
            super().__init__()
            self.start = time.perf_counter()
            self.curve: list[tuple[float, float]] = []

        def on_solution_callback(self) -> None:
            value = evaluate(self)
            if not self.curve or value < self.curve[-1][1]:
                self.curve.append((round(time.perf_counter() - self.start, 4), value))

    return Recorder()


def _symmetry_tree(view: HierarchicalView) -> tuple[dict[tuple, list[tuple]], dict[tuple, Any]]:
    """The model's units as a tree over the levels that cost something: the children of each
    vertex (a vertex is its path of domain ids from the top; a unit's path ends in its index) and
    each vertex's shape (a unit's: its capacity; a domain's: its children's shapes, sorted). A
    level whose saving is zero does not tell its domains apart, so it is left out of the tree."""
    used = [k for k in range(view.groups.shape[1]) if view.step[k + 1] > 0][::-1]
    children: dict[tuple, list[tuple]] = {}
    seen: set[tuple] = set()
    for k in range(len(view.nodes)):
        path = (*(int(view.groups[k, lev]) for lev in used), k)
        for depth in range(len(path)):
            child = path[: depth + 1]
            if child not in seen:
                seen.add(child)
                children.setdefault(path[:depth], []).append(child)
    shape: dict[tuple, Any] = {}

    def shape_of(vertex: tuple) -> Any:
        if vertex not in shape:
            kids = children.get(vertex)
            if kids is None:
                shape[vertex] = ("unit", int(view.capacity[vertex[-1]]))
            else:
                shape[vertex] = tuple(sorted((shape_of(c) for c in kids), key=repr))
        return shape[vertex]

    shape_of(())
    return children, shape


def _units_under(children: dict[tuple, list[tuple]], vertex: tuple) -> list[int]:
    kids = children.get(vertex)
    if kids is None:
        return [vertex[-1]]
    return [u for c in kids for u in _units_under(children, c)]


def _map_onto(
    children: dict[tuple, list[tuple]],
    shape: dict[tuple, Any],
    a: tuple,
    b: tuple,
    mapping: np.ndarray,
) -> None:
    """``mapping`` sends each unit under vertex ``a`` to its twin under ``b`` (same shape),
    children paired in order of shape."""
    kids_a, kids_b = children.get(a), children.get(b)
    if kids_a is None or kids_b is None:
        mapping[a[-1]] = b[-1]
        return
    for ca, cb in zip(sorted(kids_a, key=lambda c: repr(shape[c])),
                      sorted(kids_b, key=lambda c: repr(shape[c]))):  # fmt: skip
        _map_onto(children, shape, ca, cb, mapping)


def _canonical_nodes(
    view: HierarchicalView, node_of: np.ndarray
) -> tuple[np.ndarray, list[list[list[int]]]]:
    """Relabel a worker → unit assignment so that interchangeable siblings appear in order of
    first use, and return the classes the symmetry-breaking constraints are stated on.

    Siblings are interchangeable when they have the same shape under the same parent in the
    tree of levels that cost something (:func:`_symmetry_tree`): units with the same capacity
    in the same domains, and whole domains with the same multiset of unit capacities, their
    units swapped with them. Each class is its sibling slots in order, each slot the list of
    units under it. Going down from the top, the siblings of each class are reordered by their
    lowest worker (unused ones last); reordering within a domain does not change which
    workers the domain holds, so the orders above stay.
    """
    children, shape = _symmetry_tree(view)
    n_units = len(view.nodes)
    node_of = np.asarray(node_of).copy()
    classes: list[list[list[int]]] = []
    todo = [()]
    while todo:
        vertex = todo.pop(0)
        kids = children.get(vertex)
        if kids is None:
            continue
        by_shape: dict[str, list[tuple]] = {}
        for c in kids:
            by_shape.setdefault(repr(shape[c]), []).append(c)
        for slots in by_shape.values():
            if len(slots) < 2:
                continue
            units = [_units_under(children, s) for s in slots]
            first = np.full(n_units, np.iinfo(np.int64).max)
            np.minimum.at(first, node_of, np.arange(len(node_of)))
            order = sorted(range(len(slots)), key=lambda i: int(first[units[i]].min()))
            mapping = np.arange(n_units)
            for slot, i in enumerate(order):
                if i != slot:
                    _map_onto(children, shape, slots[i], slots[slot], mapping)
            node_of = mapping[node_of]
            classes.append(units)
        todo.extend(kids)
    return node_of, classes


def _solve_hierarchical(
    problem: PlacementProblem,
    view: HierarchicalView,
    hint: np.ndarray,
    limit: float,
    seed: int,
    workers: int,
    symmetry: bool,
    known: float | None,
) -> SolverOutput:
    """The worker → node model; ``known``: the best known lower bound (None: none, or the
    ``independent`` option), a cut on the savings and the scale's guide."""
    from ortools.sat.python import cp_model

    n = problem.n_workers
    n_nodes = len(view.nodes)
    hint_nodes = units_of(view, hint)
    classes: list[list[int]] = []
    if symmetry:
        hint_nodes, classes = _canonical_nodes(view, hint_nodes)

    # Data: savings per pair and level, scaled up to integers (rounded up: a valid bound).
    steps = view.step
    per_level = [view.weight * s for s in steps]
    biggest = max((float(p.max()) for p in per_level if len(p)), default=0.0)
    scale = SCALE_TARGET / biggest if biggest > 0 else 1.0
    # Rounding each saving up costs the bound at most one unit per term. Where that could exceed
    # the proof tolerance at the optimum (a plan far cheaper than its savings), the scale grows,
    # as far as the savings' sum stays exact in a double (CP-SAT's LP). The optimum is at least
    # the known bound; without one (``independent``), a hundredth of the start's cost stands in.
    terms_count = sum(int(np.count_nonzero(p)) for p in per_level)
    if terms_count:
        total = sum(float(p.sum()) for p in per_level)
        least = known if known is not None and known > 0 else view.cost(hint_nodes) / 100
        tolerance = PROOF_TOLERANCE * max(1.0, least)
        scale = max(scale, min(terms_count / tolerance, SCALE_LIMIT / total))
    coef = [np.ceil(p * scale).astype(np.int64) for p in per_level]

    m = cp_model.CpModel()
    # Variables
    node = [m.NewIntVar(0, n_nodes - 1, f"node{w}") for w in range(n)]
    x = [[m.NewBoolVar(f"x{w}_{k}") for k in range(n_nodes)] for w in range(n)]
    dom = []
    for lev in range(view.groups.shape[1]):
        table = [int(g) for g in view.groups[:, lev]]
        dom.append([m.NewIntVar(0, max(table), f"d{lev}_{w}") for w in range(n)])
        for w in range(n):
            m.AddElement(node[w], table, dom[lev][w])
    # Constraints: one node per worker, capacities
    for w in range(n):
        m.AddExactlyOne(x[w])
        m.Add(node[w] == sum(k * x[w][k] for k in range(n_nodes)))
    for k in range(n_nodes):
        m.Add(sum(x[w][k] for w in range(n)) <= int(view.capacity[k]))
    # Symmetry breaking: in each class of interchangeable siblings (units, or whole domains), a
    # sibling is used only after the one before it, by worker index: its lowest worker comes
    # after that of the one before (a prefix "seen" literal per worker keeps this linear).
    inside: dict[tuple[int, tuple[int, ...]], Any] = {}

    def within(w: int, units: list[int]) -> Any:
        if len(units) == 1:
            return x[w][units[0]]
        key = (w, tuple(units))
        if key not in inside:
            inside[key] = m.NewBoolVar(f"in{w}_{units[0]}")
            m.Add(inside[key] == sum(x[w][k] for k in units))
        return inside[key]

    for members in classes:
        for a, b in zip(members, members[1:]):
            m.Add(within(0, b) == 0)
            seen = within(0, a)
            for w in range(1, n):
                m.AddImplication(within(w, b), seen)
                if w == n - 1:
                    break
                here = within(w, a)
                after = m.NewBoolVar(f"seen{w}_{a[0]}")
                m.AddBoolOr([seen, here, after.Not()])
                m.AddImplication(seen, after)
                m.AddImplication(here, after)
                seen = after
    # Objective: savings of pairs sharing a node / a domain
    terms = []
    for e, (i, j) in enumerate(view.pairs):
        same = m.NewBoolVar(f"s0_{e}")
        m.Add(node[i] == node[j]).OnlyEnforceIf(same)
        prev = same
        if coef[0][e] > 0:
            terms.append((same, int(coef[0][e])))
        for lev in range(view.groups.shape[1]):
            shared = m.NewBoolVar(f"s{lev + 1}_{e}")
            m.Add(dom[lev][i] == dom[lev][j]).OnlyEnforceIf(shared)
            m.AddImplication(prev, shared)  # nested: same node ⇒ same leaf ⇒ …
            prev = shared
            if coef[lev + 1][e] > 0:
                terms.append((shared, int(coef[lev + 1][e])))
    savings = sum(c * b for b, c in terms) if terms else 0
    constant = view.constant
    if known is not None and terms:
        slack = sum(
            int(c[e]) - p[e] * scale for c, p in zip(coef, per_level) for e in range(len(p))
        )
        m.Add(savings <= math.floor((constant - known) * scale + slack + 1e-6))
    m.Maximize(savings)
    for w in range(n):
        m.AddHint(node[w], int(hint_nodes[w]))

    solver = _solver(limit, seed, workers)

    def evaluate(cb: Any) -> float:
        return view.cost(np.array([cb.Value(v) for v in node]))

    recorder = _recorder(evaluate)
    status = solver.Solve(m, recorder)
    name = solver.StatusName(status)
    stats: dict[str, Any] = {
        "model": "hierarchical",
        "cpsat_status": name,
        "scale": scale,
        "anytime": recorder.curve,
        "nodes": n_nodes,
        "symmetry_classes": len(classes),
        "reproducible": _reproducible(solver, status, limit),
    }
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        assignment = assignment_from_nodes(problem, view, hint_nodes)
        return SolverOutput(assignment, message=f"cpsat: {name}; returning the start", stats=stats)
    node_of = np.array([solver.Value(v) for v in node])
    assignment = assignment_from_nodes(problem, view, node_of)
    bound = constant - solver.BestObjectiveBound() / scale
    optimal = status == cp_model.OPTIMAL
    return _result(problem, assignment, bound, optimal, solver, f"hierarchical: {name}", stats)


def _solve_flat(
    problem: PlacementProblem, hint: np.ndarray, limit: float, seed: int, workers: int
) -> SolverOutput:
    """Adams–Johnson (RLT-1) linearisation: x[i, k] and, per facility pair with flow, y[e, k, l]
    = x[i, k]·x[j, l] with Σ_l y = x[i, k] and Σ_k y = x[j, l]. Its LP relaxation is at least as
    strong as Gilmore–Lawler, which CP-SAT uses for its bound."""
    from ortools.sat.python import cp_model

    n, mloc = problem.n_workers, problem.n_locations
    flow = problem.flow_dense()
    dist = problem.distance()
    lin = problem.linear if problem.linear is not None else np.zeros((n, mloc))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if flow[i, j] or flow[j, i]]
    # cost of (i at k, j at l) for each pair: F_ij D_kl + F_ji D_lk
    costs = [flow[i, j] * dist + flow[j, i] * dist.T for i, j in pairs]
    biggest = max([float(np.abs(c).max()) for c in costs] + [float(np.abs(lin).max()), 1e-300])
    integral = all(np.all(c == np.round(c)) for c in costs) and np.all(lin == np.round(lin))
    scale = 1.0 if integral and biggest < 2**40 else SCALE_TARGET / biggest
    c_int = [np.round(c * scale).astype(np.int64) for c in costs]
    l_int = np.round(lin * scale).astype(np.int64)
    error = sum(float(np.abs(ci - c * scale).max()) for ci, c in zip(c_int, costs))
    error += float(np.abs(l_int - lin * scale).max(axis=1).sum())

    m = cp_model.CpModel()
    x = [[m.NewBoolVar(f"x{i}_{k}") for k in range(mloc)] for i in range(n)]
    for i in range(n):
        m.AddExactlyOne(x[i])
    for k in range(mloc):
        m.AddAtMostOne(x[i][k] for i in range(n))
    terms = [int(l_int[i, k]) * x[i][k] for i in range(n) for k in range(mloc) if l_int[i, k]]
    hint_y = []
    for e, (i, j) in enumerate(pairs):
        y = {}
        for k in range(mloc):
            for l in range(mloc):
                if k != l:
                    y[k, l] = m.NewBoolVar(f"y{e}_{k}_{l}")
                    if c_int[e][k, l]:
                        terms.append(int(c_int[e][k, l]) * y[k, l])
        for k in range(mloc):
            m.Add(sum(y[k, l] for l in range(mloc) if l != k) == x[i][k])
            m.Add(sum(y[l, k] for l in range(mloc) if l != k) == x[j][k])
        hint_y.append((y, i, j))
    m.Minimize(sum(terms) if terms else 0)
    for i in range(n):
        for k in range(mloc):
            m.AddHint(x[i][k], int(hint[i] == k))
    for y, i, j in hint_y:
        for (k, l), var in y.items():
            m.AddHint(var, int(hint[i] == k and hint[j] == l))
    solver = _solver(limit, seed, workers)

    def evaluate(cb: Any) -> float:
        return objective(problem, _decode(cb, x))

    recorder = _recorder(evaluate)
    status = solver.Solve(m, recorder)
    name = solver.StatusName(status)
    stats = {
        "model": "flat",
        "cpsat_status": name,
        "scale": scale,
        "anytime": recorder.curve,
        "reproducible": _reproducible(solver, status, limit),
    }
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return SolverOutput(hint, message=f"cpsat flat: {name}; returning the start", stats=stats)
    assignment = _decode(solver, x)
    bound = (solver.BestObjectiveBound() - error) / scale
    optimal = status == cp_model.OPTIMAL
    return _result(problem, assignment, bound, optimal, solver, f"flat: {name}", stats)


def _result(
    problem: PlacementProblem,
    assignment: np.ndarray,
    bound: float,
    optimal: bool,
    solver: Any,
    what: str,
    stats: dict[str, Any],
) -> SolverOutput:
    """The output of a finished CP-SAT run: optimal only when CP-SAT says so and its bound,
    taken back to the float objective, meets the recomputed objective."""
    value = objective(problem, assignment)
    proved = optimal and value - bound <= PROOF_TOLERANCE * max(1.0, abs(value))
    return SolverOutput(
        assignment,
        bound=bound,
        proved_optimal=proved,
        iterations=int(solver.NumBranches()),
        message=f"cpsat {what} in {solver.WallTime():.2f} s",
        stats=stats,
    )


def _solver(limit: float, seed: int, workers: int) -> Any:
    """A CP-SAT solver with the limits described in the module docstring."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = max(1, workers)
    solver.parameters.random_seed = int(seed)
    solver.parameters.interleave_search = True
    solver.parameters.max_deterministic_time = float(limit)
    solver.parameters.max_time_in_seconds = float(limit)
    return solver


def _reproducible(solver: Any, status: int, limit: float) -> bool:
    """True unless the wall clock, not the deterministic limit, ended an unfinished search."""
    from ortools.sat.python import cp_model

    if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        return True
    return solver.deterministic_time >= 0.999 * limit


def _decode(source: Any, x: list[list[Any]]) -> np.ndarray:
    return np.array(
        [next(k for k, v in enumerate(row) if source.BooleanValue(v)) for row in x], dtype=np.int64
    )
