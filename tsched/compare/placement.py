"""Cluster-level placement rules: which free GPUs a job of ``n`` GPUs gets, and when it must wait.

The rules of the schedulers people run, each reproduced as its documentation or code states it,
and ``fgd``, tsched's own. A rule sees the free GPUs, the admission regime and (``fgd``) the
shapes of the work it expects; it returns GPU indices or ``None`` (the job waits).

Admission regimes (:data:`ADMISSIONS`):

``any``
    A job may start whenever ``n`` GPUs are free anywhere; a scattered placement only runs slower
    (the job model stretches it).
``compact``
    The production regime: a job that fits in one node gets one node, and a larger one gets
    whole free nodes, plus one node with room for the remainder when they do not add up to
    ``n`` (:func:`admits_compact`; ``⌈n/G⌉`` nodes on nodes of ``G`` GPUs). Fragmentation shows
    up as waiting.

Rules (:data:`RULES`; ``pack`` is an alias of ``first-fit``):

``first-fit``
    The first free GPUs in node order (Kubernetes' and KAI's default bin-packing; what tsched
    called ``pack``). Compact: the first node by index with room, whole nodes by index.
``best-fit``
    The fullest node that fits (the classic best-fit bin-packing rule, and the *best-fit* baseline
    of FGD, Weng et al., USENIX ATC'23). A job no node holds takes whole nodes and the best-fitting
    node for the remainder, and under ``any`` with too few whole nodes fills the fullest nodes
    first (holes first).
``kai-tas``
    KAI Scheduler's topology-aware scheduling: among the domains of the lowest level that hold
    the whole gang, the one with the least free capacity; inside it, first fit (NVIDIA
    KAI-Scheduler ``docs/topology/README.md``).
``slurm-tree``
    Slurm's ``topology/tree``: the lowest switch level that satisfies the job, best fit among the
    switches of that level, then best fit over the nodes below it (slurm.schedmd.com/topology).
``whole-nodes``
    The rule of several research schedulers (Helios' consolidate placer, Sia's whole-node
    configurations): a job of up to one node goes best fit to one node; a larger one runs only on
    whole idle nodes, taken from the high end of the cluster so single-node jobs and distributed
    jobs stay apart. It waits otherwise, under either admission regime.
``spread``
    The emptiest nodes first, round-robin (load balancing; Kubernetes' ``LeastAllocated``).
``random``
    Uniformly random free GPUs (seeded); compact: a random node, random whole nodes.
``fgd``
    Fragmentation gradient descent extended to whole-GPU, multi-node jobs (see :class:`Fgd`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from tsched.cluster import Cluster
from tsched.errors import InputError

__all__ = [
    "ADMISSIONS",
    "RULES",
    "ALIASES",
    "View",
    "place",
    "is_compact",
    "admits_compact",
    "fragmentation",
]

ADMISSIONS = ("any", "compact")
RULES = ("first-fit", "best-fit", "kai-tas", "slurm-tree", "whole-nodes", "spread", "random", "fgd")
ALIASES = {"pack": "first-fit"}


@dataclass
class View:
    """What a rule sees of the cluster at one decision.

    ``free`` is the boolean mask of free GPUs, ``per_node`` the free GPUs per node. ``shapes``
    maps a job size (GPUs) to its weight in the work expected next (``fgd``); ``slowdown(gpus)``
    is the job's run time on ``gpus`` over its compact run time (``fgd``). ``hold`` is, per node,
    the seconds until its running jobs have all ended, and ``duration`` the job's expected run
    time (``fgd``; without them fragments are weighed without time); ``releases`` is, per node,
    the seconds until each running job ends and the GPUs it gives back there (two arrays of
    one row a node, ``inf`` and 0 padding; ``fgd``). ``weight`` prices a
    fragmented GPU-second against a GPU-second of the job's own, and ``tables`` holds, per node
    size, :func:`fragmentation` of every free count for ``shapes`` (``fgd``; computed when
    absent). ``wait(n)`` is the expected seconds until ``n`` GPUs are free compactly and
    ``waited`` the seconds this job has already waited for locality (``fgd`` under ``any``;
    without ``wait`` it never waits while GPUs are free). ``margin``: predicted speed-ups of a
    scattered placement smaller than this share are not acted on (``fgd``).
    """

    cluster: Cluster
    free: np.ndarray
    per_node: np.ndarray
    admission: str = "any"
    rng: np.random.Generator | None = None
    shapes: Mapping[int, float] | None = None
    slowdown: Callable[[np.ndarray], float] | None = None
    weight: float = 1.0
    hold: np.ndarray | None = None
    duration: float | None = None
    tables: Mapping[int, np.ndarray] | None = None
    wait: Callable[[int], float] | None = None
    waited: float = 0.0
    margin: float = 0.0
    releases: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def size(self) -> np.ndarray:
        return self.cluster.gpus_per_node

    @property
    def whole(self) -> np.ndarray:
        return self.per_node == self.cluster.gpus_per_node


def _free_on(view: View, node: int) -> np.ndarray:
    """The free GPUs of ``node`` (global indices, in order)."""
    s = int(view.cluster.node_offset[node])
    return s + np.flatnonzero(view.free[s : s + int(view.cluster.gpus_per_node[node])])


def _gpus_of(view: View, nodes: np.ndarray | list[int], n: int) -> np.ndarray:
    """The first free GPUs of ``nodes`` in that order, ``n`` in all."""
    out: list[np.ndarray] = []
    left = n
    for node in nodes:
        take = _free_on(view, node)[:left]
        out.append(take)
        left -= len(take)
        if left == 0:
            break
    if left:
        raise AssertionError("rule chose nodes without room")  # a bug, never input
    return np.concatenate(out).astype(np.int64)


def node_count(cluster: Cluster, n: int) -> int:
    """The fewest nodes that can hold ``n`` GPUs (largest nodes first)."""
    sizes = np.sort(cluster.gpus_per_node)[::-1]
    return int(np.searchsorted(np.cumsum(sizes), n) + 1)


def is_compact(cluster: Cluster, gpus: np.ndarray) -> bool:
    """Whether a placement uses the fewest nodes a job of its size can."""
    return len(np.unique(cluster.gpu_node[gpus])) == node_count(cluster, len(gpus))


def _fewest_nodes(view: View, n: int) -> np.ndarray | None:
    """A placement of a job larger than a node on the fewest nodes without asking for whole
    ones: the nodes with the most free GPUs, all their free GPUs, and the best-fitting node for
    the remainder (``6 + 6`` for 12 GPUs on two 8-GPU nodes with 6 free each). None when no
    such set of :func:`node_count` nodes has room."""
    f = view.per_node
    k = node_count(view.cluster, n)
    order = np.lexsort((np.arange(len(f)), -f))  # most free first, then the lower index
    head = order[: k - 1]
    rest = n - int(f[head].sum())  # > 0: k − 1 nodes cannot hold n
    tail = order[k - 1 :]
    fit = tail[f[tail] >= rest]
    if not len(fit):
        return None
    last = fit[np.lexsort((fit, f[fit]))][0]  # the fullest node with room for the remainder
    return _gpus_of(view, [*head.tolist(), int(last)], n)


def admits_compact(cluster: Cluster, gpus: np.ndarray) -> bool:
    """Whether ``compact`` admission lets a job start on ``gpus``: one node for a job that fits
    the largest node; else whole nodes, of any size, and at most one node for the remainder
    (which may keep other jobs). On nodes of one size that is :func:`is_compact`'s ⌈n/G⌉ nodes
    with all but one whole; on mixed sizes 16 GPUs may take four whole 4-GPU nodes as well as
    two whole 8-GPU ones."""
    nodes, counts = np.unique(cluster.gpu_node[gpus], return_counts=True)
    if len(gpus) <= int(cluster.gpus_per_node.max()):
        return len(nodes) == 1
    return int((counts < cluster.gpus_per_node[nodes]).sum()) <= 1


def compact_room(per_node: np.ndarray, size: np.ndarray, n: int) -> bool:
    """Whether some placement of ``n`` GPUs that :func:`admits_compact` is free (``per_node``
    free GPUs of nodes of ``size``): a node with room for a job of up to the largest node; else
    whole free nodes and the freest other node together with room.

    >>> size = np.array([8, 8, 8])
    >>> compact_room(np.array([8, 5, 3]), size, 6), compact_room(np.array([7, 5, 3]), size, 8)
    (True, False)
    >>> compact_room(np.array([8, 5, 3]), size, 13), compact_room(np.array([8, 4, 4]), size, 13)
    (True, False)
    """
    one, more = compact_limits(per_node, size)
    return (one if n <= int(size.max()) else more) >= n


def compact_limits(per_node: np.ndarray, size: np.ndarray) -> tuple[int, int]:
    """The largest jobs :func:`compact_room` finds room for: of up to a node (the most free GPUs
    on one node), and larger (the whole free nodes' GPUs and the most free GPUs on one other
    node)."""
    whole = per_node == size
    return (int(per_node.max(initial=0)),
            int(size[whole].sum()) + int(per_node[~whole].max(initial=0)))  # fmt: skip


def compact_nodes(per_node: np.ndarray, size: np.ndarray, n: int) -> np.ndarray:
    """The nodes a compact placement of ``n`` GPUs may use (a mask): nodes with room for the whole
    job, or, for a job larger than a node, whole free nodes and nodes with room for the
    remainder."""
    gmax = int(size.max())
    if n <= gmax:
        return per_node >= n
    rest = n - (math.ceil(n / gmax) - 1) * gmax
    return (per_node == size) | (per_node >= rest)


def _compact(
    view: View,
    n: int,
    single_key: Callable[[np.ndarray], tuple[np.ndarray, ...]],
    whole_key: Callable[[np.ndarray], tuple[np.ndarray, ...]],
    allowed: np.ndarray | None = None,
) -> np.ndarray | None:
    """A compact placement: one node with room (the best by ``single_key``), or whole nodes
    (best first by ``whole_key``) plus the best node with room for the remainder. Keys are
    tuples for :func:`numpy.lexsort`, most significant first; ties go to the lower index."""
    f = view.per_node
    ok = np.ones(len(f), dtype=bool) if allowed is None else allowed
    gmax = int(view.size.max())
    if n <= gmax:
        cand = np.flatnonzero(ok & (f >= n))
        if not len(cand):
            return None
        best = cand[_order(cand, single_key)[0]]
        return _gpus_of(view, [best], n)
    wholes = np.flatnonzero(ok & view.whole)
    if not len(wholes):
        return None
    wholes = wholes[_order(wholes, whole_key)]
    cum = np.cumsum(view.size[wholes])
    k = int(np.searchsorted(cum, n))  # whole nodes wholes[:k+1] hold n
    if k < len(wholes) and cum[k] == n:
        return _gpus_of(view, wholes[: k + 1], n)
    if k == 0 and cum[0] > n:
        return None  # cannot happen when n > gmax
    taken = wholes[:k]
    rest = n - (int(cum[k - 1]) if k else 0)
    mask = ok & (f >= rest)
    mask[taken] = False
    cand = np.flatnonzero(mask)
    if not len(cand):
        return None
    last = cand[_order(cand, single_key)[0]]
    return _gpus_of(view, [*taken, last], n)


def _order(nodes: np.ndarray, key: Callable[[np.ndarray], tuple[np.ndarray, ...]]) -> np.ndarray:
    keys = key(nodes)
    return np.lexsort((nodes, *reversed(keys)))


def _first_fit(view: View, n: int) -> np.ndarray | None:
    """First fit: the first free GPUs in node order (Kubernetes' default bin-packing order and
    KAI Scheduler's; compact: the first node by index with room)."""
    if view.admission == "compact":
        return _compact(view, n, lambda c: (), lambda c: ())
    idx = np.flatnonzero(view.free)
    return idx[:n] if len(idx) >= n else None


def _best_fit(view: View, n: int) -> np.ndarray | None:
    """Best fit: the fullest node that fits (the best-fit baseline of FGD, Weng et al., USENIX
    ATC'23, for whole GPUs); larger jobs whole nodes plus the best-fitting remainder node, or
    under ``any`` the fullest nodes first."""
    f = view.per_node
    got = _compact(view, n, lambda c: (f[c],), lambda c: ())
    if got is not None or view.admission == "compact":
        return got
    nodes = np.flatnonzero(f > 0)
    nodes = nodes[np.lexsort((nodes, f[nodes]))]  # fullest first: spend the holes
    return _gpus_of(view, nodes, n) if f.sum() >= n else None


def _domains(view: View) -> list[np.ndarray]:
    """Domain id per node for each level above the node (lowest first)."""
    c = view.cluster
    return [c.node_group[:, k] for k in range(len(c.levels))] if c.levels else []


def _tightest(
    view: View, n: int, inside: Callable[[np.ndarray], np.ndarray | None]
) -> np.ndarray | None:
    """The lowest level at which some domain holds the job; among those domains the one with the
    least free GPUs; ``inside(allowed_nodes)`` places the job there."""
    f = view.per_node
    gmax = int(view.size.max())
    compact = view.admission == "compact"
    if n <= gmax:  # level zero: the fullest node that holds the job
        fits = np.flatnonzero(f >= n)
        if len(fits):
            return inside(np.arange(len(f)) == fits[np.lexsort((fits, f[fits]))[0]])
        if compact:  # compact: a job of up to a node gets one node, and none has room
            return None
    if compact:  # n > gmax: whole nodes and the partial ones
        whole = np.where(view.whole, view.size, 0)
        part = np.where(view.whole, 0, f)
    for dom in _domains(view):
        if compact:
            # whole nodes plus at most one partial node with the remainder: a domain holds the
            # job where its whole nodes and its freest partial node do (``_compact`` succeeds
            # in exactly these); the order goes by all its partial GPUs, up to a node's worth
            room = np.bincount(dom, weights=whole)
            best = np.zeros(len(room))
            np.maximum.at(best, dom, part)
            holds = room + best >= n
            room = room + np.bincount(dom, weights=part).clip(max=gmax)
        else:
            room = np.bincount(dom, weights=f)
            holds = room >= n
        fits = np.flatnonzero(holds)
        for d in fits[np.lexsort((fits, room[fits]))]:
            got = inside(dom == d)
            if got is not None:
                return got
    return inside(np.ones(len(f), dtype=bool))


def _restricted(view: View, allowed: np.ndarray) -> View:
    free = view.free.copy()
    free[~allowed[view.cluster.gpu_node]] = False
    per_node = np.where(allowed, view.per_node, 0)
    return replace(view, free=free, per_node=per_node)


def _kai_tas(view: View, n: int) -> np.ndarray | None:
    """KAI Scheduler's topology-aware scheduling: the least free domain of the lowest level that
    holds the gang, then first fit inside (NVIDIA/KAI-Scheduler ``docs/topology/README.md``)."""
    return _tightest(view, n, lambda ok: _first_fit(_restricted(view, ok), n))


def _slurm_tree(view: View, n: int) -> np.ndarray | None:
    """Slurm ``topology/tree``: the lowest switch level that satisfies the job, best fit among
    its switches, then best fit over the nodes (slurm.schedmd.com/topology.html)."""
    return _tightest(view, n, lambda ok: _best_fit(_restricted(view, ok), n))


def _whole_nodes(view: View, n: int) -> np.ndarray | None:
    """Helios' consolidate placer and Sia's whole-node configurations: up to a node best fit;
    larger jobs only on whole idle nodes, taken from the high end (Sia's two-ended layout)."""
    f = view.per_node
    gmax = int(view.size.max())
    if n <= gmax:
        return _compact(view, n, lambda c: (f[c],), lambda c: ())
    wholes = np.flatnonzero(view.whole)[::-1]  # the high end first
    cum = np.cumsum(view.size[wholes])
    k = int(np.searchsorted(cum, n))
    return _gpus_of(view, wholes[: k + 1], n) if k < len(wholes) else None


def _spread(view: View, n: int) -> np.ndarray | None:
    """Spread: the emptiest nodes first, one GPU a node a round (Kubernetes' LeastAllocated
    scoring; the load-balancing baseline)."""
    f = view.per_node
    if view.admission == "compact":
        return _compact(view, n, lambda c: (-f[c],), lambda c: ())
    if f.sum() < n:
        return None
    nodes = np.flatnonzero(f > 0)
    nodes = nodes[np.lexsort((nodes, -f[nodes]))]  # emptiest first
    per = [_free_on(view, k) for k in nodes]
    out: list[int] = []
    rnd = 0
    while len(out) < n:
        for g in per:
            if rnd < len(g):
                out.append(int(g[rnd]))
                if len(out) == n:
                    break
        rnd += 1
    return np.asarray(out, dtype=np.int64)


def _random(view: View, n: int) -> np.ndarray | None:
    """Random fit (FGD's random-fit baseline): uniformly random free GPUs, or under ``compact`` a
    random node with room and random whole nodes."""
    rng = view.rng or np.random.default_rng(0)
    if view.admission == "compact":
        keys = rng.random(view.cluster.n_nodes)
        return _compact(view, n, lambda c: (keys[c],), lambda c: (keys[c],))
    idx = np.flatnonzero(view.free)
    return np.sort(rng.choice(idx, size=n, replace=False)) if len(idx) >= n else None


def fragmentation(
    free: np.ndarray, size: int | np.ndarray, shapes: Mapping[int, float]
) -> np.ndarray:
    """Expected free GPUs of nodes with ``free`` free GPUs (of ``size``) that the job shapes
    cannot use, weighted by the shapes' weights (which sum to 1).

    A shape of ``s ≤ size`` GPUs uses a node's free GPUs in whole copies of itself, so ``free
    mod s`` of them are lost to it; a shape larger than a node needs whole free nodes, so a node
    that is not wholly free is all loss to it. This is FGD's node fragmentation (Weng et al.,
    USENIX ATC'23, §4) for whole GPUs.

    >>> fragmentation(np.array([8, 7, 4, 3, 0]), 8, {1: 0.2, 4: 0.3, 8: 0.5})
    array([0. , 4.4, 2. , 2.4, 0. ])
    """
    free = np.asarray(free, dtype=np.float64)
    if not shapes:
        return np.zeros_like(free)
    s = np.array([max(int(k), 1) for k in shapes], dtype=np.float64)
    p = np.array(list(shapes.values()), dtype=np.float64)
    f = free[..., None]
    g = np.asarray(size, dtype=np.float64)[..., None]
    loss = np.where(s <= g, np.mod(f, s), np.where(f < g, f, 0.0))
    return loss @ p


@dataclass(frozen=True)
class Fgd:
    """Fragmentation gradient descent for whole GPUs on node → leaf → spine clusters.

    FGD (Weng et al., USENIX ATC'23) places each task where the cluster's expected unusable free
    capacity grows least, the expectation taken over the task shapes it expects to arrive. Here:

    * **Shapes** come from the jobs that arrived lately (the simulator's last ``shape_window``
      arrivals, and older ones still waiting), weighted by GPU-time: size × run time. Finished
      jobs would be a biased sample, since the longest jobs finish last: while a long 4-GPU job
      runs, no 4-GPU job may have finished, and its shape would weigh nothing however much of
      the work it is. A count weighting would give 95 % of Philly's weight to one-GPU jobs,
      which never fragment anything.
    * **Node fragmentation** is :func:`fragmentation`; a placement's change ``ΔF`` is the sum of
      the touched nodes' changes.
    * **Fragments last.** A fragment costs for as long as it stays. The job takes ``took`` GPUs
      of a node for its expected run time ``d``, while the node's running jobs end one by one
      (``releases``: when each ends and the GPUs it gives back there). Its cost on the node is
      ``∫₀^d F(free(t) − took) − F(free(t)) dt``. Filling the hole of a node that stays busy
      longer than the job removes fragments for ``d``; breaking a whole node for a long job
      costs ``F(G − n)·d``; taking a node whose other jobs end soon costs the fragments it
      leaves there once they have ended. So short jobs go where long jobs already hold a node,
      and nodes become whole again together (the note's ``T_hold``). Without ``releases`` every
      busy GPU of a node comes back at ``hold``, when its last job ends.
    * **One currency, GPU-seconds.** A candidate costs ``n·d·(slowdown − 1)`` (the job's own loss
      from a non-compact placement, through the job model; negative where spreading is faster,
      as on nodes with one NIC) plus ``weight`` times its fragment-seconds (``weight`` 1: a
      fragmented GPU-second is a GPU-second the expected shapes cannot use compactly), scaled
      by the demand the simulator sees (:class:`View.weight`: waiting GPUs plus those expected
      to arrive during the job, over the free GPUs, at most 1), since a fragment nobody would
      have used costs nothing.
    * **What a fragment costs under** ``any``. There a fragment is not lost: a job may run on it,
      scattered, at its slowdown. The simulator weighs each expected shape by the share of
      GPU-time its jobs lose on fragments (``1 − 1/s`` for the slowdown ``s`` of the job split
      over one node more than it needs; 0 for jobs that run as fast scattered, as on nodes with
      one NIC; 1 for a size not seen yet). Under ``compact`` a fragment is all loss to a shape
      that cannot use it compactly.
    * **Model margin.** A speed-up the job model predicts for a scattered placement is acted on
      only beyond ``margin`` (``SimConfig.model_margin``, 10 %: the model's median error in
      calibration is 3–14 % per application). In exploratory runs without it, gains within
      that error spread the largest, longest jobs over every node, and no node was whole for
      hours when a job that needs one arrived.
    * **Candidates**: every node with room (jobs of up to one node); whole nodes of each leaf,
      fewest whole nodes first, and across leaves, each with the best-fitting node for a
      remainder (larger jobs); and under ``any`` the holes-first and the round-robin split, and
      for a job larger than a node the fewest nodes without whole ones (the nodes with the most
      free GPUs, :func:`_fewest_nodes`: ``6 + 6`` for 12 GPUs on 8-GPU nodes is as compact as
      ``8 + 4``). Ties go to the fullest node, then to the fullest leaf, then the lower index, so
      whole nodes and whole leaves stay free.

    * **Waiting for locality** (``any`` admission). When the best candidate is scattered and
      costs the job ``d·(s − 1)`` seconds (slowdown ``s``), and a compact placement is expected
      sooner than that (``waited + wait(n) < d·(s − 1)``, the wait counted from the first time
      the job was held back), the job waits: the cluster saves ``n·d·(s − 1)`` GPU-seconds and
      the job finishes no later on the expected times. This is delay scheduling (Zaharia et al.,
      EuroSys'10) with the delay priced by the job model instead of a fixed timeout. The budget
      is spent once: a job waits at most its split's cost before it takes the split, so, as in
      ski rental, the time it loses to locality (waiting plus slowdown) is at most twice what
      the better of the two choices would have cost it in hindsight, however wrong the wait
      estimate. A split that costs the job time gives way to a compact placement that is free
      now, whatever fragments the split would have filled. The simulator keeps for a held job
      the node it waits on: ``backfill`` starts no later job there that would still run when
      the node is expected to have room (the wait counts only GPUs the job may take; those
      kept for another job do not).

    Under ``compact`` admission the simulator pairs the rule with a topology-aware reservation
    for ``backfill``: the head job reserves the GPUs this rule would give it, not a count
    (``SimConfig.reservation``).
    """

    def __call__(self, view: View, n: int) -> np.ndarray | None:
        c = view.cluster
        f = view.per_node
        size = view.size
        gmax = int(size.max())
        shapes = dict(view.shapes or {n: 1.0})
        tot = sum(shapes.values()) or 1.0
        shapes = {s: w / tot for s, w in shapes.items()}
        tables = view.tables or {
            int(g): fragmentation(np.arange(int(g) + 1), int(g), shapes) for g in np.unique(size)
        }

        hold = view.hold if view.hold is not None else np.ones(c.n_nodes)
        d = view.duration if view.duration is not None else 1.0
        if view.releases is not None:
            rel_t, rel_g = view.releases
        else:  # every busy GPU of a node comes back when its last job ends
            rel_t, rel_g = hold[:, None], (size - f)[:, None]

        def frag_seconds(nodes: np.ndarray, took: np.ndarray | int) -> np.ndarray:
            """Fragment-seconds the job adds to each of ``nodes`` by taking ``took`` GPUs there
            for ``d`` seconds: ∫₀^d F(free(t) − took) − F(free(t)) dt, ``free(t)`` growing as
            the node's running jobs end."""
            level = f[nodes, None] + np.concatenate(
                [np.zeros((len(nodes), 1)), np.cumsum(rel_g[nodes], axis=1)], axis=1
            )
            level = np.minimum(level, size[nodes, None]).astype(np.int64)
            edges = np.minimum(rel_t[nodes], d)
            begin = np.concatenate([np.zeros((len(nodes), 1)), edges], axis=1)
            end = np.concatenate([edges, np.full((len(nodes), 1), d)], axis=1)
            took = np.broadcast_to(np.asarray(took), (len(nodes),))[:, None]
            out = np.zeros(len(nodes))
            for g, table in tables.items():
                m = size[nodes] == g
                if m.any():
                    gain = table[level[m] - took[m]] - table[level[m]]
                    out[m] = np.sum(gain * (end[m] - begin[m]), axis=1)
            return out

        doms = _domains(view)
        leaf = doms[0] if doms else np.zeros(c.n_nodes, dtype=np.int64)
        leaf_free = np.bincount(leaf, weights=f)
        weight = view.weight  # the price of a fragmented GPU-second
        cands: list[tuple[float, float, float, np.ndarray]] = []

        def score(gpus: np.ndarray) -> tuple[float, float, float, np.ndarray]:
            nodes, took = np.unique(c.gpu_node[gpus], return_counts=True)
            delta = frag_seconds(nodes, took)
            s = view.slowdown(gpus) if view.slowdown is not None else 1.0
            # a speed-up within the job model's error is not acted on
            own = 0.0 if 1.0 - view.margin < s < 1.0 else n * d * (s - 1.0)
            return (own + weight * float(delta.sum()), float(f[nodes].sum()),
                    float(leaf_free[leaf[nodes]].sum()), gpus)  # fmt: skip

        if view.admission == "any" and n > 1:
            for split in (_best_fit(view, n), _spread(view, n)):
                if split is not None and not is_compact(c, split):
                    cands.append(score(split))
            if n > gmax:  # the fewest nodes, not all whole (whole ones are the next candidates)
                fewest = _fewest_nodes(view, n)
                if fewest is not None:
                    cands.append(score(fewest))
        if n <= gmax:
            ok = np.flatnonzero(f >= n)
            if len(ok):
                delta = weight * frag_seconds(ok, n)
                # ΔF·time, then fullest node, then fullest leaf, then index
                order = np.lexsort((ok, leaf_free[leaf[ok]], f[ok], np.round(delta, 6)))
                best = ok[order[0]]
                cands.append((float(delta[order[0]]), float(f[best]),
                              float(leaf_free[leaf[best]]), _gpus_of(view, [best], n)))  # fmt: skip
        else:
            for allowed in self._leaf_sets(view, n, leaf):
                gpus = _compact(view, n, lambda k: (f[k],), lambda k: (), allowed)
                if gpus is not None:
                    cands.append(score(gpus))
        if not cands:
            return None
        cands.sort(key=lambda t: (round(t[0], 6), t[1], t[2], int(t[3][0])))
        best = cands[0][3]
        if view.admission == "any" and view.wait is not None and view.slowdown is not None:
            loss = d * (view.slowdown(best) - 1.0)  # what this placement adds to the job's time
            wait = view.wait(n) if loss > 0 else math.inf
            if view.waited + wait < loss:
                compact = [t[3] for t in cands if is_compact(c, t[3])]
                if compact:  # a compact placement now: a fragment credit buys no sure slowdown
                    return compact[0]
                if wait > 0:  # a compact placement comes sooner than the split would cost
                    return None
        return best

    @staticmethod
    def _leaf_sets(view: View, n: int, leaf: np.ndarray) -> list[np.ndarray | None]:
        """Node masks to try for a multi-node job: each leaf with enough whole nodes (fewest
        whole nodes first, so whole leaves stay whole), then the whole cluster."""
        wholes = np.bincount(leaf, weights=np.where(view.whole, view.size, 0).astype(float))
        rest = np.bincount(leaf, weights=np.where(view.whole, 0, view.per_node).astype(float))
        room = wholes + rest.clip(max=view.size.max())
        fits = np.flatnonzero(room >= n)
        out: list[np.ndarray | None] = [leaf == d for d in fits[np.lexsort((fits, wholes[fits]))]]
        out.append(None)
        return out


_RULES: dict[str, Callable[[View, int], np.ndarray | None]] = {
    "first-fit": _first_fit,
    "best-fit": _best_fit,
    "kai-tas": _kai_tas,
    "slurm-tree": _slurm_tree,
    "whole-nodes": _whole_nodes,
    "spread": _spread,
    "random": _random,
    "fgd": Fgd(),
}


def canonical(name: str) -> str:
    """The rule a policy name stands for (``pack`` → ``first-fit``); unknown names unchanged."""
    return ALIASES.get(name, name)


def place(rule: str, view: View, n: int) -> np.ndarray | None:
    """GPUs (global indices) for a job of ``n`` GPUs under ``rule``, or ``None`` to wait.

    >>> from tsched import presets
    >>> c = presets.cluster("dgx-h100-4node")  # node 1 has GPUs 8 and 9 busy
    >>> free = ~c.busy_mask
    >>> view = View(c, free, np.bincount(c.gpu_node[free], minlength=c.n_nodes), "compact")
    >>> place("first-fit", view, 4).tolist()  # the first node with room
    [0, 1, 2, 3]
    >>> place("best-fit", view, 4).tolist()  # the fullest node that fits
    [10, 11, 12, 13]
    """
    try:
        fn = _RULES[canonical(rule)]
    except KeyError:
        raise InputError(f"unknown placement rule {rule!r}; valid: {', '.join(RULES)}") from None
    if view.admission not in ADMISSIONS:
        raise InputError(f"admission {view.admission!r}: expected one of {', '.join(ADMISSIONS)}")
    if n < 1 or n > int(view.per_node.sum()):
        return None
    gpus = fn(view, n)
    if gpus is None:
        return None
    if view.admission == "compact" and not admits_compact(view.cluster, gpus):
        return None
    return gpus


def expected_shapes(
    history: Mapping[int, float], queued: Mapping[int, int], mean_runtime: Mapping[int, float]
) -> dict[int, float]:
    """Shape weights by GPU-time: the GPU-seconds of recent jobs per size (the simulator's:
    recent arrivals and older jobs still waiting) plus, for ``queued`` counts given apart, the
    queued jobs' GPUs times their size's mean run time (the overall mean where a size has
    none)."""
    overall = (sum(mean_runtime.values()) / len(mean_runtime)) if mean_runtime else 1.0
    out = {s: float(v) for s, v in history.items() if v > 0}
    for s, k in queued.items():
        if k > 0:
            out[s] = out.get(s, 0.0) + k * s * mean_runtime.get(s, overall)
    if not out:
        return {}
    total = math.fsum(out.values())
    return {s: v / total for s, v in out.items()}
