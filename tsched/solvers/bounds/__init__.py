"""Lower bounds on the placement objective: one module per family, :func:`best_bound` in front.

Every bound here is valid for any assignment of workers to *distinct* locations, so
``bound <= objective`` always holds, and a bound that meets a solution's objective proves it
optimal. :func:`best_bound` combines the applicable ones and caches the result on the problem
(:meth:`tsched.problem.PlacementProblem.cached`).

- :func:`basic_bound` — every edge at the cheapest link between two usable GPUs. O(edges).
- :func:`gilmore_lawler_bound` — Gilmore–Lawler: for facility i on location k, the minimal scalar
  product of i's flows with k's distances, then a linear assignment (scipy's
  ``linear_sum_assignment``) over (i, k). Dense: O(n·m² + LAP).
- :func:`profile_bound` — the Gilmore–Lawler row bound without the assignment step, computed from
  the cluster's hierarchy (a location's sorted distances are runs of link classes whose lengths
  are free-GPU counts), so it needs no dense matrix and scales to 16,384 GPUs.
- :func:`spectral_bound` — for nested hierarchies with uniform nodes: the objective splits into
  ``Σ traffic · d_intra + Σ_levels (d_next − d_level) · cut_level``, where ``cut_level`` is the
  traffic between workers in different domains of that level; each cut is bounded below by the
  Donath–Hoffman eigenvalue bound ``½ Σ_i size_i · λ_i(L)`` (L the Laplacian of the symmetrised
  traffic, λ ascending, domain sizes descending). Exact for TP × DP × PP layouts, whose traffic
  graphs are products of rings and paths.
- :func:`packing_bound` — the same cut decomposition with two more bounds on each cut that need
  no search: the traffic no spread of the workers over the domains can keep inside them
  (upper bounds on densest subgraphs from each worker's heaviest pairs and, for layouts, from
  their factor graphs: :func:`packing_weights`, :func:`layout_weights`), and the lines of a
  layout each domain must touch (Loomis–Whitney: :func:`projection_cuts`). Sparse, at any size;
  it proves a 4,096-worker GPT-3 plan on 16,384 GPUs optimal.
- :func:`partition_bound` — the same cut decomposition with two more bounds on each cut: the
  traffic no spread of the workers over the domains can keep inside them (densest-subgraph
  weights, :func:`densest_weights`, in a knapsack over the domains' free GPUs), and, for levels
  of a few large domains, CP-SAT's proved bounds on the least cut: over workers
  (:func:`level_cut_cpsat`) and over blocks of up to 16 workers whose split costs are
  enumerated exactly, joined by matchings (:func:`block_cut_cpsat`).
  Exact for the symmetric blocks of MoE layouts, which the eigenvalues cannot see; it searches,
  so :func:`best_bound` computes it only when asked to be thorough.
- fiber weights (:mod:`~tsched.solvers.bounds.fibers`, inside packing and nested) — densest
  weights for domains larger than the search reaches (racks, leaves): the layout cut into
  small fibers along a ring or path dimension, a dynamic programme over their counts. Exact for
  an MoE job's expert cliques along its data-parallel ring.
- domain capacity (:mod:`~tsched.solvers.bounds.groups`, inside packing and nested) — the
  job's heavy groups (TP rings, replicas) that the domains' free GPUs cannot hold whole, each
  cutting at least its own least cut.
- :func:`nested_bound` — the levels coupled: one worker count per domain, nested, for all levels
  at once (a min-plus programme up the tree of domains), so the node and spine cuts cannot
  each take a spread no plan has. Also only when thorough.
- :func:`~tsched.solvers.bounds.lagrange.lagrangian_bound` — the levels coupled through their
  pairs too: a pair that shares a node shares its spine, so part of a class of pairs' saving
  may be moved from the finer level to the coarser one (Lagrange multipliers searched per
  class) before each level is bounded, which stops the two levels pricing sets no plan has
  together. It also bounds a share of each level's weight by the least cut of the groups of
  workers no domain of the level holds (:mod:`~tsched.solvers.bounds.splits`). Not a
  :func:`best_bound` stage (it searches for seconds): ``auto`` runs it before its final exact
  model.

Per-GPU linear costs C (a workload's ``gpu_costs``): min over plans of (quadratic + linear) is at
least min quadratic + min linear, so every bound that prices only the traffic adds
:func:`linear_floor` — the linear assignment optimum of C when the table is small enough, else
each worker's cheapest GPU. Without pairwise traffic that floor is the optimum itself
(``linear-assignment``). Gilmore–Lawler folds C into its own assignment step.

Modules: :mod:`~tsched.solvers.bounds.basic` (basic bound, linear floor),
:mod:`~tsched.solvers.bounds.gilmore_lawler`, :mod:`~tsched.solvers.bounds.profile`,
:mod:`~tsched.solvers.bounds.cuts` (the cut decomposition the next ones share),
:mod:`~tsched.solvers.bounds.spectral`, :mod:`~tsched.solvers.bounds.layout` (product
structure of parallel layouts), :mod:`~tsched.solvers.bounds.symmetry` (verified orbits of the
workers), :mod:`~tsched.solvers.bounds.densest` (densest-subgraph weights and the knapsack over
domains), :mod:`~tsched.solvers.bounds.fibers` (densest weights of large sets from fibers),
:mod:`~tsched.solvers.bounds.groups` (heavy groups and domain capacity),
:mod:`~tsched.solvers.bounds.projection`, :mod:`~tsched.solvers.bounds.packing`,
:mod:`~tsched.solvers.bounds.cut_cpsat`, :mod:`~tsched.solvers.bounds.partition`,
:mod:`~tsched.solvers.bounds.nested` and :mod:`~tsched.solvers.bounds.lagrange`. Each imports
only the families below it; none imports this front door.
"""

