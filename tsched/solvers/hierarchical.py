"""Hierarchical decomposition (``method="hierarchical"``): top-down partitioning, then sparse
local search on the whole problem.

This is the process-mapping approach (as in VieM's top-down mapping), extended to clusters that
are not complete, uniform or empty:

1. The usable GPUs form a tree: top-level domains, their sub-domains, …, nodes, GPUs (levels
   that are not nested are made so by keying each domain by its parent).
2. Top-down, the workers of a domain are split among its children. The children used are the
   fewest that hold the workers, taken by free capacity (a child that holds everything alone:
   the one needing the fewest nodes, then the tightest fit), so part sizes are exactly what each
   child has free — busy GPUs and half-free nodes are respected, not assumed away. The method
   decomposes onto each candidate GPU set that greedy considers (per level, the domains that
   hold the job with the fewest nodes; the fewest-fullest-nodes variant) and onto all free GPUs.
3. Each split is a graph partition of the job's traffic with those exact sizes, minimising the
   traffic cut: by graph growing (the part takes the worker with the most traffic to it) or by
   METIS (``pymetis``, then rebalanced to the exact sizes); Kernighan–Lin exchanges refine
   either. With ``partitioner=best`` (the default) each candidate set is decomposed with both
   (METIS first where the set is whole nodes, graph growing first elsewhere: under a time
   limit the first may be the only one), then once more taking at every split the smaller of
   the two cuts (METIS is often better across spines, graph growing across partly busy nodes),
   and the plan with the smallest objective wins. The
   same children filled evenly are tried too (the smaller cut stands). Up to
   :data:`WIDER_SPLIT_MAX` workers a *wide* decomposition runs beside it: levels whose
   boundary costs nothing (an NVL72 rack's trays; leaves under spines of the same bandwidth)
   leave the tree, so racks are chosen by capacity wherever they are, and each split also
   tries the k largest children filled evenly (k up to two more than the fewest), in whole
   heavy blocks (a TP group: :func:`heavy_atom`) and not — smaller parts can follow the job's
   own blocks, such as a pipeline stage per rack — the fewest children filled in whole blocks
   of each small divisor of the job's size (:func:`block_units`: expert cliques stay whole
   when a rack's free GPUs are no multiple of them), the spread the lower bound's own
   knapsack takes for the whole job (:func:`_kept_splits`: an expert ring split once between
   two racks can need one rack fewer than whole cliques), and the split that keeps the most
   blocks whole (each child holds as many as its nodes have room for); a *blocks* decomposition
   takes that split wherever it exists. The plan with the smallest objective wins.
4. On a node, workers take its free GPUs in order; then a sparse local search over the whole
   problem tries, for every worker, exchanges and moves with each GPU of its own node and of
   the nodes its traffic partners use — the only moves that can lower its cost — until none
   improves. Intra-node link matrices (PCIe servers) are priced exactly there. Under a time
   limit, an iterated local search (kicks, descent, keep the better) uses the time left; when
   less is left than one decomposition pass took (a descent pass costs about as much), it is
   skipped rather than overrun the limit.

A raw QAP has no hierarchy: the method then runs the dense greedy construction and swaps.
Not exact: ``optimal`` only when the lower bound meets the result.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from tsched.errors import InputError
from tsched.problem import PlacementProblem, objective
from tsched.solvers.base import Count, Flag, SolverOutput, register
from tsched.solvers.baselines import domain_columns
from tsched.solvers.bounds.groups import heavy_labels
from tsched.solvers.greedy import candidate_sets, construct_dense, local_search
from tsched.solvers.relocate import relocate_blocks

__all__ = [
    "hierarchical",
    "partition",
    "sparse_refine",
    "nested_keys",
    "block_units",
    "PARTITIONERS",
]

PARTITIONERS = ("best", "grow", "metis")


def _kernel() -> Any:
    from tsched.solvers import _sparse_kernel

    return _sparse_kernel


def have_metis() -> bool:
    return importlib.util.find_spec("pymetis") is not None


# ---------------------------------------------------------------------- partitioning
def symmetric_graph(problem: PlacementProblem) -> sp.csr_array:
    """Traffic in both directions, f + fᵀ (:meth:`PlacementProblem.flow_symmetric`)."""
    return problem.flow_symmetric()


def _csr(graph: sp.csr_array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (
        graph.indptr.astype(np.int64),
        graph.indices.astype(np.int64),
        graph.data.astype(np.float64),
    )


def _metis(graph: sp.csr_array, sizes: np.ndarray, seed: int) -> np.ndarray:
    import pymetis

    indptr, indices, w = _csr(graph)
    top = float(w.max(initial=0.0))
    # METIS wants positive integer weights: scale so the heaviest edge is 10⁶
    weights = np.maximum(1, np.round(w * (1e6 / top))).astype(np.int64) if top > 0 else None
    options = pymetis.Options(seed=int(seed) % (2**31), contig=0)
    tp = (sizes / sizes.sum()).tolist()
    _, parts = pymetis.part_graph(
        len(sizes),
        adjacency=pymetis.CSRAdjacency(indptr, indices),
        eweights=weights,
        tpwgts=tp,
        options=options,
    )
    return np.asarray(parts, dtype=np.int64)


def partition(
    graph: sp.csr_array, sizes: np.ndarray, partitioner: str = "best", seed: int = 0
) -> tuple[np.ndarray, float, str]:
    """Split the vertices of ``graph`` into parts of exactly ``sizes`` vertices (sum = vertex
    count) with a small traffic cut. Returns (part per vertex, cut, partitioner used)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    s = graph.shape[0]
    if int(sizes.sum()) != s:
        raise ValueError(f"part sizes sum to {int(sizes.sum())}, graph has {s} vertices")
    if len(sizes) == 1:
        return np.zeros(s, dtype=np.int64), 0.0, "single"
    k = _kernel()
    indptr, indices, w = _csr(graph)
    tries = []
    if partitioner in ("best", "grow"):
        tries.append(("grow", k.grow_parts(indptr, indices, w, sizes)))
    if partitioner in ("best", "metis") and have_metis() and graph.nnz:
        part = _metis(graph, sizes, seed)
        tries.append(("metis", k.rebalance(indptr, indices, w, part, sizes)))
    if not tries:  # metis asked for but missing, or no edges
        tries.append(("grow", k.grow_parts(indptr, indices, w, sizes)))
    if partitioner == "best":  # runs of the given sizes in worker order: a layout's ranks are
        # numbered innermost dimension first, so these are whole groups along its outer ring
        tries.append(("sequence", np.repeat(np.arange(len(sizes)), sizes).astype(np.int64)))
    best: tuple[np.ndarray, float, str] | None = None
    for name, part in tries:
        k.refine_parts(indptr, indices, w, part, len(sizes), 50)
        value = float(k.cut(indptr, indices, w, part))
        if best is None or value < best[1] - 1e-12 * max(1.0, value):
            best = (part, value, name)
    assert best is not None
    return best


