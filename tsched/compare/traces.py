"""Job traces: the real samples tsched ships and any CSV with a column mapping.

Every loader returns :class:`TraceJob` rows sorted by submit time, with ``submit`` in seconds
from the first job. ``duration`` is the job's run time in seconds **on its most compact
placement** (whole nodes, one domain); the simulator stretches or shrinks it with the job time
model when the job gets another placement. Each job carries a workload class (``app``) that
names its traffic model.

Formats, detected from the CSV header (:func:`detect_format`):

``philly``
    ``timestamp,duration,num_gpus,gpu_time,cluster`` — Microsoft Philly jobs as reduced by the
    Pollux artifact. The virtual cluster is the tenant. Classes by GPU time, as Pollux's workload
    generator does: < 1 GPU·h → ``cifar10`` or ``ncf`` (alternating), < 10 → ``bert``, else
    ``imagenet``.
``pollux``
    ``name,time,application,num_replicas,batch_size`` — a Pollux workload. It has no durations:
    a job's work is the middle of the GPU-time bucket its class was drawn from
    (:data:`POLLUX_WORK_GPU_HOURS`).
``alibaba``
    ``name,…,num_gpu,gpu_milli,…,creation_time,deletion_time,scheduled_time`` — Alibaba GPU
    trace v2023. Pods without GPUs or never scheduled are dropped; a fractional GPU counts as
    one; the QoS class is the tenant.
``generic``
    Any CSV, given a column mapping: ``submit`` (seconds or ``YYYY-MM-DD HH:MM:SS``),
    ``gpus`` and ``duration`` are required; ``name``, ``tenant``, ``project``, ``app`` optional.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from tsched._io import read_text
from tsched.errors import InputError

__all__ = [
    "TraceJob",
    "FORMATS",
    "POLLUX_WORK_GPU_HOURS",
    "detect_format",
    "load_trace",
    "class_by_gpu_hours",
]

FORMATS = ("philly", "pollux", "alibaba", "generic")

_HEADERS = {
    "philly": {"timestamp", "duration", "num_gpus", "gpu_time", "cluster"},
    "pollux": {"name", "time", "application", "num_replicas", "batch_size"},
    "alibaba": {
        "name",
        "num_gpu",
        "gpu_milli",
        "creation_time",
        "deletion_time",
        "scheduled_time",
        "qos",
    },  # fmt: skip
}

#: GPU hours of work per Pollux class, in the bucket the class is drawn from in Pollux's
#: workload generator (< 1, 1–10, 10–100, > 100 GPU·h): the geometric middle of the closed
#: buckets (3.2, 32), and a chosen 0.5 and 150 for the open-ended ones.
POLLUX_WORK_GPU_HOURS = {
    "cifar10": 0.5,
    "ncf": 0.5,
    "bert": 3.2,
    "deepspeech2": 3.2,
    "yolov3": 32.0,
    "imagenet": 150.0,
}


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace (see the module docstring for units)."""

    name: str
    submit: float
    gpus: int
    duration: float
    app: str
    tenant: str = "default"
    project: str = ""
    batch_size: int = 0


def class_by_gpu_hours(gpu_hours: float, index: int) -> str:
    """Pollux's bucket rule: the workload class of a job of ``gpu_hours`` GPU·h."""
    if gpu_hours < 1:
        return "cifar10" if index % 2 == 0 else "ncf"
    if gpu_hours < 10:
        return "bert"
    return "imagenet"


def detect_format(header: list[str]) -> str:
    """The trace format whose required columns the header has; ``generic`` otherwise."""
    cols = {h.strip() for h in header}
    for name, need in _HEADERS.items():
        if need <= cols:
            return name
    return "generic"


