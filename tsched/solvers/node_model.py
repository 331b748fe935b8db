"""The hierarchical view of a cluster problem shared by the CP-SAT and MILP models.

When every usable node has one intra-node link cost and the hierarchy is nested with costs that
grow level by level, GPUs of a node are interchangeable and the objective depends only on which
*node* each worker uses:

    cost(i, j) = d_top − Σ_ℓ Δ_ℓ · [i and j share a level-ℓ domain]        (ℓ = node, level1, …)

with Δ_node = d_level1 − d_intra and Δ_ℓ = d_{ℓ+1} − d_ℓ ≥ 0. So a placement is "worker → node",
and its cost is a constant minus the *savings* of the pairs that share domains.

Symmetry: where the first levels cost what a node's own links do (an NVL72 rack: its trays'
NVLink and the rack's NVLink switch both at 900 GB/s), every free GPU of such a domain is
interchangeable with every other, so the model's unit is that domain, not the node: a rack of
18 trays is one unit of up to 72 GPUs, and the model has the size of the racks, not the trays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tsched.problem import PlacementProblem

__all__ = [
    "HierarchicalView",
    "hierarchical_view",
    "assignment_from_nodes",
    "units_of",
    "ExactStart",
    "prepare_exact",
]


@dataclass(frozen=True)
class HierarchicalView:
    """Model nodes (units) with free GPUs, their domains, capacities, and per-level savings.

    A unit is a cluster node, or a whole domain of the first ``merged`` levels when those cost
    what the node's own links do (module docstring)."""

    nodes: np.ndarray  # a cluster node index per model node (the first of its domain)
    capacity: np.ndarray  # free usable GPUs per model node
    groups: np.ndarray  # (model nodes, levels used) domain ids, relabelled 0..
    step: np.ndarray  # saving per unit traffic at each level: [node, level1, …]
    top: float  # distance at the top level (pairs that share nothing)
    pairs: np.ndarray  # (E, 2) worker pairs i < j with traffic
    weight: np.ndarray  # symmetrised traffic per pair (GB)
    unit: np.ndarray  # model node of each usable location
    merged: int = 0  # levels merged into a unit (0: units are nodes)

    @property
    def constant(self) -> float:
        """Objective if no pair shared any domain."""
        return float(self.top * self.weight.sum())

    def cost(self, node_of_worker: np.ndarray) -> float:
        """Objective of a worker → model-node assignment."""
        a, b = node_of_worker[self.pairs[:, 0]], node_of_worker[self.pairs[:, 1]]
        saving = self.step[0] * (a == b)
        for k in range(self.groups.shape[1]):
            g = self.groups[:, k]
            saving = saving + self.step[k + 1] * (g[a] == g[b])
        return self.constant - float(np.dot(self.weight, saving))


def hierarchical_view(problem: PlacementProblem) -> tuple[HierarchicalView | None, str]:
    """The hierarchical view, or None and the reason it does not apply."""
    cl = problem.cluster
    if cl is None:
        return None, "no cluster hierarchy (raw QAP)"
    if problem.linear is not None:
        return None, "per-GPU costs (gpu_costs) make a node's GPUs distinct"
    locs = problem.locations
    node_of_loc = cl.gpu_node[locs]
    nodes, capacity = np.unique(node_of_loc, return_counts=True)
    intra = set(np.unique(np.round(problem.intra_node_costs(), 15)).tolist())
    if len(intra) > 1:
        return None, "usable nodes differ in intra-node link cost (GPUs not interchangeable)"
    level_cost = [float(c) for c in cl.link_seconds_per_gb[cl.level_link.astype(np.int64)]]
    if not level_cost:
        if len(nodes) > 1:
            return None, "no network levels"
        level_cost = [max(intra) if intra else 0.0]
    d_intra = min(intra) if intra else level_cost[0]
    costs = [d_intra, *level_cost]
    if any(b < a - 1e-15 for a, b in zip(costs, costs[1:])):
        return None, "link costs do not grow with the level"
    groups = cl.node_group[nodes][:, : max(len(cl.levels) - 1, 0)]
    for k in range(1, groups.shape[1]):
        pairs = np.unique(groups[:, k - 1 : k + 1], axis=0)
        if len(np.unique(pairs[:, 0])) != len(pairs):
            return None, "hierarchy is not nested"
    # levels that cost what a node's links do: their domains are the model's units
    merged = 0
    while merged < groups.shape[1] and abs(costs[merged + 1] - d_intra) <= 1e-12 * abs(d_intra):
        merged += 1
    live = nodes
    if merged:
        domain = groups[:, merged - 1]
        keys, first, unit_of_node = np.unique(domain, return_index=True, return_inverse=True)
        capacity = np.bincount(unit_of_node, weights=capacity).astype(np.int64)
        nodes, groups = nodes[first], groups[first][:, merged:]
        costs = [d_intra, *level_cost[merged:]]
    else:
        unit_of_node = np.arange(len(nodes))
    unit = unit_of_node[np.searchsorted(live, node_of_loc)]
    relabelled = np.empty_like(groups)
    for k in range(groups.shape[1]):
        relabelled[:, k] = np.unique(groups[:, k], return_inverse=True)[1]
    sym = (problem.flow_csr() + problem.flow_csr().T).tocoo()
    keep = sym.row < sym.col
    pairs = np.stack([sym.row[keep], sym.col[keep]], axis=1).astype(np.int64)
    weight = sym.data[keep].astype(float)
    step = np.diff(np.asarray(costs))[: groups.shape[1] + 1]
    view = HierarchicalView(
        nodes, capacity, relabelled, step, costs[-1], pairs, weight, unit.astype(np.int64), merged
    )
    return view, "ok"