# ---------------------------------------------------------------------- the tree of domains
def nested_keys(problem: PlacementProblem, flatten: bool = False) -> np.ndarray:
    """(m, L + 2) domain ids per location, top first: [root, top level, …, node], each keyed by
    its parent so the levels nest even when the cluster's do not (cached on the problem).

    With ``flatten``, a level whose boundary saves nothing (crossing it costs what staying
    inside does: an NVL72 rack's trays, leaves under spines of the same bandwidth) is left out,
    so its domains' children are split among directly, by capacity (fewer columns)."""
    return problem.cached(("nested_keys", flatten), lambda: _nested_keys(problem, flatten))


def _nested_keys(problem: PlacementProblem, flatten: bool) -> np.ndarray:
    """:func:`nested_keys`, uncached."""
    _, cols = domain_columns(problem)  # [node, level1, …]
    m = problem.n_locations
    keys = [np.zeros(m, dtype=np.int64)]
    flat = _flat_columns(problem, cols.shape[1]) if flatten else set()
    for k in range(cols.shape[1] - 1, -1, -1):
        if k in flat:
            continue
        pair = np.stack([keys[-1], cols[:, k].astype(np.int64)], axis=1)
        _, inv = np.unique(pair, axis=0, return_inverse=True)
        keys.append(inv.reshape(-1).astype(np.int64))
    return np.stack(keys, axis=1)


def _flat_columns(problem: PlacementProblem, columns: int) -> set[int]:
    """Columns of :func:`domain_columns` below the top whose boundary has no cost step: pairs
    inside a domain pay what pairs in different domains of the next level up pay."""
    cl = problem.cluster
    if cl is None or not len(cl.levels):
        return set()
    level_cost = [float(c) for c in cl.link_seconds_per_gb[cl.level_link.astype(np.int64)]]
    intra = np.unique(np.round(problem.intra_node_costs(), 15))
    costs = [float(intra[0]) if len(intra) == 1 else -np.inf, *level_cost]
    out = set()
    for k in range(min(columns, len(costs)) - 1):
        if abs(costs[k + 1] - costs[k]) <= 1e-12 * abs(costs[k + 1]):
            out.add(k)
    return out


