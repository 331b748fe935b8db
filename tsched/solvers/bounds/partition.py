"""The partition bound: exact densest weights and CP-SAT cut bounds on each level.

It searches (seconds), so :func:`~tsched.solvers.bounds.best_bound` runs it only when thorough.
"""

from __future__ import annotations

import numpy as np

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.basic import linear_floor
from tsched.solvers.bounds.cut_cpsat import block_cut_cpsat, level_cut_cpsat
from tsched.solvers.bounds.cuts import DENSEST_MAX_PART, cut_levels, level_steps
from tsched.solvers.bounds.densest import densest_weights
from tsched.solvers.bounds.packing import level_cuts, packing_weights

__all__ = [
    "DENSEST_MAX_WORKERS",
    "CUT_CPSAT_MAX_DOMAINS",
    "CUT_CPSAT_MAX_WORKERS",
    "partition_bound",
]


#: Largest worker count for the densest-subgraph partition bound (dense n × n traffic).
DENSEST_MAX_WORKERS = 512


#: Levels with at most this many domains get their cut bounded by CP-SAT as well.
CUT_CPSAT_MAX_DOMAINS = 8


#: ... for jobs of at most this many workers,
CUT_CPSAT_MAX_WORKERS = 256


def partition_bound(problem: PlacementProblem) -> float | None:
    """The hierarchical cut bound of :func:`spectral_bound` with a second bound on each cut:
    ``cut_ℓ ≥ W − max Σ_d D[s_d]``, the traffic that cannot stay inside level-ℓ domains however
    the workers are spread over them (:func:`densest_weights`, capped by the
    :func:`packing_weights`; :func:`kept_upper`). Each level keeps the largest of this, the
    eigenvalue bound and the line-projection bound (:func:`projection_cuts`), so it is never
    below :func:`packing_bound`.

    Exact where the parts of an optimal plan are densest subgraphs, which is the case for the
    symmetric groups of parallel layouts: an MoE job's TP pairs, expert all-to-all cliques and
    data-parallel rings tile into equal dense blocks that the eigenvalue bound cannot see. Up to
    :data:`DENSEST_MAX_WORKERS` workers, with the densest weights searched exactly up to
    :data:`DENSEST_MAX_PART` workers (larger domains use the density bound). A level of few
    large domains (the spine groups or NVL72 racks a job must span) gets two more bounds on its
    cut: CP-SAT's proved bounds on the least cut over those capacities, pair by pair
    (:func:`level_cut_cpsat`, up to :data:`CUT_CPSAT_MAX_WORKERS` workers) and block by block
    (:func:`block_cut_cpsat`).
    """
    n = problem.n_workers
    if n > DENSEST_MAX_WORKERS:
        return None
    levels = cut_levels(problem)
    if levels is None:
        return None
    e, sizes_by_level = levels
    steps, kmax = level_steps(problem, e, sizes_by_level)
    weights = np.minimum(
        densest_weights(problem, kmax)[: kmax + 1], packing_weights(problem, kmax)[: kmax + 1]
    )
    cuts = level_cuts(problem, sizes_by_level, steps, weights)
    for k, sizes in enumerate(sizes_by_level):
        if steps[k] <= 0 or not _few_domains(sizes):
            continue
        if n <= CUT_CPSAT_MAX_WORKERS:
            lower, partition, _ = level_cut_cpsat(problem, sizes)
            cuts[k] = max(cuts[k], lower)
            if partition is not None:  # a candidate plan (auto takes it if it is better)
                problem.remember("partition_plan", _plan_from_partition(problem, k, partition))
        cuts[k] = max(cuts[k], block_cut_cpsat(problem, sizes))
    bound = e[0] * float(problem.gb.sum()) + float(np.dot(steps, cuts))
    return bound + linear_floor(problem)


def _plan_from_partition(problem: PlacementProblem, level: int, part: np.ndarray) -> np.ndarray:
    """A plan that keeps :func:`level_cut_cpsat`'s partition at ``level``: each domain's workers
    (in worker order, which keeps layout groups together) on its free GPUs in location order
    (node by node)."""
    cl = problem.cluster
    assert cl is not None
    nodes = cl.gpu_node[problem.locations]
    domain = nodes if level == 0 else cl.node_group[nodes, level - 1]
    ids, caps = np.unique(domain, return_counts=True)
    order = ids[np.argsort(-caps, kind="stable")]  # level_cut_cpsat's order of domains
    assignment = np.empty(problem.n_workers, dtype=np.int64)
    for d, dom in enumerate(order):
        workers = np.flatnonzero(part == d)
        assignment[workers] = np.flatnonzero(domain == dom)[: len(workers)]
    return assignment


def _few_domains(sizes: np.ndarray) -> bool:
    """Whether a level has at most :data:`CUT_CPSAT_MAX_DOMAINS` domains with free GPUs and
    parts larger than the densest search reaches (where that bound is weak)."""
    live = np.asarray(sizes)[np.asarray(sizes) > 0]
    return 1 < len(live) <= CUT_CPSAT_MAX_DOMAINS and live.max() > DENSEST_MAX_PART
