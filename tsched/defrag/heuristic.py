"""Evict and re-place: a fast plan and a lower bound for the defragmentation problem.

**Bound.** Whatever the plan, the waiting job's GPUs on each node it uses must be free after
the moves, so the jobs moved off that node hold at least the node's *deficit* (GPUs wanted
there less GPUs free). For a job that fits a node the bound is, over the nodes with room once
pinned GPUs are set aside, the cheapest set of jobs on the node whose GPUs cover the deficit (a
covering knapsack, solved exactly by dynamic programming: a node holds few jobs). For a larger
job, a job's weight is shared among its nodes by its GPUs there (a job moved pays its whole
weight once, at least the sum of its shares on the nodes cleared), and a dynamic programme over
nodes picks whole nodes (their jobs' shares) and at most one partly used node (its cheapest
cover) that add up to the job's size. Both are valid whatever the moved jobs' new places: moves
only add cost.

**Plan.** Candidates in order of that cost: clear the node (or nodes), reserve the waiting job's
GPUs, and re-place every moved job, largest first, best fit under the same admission rule on
what is free then. The first candidate whose moved jobs all find a place is kept; its cost is
the true weight of the jobs it moves, and when it meets the bound it is proved optimal.
"""

from __future__ import annotations

import time

import numpy as np

from tsched.defrag.model import Counts, place

__all__ = ["Heuristic", "cover", "bound_and_plan"]

INF = float("inf")


class Heuristic:
    """What :func:`bound_and_plan` found: the bound (``inf``: no set of moves can make room, with
    ``reason``), and the best plan (``target``: node → GPUs; ``moved``: job → node → GPUs;
    ``cost``) or none."""

    def __init__(self) -> None:
        self.bound = 0.0
        self.reason = ""
        self.target: dict[int, int] | None = None
        self.moved: dict[int, dict[int, int]] = {}
        self.cost = INF
        self.tried = 0


def cover(
    jobs: list[int], counts: list[int], weights: list[float], deficit: int
) -> tuple[float, list[int]]:
    """The cheapest subset of ``jobs`` whose ``counts`` add up to at least ``deficit``
    (weights ``weights``): (cost, chosen jobs); (inf, []) when even all of them fall short.

    >>> cover([7, 8, 9], [2, 1, 3], [20.0, 5.0, 40.0], 3)
    (25.0, [7, 8])
    """
    if deficit <= 0:
        return 0.0, []
    if sum(counts) < deficit:
        return INF, []
    best = np.full(deficit + 1, INF)
    best[0] = 0.0
    pick: list[list[int]] = [[] for _ in range(deficit + 1)]
    for j, c, w in zip(jobs, counts, weights, strict=True):
        new = best.copy()
        new_pick = list(pick)
        for have in range(deficit + 1):
            if best[have] == INF:
                continue
            to = min(deficit, have + c)
            if best[have] + w < new[to]:
                new[to] = best[have] + w
                new_pick[to] = pick[have] + [j]
        best, pick = new, new_pick
    return float(best[deficit]), pick[deficit]


def cover_table(counts: Counts, node: int, share: bool) -> np.ndarray:
    """Per deficit d = 0 … size, the cheapest weight of movable jobs on ``node`` holding at
    least d GPUs there (shared weights with ``share``); inf where they hold fewer."""
    d_max = int(counts.size[node])
    best = np.full(d_max + 1, INF)
    best[0] = 0.0
    for k in counts.on_node[node]:
        if not counts.movable[k]:
            continue
        c = counts.held[k][node]
        w = counts.weight[k] * (c / counts.jobs[k] if share else 1.0)
        new = best.copy()
        for have in np.flatnonzero(best < INF):
            to = min(d_max, int(have) + c)
            new[to] = min(new[to], best[have] + w)
        best = new
    return np.minimum.accumulate(best[::-1])[::-1]  # at least d: the cheapest of d … size


def _node_cover(counts: Counts, node: int, deficit: int, share: bool) -> tuple[float, list[int]]:
    jobs = [k for k in counts.on_node[node] if counts.movable[k]]
    c = [counts.held[k][node] for k in jobs]
    if share:
        w = [float(counts.weight[k] * counts.held[k][node] / counts.jobs[k]) for k in jobs]
    else:
        w = [float(counts.weight[k]) for k in jobs]
    return cover(jobs, c, w, deficit)


def _replace(counts: Counts, free: np.ndarray, moved: list[int], admission: str):
    """Re-place ``moved`` jobs (largest first) on ``free`` (modified); None if one finds no
    place."""
    out: dict[int, dict[int, int]] = {}
    for k in sorted(moved, key=lambda k: (-int(counts.jobs[k]), k)):
        got = place(int(counts.jobs[k]), free, counts.size, admission)
        if got is None:
            return None
        for node, c in got.items():
            free[node] -= c
        out[k] = got
    return out


def _try(counts: Counts, n: int, target: dict[int, int], moved: list[int], admission: str):
    free = counts.free(set(moved))
    for node, c in target.items():
        free[node] -= c
    if (free < 0).any():
        return None
    return _replace(counts, free, moved, admission)


