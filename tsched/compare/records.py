"""JCT records: one row per job and policy, the same for simulated and executed runs.

Columns (DESIGN.md §4, ``records.csv``): ``policy, job, submit, start, end, jct, queue_delay,
gpus`` plus ``source`` (``simulated`` or ``executed``), ``nodes`` (how many nodes the job used)
and ``objective`` (the plan's communication seconds per iteration). Times are seconds from the
start of the run; ``jct = end − submit``, ``queue_delay = start − submit``.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import asdict, dataclass, fields

from tsched._io import atomic_write_text, read_text
from tsched.errors import InputError

__all__ = ["JobRecord", "COLUMNS", "write_records", "read_records"]


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

    @classmethod
    def of(cls, policy: str, job: str, submit: float, start: float, end: float, gpus: int,
           **extra: object) -> JobRecord:  # fmt: skip
        """A record with ``jct`` and ``queue_delay`` derived from the times."""
        if not submit <= start <= end:
            raise InputError(f"job {job!r}: times must satisfy submit <= start <= end")
        return cls(policy, job, submit, start, end, end - submit, start - submit, gpus, **extra)


COLUMNS = tuple(f.name for f in fields(JobRecord))


def write_records(records: list[JobRecord], path: str | os.PathLike[str]) -> None:
    """Write ``records.csv`` atomically."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in records:
        row = asdict(r)
        for key in ("submit", "start", "end", "jct", "queue_delay", "objective"):
            row[key] = f"{row[key]:.6f}"
        writer.writerow(row)
    atomic_write_text(path, buf.getvalue())


def read_records(path: str | os.PathLike[str]) -> list[JobRecord]:
    text = read_text(path, "JCT records")
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in COLUMNS[:8] if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}")
    out = []
    for k, row in enumerate(reader, 2):
        try:
            out.append(
                JobRecord(
                    row["policy"],
                    row["job"],
                    float(row["submit"]),
                    float(row["start"]),
                    float(row["end"]),
                    float(row["jct"]),
                    float(row["queue_delay"]),
                    int(row["gpus"]),
                    row.get("source") or "simulated",
                    int(row.get("nodes") or 0),
                    float(row.get("objective") or 0.0),
                )  # fmt: skip
            )
        except ValueError as exc:
            raise InputError(f"{path}:{k}: {exc}") from None
    return out