def assignment_from_nodes(
    problem: PlacementProblem, view: HierarchicalView, node_of_worker: np.ndarray
) -> np.ndarray:
    """Location indices for a worker → model-node assignment (free GPUs of a unit in order)."""
    order = np.argsort(view.unit, kind="stable")
    starts = np.searchsorted(view.unit[order], np.arange(len(view.capacity)))
    taken = np.zeros(len(view.capacity), dtype=np.int64)
    out = np.empty(problem.n_workers, dtype=np.int64)
    for w, k in enumerate(node_of_worker):
        out[w] = order[starts[k] + taken[k]]
        taken[k] += 1
    return out


def units_of(view: HierarchicalView, assignment: np.ndarray) -> np.ndarray:
    """The model node of each worker of a location assignment."""
    return view.unit[np.asarray(assignment, dtype=np.int64)]


@dataclass(frozen=True)
class ExactStart:
    """What an exact backend knows before it searches: its model, start and the best bound."""

    view: HierarchicalView | None
    model: str  # "hierarchical" or "flat"
    why: str  # why the hierarchical view does (not) apply
    hint: np.ndarray
    known: float | None  # best lower bound known before the search
    proved: Any  # a finished SolverOutput when the start already meets the bound, else None


def independent(options: dict[str, Any], name: str) -> bool:
    """The ``independent`` option of the exact models: prove without tsched's lower bounds (no
    early stop at a start that meets them, no cut on the objective), a check on those bounds.
    A boolean (the command line's ``--option independent=true`` gives one)."""
    from tsched.errors import InputError

    value = options.get("independent", False)
    if value not in (True, False):  # 0 and 1 compare equal to them
        raise InputError(f"method {name!r}: option independent={value!r} must be true or false")
    return bool(value)


def prepare_exact(
    problem: PlacementProblem, name: str, options: dict[str, Any], limit: float, seed: int
) -> ExactStart:
    """Common start of the CP-SAT and MILP solvers.

    Validates the ``model`` option, takes the ``hint`` (or the greedy solution) as the start, and
    stops early when the start already meets the best known bound.
    """
    from tsched.errors import InputError
    from tsched.problem import objective
    from tsched.solvers.base import SolverOutput, get_solver
    from tsched.solvers.bounds import best_bound

    view, why = hierarchical_view(problem)
    model = options.get("model", "hierarchical" if view is not None else "flat")
    if model not in ("hierarchical", "flat"):
        raise InputError(f"method {name!r}: option model={model!r} (valid: hierarchical, flat)")
    if model == "hierarchical" and view is None:
        raise InputError(f"method {name!r}: the hierarchical model does not apply: {why}")
    hint = options.get("hint")
    if hint is None:
        greedy = get_solver("greedy").fn(
            problem, time_limit=max(0.05, limit / 10), seed=seed, options={}
        )
        hint = greedy.assignment
    hint = np.asarray(hint, dtype=np.int64)
    known, source = (None, None) if independent(options, name) else best_bound(problem)
    value = objective(problem, hint)
    proved = None
    if known is not None and value - known <= 1e-9 * max(1.0, abs(value)):
        proved = SolverOutput(
            hint,
            bound=known,
            proved_optimal=True,
            message=f"{name}: the start meets the {source} bound; no search needed",
            stats={"model": "none"},
        )
    return ExactStart(view, model, why, hint, known, proved)
