"""``nccl-tests`` output (``all_reduce_perf`` and friends) and measured link figures.

An nccl-tests run prints its ranks (``#  Rank  0 Group  0 Pid … on <host> device 0 [0x18]
<GPU name>``) and a table of sizes with out-of-place and in-place ``time algbw busbw``. NCCL's
*bus bandwidth* is normalised so that it can be compared with a link's hardware bandwidth, and at
large message sizes it is set by the slowest link the collective crosses. So a run whose ranks
all sit on one host measures that node type's intra-node link; a run across hosts measures the
lowest network level those hosts share.

:func:`apply_measurement` replaces a link class's bandwidth with a measured one, marking it
``measured`` with the time of the measurement; :func:`check_fresh` refuses measured figures
older than a maximum age.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass, replace

from tsched._io import read_text
from tsched.cluster import Cluster, LinkClass
from tsched.errors import InputError

__all__ = [
    "NcclRun",
    "parse_nccl_tests",
    "read_nccl_tests",
    "link_for_run",
    "apply_measurement",
    "check_fresh",
    "utc_now",
]

_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+(.*)$")
_COLLECTIVE = re.compile(
    r"(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv)"
)


@dataclass(frozen=True)
class NcclRun:
    """One nccl-tests run: its ranks' hosts, and bus bandwidth (GB/s) per message size."""

    collective: str
    hosts: tuple[str, ...]  # per rank
    sizes: tuple[int, ...]
    busbw: tuple[float, ...]  # best of out-of-place and in-place, per size

    @property
    def peak_busbw(self) -> float:
        """Bus bandwidth at the largest message size (the link-bound regime)."""
        return self.busbw[-1]


def parse_nccl_tests(text: str, source: str = "nccl-tests output") -> NcclRun:
    hosts: dict[int, str] = {}
    sizes: list[int] = []
    busbw: list[float] = []
    collective = ""
    for k, line in enumerate(text.splitlines(), 1):
        m = _RANK.match(line)
        if m:
            hosts[int(m.group(1))] = m.group(2)
            continue
        if line.lstrip().startswith("#"):
            c = _COLLECTIVE.search(line)
            if c and not collective and "Collective test" in line:
                collective = c.group(1)
            continue
        m = _ROW.match(line)
        if not m:
            continue
        fields = m.group(6).split()
        # out-of-place: time algbw busbw #wrong; in-place: time algbw busbw #wrong
        try:
            values = [float(fields[i]) for i in (2, 6) if i < len(fields)]
        except ValueError:
            raise InputError(
                f"{source}:{k}: expected numbers for time/algbw/busbw, got {line.strip()!r}"
            ) from None
        if not values:
            raise InputError(f"{source}:{k}: row has no busbw column: {line.strip()!r}")
        sizes.append(int(m.group(1)))
        busbw.append(max(values))
    if not sizes:
        raise InputError(f"{source}: no result rows (is this nccl-tests output?)")
    if not hosts:
        raise InputError(
            f"{source}: no '# Rank N … on HOST device D' lines, so the hosts the run spanned "
            "are unknown"
        )
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    return NcclRun(
        collective=collective or "all_reduce",
        hosts=tuple(hosts[r] for r in sorted(hosts)),
        sizes=tuple(sizes[i] for i in order),
        busbw=tuple(busbw[i] for i in order),
    )


def read_nccl_tests(path: str | os.PathLike[str]) -> NcclRun:
    return parse_nccl_tests(read_text(path, "nccl-tests output"), str(path))


def link_for_run(cluster: Cluster, run: NcclRun) -> str:
    """The link class a run measured: the intra-node class when all ranks share a host (the
    node type must have one uniform class), else the lowest level all hosts share."""
    names = sorted(set(run.hosts))
    try:
        idx = [cluster.node_index(h) for h in names]
    except InputError as exc:
        raise InputError(f"nccl-tests run: {exc}") from None
    if len(idx) == 1:
        node_type = cluster.node_type_of(idx[0])
        if node_type.intra is None:
            raise InputError(
                f"nccl-tests run on one host ({names[0]}): node type {node_type.name!r} has an "
                "intra-node matrix with several link classes; measure one pair class at a time"
            )
        return node_type.intra
    meet = cluster.node_meet_level()
    level = max(int(meet[a, b]) for a in idx for b in idx if a != b)
    return cluster.levels[level - 1]


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def apply_measurement(
    cluster: Cluster, link: str, gbps: float, measured_at: str | None = None
) -> Cluster:
    """A copy of ``cluster`` whose link class ``link`` has the measured bandwidth."""
    if link not in cluster.links:
        raise InputError(f"cluster {cluster.name!r} has no link class {link!r}")
    if not gbps > 0:
        raise InputError(f"measured bandwidth of {link!r} must be > 0 GB/s, got {gbps!r}")
    links = dict(cluster.links)
    links[link] = replace(
        links[link],
        bandwidth=float(gbps),
        provenance="measured",
        measured_at=measured_at or utc_now(),
    )
    return replace_links(cluster, links)


def replace_links(cluster: Cluster, links: dict[str, LinkClass]) -> Cluster:
    return Cluster(
        cluster.name,
        links,
        cluster.levels,
        cluster.node_types,
        cluster.nodes,
        source=cluster.source,
        description=cluster.description,
    )


def check_fresh(cluster: Cluster, max_age_s: float, now: dt.datetime | None = None) -> None:
    """Refuse measured link figures older than ``max_age_s`` seconds (or without a time)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    for link in cluster.links.values():
        if link.provenance != "measured":
            continue
        if not link.measured_at:
            raise InputError(f"link {link.name!r} is marked measured but has no measured_at time")
        try:
            when = dt.datetime.fromisoformat(link.measured_at.replace("Z", "+00:00"))
        except ValueError:
            raise InputError(
                f"link {link.name!r}: measured_at {link.measured_at!r} is not an ISO 8601 time"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        age = (now - when).total_seconds()
        if age > max_age_s:
            raise InputError(
                f"link {link.name!r} was measured {age / 3600:.1f} h ago ({link.measured_at}), "
                f"older than the allowed {max_age_s / 3600:.1f} h; measure again"
            )
