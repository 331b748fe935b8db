"""Queue disciplines of the replay beyond arrival order: fair share and backfilling.

Fair share (:class:`FairShare`) starts jobs from the tenant, then the project, furthest below
its share of the GPU-seconds used in a sliding window. Backfilling (:class:`Backfill`) lets jobs
behind a blocked head start now where they keep off its reservation: EASY with a count of GPUs,
EASY with a reservation that names GPUs (``topology``), and relaxed backfilling (``slack``),
where the head's start may slip by a share of its run time. Both are parts of a
:class:`tsched.compare.simulator.Simulation` and read its state.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from tsched.compare import sim_state
from tsched.compare.sim_state import SimJob

__all__ = ["Backfill", "FairShare"]


class FairShare:
    """Fair share with GPU-time budgets, as a part of a :class:`Simulation`."""

    def shares(self, now: float) -> dict[str, float]:
        """Budget share of each tenant with work (running or queued)."""
        active = set(self.queue.groups) | set(self.running_tenants)
        total = sum(self.budgets.get(t, 1.0) for t in active)
        return {t: self.budgets.get(t, 1.0) / total for t in active}

    def occupancy(self, key: str, now: float) -> float:
        """GPUs held by ``key``: the mean of its sliding-window average and what it holds now,
        so a tenant's standing reflects its recent past and reacts to each start."""
        past = self.usage.window(key, now, self.config.window) / self.config.window
        return 0.5 * (past + self.usage.rate.get(key, 0.0))

    def tenant_ratios(self, now: float) -> dict[str, float]:
        return {t: self.occupancy(t, now) / (s * self.usable) for t, s in self.shares(now).items()}

    def fair_pass(self, now: float) -> None:
        """Start jobs one at a time from the tenant (then project) furthest below its share."""
        sh = self.shares(now)
        tenants = set(self.queue.groups)
        depth = self.config.scan_depth
        while tenants and self.free.any():
            n_free = int(self.free.sum())
            tenant = min(tenants, key=lambda t: (self.occupancy(t, now) / sh[t], t))
            projects = self.queue.groups[tenant]
            placed = False
            for proj in sorted(
                projects, key=lambda p: (self.occupancy(p, now) / self.budgets.get(p, 1.0), p)
            ):
                for _submit, k in projects[proj][:depth]:
                    if self.state[k].trace.gpus <= n_free and self.try_start(k, now):
                        self.queue.remove(k)
                        placed = True
                        break
                if placed:
                    break
            if not placed or tenant not in self.queue.groups:
                tenants.discard(tenant)

