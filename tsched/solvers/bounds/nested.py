"""The nested bound: every level's cut at once, through one worker count per domain.

A min-plus programme up the tree of domains.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from tsched.problem import PlacementProblem
from tsched.solvers.bounds.basic import linear_floor
from tsched.solvers.bounds.cuts import DENSEST_MAX_PART, cut_levels, level_steps
from tsched.solvers.bounds.densest import degree_ceiling, densest_weights
from tsched.solvers.bounds.fibers import with_fibers
from tsched.solvers.bounds.groups import between_problem, group_form
from tsched.solvers.bounds.packing import packing_weights
from tsched.solvers.bounds.projection import projection_best
from tsched.solvers.bounds.symmetry import worker_orbits

__all__ = ["NESTED_WORK", "domain_tree", "nested_bound", "nested_counts", "nested_min"]


#: Largest min-plus work (Σ over convolutions of their lengths' product) of the nested bound.
NESTED_WORK = 100_000_000
#: Largest job whose exact densest-subgraph weights the nested bound computes itself (beyond
#: the partition bound's limit) when symmetry leaves few workers to start the search from.
SYMMETRIC_DENSEST_MAX = 2048
#: ... and the most orbits (:func:`worker_orbits`) for that.
SYMMETRIC_ORBITS_MAX = 64
#: The shares α of the domain-capacity form (:func:`~tsched.solvers.bounds.groups.group_form`)
#: tried per level: 0 counts split groups, more charges groups cut into more than two pieces.
GROUP_SHARES = (0.0, 0.25, 0.5)


def _symmetric_search_pays(problem: PlacementProblem) -> bool:
    """Whether the densest-subgraph search is cheap here: a job of at most
    :data:`SYMMETRIC_DENSEST_MAX` workers whose verified symmetries leave at most
    :data:`SYMMETRIC_ORBITS_MAX` orbits (the search starts once per orbit, not per worker)."""
    n = problem.n_workers
    if n > SYMMETRIC_DENSEST_MAX:
        return False
    return int(worker_orbits(problem).max()) + 1 <= SYMMETRIC_ORBITS_MAX


def nested_bound(problem: PlacementProblem) -> float | None:
    """The hierarchical cut bound with the levels coupled: one worker count per domain, nested.

    The per-level bounds (:func:`packing_bound`, :func:`partition_bound`) each choose the best
    spread of the workers for their own level: all whole nodes for the node cut, the fewest
    spine groups for the spine cut — even when no plan can do both (the whole nodes lie in
    spine groups the spine cut would not use). Here every level's cut is bounded by a sum over
    its domains of a function of the domain's worker count: ``W − Σ_P D[|P|]`` (densest
    weights: :func:`packing_weights`, and :func:`densest_weights` where the partition bound
    computed them) or a line-projection form of :func:`projection_cuts` (the best one for that
    level alone). Every plan gives each domain a count, a child's count within its parent's,
    so ``objective ≥ e_0·W + min Σ_ℓ step_ℓ · (const_ℓ + Σ_{P at ℓ} cost_ℓ[|P|])`` over all
    nested counts that fit the free GPUs and sum to n: a dynamic programme up the tree of
    domains (min-plus convolutions of the children's functions; domains with the same subtree
    computed once). Every choice of form per level is tried and the largest bound kept.
    None when fewer than two levels have a cut, or above :data:`NESTED_WORK`.
    """
    levels = cut_levels(problem)
    if levels is None:
        return None
    e, sizes_by_level = levels
    n = problem.n_workers
    steps, kmax = level_steps(problem, e, sizes_by_level)
    if np.count_nonzero(steps > 0) < 2:
        return None  # one cut: the per-level bounds already see everything
    chain, free, spans = domain_tree(problem, sizes_by_level)
    total = float(problem.gb.sum())
    weights = packing_weights(problem, kmax)[: kmax + 1]
    densest = problem.peek("densest_weights")  # exact where the partition bound ran
    if densest is None and _symmetric_search_pays(problem):
        densest = densest_weights(problem, kmax)
    if densest is not None and len(densest) > kmax:
        weights = np.minimum(weights, densest[: kmax + 1])
    projection = projection_best(problem, sizes_by_level, steps)
    forms: list[list[tuple[np.ndarray, float]]] = []
    for k, span in enumerate(spans):
        if steps[k] <= 0:
            forms.append([(np.zeros(span + 1), 0.0)])
            continue
        ceiling = degree_ceiling(problem)
        level = [(-np.minimum(with_fibers(problem, weights, span, ceiling), total), total)]
        if projection and projection[k][1] is not None:  # the form best for this level alone
            level.append(projection[k][1])
        dense = _between_weights(problem, span)
        for share in GROUP_SHARES:  # heavy groups a domain of p workers cannot all hold whole
            grouped = group_form(problem, span, share, dense)
            if grouped is not None:
                level.append(grouped)
        forms.append(level)
    best, best_programme = None, None
    for choice in itertools.product(*forms):
        costs = [steps[k] * cost for k, (cost, _) in enumerate(choice)]
        programme = _Programme(chain, free, costs, n)
        spent = programme.value()
        if spent is None:
            return None
        value = e[0] * total + sum(steps[k] * c for k, (_, c) in enumerate(choice)) + spent
        if best is None or value > best:
            best, best_programme = value, programme
    if best is None or best_programme is None:
        return None
    # the spread this bound prices: a plan may start from it (the decomposition's first set)
    problem.remember("nested_spread", (chain[0], best_programme.counts()))
    return best + linear_floor(problem)


def domain_tree(
    problem: PlacementProblem, sizes_by_level: list[np.ndarray]
) -> tuple[list[np.ndarray], np.ndarray, list[int]]:
    """What :func:`nested_min` runs on for the levels of :func:`cut_levels`: the chain of each
    node with free GPUs' domains (``chain[0]``: the node; ``chain[ℓ]``: its level-ℓ domain),
    those nodes' free GPUs, and per level the largest count a domain can take (at most n)."""
    cl = problem.cluster
    assert cl is not None
    free = np.bincount(cl.gpu_node[problem.locations], minlength=cl.n_nodes)
    live = np.flatnonzero(free > 0)
    levels = len(sizes_by_level)
    chain = [live] + [cl.node_group[live, k].astype(np.int64) for k in range(levels - 1)]
    n = problem.n_workers
    spans = [int(min(np.max(sizes, initial=0), n)) for sizes in sizes_by_level]
    return chain, free[live], spans


