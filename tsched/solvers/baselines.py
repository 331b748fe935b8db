"""Baseline placements people run today, so comparisons with tsched's solvers are honest.

None of them looks at the traffic; all place workers in rank order.

- ``pack``: the first free GPUs in node order (Kubernetes' and KAI's default bin-packing).
- ``spread``: round-robin over nodes, one GPU per node per round.
- ``random``: a uniformly random set of free GPUs in random order (seeded).
- ``kai-tas``: KAI Scheduler's topology-aware rule: the fullest domain at the *required* level
  that still fits the gang, then the emptiest sub-domains at the *preferred* level first, and
  within a sub-domain the fullest nodes first (bin-packing).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tsched.errors import InputError
from tsched.problem import PlacementProblem
from tsched.solvers.base import SolverOutput, register

__all__ = ["pack", "spread", "random_placement", "kai_tas", "domain_columns"]


@register(
    "pack",
    baseline=True,
    description="first free GPUs in node order (Kubernetes/KAI default bin-packing)",
)
def pack(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    return SolverOutput(np.arange(problem.n_workers), message="first free GPUs in node order")


@register("spread", baseline=True, description="round-robin over nodes, one GPU per node a round")
def spread(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    nodes = problem.location_node()
    # rank of each location among its node's candidates (locations are in global order)
    starts = np.r_[0, np.flatnonzero(np.diff(nodes)) + 1]
    rank = np.arange(len(nodes)) - np.repeat(starts, np.diff(np.r_[starts, len(nodes)]))
    order = np.lexsort((nodes, rank))
    return SolverOutput(order[: problem.n_workers], message="round-robin over nodes")


@register("random", baseline=True, description="random free GPUs (seeded)")
def random_placement(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    rng = np.random.default_rng(seed)
    return SolverOutput(
        rng.permutation(problem.n_locations)[: problem.n_workers],
        message=f"random free GPUs (seed {seed})",
    )


def domain_columns(problem: PlacementProblem) -> tuple[list[str], np.ndarray]:
    """Level names ``["node", *levels]`` and an (m, L+1) array of domain ids per location."""
    names = ["node"]
    cols = [problem.location_node()]
    if problem.cluster is not None:
        names += list(problem.cluster.levels)
        groups = problem.location_groups()
        cols += [groups[:, k] for k in range(groups.shape[1])]
    return names, np.stack(cols, axis=1)


def _level(names: list[str], value: Any, key: str) -> int:
    if value not in names:
        raise InputError(
            f"method 'kai-tas': option {key}={value!r} is not a level (valid: {', '.join(names)})"
        )
    return names.index(value)


@register(
    "kai-tas",
    baseline=True,
    description="KAI Scheduler topology-aware: fullest fitting domain, emptiest sub-domains",
    options={
        "required_level": "level whose single domain must hold the whole gang "
        "(default: the top level)",
        "preferred_level": "level whose sub-domains are filled emptiest first "
        "(default: the level below required)",
    },
)
def kai_tas(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    names, cols = domain_columns(problem)
    top = len(names) - 1
    req = _level(names, options.get("required_level", names[top]), "required_level")
    pref = _level(names, options.get("preferred_level", names[max(req - 1, 0)]), "preferred_level")
    if pref > req:
        raise InputError(
            f"method 'kai-tas': preferred_level {names[pref]!r} must not be above "
            f"required_level {names[req]!r}"
        )
    n = problem.n_workers
    domain = cols[:, req]
    ids, counts = np.unique(domain, return_counts=True)
    fits = counts >= n
    if not fits.any():
        if "required_level" not in options and req == top:
            chosen = np.arange(problem.n_locations)  # no constraint asked for: whole cluster
        else:
            return SolverOutput(
                None,
                message=f"kai-tas: no {names[req]} domain has {n} free "
                f"GPUs (largest has {counts.max()})",
            )
    else:
        best = ids[fits][np.argmin(counts[fits])]  # fullest domain that still fits
        chosen = np.flatnonzero(domain == best)
    sub = cols[chosen, pref]
    node = cols[chosen, 0]
    sub_ids, sub_inv, sub_counts = np.unique(sub, return_inverse=True, return_counts=True)
    node_ids, node_inv, node_counts = np.unique(node, return_inverse=True, return_counts=True)
    # emptiest sub-domain first; inside it, fullest node first; then GPU order
    order = np.lexsort(
        (chosen, node_ids[node_inv], node_counts[node_inv], sub_ids[sub_inv], -sub_counts[sub_inv])
    )
    picked = chosen[order][:n]
    return SolverOutput(
        picked,
        message=f"kai-tas: required {names[req]}, preferred {names[pref]}",
        stats={"required_level": names[req], "preferred_level": names[pref]},
    )
