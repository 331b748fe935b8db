"""Heavy groups and the domains that can hold them whole: the domain-capacity bound.

A job's heaviest traffic usually falls into disjoint groups of one size (TP groups, serving
replicas): the connected components of the pairs that carry at least half the heaviest pair's
traffic. A group whose workers end up in two or more domains of a level cuts at least its
*least cut* λ there — the global minimum cut of its own traffic (Stoer–Wagner), e.g. two edges
of a TP ring — and the groups' traffic is disjoint, so over a level

    cut_ℓ ≥ λ · (groups that are split at ℓ) + (traffic between groups that is cut at ℓ).

A domain of free capacity c holds at most ⌊c/g⌋ groups whole, so at least
``G − Σ_d ⌊c_d/g⌋`` groups are split whatever the plan (:func:`domain_capacity_cuts`): a
fragmented fabric whose whole free nodes number fewer than the job's TP groups must split the
rest, each at the price of a ring's two crossings, which the densest-subgraph knapsack — whose
pieces need not add up to whole groups — does not see. With worker counts ``p_d`` per domain
(the nested bound's variables) the same argument gives a form separable over the domains:
``cut_ℓ ≥ λ·G − Σ_d λ·⌊p_d/g⌋`` (:func:`group_form`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tsched.problem import PlacementProblem

__all__ = [
    "HeavyGroups",
    "heavy_labels",
    "heavy_groups",
    "domain_capacity_cuts",
    "group_form",
    "between_problem",
    "stoer_wagner_cut",
]


@dataclass(frozen=True)
class HeavyGroups:
    """The job's heavy groups: their common size, how many, and the least cut of any one."""

    size: int
    count: int
    least_cut: float  # λ: the smallest global minimum cut of a group's own traffic (GB)


def heavy_labels(problem: PlacementProblem) -> np.ndarray | None:
    """A component label per worker over the pairs that carry at least half the heaviest
    pair's traffic (None without traffic). Cached: the bounds here and the decomposition's
    whole-block splits share it."""

    def build() -> np.ndarray | None:
        from scipy.sparse.csgraph import connected_components

        graph = problem.flow_symmetric().tocsr()
        if graph.nnz == 0:
            return None
        heavy = graph.multiply(graph >= 0.5 * graph.data.max()).tocsr()
        heavy.eliminate_zeros()
        return connected_components(heavy, directed=False)[1]

    return problem.cached("heavy_labels", build)


def heavy_groups(problem: PlacementProblem) -> HeavyGroups | None:
    """The heavy groups (module docstring) when they all have one size of at least 2 and cover
    every worker with traffic; None otherwise (cached)."""
    return problem.cached("heavy_groups", lambda: _heavy_groups(problem))


def _heavy_groups(problem: PlacementProblem) -> HeavyGroups | None:
    label = heavy_labels(problem)
    if label is None:
        return None
    graph = problem.flow_symmetric().tocsr()
    count = int(label.max()) + 1
    sizes = np.bincount(label, minlength=count)
    if len(np.unique(sizes)) != 1 or sizes[0] < 2:
        return None
    order = np.argsort(label, kind="stable")
    members = order.reshape(count, int(sizes[0]))  # each row one group, workers ascending
    least = np.inf
    seen: dict[bytes, float] = {}
    for group in members:
        sub = graph[group][:, group].tocsr()
        sub.sort_indices()
        key = sub.indptr.tobytes() + sub.indices.tobytes() + sub.data.tobytes()
        if key not in seen:
            seen[key] = stoer_wagner_cut(sub.toarray())
        least = min(least, seen[key])
    if not np.isfinite(least) or least <= 0:
        return None
    return HeavyGroups(int(sizes[0]), int(count), float(least))


def stoer_wagner_cut(a: np.ndarray) -> float:
    """The global minimum cut of a small connected weighted graph (Stoer–Wagner, networkx)."""
    import networkx as nx

    graph = nx.Graph()
    rows, cols = np.nonzero(np.triu(a, 1))
    graph.add_weighted_edges_from(
        (int(i), int(j), float(a[i, j])) for i, j in zip(rows, cols, strict=True)
    )
    if graph.number_of_nodes() < len(a) or not nx.is_connected(graph):
        return 0.0
    value, _ = nx.stoer_wagner(graph)
    return float(value)