class Backfill:
    """EASY and relaxed backfilling, as a part of a :class:`Simulation`."""

    def locality_locks(self, now: float) -> dict[int, tuple[int, float]]:
        """Nodes kept for the jobs fgd holds back for locality (``any`` admission): in queue
        order, each held job of up to a node keeps the node where room for it is expected
        soonest (a node no earlier held job keeps), until that time. ``backfill`` starts no
        other job there that would still run then, so the wait the job was held on is not
        taken from it by jobs behind it. Returns ``{node: (job index, until)}``."""
        locks: dict[int, tuple[int, float]] = {}
        if self.placer.wait is None or not self.placer.deferred:
            return locks
        held = sorted(self.queue.keys[k] for k in self.placer.deferred if k in self.queue.keys)
        for key in held:
            k = int(key[-1])
            if bisect.bisect_left(self.queue.items, key) > self.config.scan_depth:
                break
            if self.state[k].trace.gpus <= self.gmax:
                got = self.room_soonest(self.state[k].trace.gpus, set(locks))
                if got is not None and got[0] > 0:
                    locks[got[1]] = (k, now + got[0])
        return locks

    def relaxed(self, head: SimJob, shadow: float) -> float:
        """The time by which backfilled jobs must end to keep off the head's reservation: its
        shadow time, or with ``slack`` the first shadow time it had as head plus ``slack`` ×
        its run time (relaxed backfilling: the head's start slips by at most that)."""
        if self.config.slack <= 0 or shadow == math.inf:
            return shadow
        k = head.index
        if k not in self.deadlines:
            self.deadlines[k] = shadow + self.config.slack * head.trace.duration
        return max(shadow, self.deadlines[k])

    def backfill(self, now: float) -> None:
        """EASY: later jobs start now if they end before the head's reservation or leave it
        enough GPUs."""
        head = self.state[self.queue.head()]
        n_free = int(self.free.sum())
        if self.config.reserves == "topology":
            self.backfill_topology(now, head, n_free)
            return
        avail, shadow = n_free, math.inf
        for end, ending in itertools.groupby(self.by_end, key=operator.itemgetter(0)):
            for g in sorted(len(self.state[r].gpus) for _end, r in ending):  # smallest first
                avail += g
                if avail >= head.trace.gpus:
                    shadow = end
                    break
            if shadow < math.inf:
                break
        extra = [avail - head.trace.gpus]
        locks = self.locality_locks(now)
        shadow = self.relaxed(head, shadow)

        def admit(k: int, need: int, est: float) -> np.ndarray | None:
            ok = self.free if now + est <= shadow or need <= extra[0] else None
            if ok is None or not locks:
                return ok
            kept = [node for node, (owner, until) in locks.items()
                    if owner != k and now + est > until]  # fmt: skip
            return ok & ~np.isin(self.cluster.gpu_node, kept) if kept else ok

        def started(k: int, need: int, est: float) -> None:
            if now + est > shadow:
                extra[0] -= need

        self.backfill_pass(now, n_free, admit, started)

    def backfill_pass(
        self,
        now: float,
        n_free: int,
        admit: Callable[[int, int, float], np.ndarray | None],
        started: Callable[[int, int, float], None] | None = None,
        fallback: Callable[[int, int, float], np.ndarray | None] | None = None,
    ) -> None:
        """Tries the waiting jobs behind the head in order: ``admit(job, gpus, estimated run
        time)`` gives the free GPUs a job may take (``None``: it may not start now), and
        ``fallback`` (same arguments), when the job does not start there, other GPUs it may
        take. ``started`` hears of each job started."""
        from tsched.compare.placement import compact_limits

        # where the placer refuses every job no compact placement is free for, the largest
        # jobs the free GPUs hold compactly, until the next start (a deep queue tries many)
        screens = self.placer.screens
        limits: tuple[int, int] | None = None
        for k in [item[-1] for item in self.queue.items[1 : 1 + self.config.scan_depth]]:
            if n_free == 0:
                break
            j = self.state[k]
            need = j.trace.gpus
            if need > n_free:
                continue
            est = j.remaining * j.trace.duration
            ok = False
            for choose in (admit, fallback):
                mask = choose(k, need, est) if choose is not None else None
                if mask is None:
                    continue
                if screens:  # every mask is part of ``free``: no room there, none in it
                    if limits is None:
                        per_node = np.bincount(self.cluster.gpu_node[self.free],
                                               minlength=self.cluster.n_nodes)  # fmt: skip
                        limits = compact_limits(per_node, self.node_gpus)
                    if limits[0 if need <= self.gmax else 1] < need:
                        continue  # the placer would refuse it
                if need <= int(mask.sum()) and self.try_start(k, now, mask):
                    ok = True
                    break
            if ok:
                limits = None
                self.queue.remove(k)
                n_free -= need
                if started:
                    started(k, need, est)

    def earliest_fit(self, need: int, n_free: int, per_node: np.ndarray,
                     one_node: bool, whole_nodes: bool) -> float:  # fmt: skip
        """The earliest end of a running job by which, if nothing else starts, ``need`` GPUs are
        free (``per_node`` free now), on one node if ``one_node``, and on whole nodes but one if
        ``whole_nodes``: a lower bound on when a job of ``need`` GPUs can start there (``-inf``:
        now; ``inf``: never)."""
        t = -math.inf
        if n_free < need:  # by count: the (need − n_free)-th GPU to come free
            ends = self.gpu_end[self.gpu_end < math.inf]
            k = need - n_free - 1
            t = float(np.partition(ends, k)[k]) if k < len(ends) else math.inf
        if one_node:
            t = max(t, float(self.releases.room_times(need, per_node).min()))
        if whole_nodes:
            final = per_node + self.releases.gpus.sum(axis=1)
            ended = np.where(final == self.node_gpus, self.releases.node_end(), np.inf)
            whole_at = np.where(per_node == self.node_gpus, -np.inf, ended)
            order = np.argsort(whole_at, kind="stable")
            reach = np.flatnonzero(np.cumsum(self.node_gpus[order]) + self.gmax - 1 >= need)
            t = max(t, float(whole_at[order[reach[0]]]) if len(reach) else math.inf)
        return t

    def backfill_topology(self, now: float, head: SimJob, n_free: int) -> None:
        """EASY with a reservation that names GPUs: the head job gets the GPUs its rule would
        give it at the earliest time it can start (the shadow time); a later job starts now if
        it ends before then, or on GPUs outside that reservation, or where its rule puts it if
        the head still has a placement at the shadow time without those GPUs (that placement
        becomes the reservation)."""
        free_now = np.bincount(self.cluster.gpu_node[self.free], minlength=self.cluster.n_nodes)
        size = self.node_sizes
        need = head.trace.gpus
        from tsched.compare.placement import is_compact, node_count

        # fgd's compact under ``any`` is the fewest nodes, whole or not
        waits_compact = self.config.admission == "any" and head.index in self.placer.deferred
        fewest = node_count(self.cluster, need) if waits_compact and need > self.gmax else 0
        # the running jobs that end before the first time the head could fit free nothing the
        # head can use: skip them at once (a deep queue on thousands of GPUs has many)
        skip = 0
        if sim_state.SHORTCUTS:
            first = self.earliest_fit(need, n_free, free_now,
                                 need <= self.gmax and (self.whole_only or waits_compact),
                                 need > self.gmax and self.whole_only)  # fmt: skip
            if first > -math.inf:
                skip = bisect.bisect_left(self.by_end, (first, -1))
        released: list[np.ndarray] = []
        if skip:  # the GPUs of the jobs that end before ``first``
            released.append(np.flatnonzero(self.gpu_end < first))
            free_now = free_now + np.bincount(self.cluster.gpu_node[released[0]],
                                              minlength=self.cluster.n_nodes)  # fmt: skip
        per_node = free_now.tolist()
        most = int(free_now.max())  # the most free GPUs on one node
        whole_gpus = int(self.node_gpus[free_now == self.node_gpus].sum())
        avail = n_free + sum(len(g) for g in released)
        shadow, reserved = math.inf, None
        for end, r in itertools.islice(self.by_end, skip, None):
            g = self.state[r].gpus
            assert g is not None
            released.append(g)
            for node, k in self.state[r].node_counts:
                per_node[node] += k
                most = max(most, per_node[node])
                if per_node[node] == size[node]:
                    whole_gpus += size[node]
            avail += len(g)
            if avail < need:
                continue
            # a cheap necessary condition of a compact placement before asking the rule
            if need <= self.gmax and (self.whole_only or waits_compact) and most < need:
                continue
            if need > self.gmax and self.whole_only and whole_gpus + self.gmax - 1 < need:
                continue
            if need > self.gmax and waits_compact and sum(heapq.nlargest(fewest, per_node)) < need:
                continue  # its fewest nodes cannot hold it yet
            future = self.free.copy()
            future[np.concatenate(released)] = True
            got = self.placer.place(head.trace, future)
            if got is not None and waits_compact and not is_compact(self.cluster, got[0]):
                continue  # the head waits for locality: it reserves a compact placement
            if got is not None:
                shadow, reserved = end, got[0]
                break
        # the GPUs the head may start on at the shadow time, less those of the jobs started
        # meanwhile that will still run then
        shadow = self.relaxed(head, shadow)
        at_shadow = None
        if reserved is not None:  # every job that ends by the shadow time frees its GPUs
            at_shadow = self.free.copy()
            for _end, r in self.by_end[: bisect.bisect_right(self.by_end, (shadow, math.inf))]:
                at_shadow[self.state[r].gpus] = True
        plan: dict[str, Any] = {"reserved": reserved, "next": None, "failed": math.inf}

        def admit(k: int, need: int, est: float) -> np.ndarray:
            # a job still running at the shadow time keeps off the reserved GPUs
            if now + est <= shadow or plan["reserved"] is None:
                return self.free
            outside = self.free.copy()
            outside[plan["reserved"]] = False
            return outside

        def fallback(k: int, need: int, est: float) -> np.ndarray | None:
            """The reservation names the GPUs the head's rule picks, but any placement the head
            would take at the shadow time serves it as well: a job that does not fit outside
            the reservation may start where the rule puts it if the head still has a placement
            at the shadow time without those GPUs (which then becomes its reservation)."""
            plan["next"] = None
            if at_shadow is None or now + est <= shadow or need >= plan["failed"]:
                return None
            got = self.placer.place(self.state[k].trace, self.free)
            left = at_shadow.copy()
            if got is not None:
                left[got[0]] = False
            moved = None if got is None else self.placer.place(head.trace, left)
            if moved is None or (waits_compact and not is_compact(self.cluster, moved[0])):
                plan["failed"] = need  # a job as large fails alike until the plan changes
                return None
            plan["next"] = (k, moved[0])
            only = np.zeros_like(self.free)
            only[got[0]] = True
            return only

        def started(k: int, need: int, est: float) -> None:
            if at_shadow is None or now + est <= shadow:
                return
            gpus = self.state[k].gpus
            assert gpus is not None
            at_shadow[gpus] = False
            if plan["next"] is not None and plan["next"][0] == k:
                plan["reserved"] = plan["next"][1]
            plan["next"], plan["failed"] = None, math.inf

        self.backfill_pass(now, n_free, admit, started, fallback)