def bound_and_plan(
    counts: Counts, n: int, admission: str, *, deadline: float | None = None, tries: int = 200
) -> Heuristic:
    """The bound and the best evict-and-re-place plan for a waiting job of ``n`` GPUs."""
    out = Heuristic()
    free = counts.free()
    size, pinned = counts.size, counts.pinned()
    now = place(n, free, size, admission)
    if now is not None:  # room already: no move, optimal
        out.target, out.cost, out.bound = now, 0.0, 0.0
        return out
    if admission == "any" or int(free.sum()) < n:
        out.bound = INF
        out.reason = (f"{n} GPUs wanted, {int(free.sum())} free in all: moving running jobs "
                      "frees no GPU" + (", and admission 'any' takes any free ones"
                                        if admission == "any" else ""))  # fmt: skip
        return out
    gmax = int(size.max())
    if n <= gmax:
        _single(counts, n, admission, free, pinned, out, deadline, tries)
    else:
        _multi(counts, n, admission, free, pinned, out, deadline, tries)
    return out


def _single(counts, n, admission, free, pinned, out, deadline, tries) -> None:
    options = []
    for node in range(len(counts.size)):
        if counts.size[node] - pinned[node] < n:
            continue
        cost, jobs = _node_cover(counts, node, n - int(free[node]), share=False)
        options.append((cost, node, jobs))
    if not options:
        out.bound = INF
        most = int((counts.size - pinned).max())
        out.reason = (f"no node can hold {n} GPUs once busy GPUs and jobs that may not move are "
                      f"set aside (the most on one node is {most})")  # fmt: skip
        return
    options.sort(key=lambda o: (o[0], o[1]))
    out.bound = options[0][0]
    for cost, node, jobs in options[:tries]:
        if deadline is not None and time.perf_counter() > deadline:
            break
        out.tried += 1
        moved = _try(counts, n, {node: n}, jobs, admission)
        if moved is not None:
            out.target, out.moved, out.cost = {node: n}, moved, cost
            return


def _multi(counts, n, admission, free, pinned, out, deadline, tries) -> None:
    size = counts.size
    nodes = len(size)
    clear = np.array([all(counts.movable[k] for k in counts.on_node[i]) and counts.busy[i] == 0
                      for i in range(nodes)])  # fmt: skip
    share = np.zeros(nodes)
    full = np.zeros(nodes)
    for i in range(nodes):
        for k in counts.on_node[i]:
            share[i] += counts.weight[k] * counts.held[k][i] / counts.jobs[k]
            full[i] += counts.weight[k]
    # bound: whole nodes by shares (a knapsack over GPUs, exactly n), or n − t of them and one
    # node partly (t GPUs, its cheapest shared cover)
    dp = np.full(n + 1, INF)
    dp[0] = 0.0
    for i in np.flatnonzero(clear):
        g = int(size[i])
        if g <= n:
            dp[g:] = np.minimum(dp[g:], dp[: n + 1 - g] + share[i])
    best = dp[n]
    partial: list[tuple[float, int]] = []  # (bound with it, remainder t)
    for i in range(nodes):
        room = int(size[i] - pinned[i])
        top = min(int(size[i]) - 1, room, n - 1)
        if top < 1:
            continue
        table = cover_table(counts, i, share=True)
        t = np.arange(1, top + 1)
        with_it = table[np.maximum(0, t - int(free[i]))] + dp[n - t]
        if with_it.min() < best:
            best = float(with_it.min())
        partial += [(float(v), int(r)) for v, r in zip(with_it, t, strict=True) if v < INF]
    if best == INF:
        out.bound = INF
        out.reason = (f"{n} GPUs need whole nodes that hold no busy GPU and no job that may not "
                      f"move; {int(size[clear].sum())} GPUs are on such nodes")  # fmt: skip
        return
    out.bound = float(best)
    # plans: whole nodes cheapest per GPU first (true weights), then the remainder on the
    # partly used node with the cheapest cover, for the remainders the best bounds suggest
    order = np.flatnonzero(clear)
    order = order[np.lexsort((order, full[order] / size[order]))]
    remainders = sorted({t for _, t in sorted(partial)[:tries]} | {0})
    plans = []
    for r in remainders:
        taken, left = [], n - r
        for i in order:
            if size[i] <= left:
                taken.append(int(i))
                left -= int(size[i])
            if left == 0:
                break
        if left:
            continue
        if r == 0:
            plans.append(
                (
                    {i: int(size[i]) for i in taken},
                    sorted({k for i in taken for k in counts.on_node[i]}),
                )
            )
            continue
        cands = []
        for i in range(nodes):
            if i in taken or size[i] - pinned[i] < r or r >= size[i]:
                continue
            c, jobs = _node_cover(counts, i, r - int(free[i]), share=False)
            cands.append((c, i, jobs))
        cands.sort()
        for _cost, i, jobs in cands[:5]:
            target = {**{j: int(size[j]) for j in taken}, i: r}
            moved = sorted({k for j in taken for k in counts.on_node[j]} | set(jobs))
            plans.append((target, moved))
    plans.sort(key=lambda p: (float(sum(counts.weight[k] for k in p[1])), sorted(p[0])))
    for target, moved in plans[:tries]:
        if deadline is not None and time.perf_counter() > deadline:
            break
        out.tried += 1
        got = _try(counts, n, target, moved, admission)
        if got is not None:
            out.target, out.moved = target, got
            out.cost = float(sum(counts.weight[k] for k in moved))
            return
