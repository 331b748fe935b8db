"""CP-SAT's proved lower bounds on a level's least cut: pair by pair, and block by block.

Both models spread the workers over a level's few large domains (the spine groups or NVL72 racks
a job must span) and take the bound CP-SAT proves, valid whether or not it finished.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
import scipy.sparse as sp

from tsched.problem import PlacementProblem

__all__ = [
    "CUT_CPSAT_LIMIT",
    "CUT_BLOCK",
    "BLOCK_MODEL_MAX",
    "BLOCK_SCALE",
    "level_cut_cpsat",
    "block_split_costs",
    "cut_blocks",
    "block_cut_cpsat",
]


#: ... within this deterministic time (CP-SAT's unit; 2-5 s of wall time here).
CUT_CPSAT_LIMIT = 2.0


#: Largest block of :func:`block_cut_cpsat` (its split costs enumerate all 2^16 subsets).
CUT_BLOCK = 16


#: Largest block model (count and layer variables, each once per domain) :func:`block_cut_cpsat`
#: hands to CP-SAT; larger ones (dense traffic between many blocks) prove little in its budget.
BLOCK_MODEL_MAX = 1024


#: ... whose costs are integers up to this (rounded down: a bound at most 10⁻⁸ of the heaviest
#: term per term below the exact one).
BLOCK_SCALE = 1e8


def level_cut_cpsat(
    problem: PlacementProblem, capacities: np.ndarray, limit: float = CUT_CPSAT_LIMIT
) -> tuple[float, np.ndarray | None, bool]:
    """``(lower bound, partition, optimal)`` for the least traffic cut when the workers are
    spread over domains of the given free capacities, from CP-SAT.

    The model: x[i, d] (worker i in domain d); a pair stays inside only if both are in one
    domain; of domains with equal capacity, worker 0 may only take the first, as any plan can
    be relabelled so. The bound is CP-SAT's proved one, valid whether or not it finished within
    the deterministic ``limit``; the partition (domain per worker, domains in the order of
    ``capacities`` sorted descending) is the best one found (None if none), ``optimal`` whether
    CP-SAT proved it. Weights are rounded down to integers on a 10⁶ scale, which keeps the
    bound below the true cut."""
    from ortools.sat.python import cp_model

    sym = problem.flow_symmetric().tocoo()
    keep = sym.row < sym.col
    rows, cols, data = sym.row[keep], sym.col[keep], sym.data[keep]
    n = problem.n_workers
    caps = sorted((int(c) for c in capacities if c > 0), reverse=True)
    if not len(data):
        return 0.0, None, False
    scale = 1e6 / float(data.max())
    weights = np.floor(data * scale).astype(np.int64)
    m = cp_model.CpModel()
    x = [[m.NewBoolVar("") for _ in caps] for _ in range(n)]
    for i in range(n):
        m.AddExactlyOne(x[i])
    for d, cap in enumerate(caps):
        m.Add(sum(x[i][d] for i in range(n)) <= cap)
    for d in range(1, len(caps)):  # domains of one capacity are interchangeable: worker 0
        if caps[d] == caps[d - 1]:  # goes to the first of its class (relabel any plan so)
            m.Add(x[0][d] == 0)
    kept = []
    for i, j, w in zip(rows, cols, weights, strict=True):
        same = m.NewBoolVar("")
        for d in range(len(caps)):
            m.Add(same <= 1 + x[i][d] - x[j][d])
        kept.append((int(w), same))
    m.Maximize(sum(w * v for w, v in kept))
    solver = _cut_solver(limit)
    status = solver.Solve(m)
    total = int(weights.sum())
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return 0.0, None, False
    lower = max(total - solver.BestObjectiveBound(), 0.0) / scale
    part = np.array([next(d for d, v in enumerate(row) if solver.BooleanValue(v)) for row in x])
    return lower, part, status == cp_model.OPTIMAL


def _cut_solver(limit: float) -> Any:
    """CP-SAT as both cut models run it: two workers, seed 0, interleaved search, so a bound
    under the deterministic ``limit`` repeats."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 2
    solver.parameters.random_seed = 0
    solver.parameters.interleave_search = True
    solver.parameters.max_deterministic_time = float(limit)
    return solver