def csv_rows(
    path: str | os.PathLike[str], what: str = "trace CSV"
) -> tuple[list[str], list[dict[str, str]]]:
    """The header (names stripped) and the rows of a CSV file, each row a mapping of the
    header's names; a row with more or fewer fields than the header is an error naming its
    line."""
    text = read_text(path, what)
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise InputError(f"{path}: empty {what} (no header)")
    header = [h.strip() for h in reader.fieldnames]
    broken = next((k for k, h in enumerate(header) if "\n" in h or "\r" in h), None)
    if broken is not None:
        raise InputError(f"{path}:1: header column {broken + 1} runs over several lines (a quote "
                         "left open?)")  # fmt: skip
    reader.fieldnames = header  # rows keyed by the names as the header checks read them
    rows = []
    try:
        for row in reader:
            extra = row.pop(None, [])  # type: ignore[call-overload]
            if extra or None in row.values():  # more fields than the header, or fewer
                fields = sum(v is not None for v in row.values()) + len(extra)
                raise InputError(
                    f"{path}:{reader.line_num}: {fields} field(s), but the header has "
                    f"{len(header)} ({','.join(header)})"
                )
            rows.append(row)
    except csv.Error as exc:
        raise InputError(f"{path}:{reader.line_num}: not valid CSV: {exc}") from None
    return header, rows


