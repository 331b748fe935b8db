"""JCT records: one row per job and policy, the same for simulated and executed runs.

Columns (DESIGN.md §4, ``records.csv``): ``policy, job, submit, start, end, jct, queue_delay,
gpus`` plus ``source`` (``simulated`` or ``executed``), ``nodes`` and ``domains`` (how many
nodes and first-level network domains the job spanned, at most over its runs), ``objective`` (the
plan's communication seconds per iteration), ``tenant``, ``app`` (workload class),
``comm_share`` (share of an iteration spent communicating on its placement), ``preemptions`` and
``ideal`` (its run time on the most compact placement, s; 0 when unknown). Times are seconds
from the start of the run; ``jct = end − submit``, ``queue_delay = start − submit`` (first start).
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

from tsched._io import atomic_write_text, read_text
from tsched.errors import InputError

__all__ = ["JobRecord", "COLUMNS", "write_records", "read_records", "write_jsonl", "read_jsonl"]


@dataclass(frozen=True)
class JobRecord:
    policy: str
    job: str
    submit: float
    start: float
    end: float
    jct: float
    queue_delay: float
    gpus: int
    source: str = "simulated"
    nodes: int = 0
    objective: float = 0.0
    tenant: str = ""
    app: str = ""
    domains: int = 0
    comm_share: float = 0.0
    preemptions: int = 0
    ideal: float = 0.0
    migrations: int = 0  # times the job was moved by consolidation
    restart_gpu_s: float = 0.0  # GPU-seconds its restarts took (preemptions and moves)

    @property
    def slowdown(self) -> float:
        """JCT over the run time on the most compact placement (NaN when unknown)."""
        return self.jct / self.ideal if self.ideal > 0 else float("nan")

    @classmethod
    def of(cls, policy: str, job: str, submit: float, start: float, end: float, gpus: int,
           **extra: object) -> JobRecord:  # fmt: skip
        """A record with ``jct`` and ``queue_delay`` derived from the times."""
        if not submit <= start <= end:
            raise InputError(f"job {job!r}: times must satisfy submit <= start <= end")
        return cls(policy, job, submit, start, end, end - submit, start - submit, gpus, **extra)


COLUMNS = tuple(f.name for f in fields(JobRecord))
_FLOATS = ("submit", "start", "end", "jct", "queue_delay", "objective", "comm_share", "ideal",
           "restart_gpu_s")  # fmt: skip
_INTS = ("gpus", "nodes", "domains", "preemptions", "migrations")


def write_records(records: list[JobRecord], path: str | os.PathLike[str]) -> None:
    """Write ``records.csv`` atomically."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in records:
        row = asdict(r)
        for key in _FLOATS:
            row[key] = f"{row[key]:.6f}"
        writer.writerow(row)
    atomic_write_text(path, buf.getvalue())


def _from_row(row: dict[str, Any], where: str) -> JobRecord:
    values: dict[str, Any] = {}
    for f in fields(JobRecord):
        raw = row.get(f.name)
        if raw is None or raw == "":
            if f.name in COLUMNS[:8]:
                raise InputError(f"{where}: missing {f.name}")
            continue
        try:
            if f.name in _FLOATS:
                values[f.name] = float(raw)
            elif f.name in _INTS:
                values[f.name] = int(raw)
            else:
                values[f.name] = str(raw)
        except ValueError:
            raise InputError(f"{where}: {f.name}: expected a number, got {raw!r}") from None
    return JobRecord(**values)


def read_records(path: str | os.PathLike[str]) -> list[JobRecord]:
    """Read ``records.csv`` (columns beyond the first eight are optional)."""
    text = read_text(path, "JCT records")
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in COLUMNS[:8] if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}")
    return [_from_row(row, f"{path}:{k}") for k, row in enumerate(reader, 2)]


def write_jsonl(records: list[JobRecord], path: str | os.PathLike[str]) -> None:
    """Write one JSON object per record, atomically."""
    atomic_write_text(path, "".join(json.dumps(asdict(r)) + "\n" for r in records))


def read_jsonl(path: str | os.PathLike[str]) -> list[JobRecord]:
    out = []
    for k, line in enumerate(read_text(path, "JCT records").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{k}: not JSON: {exc}") from None
        if not isinstance(row, dict):
            raise InputError(f"{path}:{k}: expected a JSON object")
        out.append(_from_row(row, f"{path}:{k}"))
    return out