def _choose_children(
    child: np.ndarray, node: np.ndarray, n: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """Which children of a domain take how many of its ``n`` workers.

    ``child``/``node``: child id and node id of each free location of the domain. One child
    when one holds all (the one needing the fewest nodes, then the smallest); otherwise the
    fewest children by free capacity (ties: fewer nodes needed), the last one the smallest that
    holds the remainder.
    """
    ids, inv, counts = np.unique(child, return_inverse=True, return_counts=True)
    members = [np.flatnonzero(inv == c) for c in range(len(ids))]
    need = np.array([_nodes_needed(node[mem], min(n, len(mem))) for mem in members])
    fits = np.flatnonzero(counts >= n)
    if len(fits):
        c = fits[np.lexsort((counts[fits], need[fits]))[0]]
        return [members[c]], np.array([n])
    order = list(np.lexsort((need, -counts)))
    chosen, sizes, left = [], [], n
    while left > 0:
        head = order[0]
        if counts[head] >= left:  # the last part: the tightest child that holds the rest
            fitting = [c for c in order if counts[c] >= left]
            head = min(fitting, key=lambda c: (_nodes_needed(node[members[c]], left), counts[c]))
        order.remove(head)
        take = min(left, int(counts[head]))
        chosen.append(members[head])
        sizes.append(take)
        left -= take
    return chosen, np.array(sizes)


#: Most workers of a job (and of a split) for which the wide and blocks variants are tried too.
WIDER_SPLIT_MAX = 2048
#: The decomposition's variants (:func:`decompose`).
VARIANTS = ("plain", "wide", "blocks", "kept")


def _wider_splits(
    child: np.ndarray, groups: list[np.ndarray], sizes: np.ndarray, workers: np.ndarray, atom: int
) -> list[tuple[list[np.ndarray], np.ndarray]]:
    """Alternatives to the fewest children filled by capacity: the same children filled evenly,
    and (up to :data:`WIDER_SPLIT_MAX` workers) the k largest children filled evenly, for k from
    as many children to two more — smaller parts can follow the job's own blocks (a pipeline
    stage per rack) — each also in whole heavy blocks of ``atom`` workers (:func:`heavy_atom`)."""
    n = len(workers)
    out = []
    even = _even_sizes(np.array([len(g) for g in groups]), n)
    if not np.array_equal(even, sizes):
        out.append((groups, even))
    if n > WIDER_SPLIT_MAX or len(groups) < 2:
        return out
    _, inv, counts = np.unique(child, return_inverse=True, return_counts=True)
    largest = np.argsort(-counts, kind="stable")
    units = (1, atom) if atom > 1 and n % atom == 0 else (1,)
    for unit in block_units(n, atom):
        filled = _unit_fill(counts, n, unit)
        if filled is not None:
            used = np.flatnonzero(filled > 0)
            out.append(([np.flatnonzero(inv == c) for c in used], filled[used]))
    for k in range(len(groups), min(len(groups) + 3, len(counts) + 1)):
        more = [np.flatnonzero(inv == c) for c in largest[:k]]
        for unit in units:
            wider = _even_sizes(counts[largest[:k]], n, unit)
            if int(wider.sum()) == n and np.all(wider > 0):
                out.append((more, wider))
    return out


#: Largest block of workers :func:`block_units` aligns a split with.
BLOCK_UNIT_MAX = 16


def block_units(n: int, atom: int) -> list[int]:
    """Block sizes a split's parts can be whole multiples of: the divisors of ``n`` from 2 up to
    :data:`BLOCK_UNIT_MAX` and the heavy atom. A job's small groups (expert cliques, TP rings,
    a pipeline's stages) have such sizes; a part that holds whole groups cuts none of them."""
    units = {u for u in range(2, min(BLOCK_UNIT_MAX, n - 1) + 1) if n % u == 0}
    if 1 < atom < n and n % atom == 0:
        units.add(atom)
    return sorted(units)


def _unit_fill(counts: np.ndarray, n: int, unit: int) -> np.ndarray | None:
    """The fewest children by free capacity, each taking whole blocks of ``unit`` workers (its
    capacity rounded down to a multiple), the last one the rest; None when that needs more
    children than rounding down leaves room in, or is the same as one child."""
    sizes = np.zeros(len(counts), dtype=np.int64)
    left = n
    for c in np.argsort(-counts, kind="stable"):
        if left <= 0:
            break
        take = min(left, int(counts[c]) // unit * unit)
        sizes[c] = take
        left -= take
    if left > 0 or np.count_nonzero(sizes) < 2:
        return None
    return sizes


#: Most work (children × largest child × workers) of the knapsack behind :func:`_kept_splits`.
KEPT_SPLIT_WORK = 20_000_000


def _kept_splits(
    problem: PlacementProblem, child: np.ndarray, n: int, atom: int
) -> list[tuple[list[np.ndarray], np.ndarray]]:
    """The split the lower bound's own knapsack takes: the worker counts over the children that
    keep the most traffic inside them by the densest-subgraph weights (fiber weights where the
    layout has them; :func:`~tsched.solvers.bounds.fibers.with_fibers`). A ring of expert
    cliques over racks of 25 and 35 free GPUs takes 6 cliques and one worker, then the other
    three and 8 cliques: one clique split, one rack fewer than whole cliques need. The children
    are ordered so that each one's share is completed to whole blocks by the next (for each
    block size of :func:`block_units`): runs of those counts along the workers' order are then
    whole blocks but one. Empty above :data:`KEPT_SPLIT_WORK` or without a table. Cached per
    ``child`` array: every partitioner's pass on one candidate set asks for the same."""
    key = ("kept_splits", np.asarray(child).tobytes(), n, atom)
    return problem.cached(key, lambda: _kept_splits_uncached(problem, child, n, atom))


def _kept_splits_uncached(
    problem: PlacementProblem, child: np.ndarray, n: int, atom: int
) -> list[tuple[list[np.ndarray], np.ndarray]]:
    """:func:`_kept_splits`, uncached."""
    from tsched.solvers.bounds.cuts import DENSEST_MAX_PART
    from tsched.solvers.bounds.densest import degree_ceiling, kept_spread
    from tsched.solvers.bounds.fibers import fiber_weights, with_fibers
    from tsched.solvers.bounds.packing import packing_weights

    _, inv, counts = np.unique(child, return_inverse=True, return_counts=True)
    caps = np.minimum(counts, n)
    span = int(caps.max())
    if len(caps) < 2 or len(caps) * span * n > KEPT_SPLIT_WORK:
        return []
    if span > DENSEST_MAX_PART and fiber_weights(problem, span) is None:
        return []  # beyond the searched sizes only a density guess: no spread worth forcing
    kmax = min(span, DENSEST_MAX_PART)
    table = with_fibers(problem, packing_weights(problem, kmax)[: kmax + 1], span,
                        degree_ceiling(problem))  # fmt: skip
    sizes = kept_spread(table, caps, n)
    if sizes is None:
        return []
    used = np.flatnonzero(sizes > 0)
    if len(used) < 2:
        return []
    out = []
    for unit in block_units(n, atom) or [1]:
        order = _complement_order(sizes[used], unit)
        chosen = used[order]
        out.append(([np.flatnonzero(inv == c) for c in chosen], sizes[chosen]))
    return out


def _complement_order(sizes: np.ndarray, unit: int) -> np.ndarray:
    """An order of the parts in which each one's running total is completed to a whole
    number of ``unit`` by the next part where one fits exactly, largest first otherwise."""
    left = list(np.argsort(-sizes, kind="stable"))
    order: list[int] = []
    filled = 0
    while left:
        need = (-filled) % unit
        pick = next((i for i in left if need and sizes[i] % unit == need), left[0])
        left.remove(pick)
        order.append(int(pick))
        filled += int(sizes[pick])
    return np.array(order, dtype=np.int64)


def _atom_fill(
    child: np.ndarray, node: np.ndarray, n: int, atom: int
) -> list[tuple[list[np.ndarray], np.ndarray]]:
    """The split that keeps the most heavy blocks whole: each child can hold as many blocks of
    ``atom`` workers whole as its nodes have room for (Σ ⌊free/atom⌋ over its nodes); children
    take blocks in order of that room, as many as it allows, and only the blocks left over go
    to the children with the most free GPUs left (where they must be split). Empty when the
    children cannot hold the n workers."""
    ids, inv, counts = np.unique(child, return_inverse=True, return_counts=True)
    _, node_inv, node_free = np.unique(node, return_inverse=True, return_counts=True)
    node_child = np.zeros(len(node_free), dtype=np.int64)
    node_child[node_inv] = inv
    room = np.bincount(node_child, weights=node_free // atom, minlength=len(ids)).astype(np.int64)
    sizes = np.zeros(len(ids), dtype=np.int64)
    left = n // atom
    for c in np.argsort(-room, kind="stable"):
        take = min(int(room[c]), left)
        sizes[c] = take * atom
        left -= take
    rest = left * atom
    spare = counts - sizes
    for whole in (True, False):  # the blocks left over: whole where a child has room for one
        for c in np.argsort(-spare, kind="stable"):
            if rest <= 0:
                break
            room = int(spare[c]) // atom * atom if whole else int(spare[c])
            take = min(room, rest)
            sizes[c] += take
            spare[c] -= take
            rest -= take
    if rest > 0:
        return []
    used = np.flatnonzero(sizes > 0)
    if len(used) < 2:
        return []
    return [([np.flatnonzero(inv == c) for c in used], sizes[used])]


def heavy_atom(problem: PlacementProblem) -> int:
    """The size of the job's heavy blocks (a TP group): the connected components of the pairs
    that carry at least half the heaviest pair's traffic (:func:`heavy_labels`), when they all
    have one size (else 1). Even splits in whole blocks keep them together."""
    label = heavy_labels(problem)
    if label is None:
        return 1
    sizes = np.unique(np.bincount(label))
    return int(sizes[0]) if len(sizes) == 1 and sizes[0] > 1 else 1


def _even_sizes(caps: np.ndarray, n: int, unit: int = 1) -> np.ndarray:
    """``n`` workers spread as evenly as the capacities allow over the same children (in
    their order): the balanced split graph partitioners aim for; with ``unit`` > 1 (dividing
    n) in whole blocks of that many workers. The sizes may sum to less than n where the
    capacities (in whole blocks) do not hold it."""
    sizes = np.zeros(len(caps), dtype=np.int64)
    left = n // unit
    for rank, i in enumerate(np.argsort(caps, kind="stable")):
        share = -(-left // (len(caps) - rank))  # ceil: the larger shares go to larger children
        sizes[i] = min(int(caps[i]) // unit, share)
        left -= sizes[i]
    return sizes * unit


def _nodes_needed(nodes: np.ndarray, n: int) -> int:
    counts = np.sort(np.unique(nodes, return_counts=True)[1])[::-1]
    return int(np.searchsorted(np.cumsum(counts), n) + 1)


def decompose(
    problem: PlacementProblem,
    graph: sp.csr_array,
    partitioner: str,
    seed: int,
    locations: np.ndarray | None = None,
    variant: str = "plain",
) -> tuple[np.ndarray, dict[str, Any]]:
    """The top-down assignment (steps 2-3 of the module docstring) onto ``locations`` (default:
    all usable ones) and what it did. ``variant`` (:data:`VARIANTS`): ``wide`` leaves levels
    whose boundary costs nothing out of the tree (:func:`nested_keys`) and each split also
    tries even splits over more children (:func:`_wider_splits`) and the split that keeps the
    most heavy blocks whole (:func:`_atom_fill`), the smallest cut standing; ``blocks`` takes
    that last split wherever it exists, whatever its cut (a block split across nodes costs
    more below than the cut here shows); ``kept`` splits the whole job as the lower bound's
    knapsack spreads it (:func:`_kept_splits`), whatever its cut, and the levels below as
    ``wide`` does."""
    if variant not in VARIANTS:
        raise ValueError(f"decomposition variant {variant!r} (valid: {', '.join(VARIANTS)})")
    keys = nested_keys(problem, flatten=variant != "plain")
    node = keys[:, -1]
    n = problem.n_workers
    atom = heavy_atom(problem)
    labels = heavy_labels(problem) if atom > 1 else None
    assignment = np.empty(n, dtype=np.int64)
    used: dict[str, int] = {}
    cut_total = 0.0
    start = np.arange(problem.n_locations) if locations is None else np.asarray(locations)
    # stack of (workers, their domain's locations, depth of that domain in ``keys``)
    stack = [(np.arange(n), start, 0)]
    while stack:
        workers, locs, depth = stack.pop()
        if depth == keys.shape[1] - 1:  # one node: its GPUs in order
            assignment[workers] = np.sort(locs)[: len(workers)]
            continue
        groups, sizes = _choose_children(keys[locs, depth + 1], node[locs], len(workers))
        blocks = []
        if variant != "plain" and atom > 1 and len(workers) % atom == 0:
            blocks = _atom_fill(keys[locs, depth + 1], node[locs], len(workers), atom)
        if variant == "blocks" and blocks:
            (groups, sizes), blocks = blocks[0], []
        if len(groups) == 1:
            stack.append((workers, locs[groups[0]], depth + 1))
            continue
        kept = _kept_splits(problem, keys[locs, depth + 1], n, atom) if (
            variant == "kept" and len(workers) == n) else []  # fmt: skip
        sub = graph[workers][:, workers]
        if kept:  # the bound's spread for the whole job, whatever its cut here: in the order
            # (of those tried) whose runs cut least
            tries = [(partition(sub, k_sizes, partitioner, seed), k_groups)
                     for k_groups, k_sizes in kept]  # fmt: skip
            (part, value, name), groups = min(tries, key=lambda t: t[0][1])
            wider = []
        else:
            part, value, name = partition(sub, sizes, partitioner, seed)
            even = _even_sizes(np.array([len(g) for g in groups]), len(workers))
            wider = [(groups, even)] if not np.array_equal(even, sizes) else []
        if variant == "blocks" and labels is not None:  # whole blocks wherever sizes allow
            whole = _block_partition(sub, labels[workers], sizes, atom, partitioner, seed)
            if whole is not None:
                part, value, name = whole
        if variant in ("wide", "kept") and not kept:
            wider = _wider_splits(keys[locs, depth + 1], groups, sizes, workers, atom) + blocks
        for groups_k, sizes_k in wider:
            # the same children (or a few more) filled evenly: keep the smallest cut (whole
            # pipeline stages per rack beat full racks)
            alt = partition(sub, sizes_k, partitioner, seed)
            if alt[1] < value - 1e-9 * max(1.0, value):
                part, value, name = alt
                groups = groups_k
        used[name] = used.get(name, 0) + 1
        cut_total += value
        for p, members in enumerate(groups):
            stack.append((workers[part == p], locs[members], depth + 1))
    return assignment, {"partitions": used, "partition_cut": cut_total}


def _block_partition(
    sub: sp.csr_array,
    labels: np.ndarray,
    sizes: np.ndarray,
    atom: int,
    partitioner: str,
    seed: int,
) -> tuple[np.ndarray, float, str] | None:
    """:func:`partition` of the heavy blocks instead of the workers: each block (``labels``,
    all of ``atom`` workers here) one vertex of the quotient graph, whose cut is the workers'
    cut. Parts whose size is a whole number of blocks take whole blocks; the blocks left over
    form one more part, whose workers are then split among the other parts (partly busy
    nodes: only those blocks are cut). None where the blocks are not whole here or no part
    takes whole blocks."""
    sizes = np.asarray(sizes, dtype=np.int64)
    ids, block_of, counts = np.unique(labels, return_inverse=True, return_counts=True)
    whole = sizes % atom == 0
    if np.any(counts != atom) or not np.any(whole):
        return None
    member = sp.csr_array(
        (np.ones(len(labels)), (np.arange(len(labels)), block_of)), shape=(len(labels), len(ids))
    )
    quotient = sp.csr_array(member.T @ sub @ member)
    quotient.setdiag(0)
    quotient.eliminate_zeros()
    rest = int(sizes[~whole].sum())
    block_sizes = np.r_[sizes[whole] // atom, [rest // atom] if rest else []].astype(np.int64)
    block_part, _, name = partition(quotient, block_sizes, partitioner, seed)
    part = np.empty(len(labels), dtype=np.int64)
    part[:] = np.flatnonzero(whole)[np.minimum(block_part[block_of], int(whole.sum()) - 1)]
    if rest:
        loose = np.flatnonzero(block_part[block_of] == int(whole.sum()))
        inner_graph = sub[loose][:, loose]
        inner, cut, _ = partition(inner_graph, sizes[~whole], partitioner, seed)
        filled = _sequential_fill(block_of[loose], sizes[~whole], atom)
        if _cut(inner_graph, filled) < cut - 1e-9 * max(1.0, cut):
            inner = filled
        part[loose] = np.flatnonzero(~whole)[inner]
    return part, _cut(sub, part), name


def _sequential_fill(block_of: np.ndarray, sizes: np.ndarray, atom: int) -> np.ndarray:
    """The loose blocks' workers laid along the parts in block order (each block in worker
    order: a TP ring's order), the parts taken so that each one's free room is completed to
    whole blocks by the next where one fits exactly (7 then 1, 6 then 2): a block then spans
    few parts, cut at few places."""
    order = _complement_order(sizes, atom)  # every size is below atom: exact complements
    part = np.empty(len(block_of), dtype=np.int64)
    workers = np.argsort(block_of, kind="stable")  # block by block, worker order within
    part[workers] = np.repeat(order, sizes[order])
    return part


def _cut(graph: sp.csr_array, part: np.ndarray) -> float:
    """The traffic between parts (each pair once)."""
    coo = graph.tocoo()
    return float(coo.data[part[coo.row] != part[coo.col]].sum()) / 2


# ---------------------------------------------------------------------- sparse refinement
def sparse_refine(
    problem: PlacementProblem,
    assignment: np.ndarray,
    deadline: float | None = None,
    graph: sp.csr_array | None = None,
    seed: int = 0,
    kicks: int = 0,
    target: float | None = None,
) -> tuple[np.ndarray, int]:
    """Sparse local search (step 4) from ``assignment``; returns (assignment, moves).

    Descends pass by pass until no move improves or ``deadline`` (``time.perf_counter``
    seconds; a pass is not started when the last one, repeated, would end past it). Then, for
    up to ``kicks`` rounds (``-1``: until the deadline), an iterated local search: perturb the
    best plan (a few exchanges of a worker with a GPU near one of its traffic partners, or the
    workers of its node exchanged with those of a node next to a partner's), descend again,
    keep the result only if it is better; the rounds stop early once the plan is at
    ``target`` (a lower bound: nothing better exists). Per-GPU linear costs are priced in every
    move, and
    each worker's cheapest GPU's node joins its candidates. Needs a cluster;
    otherwise returns the input unchanged.
    """
    cl = problem.cluster
    if cl is None or problem.n_workers < 1:
        return np.asarray(assignment, dtype=np.int64), 0
    graph = symmetric_graph(problem) if graph is None else graph
    indptr, indices, w = _csr(graph)
    nodes = problem.location_node()
    used_nodes, loc_node = np.unique(nodes, return_inverse=True)
    loc_node = loc_node.astype(np.int64)
    bounds = np.r_[0, np.flatnonzero(np.diff(loc_node)) + 1, len(loc_node)]
    type_cost = cl.type_cost_table()
    groups = np.ascontiguousarray(cl.node_group[used_nodes], dtype=np.int64)  # no N × N table
    assign = np.array(assignment, dtype=np.int64)
    occ = np.full(problem.n_locations, -1, dtype=np.int64)
    occ[assign] = np.arange(problem.n_workers)
    rng = np.random.default_rng(seed)
    order = rng.permutation(problem.n_workers).astype(np.int64)
    if problem.linear is not None:
        lin = np.ascontiguousarray(problem.linear, dtype=np.float64)
        pref_node = loc_node[np.argmin(lin, axis=1)].astype(np.int64)
    else:
        lin, pref_node = np.zeros((0, 0)), np.full(problem.n_workers, -1, dtype=np.int64)
    args = (
        indptr,
        indices,
        w,
        assign,
        occ,
        loc_node,
        cl.gpu_local[problem.locations].astype(np.int64),
        bounds[:-1].astype(np.int64),
        bounds[1:].astype(np.int64),
        groups,
        np.ascontiguousarray(cl.level_costs(), dtype=np.float64),
        cl.node_type_index[used_nodes].astype(np.int64),
        np.ascontiguousarray(type_cost),
        order,
    )
    tail = (lin, pref_node)

    last_pass = 0.0  # seconds of the latest pass: no pass starts that would overrun

    def overrun() -> bool:
        return deadline is not None and time.perf_counter() + last_pass > deadline

    def descend() -> int:
        nonlocal last_pass
        made_total = 0
        while True:
            began = time.perf_counter()
            _, made = _kernel().local_search(*args, 1, *tail)
            last_pass = time.perf_counter() - began
            made_total += int(made)
            if made == 0 and not overrun():
                # no exchange helps: a split heavy block may still move whole
                gathered, made = relocate_blocks(problem, assign, graph, deadline)
                if made:
                    assign[:] = gathered
                    occ[:] = -1
                    occ[assign] = np.arange(problem.n_workers)
                    made_total += int(made)
            if made == 0 or overrun():
                return made_total

    moves = descend()
    if kicks == 0 or problem.n_workers < 2 or len(w) == 0:
        return assign, moves
    leaf = problem.location_groups()[bounds[:-1], 0] if len(cl.levels) else np.zeros(1)
    best = objective(problem, assign)
    reached = -np.inf if target is None else target + 1e-9 * max(1.0, abs(target))
    round_ = 0
    while kicks < 0 or round_ < kicks:
        if overrun() or best <= reached:
            break
        round_ += 1
        saved_assign, saved_occ = assign.copy(), occ.copy()
        _kick(rng, assign, occ, indptr, indices, loc_node, bounds, leaf)
        moves += descend()
        value = objective(problem, assign)
        if value < best - 1e-12 * max(1.0, abs(best)):
            best = value
        else:
            assign[:], occ[:] = saved_assign, saved_occ
    return assign, moves


def _kick(
    rng: np.random.Generator,
    assign: np.ndarray,
    occ: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
    loc_node: np.ndarray,
    bounds: np.ndarray,
    leaf: np.ndarray,
) -> None:
    """Perturb in place: a node-content exchange towards a partner, or a few pair moves."""

    def exchange(p: int, q: int) -> None:
        i, j = occ[p], occ[q]
        occ[p], occ[q] = j, i
        if i >= 0:
            assign[i] = q
        if j >= 0:
            assign[j] = p

    n = len(assign)
    for _ in range(8):  # find a worker with a partner on another node
        i = int(rng.integers(n))
        lo, hi = indptr[i], indptr[i + 1]
        if hi > lo:
            break
    else:
        return
    j = int(indices[rng.integers(lo, hi)])
    a, b = loc_node[assign[i]], loc_node[assign[j]]
    if rng.random() < 0.5 and a != b:
        near = np.flatnonzero(leaf == leaf[b])
        near = near[(near != a) & (near != b)]
        if len(near):
            c = int(near[rng.integers(len(near))])
            width = min(bounds[a + 1] - bounds[a], bounds[c + 1] - bounds[c])
            for k in range(width):
                exchange(int(bounds[a] + k), int(bounds[c] + k))
            return
    for _ in range(3):
        q = int(rng.integers(bounds[b], bounds[b + 1]))
        if q != assign[i]:
            exchange(int(assign[i]), q)
        i = int(rng.integers(n))
        lo, hi = indptr[i], indptr[i + 1]
        if hi == lo:
            continue
        b = loc_node[assign[int(indices[rng.integers(lo, hi)])]]


def spread_locations(
    problem: PlacementProblem, nodes: np.ndarray, counts: np.ndarray
) -> np.ndarray:
    """Exactly ``counts[i]`` free GPUs (locations, the first ones) of each node ``nodes[i]``:
    a candidate set laid as the nested bound spreads the job (its counts sum to n)."""
    want = dict(zip(nodes.tolist(), counts.tolist(), strict=True))
    runs = [np.arange(lo, lo + want.get(node, 0)) for node, lo, _, _ in problem.node_blocks()]
    return np.concatenate(runs) if runs else np.zeros(0, dtype=np.int64)


# ---------------------------------------------------------------------- the method
def _partitioner_order(
    problem: PlacementProblem, names: tuple[str, ...], locs: np.ndarray | None
) -> tuple[str, ...]:
    """METIS first on whole nodes (balanced parts of one size are what it aims for), graph
    growing first where nodes are partly busy (exact, uneven part sizes): under a deadline
    the first is the one that runs."""
    if len(names) < 2:
        return names
    cl = problem.cluster
    assert cl is not None
    chosen = problem.locations if locs is None else problem.locations[locs]
    nodes, counts = np.unique(cl.gpu_node[chosen], return_counts=True)
    whole = bool(np.all(counts == cl.gpus_per_node[nodes]))
    first = "metis" if whole else "grow"
    return tuple(sorted(names, key=lambda name: (name != first, name == "best")))


@register(
    "hierarchical",
    description="top-down partitioning per level (graph growing / METIS) + sparse local search",
    options={
        "partitioner": "best (default: both, the smaller cut), grow, or metis (needs pymetis)",
        "refine": "run the sparse local search (default true)",
        "kicks": "iterated local search rounds after the descent (default: until the time "
        "limit when one is given, else none; -1: until the time limit)",
        "spread": "also split the whole job as the lower bound's knapsack spreads it "
        "(default true)",
    },
    kinds={"refine": Flag(), "kicks": Count(-1), "spread": Flag()},
)
def hierarchical(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    start = time.perf_counter()
    deadline = None if time_limit is None else start + time_limit
    partitioner = str(options.get("partitioner", "best"))
    if partitioner not in PARTITIONERS:
        raise InputError(
            f"method 'hierarchical': option partitioner={partitioner!r} must be one of "
            f"{', '.join(PARTITIONERS)}"
        )
    if partitioner == "metis" and not have_metis():
        raise InputError(
            "method 'hierarchical': partitioner=metis needs pymetis (pip install pymetis)"
        )
    if problem.cluster is None:
        assignment = construct_dense(problem)
        pool = np.setdiff1d(np.arange(problem.n_locations), assignment)
        assignment, swaps = local_search(problem, assignment, pool, deadline)
        return SolverOutput(
            assignment,
            iterations=swaps,
            message=f"hierarchical: no hierarchy (raw QAP): greedy + {swaps} swaps",
        )
    graph = symmetric_graph(problem)
    names: tuple[str, ...] = (partitioner,)
    if partitioner == "best":  # each alone, then the smaller cut at every split
        names = ("grow", "metis", "best") if have_metis() else ("grow",)
    sets: list[tuple[str, np.ndarray | None]] = [
        (level, locs) for level, _, locs in candidate_sets(problem)
    ]
    sets.append(("free choice", None))
    spread = problem.peek("nested_spread")  # left by the nested bound: the counts it prices
    if spread is not None:
        sets.insert(0, ("the nested bound's spread", spread_locations(problem, *spread)))
    best: tuple[float, np.ndarray, dict[str, Any]] | None = None
    tried = 0
    # the wide variant (module docstring, step 3) where a split is cheap enough to try more
    variants = VARIANTS if problem.n_workers <= WIDER_SPLIT_MAX else ("plain",)
    if not options.get("spread", True):
        variants = tuple(v for v in variants if v != "kept")
    # under a deadline no pass starts that would overrun, by the longest so far with a margin
    # (a pass of the other partitioner or on another candidate set can take half as long again)
    longest = 0.0
    # first each candidate set with each partitioner alone and the first three variants, and
    # the wide one with the per-split best; then, as time allows, the rest of the per-split
    # best and the bound's spread (``kept``): under a tight budget the passes that matter
    # most on most jobs run first
    first = [
        (name, variant)
        for name in names
        for variant in variants
        if (name != "best" and variant != "kept") or (name, variant) == ("best", "wide")
    ]
    every = [(level, locs, name, variant) for level, locs in sets
             for name in _partitioner_order(problem, names, locs)
             for variant in variants]  # fmt: skip
    passes = [p for p in every if p[2:] in first] + [p for p in every if p[2:] not in first]
    for level, locs, name, variant in passes:
        now = time.perf_counter()
        if best is not None and deadline is not None:
            if now > start + 0.5 * (deadline - start) or now + 1.5 * longest > deadline:
                break
        assignment, info = decompose(problem, graph, name, seed, locs, variant)
        longest = max(longest, time.perf_counter() - now)
        value = objective(problem, assignment)
        tried += 1
        if best is None or value < best[0] - 1e-12 * max(1.0, abs(value)):
            info = {**info, "locations": level, "partitioner": name, "variant": variant}
            best = (value, assignment, info)
    assert best is not None
    assignment, stats = best[1], best[2]
    stats["candidates_tried"] = tried
    stats["decompose_seconds"] = round(time.perf_counter() - start, 4)
    moves = 0
    # a descent pass over the whole problem costs about a decomposition pass: under a deadline
    # that leaves less than one, the refinement would only overrun it
    late = deadline is not None and deadline - time.perf_counter() < longest
    if late:
        stats["refine_skipped"] = True
    if options.get("refine", True) and not late:
        kicks = int(options.get("kicks", -1 if deadline is not None else 0))
        assignment, moves = sparse_refine(problem, assignment, deadline, graph, seed, kicks)
    return SolverOutput(
        assignment,
        iterations=moves,
        message=f"hierarchical: {tried} decompositions, best on {stats['locations']} "
        f"locations by {stats['partitioner']}; {moves} improving moves",
        stats=stats,
    )