def domain_capacity_cuts(
    problem: PlacementProblem, sizes_by_level: list[np.ndarray], steps: np.ndarray
) -> list[float] | None:
    """Per level with a cost step, ``λ · (G − Σ_d ⌊free_d / g⌋)`` (at least 0): the groups no
    spread can keep whole, each cutting at least λ. None without heavy groups."""
    groups = heavy_groups(problem)
    if groups is None:
        return None
    out = []
    for sizes, step in zip(sizes_by_level, steps, strict=True):
        if step <= 0:
            out.append(0.0)
            continue
        whole = int(np.sum(np.asarray(sizes, dtype=np.int64) // groups.size))
        out.append(groups.least_cut * max(0, groups.count - whole))
    return out


def group_form(
    problem: PlacementProblem, span: int, share: float = 0.0, dense: np.ndarray | None = None
) -> tuple[np.ndarray, float] | None:
    """The nested bound's form of the same argument for a level, with the traffic between
    groups: ``(cost, const)`` with ``cut ≥ const + Σ_d cost[p_d]`` over the level's domains.

    ``cut = cut_in + cut_between``; ``cut_between ≥ W_between − (between-traffic kept inside
    domains)``. A group split into y pieces (one per domain it touches) cuts at least
    ``y·λ/2`` of its own traffic, and every split group has two pieces at least, so with
    ``q_d`` the split groups touching domain d and ``k_d`` the groups whole in it, for any
    ``share`` α in [0, 1]: ``cut_in ≥ (1 − α)·λ·(G − Σ_d k_d) + α·(λ/2)·Σ_d q_d``. Hence
    ``cut ≥ (1 − α)·λ·G + W_between − Σ_d f(p_d)`` where ``f(p)`` bounds ``(1 − α)·λ·k −
    α·(λ/2)·q + (between-traffic kept)`` in one domain of p workers. With k whole groups and
    r = p − k·g loose workers (from q ≥ ⌈r/(g − 1)⌉ split groups), the traffic kept between
    groups is at most the loose workers' between-degrees (every such pair inside the domain
    touches a loose worker, or joins two whole groups), ``½·T(k·g)·[k ≥ 2] + T(r)`` with T(s)
    the s largest between-degrees summed, and at most ``dense[p]`` where given (upper bounds
    on the traffic between groups inside p workers, s = 0 … span); none when the loose
    workers are one group's and no group is whole there. α = 0 is the count of split groups
    alone; α > 0 also charges a group cut into more than two pieces (half-free nodes that each
    keep pairs between groups take pieces of more groups than a split into two needs). None
    without heavy groups."""
    groups = heavy_groups(problem)
    if groups is None:
        return None
    g, lam = groups.size, groups.least_cut
    degree, between = _between_degrees(problem)
    top = np.zeros(span + 1)
    cum = np.cumsum(degree[:span])
    top[1 : len(cum) + 1] = cum
    top[len(cum) + 1 :] = cum[-1] if len(cum) else 0.0
    if dense is None:
        dense = np.full(span + 1, np.inf)
    f = np.minimum(0.5 * top, dense)  # k = 0, loose workers of two groups or more
    f[1] = 0.0  # one worker keeps nothing
    r = np.arange(span + 1)
    fewest = np.where(r > 0, -(-r // max(g - 1, 1)), 0)  # the fewest split groups r workers have
    alone = fewest <= 1  # k = 0: one group's workers keep no pair between groups
    f = np.where(
        alone, np.maximum(-share * lam / 2 * fewest, f - share * lam), f - share * lam / 2 * fewest
    )
    for k in range(1, min(span // g, groups.count) + 1):
        p = np.arange(k * g, span + 1)
        loose = p - k * g
        inside = 0.5 * top[k * g] if k >= 2 else 0.0
        kept = np.minimum(inside + top[loose], dense[p])
        pieces = np.where(loose > 0, np.maximum(fewest[loose], 1), 0)
        f[p] = np.maximum(f[p], (1 - share) * lam * k - share * lam / 2 * pieces + kept)
    return -f, (1 - share) * lam * groups.count + between


def between_problem(problem: PlacementProblem) -> PlacementProblem | None:
    """The traffic between heavy groups alone (the groups' own pairs left out), as a problem
    on the same cluster; None without heavy groups."""
    label = heavy_labels(problem)
    if label is None:
        return None
    cross = label[problem.src] != label[problem.dst]
    return replace(problem, name=f"{problem.name}/between", src=problem.src[cross],
                   dst=problem.dst[cross], gb=problem.gb[cross])  # fmt: skip


def _between_degrees(problem: PlacementProblem) -> tuple[np.ndarray, float]:
    """Each worker's traffic to other groups (descending) and the total between groups."""
    graph = problem.flow_symmetric().tocoo()
    label = heavy_labels(problem)
    assert label is not None  # called only where heavy groups exist
    cross = label[graph.row] != label[graph.col]
    degree = np.bincount(graph.row[cross], weights=graph.data[cross], minlength=problem.n_workers)
    return np.sort(degree)[::-1], float(graph.data[cross].sum()) / 2