def nested_min(
    chain: list[np.ndarray], free: np.ndarray, costs: list[np.ndarray], n: int
) -> float | None:
    """``min Σ_ℓ Σ_{P at ℓ} costs[ℓ][|P|]`` over nested worker counts (node counts up to their
    free GPUs, summing to n), bottom-up; None above :data:`NESTED_WORK`. ``chain[ℓ]``: each
    live node's domain at level ℓ (``chain[0]``: the node itself)."""
    programme = _Programme(chain, free, costs, n)
    return programme.value()


def nested_counts(
    chain: list[np.ndarray], free: np.ndarray, costs: list[np.ndarray], n: int
) -> np.ndarray | None:
    """The worker count per live node (``chain[0]``'s order) of a minimiser of
    :func:`nested_min`: the programme's choices traced back down the tree; None where it gives
    none."""
    programme = _Programme(chain, free, costs, n)
    if programme.value() is None:
        return None
    return programme.counts()


def _signature(kid: tuple[Any, int]) -> Any:
    """A domain's subtree signature: domains in one order per multiset of signatures, so
    equal subtrees share one table (a stable sort keeps the domain order within ties)."""
    return kid[0]


class _Programme:
    """:func:`nested_min`'s dynamic programme, each domain's partial min-plus sums kept so a
    minimiser can be traced back (:meth:`counts`). Domains with the same subtree share one
    table (their signature)."""

    def __init__(
        self, chain: list[np.ndarray], free: np.ndarray, costs: list[np.ndarray], n: int
    ) -> None:
        self.chain, self.free, self.costs, self.n = chain, free, costs, n
        self.work = 0
        self.table: dict[Any, np.ndarray] = {}  # signature → min cost per count
        self.partial: dict[Any, list[np.ndarray]] = {}  # signature → sums over its first kids
        self.kids: list[dict[int, list[tuple[Any, int]]]] = []  # per level: domain → kids
        self.top: list[tuple[Any, int]] = []

    def _minplus(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        n = self.n
        if len(a) > len(b):
            a, b = b, a
        out = np.full(min(len(a) + len(b) - 1, n + 1), np.inf)
        self.work += len(a) * len(b)
        for i in range(min(len(a), n + 1)):
            if np.isfinite(a[i]):
                seg = min(len(b), n + 1 - i)
                np.minimum(out[i : i + seg], a[i] + b[:seg], out=out[i : i + seg])
        return out

    def _sums(self, members: list[tuple[Any, int]]) -> list[np.ndarray] | None:
        sums = [np.zeros(1)]
        for key, _ in members:
            sums.append(self._minplus(sums[-1], self.table[key]))
            if self.work > NESTED_WORK:
                return None
        return sums

    def value(self) -> float | None:
        chain, costs, n = self.chain, self.costs, self.n
        current: dict[int, Any] = {}  # domain id at the level below → its signature
        for node, f in zip(chain[0].tolist(), self.free.tolist(), strict=True):
            key = ("node", int(f))
            self.table.setdefault(key, costs[0][: int(f) + 1].copy())
            current[node] = key
        for level in range(1, len(chain)):
            found: dict[int, dict[int, Any]] = {}  # chain[ℓ] has one entry per live node
            for child, parent in zip(chain[level - 1].tolist(), chain[level].tolist(), strict=True):
                found.setdefault(parent, {})[child] = current[child]
            children = {
                parent: sorted(((key, child) for child, key in kids.items()), key=_signature)
                for parent, kids in found.items()
            }
            nxt = {}
            for parent, kids in children.items():
                key = (level, tuple(kid[0] for kid in kids))
                if key not in self.table:
                    sums = self._sums(kids)
                    if sums is None:
                        return None
                    span = min(len(sums[-1]), len(costs[level]))
                    self.partial[key] = sums
                    self.table[key] = sums[-1][:span] + costs[level][:span]
                nxt[parent] = key
            self.kids.append(children)
            current = nxt
        self.top = sorted(((key, dom) for dom, key in current.items()), key=_signature)
        sums = self._sums(self.top)
        if sums is None:
            return None
        self.partial["top"] = sums
        total = sums[-1]
        return float(total[n]) if len(total) > n and np.isfinite(total[n]) else None

    def _split(
        self, sums: list[np.ndarray], members: list[tuple[Any, int]], count: int
    ) -> list[tuple[int, int]]:
        """(member domain, its count) for a minimiser of ``sums[-1][count]``."""
        out = []
        for i in range(len(members), 0, -1):
            key, dom = members[i - 1]
            own, before = self.table[key], sums[i - 1]
            ks = np.arange(min(len(own), count + 1))
            ks = ks[count - ks < len(before)]
            take = int(ks[np.argmin(before[count - ks] + own[ks])])
            out.append((dom, take))
            count -= take
        return out

    def counts(self) -> np.ndarray:
        level = len(self.chain) - 1
        todo = [(self.top, self.partial["top"], self.n)]
        for _ in range(level):
            nxt = []
            for members, sums, count in todo:
                for dom, take in self._split(sums, members, count):
                    kids = self.kids[level - 1][dom]
                    key = (level, tuple(kid[0] for kid in kids))
                    nxt.append((kids, self.partial[key], take))
            todo = nxt
            level -= 1
        node_count: dict[int, int] = {}
        for members, sums, count in todo:
            node_count.update(self._split(sums, members, count))
        return np.array([node_count.get(node, 0) for node in self.chain[0].tolist()])


def _between_weights(problem: PlacementProblem, span: int) -> np.ndarray | None:
    """Upper bounds on the traffic between heavy groups inside any s workers, s = 0 … span:
    the packing weights (with fibers beyond a node) of that traffic alone (cached per span);
    None without heavy groups."""

    def build() -> np.ndarray | None:
        rest = between_problem(problem)
        if rest is None:
            return None
        kmax = min(span, DENSEST_MAX_PART)
        weights = packing_weights(rest, kmax)[: kmax + 1]
        table = with_fibers(rest, weights, span, degree_ceiling(rest))
        return np.minimum(table[: span + 1], float(rest.gb.sum()))

    return problem.cached(("between_weights", span), build)
