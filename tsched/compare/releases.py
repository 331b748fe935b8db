"""When the cluster's GPUs come free in a replay: per node, the end of each running job and the
GPUs it gives back there.

The replay asks these questions once per waiting job an event (backfill's shadow time, fgd's
wait for locality, consolidation's price of waiting), so the answers are kept until the table
or the clock changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tsched.cluster import Cluster

__all__ = ["ReleaseTable"]


class ReleaseTable:
    """Per node, the running jobs' ends (ascending; ``inf`` pads) and the GPUs each frees there.

    ``clock`` is the replay's time; the caller sets it at each event.

    >>> from tsched import presets
    >>> t = ReleaseTable(presets.cluster("dgx-h100-4node"))
    >>> t.add(7, 50.0, [(0, 4)]); t.add(8, 20.0, [(0, 2), (1, 8)])
    >>> t.clock = 10.0
    >>> ends, gpus = t.releases()
    >>> ends[0, :2].tolist(), gpus[0, :2].tolist()
    ([10.0, 40.0], [2, 4])
    >>> float(t.node_end()[0]), float(t.node_end()[2])
    (50.0, -inf)
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.clock = 0.0
        # per node: {job index: (end, GPUs it holds there)}
        self.on_node: list[dict[int, tuple[float, int]]] = [{} for _ in range(cluster.n_nodes)]
        self.end = np.full((cluster.n_nodes, 4), np.inf)
        self.gpus = np.zeros((cluster.n_nodes, 4), dtype=np.int64)
        # what the table gives, kept until the table or the clock changes; read-only for callers
        self._derived: dict[str, Any] = {}

    def add(self, job: int, end: float, node_counts: Iterable[tuple[int, int]]) -> None:
        """A job started: it ends at ``end`` and holds ``count`` GPUs on each ``node``."""
        for node, count in node_counts:
            self.on_node[node][job] = (end, count)
            self._row(node)

    def remove(self, job: int, node_counts: Iterable[tuple[int, int]]) -> None:
        """A job stopped."""
        for node, _count in node_counts:
            del self.on_node[node][job]
            self._row(node)

    def _row(self, node: int) -> None:
        self._derived.clear()
        ends = sorted((e, r, c) for r, (e, c) in self.on_node[node].items())
        if len(ends) > self.end.shape[1]:  # widen the table
            grow = len(ends) - self.end.shape[1] + 4
            self.end = np.pad(self.end, ((0, 0), (0, grow)), constant_values=np.inf)
            self.gpus = np.pad(self.gpus, ((0, 0), (0, grow)))
        self.end[node] = np.inf
        self.gpus[node] = 0
        for i, (end, _r, count) in enumerate(ends):
            self.end[node, i] = end
            self.gpus[node, i] = count

    def node_end(self) -> np.ndarray:
        """When each node's running jobs have all ended (``-inf`` for an idle node)."""
        if "end" not in self._derived:
            self._derived["end"] = np.where(np.isinf(self.end), -np.inf, self.end).max(axis=1)
        return self._derived["end"]

    def at_clock(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()``, kept until the table or the clock changes."""
        got = self._derived.get(key)
        if got is None or got[0] != self.clock:
            got = self._derived[key] = (self.clock, make())
        return got[1]

    def hold(self) -> np.ndarray:
        """Per node, the seconds until its running jobs have all ended (0 for an idle node)."""
        return self.at_clock("hold", lambda: np.maximum(self.node_end() - self.clock, 0.0))

    def releases(self) -> tuple[np.ndarray, np.ndarray]:
        """Per node, the seconds until each of its running jobs ends (ascending; ``inf``
        pads) and the GPUs that job gives back there (0 pads)."""
        return self.at_clock("releases", lambda: (np.maximum(self.end - self.clock, 0.0),
                                                  self.gpus))  # fmt: skip

    def room_times(self, n: int, per_node: np.ndarray) -> np.ndarray:
        """Per node, the end of the running job by which ``n`` GPUs are free there if nothing
        else starts (``per_node`` free now): ``-inf`` where they are free now, ``inf`` where
        they never are."""
        reach = per_node[:, None] + np.cumsum(self.gpus, axis=1) >= n
        at = self.end[np.arange(self.cluster.n_nodes), reach.argmax(axis=1)]
        return np.where(per_node >= n, -np.inf, np.where(reach.any(axis=1), at, np.inf))

    def room_soonest(
        self, n: int, per_node: np.ndarray, skip: set[int]
    ) -> tuple[float, int] | None:
        """``(seconds, node)``: the node (not in ``skip``) where ``n`` GPUs are expected free
        soonest if nothing else starts (``per_node`` free now), and when (the lowest index on a
        tie); None if no node ever has room."""
        when = self.room_times(n, per_node)
        when[list(skip)] = np.inf
        now_ok = np.flatnonzero(when == -np.inf)
        if len(now_ok):
            return 0.0, int(now_ok[0])
        when = when - self.clock
        node = int(np.argmin(when))
        return None if math.isinf(when[node]) else (float(when[node]), node)
