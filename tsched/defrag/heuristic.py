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


def _replace(counts: Counts, free: np.ndarray, moved: list[int], admission: str,
             cascade: int = 8) -> dict[int, dict[int, int]] | None:  # fmt: skip
    """Re-place ``moved`` jobs (largest first) on ``free`` (modified): best fit, or, for a job
    of up to a node that finds no place, on the node where moving the cheapest other jobs makes
    room (they join the jobs to re-place; at most ``cascade`` of them). Returns each moved
    job's GPUs per node (cascaded ones included), or None."""
    out: dict[int, dict[int, int]] = {}
    gone = set(moved)
    queue = sorted(moved, key=lambda k: (-int(counts.jobs[k]), k))
    extra = 0
    gmax = int(counts.size.max())
    while queue:
        k = queue.pop(0)
        s = int(counts.jobs[k])
        got = place(s, free, counts.size, admission)
        if got is None:
            if s > gmax or extra >= cascade or admission != "compact":
                return None
            best: tuple[float, int, list[int]] | None = None
            for node in np.flatnonzero(counts.size >= s):
                need = s - int(free[node])
                jobs = [j for j in counts.on_node[node] if counts.movable[j] and j not in gone]
                cost, chosen = cover(jobs, [counts.held[j][node] for j in jobs],
                                     [float(counts.weight[j]) for j in jobs], need)  # fmt: skip
                if cost < INF and (best is None or cost < best[0]):
                    best = (cost, int(node), chosen)
            if best is None:
                return None
            _, node, chosen = best
            for j in chosen:
                gone.add(j)
                for there, c in counts.held[j].items():
                    free[there] += c
            extra += len(chosen)
            queue = sorted(queue + chosen, key=lambda j: (-int(counts.jobs[j]), j))
            got = {node: s}
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


def _moved_cost(counts: Counts, moved: dict[int, dict[int, int]]) -> float:
    return float(sum(counts.weight[k] for k in moved))


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
        if cost >= out.cost or (deadline is not None and time.perf_counter() > deadline):
            break  # no later candidate costs less than the best plan
        out.tried += 1
        moved = _try(counts, n, {node: n}, jobs, admission)
        if moved is not None and _moved_cost(counts, moved) < out.cost:
            out.target, out.moved, out.cost = {node: n}, moved, _moved_cost(counts, moved)


def _whole_sets(order: np.ndarray, size: np.ndarray, want: int, swaps: int = 6) -> list[list[int]]:
    """Whole nodes adding up to ``want`` GPUs taken in ``order``, and the same with one of them
    swapped for each of the next ``swaps`` nodes (none when the order cannot add up)."""
    out: list[list[int]] = []
    taken, left, stop = [], want, 0
    for stop, i in enumerate(order):  # noqa: B007 - the loop's end is used below
        if size[i] <= left:
            taken.append(int(i))
            left -= int(size[i])
        if left == 0:
            break
    if left or want == 0:
        return [[]] if want == 0 else []
    out.append(taken)
    for j in order[stop + 1 : stop + 1 + swaps]:
        for k in range(len(taken) - 1, -1, -1):
            if size[taken[k]] == size[j]:
                out.append(taken[:k] + taken[k + 1 :] + [int(j)])
                break
    return out


def _add(plans: list, seen: set, counts: Counts, target: dict[int, int], extra: list[int]) -> None:
    """A candidate plan: the waiting job's nodes and the jobs that move (those on its whole
    nodes and ``extra``), once."""
    key = tuple(sorted(target.items()))
    if key in seen:
        return
    seen.add(key)
    whole = [i for i, c in target.items() if c == counts.size[i]]
    plans.append((target, sorted({k for i in whole for k in counts.on_node[i]} | set(extra))))


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
    # plans: whole nodes in three orders (cheapest per GPU, fewest GPUs to re-place, cheapest),
    # each also with one of its nodes swapped for the next ones, then the remainder on the
    # partly used node with the cheapest cover, for the remainders the best bounds suggest
    held = size - free
    base = np.flatnonzero(clear)
    orders = [base[np.lexsort((base, full[base] / size[base]))],
              base[np.lexsort((base, full[base], held[base]))],
              base[np.lexsort((base, held[base], full[base]))]]  # fmt: skip
    remainders = sorted({t for _, t in sorted(partial)[:tries]} | {0})
    plans, seen = [], set()
    for r in remainders:
        for order in orders:
            for taken in _whole_sets(order, size, n - r):
                if r == 0:
                    _add(plans, seen, counts, {i: int(size[i]) for i in taken}, [])
                    continue
                cands = []
                for i in range(nodes):
                    if i in taken or size[i] - pinned[i] < r or r >= size[i]:
                        continue
                    c, jobs = _node_cover(counts, i, r - int(free[i]), share=False)
                    cands.append((c, int(held[i]), i, jobs))
                cands.sort()
                for _cost, _held, i, jobs in cands[:5]:
                    _add(plans, seen, counts, {**{j: int(size[j]) for j in taken}, i: r}, jobs)
    plans.sort(key=lambda p: (float(sum(counts.weight[k] for k in p[1])), sorted(p[0])))
    for target, moved in plans[:tries]:
        base = float(sum(counts.weight[k] for k in moved))
        if base >= out.cost or (deadline is not None and time.perf_counter() > deadline):
            break  # no later candidate costs less than the best plan
        out.tried += 1
        got = _try(counts, n, target, moved, admission)
        if got is not None and _moved_cost(counts, got) < out.cost:
            out.target, out.moved, out.cost = target, got, _moved_cost(counts, got)