def block_split_costs(a: np.ndarray) -> np.ndarray:
    """``f[j]``: the least weight between ``j`` vertices of a small graph and the rest (dense
    symmetric weights ``a``, at most :data:`CUT_BLOCK` vertices), over all ``2^k`` subsets:
    ``cut(x) = Σ_i deg_i·x_i − xᵀ a x`` for each 0/1 vector x, the least per popcount."""
    k = len(a)
    if k > CUT_BLOCK:
        raise ValueError(f"a block of {k} vertices; at most {CUT_BLOCK} are enumerated")
    x, count = _subsets(k)
    cut = x @ a.sum(axis=1) - np.einsum("ij,ij->i", x @ a, x)
    out = np.full(k + 1, np.inf)
    np.minimum.at(out, count, np.maximum(cut, 0.0))
    return out


@functools.lru_cache(maxsize=4)
def _subsets(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every subset of k vertices as a 0/1 row, and its size (read-only, cached)."""
    masks = np.arange(2**k, dtype=np.int64)
    x = ((masks[:, None] >> np.arange(k)) & 1).astype(np.float64)
    count = x.sum(axis=1).astype(np.int64)
    x.flags.writeable = False
    count.flags.writeable = False
    return x, count


def _matching_layers(sub: np.ndarray, most: int = CUT_BLOCK) -> list[tuple[float, int]]:
    """The weights between two blocks (``sub``: p × q) as a sum of at most ``most`` weighted
    matchings plus a non-negative rest: ``[(w, size), …]``, peeled off one maximum matching of
    the remaining support at a time at its lightest weight (each round empties a pair; uniform
    weights between two blocks of 16 take 16 rounds). The rest is left out, which only lowers
    the bound."""
    from scipy.sparse.csgraph import maximum_bipartite_matching

    rest = sub.astype(np.float64).copy()
    tol = 1e-12 * float(rest.max(initial=0.0))
    out = []
    while rest.max(initial=0.0) > tol and len(out) < most:
        match = maximum_bipartite_matching(sp.csr_array(rest > tol), perm_type="column")
        rows = np.flatnonzero(match >= 0)
        w = float(rest[rows, match[rows]].min())
        out.append((w, len(rows)))
        rest[rows, match[rows]] -= w
        rest[rest <= tol] = 0.0
    return out


def cut_blocks(problem: PlacementProblem, block: int = CUT_BLOCK) -> tuple[list[np.ndarray], list]:
    """The job graph in blocks of at most ``block`` workers for :func:`block_cut_cpsat`
    (cached): ``(members, layers)``, the blocks a small-cut partition
    (:func:`tsched.solvers.hierarchical.partition`, so the heavy groups stay inside), and
    ``(b, c, w, slack_b, slack_c)`` per matching layer between two blocks
    (:func:`_matching_layers`; slack: a block's vertices the matching leaves out)."""
    return problem.cached(("cut_blocks", block), lambda: _cut_blocks(problem, block))


def _cut_blocks(problem: PlacementProblem, block: int) -> tuple[list[np.ndarray], list]:
    """:func:`cut_blocks`, uncached."""
    from tsched.solvers.hierarchical import partition

    sym = problem.flow_symmetric()
    n = problem.n_workers
    q, r = divmod(n, block)
    sizes = np.array([block] * q + ([r] if r else []), dtype=np.int64)
    part = partition(sym, sizes)[0] if len(sizes) > 1 else np.zeros(n, dtype=np.int64)
    members = [np.flatnonzero(part == b) for b in range(len(sizes))]
    layers = []
    for b, c in itertools.combinations(range(len(members)), 2):
        sub = sym[members[b]][:, members[c]].toarray()
        for w, size in _matching_layers(sub):
            layers.append((b, c, w, len(members[b]) - size, len(members[c]) - size))
    return members, layers


def _block_costs(problem: PlacementProblem, block: int) -> list[np.ndarray]:
    """Each block of :func:`cut_blocks`' :func:`block_split_costs` (cached), once per distinct
    block (a layout's blocks repeat)."""
    return problem.cached(("block_costs", block), lambda: _split_costs_of_blocks(problem, block))


def _split_costs_of_blocks(problem: PlacementProblem, block: int) -> list[np.ndarray]:
    """:func:`_block_costs`, uncached."""
    sym = problem.flow_symmetric()
    seen: dict[bytes, np.ndarray] = {}
    costs = []
    for mem in cut_blocks(problem, block)[0]:
        a = sym[mem][:, mem].toarray()
        key = a.tobytes()
        if key not in seen:
            seen[key] = block_split_costs(a)
        costs.append(seen[key])
    return costs


def block_cut_cpsat(
    problem: PlacementProblem,
    capacities: np.ndarray,
    limit: float = CUT_CPSAT_LIMIT,
    block: int = CUT_BLOCK,
) -> float:
    """A lower bound on the least traffic cut over domains of the given free capacities, from
    the job graph's blocks of up to ``block`` workers (:func:`cut_blocks`): CP-SAT's proved
    bound on a programme over how many workers of each block each domain holds.

    Derivation. Let ``s_bd`` be the workers of block b in domain d. Inside a block, the part in
    domain d is ``s_bd`` of its workers, so at least ``f_b[s_bd]`` of the block's weight leaves
    it (the block's exact split costs), and each cut pair leaves two parts: the block's cut is at
    least ``½ Σ_d f_b[s_bd]``. Between blocks b and c, take one matching layer (weight w on each
    of its pairs; it leaves ``slack_b`` workers of b out): of b's ``s_bd`` workers in d at least
    ``s_bd − slack_b`` are matched, and at most ``s_cd`` of their partners are in d, so at least
    ``s_bd − s_cd − slack_b`` matched pairs leave d from b's side, and likewise from c's; each
    cut pair is counted from both ends, so the layer cuts at least
    ``½ Σ_d w·max(0, s_bd − s_cd − slack_b, s_cd − s_bd − slack_c)``. Layers split the
    weights between blocks without overlap, so the sum over blocks and layers bounds the cut for
    every plan; minimising it over all counts that fit the capacities (``Σ_d s_bd = |b|``,
    ``Σ_b s_bd ≤ cap_d``) gives the bound. With two domains every cut pair leaves both, and the
    halves count once: one count per block, ``f_b[s_b]`` and the layer terms taken whole.

    Exact where the optimal cut runs between whole blocks joined by matchings, as in an MoE
    job's data-parallel rings between expert groups, which the densest-subgraph weights and
    the pair-level CP-SAT model (:func:`level_cut_cpsat`) leave loose: both see the rings only
    one pair at a time. Costs are rounded down on a :data:`BLOCK_SCALE` scale, and CP-SAT's
    proved bound holds whether or not it finished within the deterministic ``limit`` (and four
    times as many wall seconds). 0 where it finds nothing, or where the model is larger than
    :data:`BLOCK_MODEL_MAX`.
    """
    from ortools.sat.python import cp_model

    caps = sorted((int(c) for c in capacities if c > 0), reverse=True)
    n = problem.n_workers
    if len(caps) < 2 or sum(caps) < n or problem.n_edges == 0:
        return 0.0
    members, layers = cut_blocks(problem, block)
    if (len(members) + len(layers)) * len(caps) > BLOCK_MODEL_MAX:
        return 0.0
    costs = _block_costs(problem, block)
    top = max([float(np.max(f[np.isfinite(f)])) for f in costs] + [w for _, _, w, _, _ in layers])
    if top <= 0:
        return 0.0
    scale = BLOCK_SCALE / top
    two = len(caps) == 2
    doms = 1 if two else len(caps)
    m = cp_model.CpModel()
    s = [[m.NewIntVar(0, min(len(mem), cap), "") for cap in caps] for mem in members]
    for b, mem in enumerate(members):
        m.Add(sum(s[b]) == len(mem))
    for d, cap in enumerate(caps):
        m.Add(sum(s[b][d] for b in range(len(members))) <= cap)
    for d in range(1, len(caps)):  # domains of one capacity are interchangeable: block 0's
        if caps[d] == caps[d - 1]:  # counts over them can be taken non-increasing
            m.Add(s[0][d - 1] >= s[0][d])
    terms = []
    for b, f in enumerate(costs):
        table = [int(np.floor(v * scale * (1 - 1e-9))) for v in f]
        for d in range(doms):
            v = m.NewIntVar(0, max(table), "")
            m.AddElement(s[b][d], table, v)
            terms.append(v)
    for b, c, w, slack_b, slack_c in layers:
        weight = int(np.floor(w * scale * (1 - 1e-9)))
        if weight <= 0:
            continue
        for d in range(doms):
            z = m.NewIntVar(0, max(len(members[b]), len(members[c])), "")
            m.Add(z >= s[b][d] - s[c][d] - slack_b)
            m.Add(z >= s[c][d] - s[b][d] - slack_c)
            terms.append(weight * z)
    m.Minimize(sum(terms))
    solver = _cut_solver(limit)
    solver.parameters.max_time_in_seconds = 4.0 * float(limit)  # a guard on a loaded machine
    status = solver.Solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return 0.0
    return max(float(solver.BestObjectiveBound()), 0.0) / scale / (1 if two else 2)