def load_trace(
    path: str | os.PathLike[str],
    fmt: str | None = None,
    mapping: Mapping[str, str] | None = None,
    limit: int | None = None,
    max_gpus: int | None = None,
) -> list[TraceJob]:
    """Read a trace.

    Parameters
    ----------
    path : path-like
        The CSV file.
    fmt : str, optional
        One of :data:`FORMATS`; detected from the header when omitted.
    mapping : mapping, optional
        For ``generic``: tsched field → CSV column (``submit``, ``gpus``, ``duration``, and
        optionally ``name``, ``tenant``, ``project``, ``app``).
    limit : int, optional
        Keep the first ``limit`` jobs by submit time.
    max_gpus : int, optional
        Drop jobs asking for more GPUs (e.g. more than the simulated cluster has).

    Raises
    ------
    InputError
        Naming the file, line and field of the first bad value.
    """
    header, rows = csv_rows(path)
    fmt = fmt or (detect_format(header) if mapping is None else "generic")
    if fmt not in FORMATS:
        raise InputError(f"trace format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt != "generic":
        missing = sorted(_HEADERS[fmt] - set(header))
        if missing:
            raise InputError(f"{path}: {fmt} trace lacks column(s) {', '.join(missing)}")
    loader = {"philly": _philly, "pollux": _pollux, "alibaba": _alibaba}.get(fmt)
    if loader is not None:
        jobs = loader(path, rows)
    else:
        if mapping is None:
            raise InputError(
                f"{path}: header {','.join(header)} is not a known trace format "
                f"({', '.join(FORMATS[:-1])}); give a column mapping, e.g. "
                "submit=start_time,gpus=num_gpu,duration=runtime"
            )
        jobs = _generic(path, header, rows, mapping)
    if not jobs:
        raise InputError(f"{path}: no jobs in trace")
    if max_gpus is not None:
        jobs = [j for j in jobs if j.gpus <= max_gpus]
    jobs.sort(key=lambda j: (j.submit, j.name))
    t0 = jobs[0].submit if jobs else 0.0
    jobs = [replace(j, submit=j.submit - t0) for j in jobs]
    return jobs[:limit] if limit is not None else jobs


def _num(path: object, line: int, field: str, value: str | None, kind: type = float) -> float:
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{path}:{line}: {field}: expected a number, got {value!r}") from None
    if not math.isfinite(out) or out < 0:
        raise InputError(f"{path}:{line}: {field}: expected a finite number >= 0, got {value!r}")
    if kind is int:
        if out != int(out):
            raise InputError(f"{path}:{line}: {field}: expected a whole number, got {value!r}")
        return int(out)
    return out


def _time(path: object, line: int, field: str, value: str | None) -> float:
    text = (value or "").strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise InputError(f"{path}:{line}: {field}: expected a finite time, got {value!r}")
        return seconds
    try:
        # read as UTC: offsets between jobs do not depend on the machine's time zone
        stamp = datetime.strptime(text, "%Y-%m-%d %H:%M:%S")
        return stamp.replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise InputError(
            f"{path}:{line}: {field}: expected seconds or 'YYYY-MM-DD HH:MM:SS', got {value!r}"
        ) from None


def _philly(path: object, rows: list[dict[str, str]]) -> list[TraceJob]:
    out = []
    for k, row in enumerate(rows):
        line = k + 2
        gpus = int(_num(path, line, "num_gpus", row["num_gpus"], int))
        duration = _num(path, line, "duration", row["duration"])
        if gpus < 1:
            raise InputError(f"{path}:{line}: num_gpus: expected >= 1, got {row['num_gpus']!r}")
        out.append(
            TraceJob(
                f"philly-{k}",
                _time(path, line, "timestamp", row["timestamp"]),
                gpus,
                duration,
                class_by_gpu_hours(gpus * duration / 3600.0, k),
                tenant=row["cluster"] or "default",
            )
        )
    return out


def _pollux(path: object, rows: list[dict[str, str]]) -> list[TraceJob]:
    out = []
    for k, row in enumerate(rows):
        line = k + 2
        app = row["application"].strip()
        if app not in POLLUX_WORK_GPU_HOURS:
            raise InputError(
                f"{path}:{line}: application {app!r}: expected one of "
                f"{', '.join(POLLUX_WORK_GPU_HOURS)}"
            )
        gpus = int(_num(path, line, "num_replicas", row["num_replicas"], int))
        if gpus < 1:
            raise InputError(f"{path}:{line}: num_replicas: expected >= 1")
        out.append(
            TraceJob(
                row["name"] or f"pollux-{k}",
                _num(path, line, "time", row["time"]),
                gpus,
                POLLUX_WORK_GPU_HOURS[app] * 3600.0 / gpus,
                app,
                batch_size=int(_num(path, line, "batch_size", row["batch_size"], int)),
            )
        )
    return out


def _alibaba(path: object, rows: list[dict[str, str]]) -> list[TraceJob]:
    out = []
    for k, row in enumerate(rows):
        line = k + 2
        gpus = int(_num(path, line, "num_gpu", row["num_gpu"], int))
        if gpus < 1 or not (row.get("scheduled_time") or "").strip():
            continue
        start = _num(path, line, "scheduled_time", row["scheduled_time"])
        end = _num(path, line, "deletion_time", row["deletion_time"])
        if end <= start:
            continue
        duration = end - start
        out.append(
            TraceJob(
                row["name"] or f"alibaba-{k}",
                _num(path, line, "creation_time", row["creation_time"]),
                gpus,
                duration,
                class_by_gpu_hours(gpus * duration / 3600.0, k),
                tenant=row.get("qos") or "default",
            )
        )
    return out


_GENERIC_FIELDS = ("submit", "gpus", "duration", "name", "tenant", "project", "app")


def parse_mapping(text: str) -> dict[str, str]:
    """``"submit=start,gpus=num_gpu,duration=runtime"`` → a mapping (CLI ``--columns``)."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, col = part.partition("=")
        if not sep or not col:
            raise InputError(f"--columns: expected FIELD=COLUMN pairs, got {part!r}")
        out[key.strip()] = col.strip()
    return out


def _generic(
    path: object, header: list[str], rows: list[dict[str, str]], mapping: Mapping[str, str]
) -> list[TraceJob]:
    unknown = sorted(set(mapping) - set(_GENERIC_FIELDS))
    if unknown:
        raise InputError(
            f"column mapping: unknown field(s) {', '.join(unknown)}; valid: "
            f"{', '.join(_GENERIC_FIELDS)}"
        )
    for need in ("submit", "gpus", "duration"):
        if need not in mapping:
            raise InputError(f"column mapping: {need!r} is required (e.g. {need}=COLUMN)")
    for field_, col in mapping.items():
        if col not in header:
            raise InputError(f"{path}: column {col!r} (for {field_}) not in header")
    out = []
    for k, row in enumerate(rows):
        line = k + 2
        gpus = int(_num(path, line, mapping["gpus"], row[mapping["gpus"]], int))
        if gpus < 1:
            continue
        duration = _num(path, line, mapping["duration"], row[mapping["duration"]])

        def opt(key: str, default: str, row: dict[str, str] = row) -> str:
            return (row.get(mapping[key]) or default) if key in mapping else default

        out.append(
            TraceJob(
                opt("name", f"job-{k}"),
                _time(path, line, mapping["submit"], row[mapping["submit"]]),
                gpus,
                duration,
                opt("app", "") or class_by_gpu_hours(gpus * duration / 3600.0, k),
                tenant=opt("tenant", "default"),
                project=opt("project", ""),
            )
        )
    return out
