"""Consolidation in the cluster replay: when the job at the head of the queue does not fit, move
running jobs so that it does.

Two rules, each a pure function of the cluster's state (which GPUs are free, which running jobs
hold which GPUs, which of them may move):

``kai``
    KAI Scheduler's consolidation action as its documentation and source describe it
    (``docs/developer/action-framework.md``; ``pkg/scheduler/actions/consolidation`` in
    NVIDIA/KAI-Scheduler): candidate victims are the running jobs that may be preempted, in the
    victims-queue order (the reverse of scheduling priority: the latest submitted first), at
    most ``max_victims`` of them; scenarios accumulate victims one job at a time, and the first
    scenario in which the pending job fits and *every* victim is allocated again elsewhere is
    committed. It does not weigh what the moves cost. Allocation is KAI's default bin-packing
    (the fullest node with room first) under the replay's admission rule.
``tsched``
    A defragmentation plan (:func:`tsched.defrag.defrag`'s evict-and-re-place heuristic with its
    bound) for the head job: the moves that lose the fewest GPU-seconds to restarts, taken only
    when they cost less than the GPU-seconds the head job would otherwise wait (its GPUs × the
    seconds until room appears if nothing else starts).

A job inside its minimum-runtime protection, or one already moved ``max_moves`` times, never
moves (the caller says which may). Moved jobs keep their progress and pay the restart cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tsched.cluster import Cluster
from tsched.defrag.heuristic import bound_and_plan
from tsched.defrag.model import counts_from, place, realise

__all__ = ["CONSOLIDATE", "Running", "Consolidation", "kai_consolidate", "tsched_consolidate"]

CONSOLIDATE = ("none", "kai", "tsched")


@dataclass(frozen=True)
class Running:
    """A running job as consolidation sees it: its index in the replay, its GPUs, whether it may
    move, and its priority order for KAI's victims queue (higher: evicted first)."""

    index: int
    gpus: np.ndarray
    movable: bool
    victim_order: float = 0.0


@dataclass(frozen=True)
class Consolidation:
    """What to do: the head job's GPUs, each moved job's new GPUs, and the GPU-seconds lost."""

    target: np.ndarray
    moves: dict[int, np.ndarray]
    cost: float


def _plan(
    cluster: Cluster, free: np.ndarray, running: Sequence[Running], target: dict[int, int],
    moved: dict[int, dict[int, int]], cost: float,
) -> Consolidation:  # fmt: skip
    """A counts-level plan (``moved`` keyed by position in ``running``) as GPU indices
    (:func:`tsched.defrag.model.realise`), the moved jobs keyed by their replay index."""
    gpus, moves = realise(cluster, free, [r.gpus for r in running], target, moved)
    return Consolidation(np.array(gpus, dtype=np.int64),
                         {running[k].index: np.array(g, dtype=np.int64) for k, g in moves.items()},
                         cost)  # fmt: skip


def tsched_consolidate(
    cluster: Cluster,
    free: np.ndarray,
    running: Sequence[Running],
    need: int,
    admission: str,
    restart: float,
    worth: float,
) -> Consolidation | None:
    """The cheapest moves (the defragmentation heuristic) that let a job of ``need`` GPUs start
    now, if they cost less than ``worth`` GPU-seconds; None otherwise."""
    if admission != "compact" or int(free.sum()) < need:
        return None  # moving jobs frees no GPU
    counts = counts_from(cluster, free, [r.gpus for r in running],
                         [len(r.gpus) * restart for r in running],
                         [r.movable for r in running])  # fmt: skip
    found = bound_and_plan(counts, need, admission, tries=50)
    if found.target is None or found.cost >= worth or not found.moved:
        return None
    return _plan(cluster, free, running, found.target, found.moved, found.cost)


def kai_consolidate(
    cluster: Cluster,
    free: np.ndarray,
    running: Sequence[Running],
    need: int,
    admission: str,
    restart: float,
    max_victims: int = 16,
) -> Consolidation | None:
    """KAI's consolidation for a job of ``need`` GPUs (see the module's description); None when
    no scenario works."""
    if admission != "compact" or int(free.sum()) < need:
        return None
    size = cluster.gpus_per_node.astype(np.int64)
    per_node = np.bincount(cluster.gpu_node[free], minlength=len(size)).astype(np.int64)
    victims = sorted((r for r in running if r.movable), key=lambda r: (-r.victim_order, -r.index))
    victims = victims[:max_victims]
    taken: list[Running] = []
    freed = per_node.copy()  # free now, with the victims taken so far gone
    for victim in victims:
        taken.append(victim)
        freed += np.bincount(cluster.gpu_node[victim.gpus], minlength=len(size))
        room = freed.copy()
        target = place(need, room, size, admission)
        if target is None:
            continue
        for node, c in target.items():
            room[node] -= c
        moved: dict[int, dict[int, int]] = {}
        for r in taken:  # each victim allocated again, bin-packing, in the victims' order
            got = place(len(r.gpus), room, size, admission)
            if got is None:
                break
            for node, c in got.items():
                room[node] -= c
            moved[r.index] = got
        else:
            by_index = {r.index: k for k, r in enumerate(running)}
            cost = float(sum(len(r.gpus) * restart for r in taken))
            return _plan(cluster, free, running, target,
                         {by_index[i]: w for i, w in moved.items()}, cost)  # fmt: skip
    return None
