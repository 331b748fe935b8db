"""The levels coupled through their pairs: a Lagrangian bound.

Every plan's cost is ``top·W − Σ_ℓ step_ℓ · Σ_e w_e · same_ℓ(e)``, where ``same_ℓ(e)`` says the
pair e shares its level-ℓ domain. The per-level bounds (:func:`~tsched.solvers.bounds.packing.
packing_bound`) bound each level's kept traffic alone, so the node level may be priced at the
spread that keeps most inside nodes (say nodes that each hold two whole expert columns of both
data-parallel replicas) and the spine level at another (a replica per spine) that no plan can
take together with it. A pair that shares a node shares every domain above it:
``same_ℓ(e) ≤ same_ℓ'(e)`` for the next costed level ℓ' above ℓ. Adding
``μ_e · (same_ℓ'(e) − same_ℓ(e)) ≥ 0`` for multipliers ``μ_e ≥ 0`` can only raise the savings of
a plan, and then every level may again be bounded on its own, with the weights moved:

    savings ≤ Σ_ℓ K_ℓ(v_ℓ),   v_ℓ = step_ℓ·w + μ_{ℓ−1} − μ_ℓ ≥ 0,

``K_ℓ(v)`` the most weight ``v`` that the level's domains can keep (the densest weights of
``v``, with fibers where the layout has them, in the knapsack over the domains' free GPUs:
:func:`~tsched.solvers.bounds.densest.kept_upper`). Any ``μ`` gives a valid bound; ``μ = 0``
gives the knapsack's. Moving part of the weight of the pairs a spread keeps only at the finer
level (the data-parallel pairs of an expert column) to the coarser one makes both levels prefer
the spread a plan can have.

With worker counts (the default), the levels are also coupled as :func:`~tsched.solvers.
bounds.nested.nested_bound` couples them: one count per domain, nested, the moved weights'
densest tables priced in its min-plus programme. On a fragmented 64-GPU fabric (a whole and a
half-free node per leaf) a TP2·EP8·DP2 job's plan at 73.681 is proved optimal this way, where
every bound that takes the levels' pairs apart stops at 72.109.

Groups no domain holds are priced too (:mod:`~tsched.solvers.bounds.splits`): at each costed
level, a share ``φ`` of the weight on the pairs inside the components (of the pairs at least some
weight) that no domain of the level holds is bounded by those components' weight less their
least cut, and only the rest by the densest tables. A pipeline stage larger than any rack's free
GPUs must cut its data-parallel rings at least twice each, which the tables, pricing each rack
on its own, do not know: on a fragmented NVL72 cluster a TP4·PP4·DP10 job's bound rises from
58.330 to 60.061 (plan 60.385). This part applies with one costed level too.

The multipliers are searched per class of pairs (pairs of one traffic weight: a layout's TP,
EP, DP and PP pairs), ``μ_e = θ_c · v_ℓ,e`` with ``θ_c`` on a grid in [0, 1], by coordinate
descent within a work budget, with each level's candidate components and share ``φ`` on the
same grid. Jobs of up to :data:`LAGRANGE_MAX_WORKERS` workers with at most
:data:`LAGRANGE_CLASSES` classes.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace

import numpy as np

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.basic import linear_floor
from tsched.solvers.bounds.cuts import cut_levels, level_steps
from tsched.solvers.bounds.densest import degree_ceiling, densest_weights, kept_upper
from tsched.solvers.bounds.fibers import with_fibers
from tsched.solvers.bounds.nested import domain_tree, nested_min
from tsched.solvers.bounds.packing import packing_weights
from tsched.solvers.bounds.partition import DENSEST_MAX_WORKERS
from tsched.solvers.bounds.splits import (
    PIECES_SECONDS,
    oversized_components,
    pieces_cut,
    threshold_components,
)

__all__ = ["LAGRANGE_MAX_WORKERS", "LAGRANGE_CLASSES", "LAGRANGE_SECONDS", "lagrangian_bound"]

#: Largest job the Lagrangian bound runs on.
LAGRANGE_MAX_WORKERS = 1024
#: Most classes of pairs (distinct traffic weights) it gives multipliers to.
LAGRANGE_CLASSES = 8
#: Seconds its search may take (it stops between evaluations; any point searched is a bound).
LAGRANGE_SECONDS = 3.0
#: The grid of each class's share θ.
GRID = tuple(i / 8 for i in range(9))


def lagrangian_bound(
    problem: PlacementProblem,
    seconds: float = LAGRANGE_SECONDS,
    target: float | None = None,
    counts: bool = True,
    splits_only: bool = False,
) -> float | None:
    """The Lagrangian bound of the module docstring; None where it does not apply (no cluster
    levels, a job too large or of too many classes, or a single level with a cost step and no
    group of workers its domains cannot hold).
    The search stops after ``seconds`` or as soon as the bound meets ``target`` (a plan's
    objective: the plan is then proved). With ``counts`` the levels are also coupled through
    one worker count per domain, as in :func:`~tsched.solvers.bounds.nested.nested_bound`
    (its min-plus programme over the moved weights' densest tables); without, or above that
    programme's work limit, each level's knapsack is taken on its own. With ``splits_only``,
    None also where no costed level has a group of workers its domains cannot hold (for
    callers that want that part's gain only)."""
    if problem.cluster is None or not 0 < problem.n_workers <= LAGRANGE_MAX_WORKERS:
        return None
    levels = cut_levels(problem)
    if levels is None:
        return None
    e, sizes_by_level = levels
    steps, kmax = level_steps(problem, e, sizes_by_level)
    active = [k for k in range(len(steps)) if steps[k] > 0]
    if not active:
        return None
    sym = problem.flow_symmetric().tocoo()
    keep = sym.row < sym.col
    rows, cols, w = sym.row[keep], sym.col[keep], sym.data[keep].astype(float)
    if not len(w) or w.max() <= 0:
        return None
    _, cls = np.unique(np.round(w / w.max(), 9), return_inverse=True)
    classes = int(cls.max()) + 1
    if classes > LAGRANGE_CLASSES:
        return None
    n = problem.n_workers
    total = float(problem.gb.sum())
    deadline = time.perf_counter() + seconds
    chain, free, spans = domain_tree(problem, sizes_by_level)
    tables: dict[tuple[int, bytes], np.ndarray] = {}

    def table(k: int, v: np.ndarray) -> np.ndarray:
        """Upper bounds on the weight ``v`` that s workers keep inside, s = 0 … level k's
        largest domain: the densest tables of the traffic ``v`` (cached per weights)."""
        key = (k, hashlib.blake2b(np.round(v, 12).tobytes(), digest_size=16).digest())
        if key not in tables:
            on = v > 0
            moved = replace(problem, name=f"{problem.name}/lagrange", src=rows[on],
                            dst=cols[on], gb=v[on])  # fmt: skip
            weights = packing_weights(moved, kmax)[: kmax + 1]
            if n <= DENSEST_MAX_WORKERS:  # the exact search is cheap here (milliseconds)
                exact = densest_weights(moved, kmax)
                if exact is not None and len(exact) > kmax:
                    weights = np.minimum(weights, exact[: kmax + 1])
            capped = with_fibers(moved, weights, spans[k], degree_ceiling(moved))
            tables[key] = np.minimum(capped, float(v.sum()))
        return tables[key]

    nested = counts
    # per costed level, the components no domain of it holds (splits.py) and the share of
    # the level's weight on their pairs that is bounded by their least cut instead
    layers = threshold_components(n, rows, cols, w)
    cands = [oversized_components(layers, spans[k]) for k in active]
    if (len(active) < 2 or splits_only) and not any(cands):
        return None
    inside = [[cand.inside(rows, cols) for cand in level] for level in cands]
    cuts: dict[tuple[int, int, bytes], float] = {}

    def must_cut(a: int, j: int, v: np.ndarray) -> float:
        """A lower bound on the weight ``v`` that level ``active[a]`` cuts inside candidate
        j's components (:func:`~tsched.solvers.bounds.splits.pieces_cut`), cached per
        weights."""
        key = (a, j, hashlib.blake2b(np.round(v, 12).tobytes(), digest_size=16).digest())
        if key not in cuts:
            seconds = min(PIECES_SECONDS, max(0.05, deadline - time.perf_counter()))
            cuts[key] = pieces_cut(
                cands[a][j], sizes_by_level[active[a]], rows, cols, v, seconds=seconds
            )
        return cuts[key]

    def savings(theta: np.ndarray, split: np.ndarray) -> float:
        """Bound on a plan's savings at the multipliers ``theta`` and, per costed level, the
        candidate ``split[a, 0]`` (−1: none) given the share ``split[a, 1]``."""
        nonlocal nested
        out, carry = 0.0, np.zeros_like(w)
        costs = [np.zeros(span + 1) for span in spans]
        for a, k in enumerate(active):
            v = steps[k] * w + carry
            if a < len(active) - 1:
                carry = theta[a][cls] * v
                v = v - carry
            j, share = int(split[a, 0]), float(split[a, 1])
            if j >= 0 and share > 0:
                vin = np.where(inside[a][j], v, 0.0)
                v = v - share * vin
                out += share * (float(vin.sum()) - must_cut(a, j, vin))
            if nested:
                costs[k] = -table(k, v)
            else:
                out += kept_upper(table(k, v), sizes_by_level[k], n)
        if nested:
            spent = nested_min(chain, free, costs, n)
            if spent is not None:
                return out - spent
            nested = False  # beyond the programme's work limit: each level on its own
            return savings(theta, split)
        return out

    top = e[0] + float(np.sum(steps))
    floor = linear_floor(problem)
    # savings at or below this prove the target
    enough = (
        -np.inf if target is None else top * total + floor - target + 1e-9 * max(1.0, abs(target))
    )
    theta = np.zeros((len(active) - 1, classes))
    split = np.tile([-1.0, 0.0], (len(active), 1))
    best = savings(theta, split)
    moves = [("split", a, (j, share)) for a in range(len(active))
             for j in range(len(cands[a])) for share in GRID[1:]]  # fmt: skip
    moves += [("theta", a, c) for a in range(len(active) - 1) for c in range(classes)]
    improved = best > enough
    while improved and time.perf_counter() < deadline:
        improved = False
        for kind, a, what in moves:
            trials = []
            if kind == "theta":
                for value in GRID:
                    if value != theta[a, what]:
                        trial = theta.copy()
                        trial[a, what] = value
                        trials.append((trial, split))
            elif tuple(split[a]) != what:
                trial = split.copy()
                trial[a] = what
                trials.append((theta, trial))
            for t_theta, t_split in trials:
                if time.perf_counter() > deadline:
                    break
                got = savings(t_theta, t_split)
                if got < best - 1e-12 * max(1.0, abs(best)):
                    best, theta, split, improved = got, t_theta, t_split, True
                    if best <= enough:
                        return top * total - best + floor
    return top * total - best + floor
