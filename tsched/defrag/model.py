"""The defragmentation problem at the level that decides it: GPUs per node.

Within a node GPUs are interchangeable for admission, so a state is, per node, its size, the GPUs
the model marks busy and, per running job, how many GPUs it holds there. A plan is the set of
jobs that move, how many GPUs each gets on which node afterwards, and how many the waiting job
gets; :func:`realise` turns it into GPU indices.

Admission (``compact``, exactly as the simulator admits, :func:`tsched.compare.placement
.admits_compact`): a job of up to the largest node's size on one node; a larger one on whole
nodes and at most one node partly. ``any``: any free GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tsched.cluster import Cluster
from tsched.errors import InputError
from tsched.formats.running_csv import RunningState

__all__ = ["ADMISSIONS", "Counts", "counts_of", "admissible", "place", "realise"]

ADMISSIONS = ("compact", "any")


@dataclass
class Counts:
    """A running state by counts: node sizes, GPUs busy in the model, and per job its GPUs on
    each node (``held[k]``: node → count), its size, weight (GPU-seconds if moved) and whether
    it may move."""

    size: np.ndarray  # (nodes,) GPUs per node
    busy: np.ndarray  # (nodes,) GPUs the model marks busy
    held: list[dict[int, int]]
    jobs: np.ndarray  # (jobs,) GPUs per job
    weight: np.ndarray  # (jobs,) GPU-seconds lost if the job moves
    movable: np.ndarray  # (jobs,) bool
    on_node: list[list[int]] = field(default_factory=list)  # node → jobs holding GPUs there

    def __post_init__(self) -> None:
        self.on_node = [[] for _ in range(len(self.size))]
        for k, where in enumerate(self.held):
            for n in where:
                self.on_node[n].append(k)

    def free(self, moved: set[int] | frozenset[int] = frozenset()) -> np.ndarray:
        """Free GPUs per node once the jobs ``moved`` have left."""
        out = self.size - self.busy
        for k, where in enumerate(self.held):
            if k not in moved:
                for n, c in where.items():
                    out[n] -= c
        return out

    def pinned(self) -> np.ndarray:
        """GPUs per node that cannot be freed: busy in the model or held by a job that may not
        move."""
        out = self.busy.copy()
        for k, where in enumerate(self.held):
            if not self.movable[k]:
                for n, c in where.items():
                    out[n] += c
        return out


def counts_of(state: RunningState) -> Counts:
    """The counts of a running-jobs state (:func:`counts_from` on its free GPUs)."""
    return counts_from(state.cluster, state.free_mask(), [list(j.gpus) for j in state.jobs],
                       [j.weight for j in state.jobs], [j.movable for j in state.jobs])  # fmt: skip


def counts_from(
    cluster: Cluster,
    free: np.ndarray,
    job_gpus: Sequence[Sequence[int]],
    weight: Sequence[float],
    movable: Sequence[bool],
) -> Counts:
    """The model's view by GPUs per node: ``free`` (a mask over the cluster's GPUs) is what no
    job holds; each running job holds ``job_gpus[k]`` and costs ``weight[k]`` to move; a GPU
    neither free nor held by a listed job is busy."""
    size = cluster.gpus_per_node.astype(np.int64)
    held = []
    taken = np.zeros(len(size), dtype=np.int64)
    for gpus in job_gpus:
        nodes, c = np.unique(cluster.gpu_node[np.asarray(gpus, dtype=np.int64)],
                             return_counts=True)  # fmt: skip
        held.append({int(n): int(x) for n, x in zip(nodes, c, strict=True)})
        taken[nodes] += c
    busy = size - np.bincount(cluster.gpu_node[free], minlength=len(size)) - taken
    return Counts(
        size=size,
        busy=busy.astype(np.int64),
        held=held,
        jobs=np.array([len(g) for g in job_gpus], dtype=np.int64),
        weight=np.array(weight, dtype=float),
        movable=np.array(movable, dtype=bool),
    )


def admissible(take: dict[int, int], n: int, size: np.ndarray, admission: str) -> bool:
    """Whether ``take`` (node → GPUs) is a placement of ``n`` GPUs the admission accepts."""
    if sum(take.values()) != n or any(c <= 0 for c in take.values()):
        return False
    if admission == "any":
        return True
    if n <= int(size.max()):
        return len(take) == 1
    return sum(1 for node, c in take.items() if c < size[node]) <= 1


def place(n: int, free: np.ndarray, size: np.ndarray, admission: str) -> dict[int, int] | None:
    """A placement of ``n`` GPUs on ``free`` (per node) that the admission accepts, best fit
    (the fullest node with room; whole free nodes, largest first, then the fullest node with
    room for the remainder), or None."""
    if admission not in ADMISSIONS:
        raise InputError(f"admission: expected one of {', '.join(ADMISSIONS)}, got {admission!r}")
    if admission == "any":
        if int(free.sum()) < n:
            return None
        take: dict[int, int] = {}
        left = n
        for node in np.lexsort((np.arange(len(free)), -free)):  # most free first
            if left == 0 or free[node] <= 0:
                break
            c = int(min(free[node], left))
            take[int(node)] = c
            left -= c
        return take
    if n <= int(size.max()):
        cand = np.flatnonzero(free >= n)
        if not len(cand):
            return None
        best = cand[np.lexsort((cand, free[cand]))[0]]
        return {int(best): n}
    whole = np.flatnonzero(free == size)
    whole = whole[np.lexsort((whole, -size[whole]))]
    take, left = {}, n
    for node in whole:
        if size[node] <= left:
            take[int(node)] = int(size[node])
            left -= int(size[node])
        if left == 0:
            return take
    rest = np.array([x for x in np.flatnonzero(free >= left) if int(x) not in take], dtype=int)
    if not len(rest):
        return None
    best = rest[np.lexsort((rest, free[rest]))[0]]
    take[int(best)] = left
    return take


def realise(
    cluster: Cluster,
    free: np.ndarray,
    job_gpus: Sequence[Sequence[int]],
    target: dict[int, int],
    moved: dict[int, dict[int, int]],
) -> tuple[list[int], dict[int, list[int]]]:
    """GPU indices for a counts-level plan: the waiting job's (``target``: node → GPUs) and each
    moved job's new GPUs (``moved``: job → node → GPUs, the job by its position in
    ``job_gpus``), taken from the GPUs free (``free``, a mask) once the moved jobs have left,
    lowest index first, the waiting job first."""
    pool_mask = free.copy()
    for k in moved:
        pool_mask[np.asarray(job_gpus[k], dtype=np.int64)] = True
    pool = {}
    for n in set(target) | {m for w in moved.values() for m in w}:
        lo, hi = int(cluster.node_offset[n]), int(cluster.node_offset[n + 1])
        pool[int(n)] = [g for g in range(lo, hi) if pool_mask[g]]

    def take(node: int, c: int) -> list[int]:
        got, pool[node] = pool[node][:c], pool[node][c:]
        if len(got) < c:
            raise AssertionError(f"node {node}: {c} GPUs asked, {len(got)} free")
        return got

    gpus = [g for node, c in sorted(target.items()) for g in take(node, c)]
    moves = {k: [g for node, c in sorted(w.items()) for g in take(node, c)]
             for k, w in sorted(moved.items())}  # fmt: skip
    return gpus, moves