from __future__ import annotations

from typing import Any

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.basic import GL_DENSE_LIMIT, basic_bound, linear_floor
from tsched.solvers.bounds.cut_cpsat import block_cut_cpsat, block_split_costs, level_cut_cpsat
from tsched.solvers.bounds.densest import densest_weights
from tsched.solvers.bounds.gilmore_lawler import (
    dense_gilmore_lawler,
    gilmore_lawler_bound,
    min_scalar_products,
    needs_assignment_solver,
)
from tsched.solvers.bounds.layout import layout_factors, layout_weights
from tsched.solvers.bounds.nested import nested_bound
from tsched.solvers.bounds.packing import packing_bound, packing_weights
from tsched.solvers.bounds.partition import DENSEST_MAX_WORKERS, partition_bound
from tsched.solvers.bounds.profile import profile_bound
from tsched.solvers.bounds.projection import projection_cuts
from tsched.solvers.bounds.spectral import product_eigenvalues, spectral_bound

__all__ = [
    "basic_bound",
    "gilmore_lawler_bound",
    "profile_bound",
    "spectral_bound",
    "packing_bound",
    "partition_bound",
    "nested_bound",
    "packing_weights",
    "densest_weights",
    "level_cut_cpsat",
    "block_cut_cpsat",
    "block_split_costs",
    "best_bound",
    "min_scalar_products",
    "linear_floor",
    "product_eigenvalues",
    "projection_cuts",
    "layout_factors",
    "layout_weights",
    "needs_assignment_solver",
    "THOROUGH_STAGES",
]


#: Bounds that search (seconds), computed only when :func:`best_bound` is asked to be thorough.
THOROUGH_STAGES = ("partition", "nested")


def _stages(problem: PlacementProblem) -> list[tuple[str, Any]]:
    """The applicable bounds, cheapest first."""
    stages: list[tuple[str, Any]] = [("basic", basic_bound)]
    if problem.cluster is not None:
        stages.append(("profile", profile_bound))
    if dense_gilmore_lawler(problem):
        stages.append(("gilmore-lawler", gilmore_lawler_bound))
    if problem.cluster is not None:
        stages.append(("spectral", spectral_bound))
        stages.append(("packing", packing_bound))
        if problem.n_workers <= DENSEST_MAX_WORKERS:
            stages.append(("partition", partition_bound))
        stages.append(("nested", nested_bound))
    return stages


def best_bound(
    problem: PlacementProblem, target: float | None = None, thorough: bool = False
) -> tuple[float | None, str | None]:
    """The largest applicable bound and its name; cached on the problem.

    Bounds are computed cheapest first (basic, profile, Gilmore–Lawler where dense matrices are
    affordable, spectral). With ``target`` (a plan's objective) the computation stops as soon as
    one bound meets it (within 1e-9 relative): the plan is then proved and the costlier bounds
    are not needed. A later call without a target, or with one not met yet, goes on where the
    last one stopped. The partition bound (densest-subgraph and CP-SAT searches, up to seconds)
    runs only when ``thorough``: ``auto`` asks for it, a plain ``solve`` with another method and
    the comparison runner's thousands of per-job solves do not.
    """
    done = problem.peek("best_bound")
    if done is not None:
        return done
    n, m = problem.n_workers, problem.n_locations
    if problem.n_edges == 0 and n <= m and n > 0:  # no interaction: a linear assignment
        exact = problem.linear is None or problem.linear.size <= GL_DENSE_LIMIT
        label = "linear-assignment" if exact else "basic"
        return problem.cached("best_bound", lambda: (linear_floor(problem), label))
    state = problem.cached("best_bound_state", lambda: {"value": None, "name": None, "next": 0})
    stages = _stages(problem)

    def met() -> bool:
        if target is None or state["value"] is None:
            return False
        return bool(state["value"] >= target - 1e-9 * max(1.0, abs(target)))

    while state["next"] < len(stages) and not met():
        label, fn = stages[state["next"]]
        if label in THOROUGH_STAGES and not thorough:
            break  # seconds of search: only for callers that asked (auto, the benchmarks)
        state["next"] += 1
        bound = fn(problem)
        if bound is not None and (
            state["value"] is None or bound > state["value"] + 1e-12 * abs(state["value"])
        ):  # a later bound must beat the earlier one by more than rounding to take its name
            state["value"], state["name"] = float(bound), label
    result = (state["value"], state["name"])
    if state["next"] >= len(stages):
        problem.remember("best_bound", result)
    return result
