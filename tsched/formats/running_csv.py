"""Running jobs (CSV): which GPUs each running job holds, what moving it costs, whether it may
move — the input of ``tsched defrag``.

One row per GPU a job holds, with a header: ``job,node,gpu`` and optionally ``restart_seconds``
(what restarting the job elsewhere costs, in seconds; the same on every row of a job; default
the caller's ``restart_cost``) and ``movable`` (``1`` or ``0``; ``0`` for a job inside its
minimum-runtime protection; default 1). Nodes and GPUs are checked against the cluster model: an
unknown node or GPU, a GPU held twice, or a job on a GPU the model marks busy is refused with the
file, row and field.

Examples
--------
>>> import tsched
>>> cluster = tsched.load_cluster("dgx-h100-4node")
>>> text = "job,node,gpu,movable\\na,node001,0,1\\na,node001,1,1\\nb,node002,3,0\\n"
>>> state = parse_running(text, cluster, "jobs.csv")
>>> [(j.name, j.gpus, j.movable) for j in state.jobs]
[('a', (0, 1), True), ('b', (11,), False)]
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass

import numpy as np

from tsched.cluster import Cluster
from tsched.errors import InputError

__all__ = ["RunningJob", "RunningState", "read_running", "parse_running", "write_running"]

COLUMNS = ("job", "node", "gpu", "restart_seconds", "movable")
REQUIRED = ("job", "node", "gpu")


@dataclass(frozen=True)
class RunningJob:
    """A running job: the GPUs it holds (global indices in the cluster), what moving it costs
    (seconds of restart, paid on every GPU it holds) and whether it may move."""

    name: str
    gpus: tuple[int, ...]
    restart_seconds: float
    movable: bool = True

    @property
    def weight(self) -> float:
        """GPU-seconds lost if the job moves: its GPUs × its restart seconds."""
        return len(self.gpus) * self.restart_seconds


@dataclass(frozen=True)
class RunningState:
    """A cluster and the jobs running on it (their GPUs disjoint and free in the model)."""

    cluster: Cluster
    jobs: tuple[RunningJob, ...]
    source: str = ""

    def held(self) -> np.ndarray:
        """Per global GPU, the index of the job holding it, or −1."""
        out = np.full(self.cluster.n_gpus, -1, dtype=np.int64)
        for k, job in enumerate(self.jobs):
            out[list(job.gpus)] = k
        return out

    def free_mask(self) -> np.ndarray:
        """GPUs neither busy in the model nor held by a running job."""
        return self.cluster.free_mask() & (self.held() < 0)


def read_running(
    path: str | os.PathLike[str], cluster: Cluster, restart_cost: float = 300.0
) -> RunningState:
    """Read a running-jobs CSV against ``cluster``; errors name the file, row and field."""
    from tsched._io import read_text

    return parse_running(read_text(path, "running-jobs CSV"), cluster, str(path), restart_cost)


def parse_running(
    text: str, cluster: Cluster, source: str = "running jobs", restart_cost: float = 300.0
) -> RunningState:
    """Parse running-jobs CSV text (see the module's description)."""
    if not math.isfinite(restart_cost) or restart_cost < 0:
        raise InputError(f"restart cost: expected a number >= 0, got {restart_cost!r}")
    if "\x00" in text:
        raise InputError(f"{source}: not a CSV text file (it holds NUL bytes)")
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not any(cell.strip() for cell in rows[0]):
        raise InputError(f"{source}: empty; expected a header row {','.join(REQUIRED)}")
    header = [cell.strip() for cell in rows[0]]
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise InputError(f"{source}: row 1: unknown column {unknown[0]!r} "
                         f"(expected {', '.join(COLUMNS)})")  # fmt: skip
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise InputError(f"{source}: row 1: missing column {missing[0]!r} "
                         f"(required: {', '.join(REQUIRED)})")  # fmt: skip
    if len(set(header)) != len(header):
        raise InputError(f"{source}: row 1: a column is named twice")
    col = {name: header.index(name) for name in header}
    names = {n.name: i for i, n in enumerate(cluster.nodes)}
    busy = ~cluster.free_mask()
    order: list[str] = []
    gpus: dict[str, list[int]] = {}
    restart: dict[str, tuple[float, int]] = {}
    movable: dict[str, tuple[bool, int]] = {}
    holder: dict[int, tuple[str, int]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue  # a blank line
        if len(row) != len(header):
            raise InputError(f"{source}: row {line}: {len(row)} fields, the header has "
                             f"{len(header)}")  # fmt: skip
        cell = {name: row[k].strip() for name, k in col.items()}
        job = cell["job"]
        if not job:
            raise InputError(f"{source}: row {line}: field job: empty")
        node = cell["node"]
        if node not in names:
            raise InputError(f"{source}: row {line}: field node: unknown node {node!r} "
                             f"(cluster {cluster.name!r})")  # fmt: skip
        local = _integer(cell["gpu"], source, line, "gpu")
        count = int(cluster.gpus_per_node[names[node]])
        if not 0 <= local < count:
            raise InputError(f"{source}: row {line}: field gpu: node {node!r} has GPUs "
                             f"0..{count - 1}, not {local}")  # fmt: skip
        gid = cluster.gpu_id(names[node], local)
        if gid in holder:
            other, first = holder[gid]
            raise InputError(f"{source}: row {line}: field gpu: {node} GPU {local} is held twice "
                             f"(row {first}, job {other!r})")  # fmt: skip
        if busy[gid]:
            raise InputError(f"{source}: row {line}: field gpu: job {job!r} on {node} GPU "
                             f"{local}, which the cluster model marks busy")  # fmt: skip
        holder[gid] = (job, line)
        if job not in gpus:
            order.append(job)
            gpus[job] = []
        gpus[job].append(gid)
        if "restart_seconds" in cell and cell["restart_seconds"] != "":
            value = _number(cell["restart_seconds"], source, line, "restart_seconds")
            _same(restart, job, value, source, line, "restart_seconds")
        if "movable" in cell and cell["movable"] != "":
            if cell["movable"] not in ("0", "1"):
                raise InputError(f"{source}: row {line}: field movable: expected 1 or 0, got "
                                 f"{cell['movable']!r}")  # fmt: skip
            _same(movable, job, cell["movable"] == "1", source, line, "movable")
    jobs = tuple(
        RunningJob(
            job,
            tuple(sorted(gpus[job])),
            restart.get(job, (restart_cost, 0))[0],
            movable.get(job, (True, 0))[0],
        )  # fmt: skip
        for job in order
    )
    return RunningState(cluster, jobs, source)


def _integer(text: str, source: str, line: int, field: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(f"{source}: row {line}: field {field}: expected an integer, got "
                         f"{text!r}") from None  # fmt: skip


def _number(text: str, source: str, line: int, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{source}: row {line}: field {field}: expected a number >= 0, got "
                         f"{text!r}")  # fmt: skip
    return value


def _same(seen: dict, job: str, value: object, source: str, line: int, field: str) -> None:
    """A per-job field must agree on every row of the job."""
    if job in seen and seen[job][0] != value:
        raise InputError(f"{source}: row {line}: field {field}: job {job!r} has {seen[job][0]!r} "
                         f"on row {seen[job][1]} and {value!r} here")  # fmt: skip
    seen.setdefault(job, (value, line))


def write_running(state: RunningState, path: str | os.PathLike[str]) -> None:
    """Write ``state`` as a running-jobs CSV (every column), atomically."""
    from tsched._io import atomic_write_text

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    cl = state.cluster
    for job in state.jobs:
        for g in job.gpus:
            node = cl.nodes[int(cl.gpu_node[g])].name
            writer.writerow([job.name, node, int(cl.gpu_local[g]), f"{job.restart_seconds:g}",
                             int(job.movable)])  # fmt: skip
    atomic_write_text(path, out.getvalue())
