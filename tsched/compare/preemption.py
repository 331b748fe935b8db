"""Taking GPUs from running jobs in the replay: fair share's preemption and consolidation.

Fair share preempts jobs of tenants above their share, past their protected time, for a waiting
job of a tenant below its share (:meth:`Preemption.preempt_pass`); which victims is
:func:`victim_sets`, a pure function of the cluster's state. Consolidation moves running jobs
so that the head of the queue fits (:meth:`Preemption.consolidate`; the rules are in
:mod:`tsched.compare.consolidation`). A preempted or moved job keeps its progress.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from tsched.compare.consolidation import Running, kai_consolidate, tsched_consolidate

__all__ = ["Preemption", "victim_sets"]


def victim_sets(
    victims: Sequence[int],
    need: int,
    per_node: np.ndarray,
    node_counts: Mapping[int, Sequence[tuple[int, int]]],
    on_node: Sequence[Mapping[int, object]],
    node_gpus: np.ndarray,
    whole_only: bool,
) -> Iterator[list[int]]:
    """Sets of victims to try for a job of ``need`` GPUs, in order: the fairness order's
    prefix that frees ``need`` GPUs; then, where a job must sit compactly (``whole_only``), the
    cheapest (fewest GPUs preempted) set that leaves one node with ``need`` free GPUs, or that
    clears whole nodes (together with those already whole) of ``need`` GPUs.

    ``victims`` are in fairness order; ``per_node`` the free GPUs of each node;
    ``node_counts[r]`` the ``(node, GPUs)`` job ``r`` holds; ``on_node[n]`` the running jobs
    on node ``n`` (victims or not); ``node_gpus`` each node's GPUs.

    >>> import numpy as np
    >>> counts = {1: [(0, 2)], 2: [(0, 2)], 3: [(1, 4)]}
    >>> on = [{1: 0, 2: 0}, {3: 0}]
    >>> sizes = np.array([4, 4])
    >>> [s for s in victim_sets([1, 3, 2], 4, np.array([0, 0]), counts, on, sizes, True)]
    [[1, 3], [1, 2], [3]]
    """
    cost = {r: sum(c for _n, c in node_counts[r]) for r in victims}
    freed, prefix = int(per_node.sum()), []
    for r in victims:
        if freed >= need:
            break
        prefix.append(r)
        freed += cost[r]
    yield prefix
    if not whole_only:
        return
    gmax = int(node_gpus.max())
    order = {r: i for i, r in enumerate(victims)}
    on = defaultdict(list)  # per node its victims, in fairness order, and their GPUs there
    for r in victims:
        for node, count in node_counts[r]:
            on[node].append((r, count))
    options = []
    if need <= gmax:  # one node: victims there in fairness order until it has room
        for node, here in on.items():
            if node_gpus[node] < need or per_node[node] >= need:
                continue
            room, picked = int(per_node[node]), []
            for r, count in here:
                picked.append(r)
                room += count
                if room >= need:
                    options.append((sum(cost[v] for v in picked), node, picked))
                    break
    else:  # whole nodes: clear the nodes whose every job is a victim, cheapest first
        got = int(node_gpus[per_node == node_gpus].sum())  # the whole free nodes
        clearable = [(sum(cost[r] for r in on_node[node]), node, list(on_node[node]))
                     for node in on if all(r in order for r in on_node[node])]  # fmt: skip
        cleared: set[int] = set()
        for _c, node, jobs_here in sorted(clearable):
            if got >= need:
                break
            cleared.update(jobs_here)
            got += int(node_gpus[node])
        if got >= need and cleared:
            options.append((sum(cost[r] for r in cleared), -1,
                            sorted(cleared, key=order.__getitem__)))  # fmt: skip
    for _c, _node, picked in sorted(options, key=lambda o: (o[0], o[1])):
        if picked != prefix:
            yield picked


class Preemption:
    """Fair share's preemption and consolidation, as parts of a :class:`Simulation`."""

    def preempt_pass(self, now: float) -> None:
        """Fair share's preemption: while a tenant below its share has a waiting job that
        preempting jobs of tenants above theirs would start, start it (the furthest below its
        share first; its jobs in arrival order, one of each size, as the same size frees the
        same room). The rounds are bounded by the jobs there are."""
        state, config = self.state, self.config
        for _round in range(len(self.queue) + len(self.running)):
            ratio = self.tenant_ratios(now)
            needy = sorted((t for t in self.queue.groups if ratio.get(t, 0.0) < 1.0),
                           key=lambda t: (ratio[t], t))  # fmt: skip
            victims = sorted(
                (
                    r
                    for r in self.running
                    if ratio.get(state[r].trace.tenant, 0.0) > 1.0
                    # protected until it has computed min_runtime, its restart not counted;
                    # never the instant it started (no two jobs swapping within one pass)
                    and now - state[r].started >= state[r].overhead + config.min_runtime
                    and state[r].started < now
                ),
                key=lambda r: (-ratio[state[r].trace.tenant], -state[r].started, r),
            )
            if not needy or not victims:
                return
            room = int(self.free.sum()) + sum(len(state[r].gpus) for r in victims)
            if not any(self._preempt_for_tenant(t, now, victims, room) for t in needy):
                return

    def _preempt_for_tenant(
        self, tenant: str, now: float, victims: list[int], room: int
    ) -> bool:
        """Whether a preemption starts one of ``tenant``'s waiting jobs (one of each size, up
        to ``room``: the GPUs free and the victims' together)."""
        depth = self.config.scan_depth
        waiting = sorted(item for jobs in self.queue.groups[tenant].values()
                         for item in jobs[:depth])  # fmt: skip
        tried: set[int] = set()
        for _submit, k in waiting[:depth]:
            size = self.state[k].trace.gpus
            if size <= room and size not in tried:
                if self._preempt_for(k, now, victims):
                    return True
                tried.add(size)
        return False

    def _preempt_for(self, k: int, now: float, victims: list[int]) -> bool:
        """Preempt some of ``victims`` (running jobs of tenants above their share, past their
        protected time, in fairness order: furthest above share, then the latest started) for
        job ``k``, only where the GPUs they free give ``k`` a placement its policy and
        admission regime take. The fairness order's prefix that frees enough GPUs comes
        first; where that leaves no such placement (under compact admission: freed GPUs on
        other nodes than the job needs), the fewest victims' GPUs that clear room on one
        node, or whole nodes, instead (:func:`victim_sets`). Where none does, nobody is
        preempted. ``k`` starts on the freed room and the jobs behind it may take what is left
        in the same pass. Returns whether ``k`` started."""
        state, free = self.state, self.free
        j = state[k]
        per_node = np.bincount(self.cluster.gpu_node[free], minlength=self.cluster.n_nodes)
        counts = {r: state[r].node_counts for r in victims}
        sets = victim_sets(victims, j.trace.gpus, per_node, counts, self.releases.on_node,
                           self.node_gpus, self.whole_only)  # fmt: skip
        for chosen in sets:
            mask = free.copy()
            for r in chosen:
                mask[state[r].gpus] = True
            placed = self.placer.place(j.trace, mask)
            if placed is not None:
                break
        else:
            return False
        for r in chosen:
            self.preempt(state[r], now)
        self.start(j, placed[0], placed[1], now)
        self.queue.remove(k)
        self.fair_pass(now)
        return True

    def consolidate(self, now: float) -> None:
        """When the head of the queue does not fit: move running jobs so that it does (the
        configured rule, :mod:`tsched.compare.consolidation`) and start it."""
        config, state, free, placer = self.config, self.state, self.free, self.placer
        if config.consolidate == "kai" and placer.rule == "spread":
            return  # KAI disables consolidation under the spread strategy
        k = self.queue.head()
        head = state[k]
        need = head.trace.gpus
        if int(free.sum()) < need:
            return  # moving jobs frees no GPU
        held = [Running(r, state[r].gpus, state[r].migrations < config.max_moves
                        and not self.protected(state[r], now), state[r].trace.submit)
                for r in sorted(self.running)]  # fmt: skip
        # look again when the next protection ends (as KAI's periodic cycle would), if no
        # event comes sooner
        ends = [state[r.index].started + state[r.index].overhead + config.min_runtime
                for r in held if not r.movable and state[r.index].migrations < config.max_moves]
        soon = min((t for t in ends if t > now), default=math.inf)
        if soon < math.inf and not self.wake_at > now:
            self.wake_at = soon
            self.seq += 1
            heapq.heappush(self.events, (soon, self.seq, -1, 0))
        if not any(r.movable for r in held):
            return
        if config.consolidate == "kai":
            plan = kai_consolidate(self.cluster, free, held, need, config.admission,
                                   config.restart_cost, config.kai_victims)  # fmt: skip
        else:
            worth = need * self.compact_wait(need, free)  # GPU-seconds the head would wait
            plan = tsched_consolidate(self.cluster, free, held, need, config.admission,
                                      config.restart_cost, worth)  # fmt: skip
        if plan is None:
            return
        for r in plan.moves:
            self.halt(state[r], now)
        for r, gpus in plan.moves.items():
            state[r].migrations += 1
            self.start(state[r], gpus, placer.ring_objective(state[r].trace, gpus), now)
        self.start(head, plan.target, placer.ring_objective(head.trace, plan.target), now)
        self.queue.remove(k)
