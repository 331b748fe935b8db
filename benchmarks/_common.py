"""Helpers shared by the benchmark scripts: machine facts, medians, markdown tables."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    """One line: CPU count, Python and the versions that matter for the numbers."""
    libs = ", ".join(f"{name} {version(name)}" for name in ("numpy", "scipy", "tsched"))
    return (
        f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, {libs}"
    )


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any]:
    """Median seconds over ``repeats`` runs, all the times, and the last return value."""
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, value


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_result(name: str, text: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.md"
    path.write_text(text)
    return path


def warm_tabu() -> None:
    """Compile tabu's kernel for int32 and for float64 tables (nug12, and nug12 with halved
    flows) so that no timed run pays the compilation (numba caches it on disk, but a fresh
    install or an edited kernel compiles again)."""
    import tsched
    from tsched.formats.qaplib import read_dat

    warm = read_dat(ROOT / "tests" / "data" / "qaplib" / "instances" / "nug12.dat")
    for flow in (warm.flow, 0.5 * warm.flow):
        tsched.solve_qap(flow, warm.distance, method="tabu", options={"iterations": 10})
