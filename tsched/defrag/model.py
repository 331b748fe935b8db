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

from dataclasses import dataclass, field

import numpy as np

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
    cl = state.cluster
    size = cl.gpus_per_node.astype(np.int64)
    busy = np.bincount(cl.gpu_node[~cl.free_mask()], minlength=len(size)).astype(np.int64)
    held = []
    for job in state.jobs:
        nodes, c = np.unique(cl.gpu_node[list(job.gpus)], return_counts=True)
        held.append({int(n): int(x) for n, x in zip(nodes, c, strict=True)})
    return Counts(
        size=size,
        busy=busy,
        held=held,
        jobs=np.array([len(j.gpus) for j in state.jobs], dtype=np.int64),
        weight=np.array([j.weight for j in state.jobs], dtype=float),
        movable=np.array([j.movable for j in state.jobs], dtype=bool),
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
    state: RunningState, counts: Counts, target: dict[int, int], moved: dict[int, dict[int, int]]
) -> tuple[list[int], dict[int, list[int]]]:
    """GPU indices for a counts-level plan: the waiting job's (``target``: node → GPUs) and each
    moved job's new GPUs (``moved``: job → node → GPUs), taken from the GPUs free once the moved
    jobs have left, lowest index first, the waiting job first."""
    cl = state.cluster
    owner = state.held()
    free = cl.free_mask() & (owner < 0)
    for k in moved:
        free[list(state.jobs[k].gpus)] = True
    pool = {int(n): list(range(int(cl.node_offset[n]), int(cl.node_offset[n + 1])))
            for n in set(target) | {m for w in moved.values() for m in w}}  # fmt: skip
    for node, gpus in pool.items():
        pool[node] = [g for g in gpus if free[g]]

    def take(node: int, c: int) -> list[int]:
        got, pool[node] = pool[node][:c], pool[node][c:]
        if len(got) < c:
            raise AssertionError(f"node {node}: {c} GPUs asked, {len(got)} free")
        return got

    gpus = [g for node, c in sorted(target.items()) for g in take(node, c)]
    moves = {k: [g for node, c in sorted(w.items()) for g in take(node, c)]
             for k, w in sorted(moved.items())}  # fmt: skip
    return gpus, moves
