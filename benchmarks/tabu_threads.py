"""Tabu's two searches side by side, with and without one BLAS thread while they run.

Each chunk of a search starts from a delta matrix made of a few small matrix products
(``tsched.solvers.tabu.dense_delta_matrix``); OpenBLAS's worker threads then spin on the cores
the other search needs. ``tabu`` runs its threads under
``tsched.solvers.tabu.one_blas_thread``; the ablation replaces it by a context that changes
nothing. The two settings alternate run by run on each instance (same seed, same time limit),
so the machine's drift falls on both; the table gives the median moves of each and the median
of the per-pair ratios.

    python -m benchmarks.tabu_threads [--only tai100a,sko100a] [--limit 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics

import tsched
import tsched.solvers.tabu as tabu_module
from benchmarks._common import ROOT, machine, markdown_table, write_result
from tsched.formats.qaplib import read_dat

QAPLIB = ROOT / "tests" / "data" / "qaplib" / "instances"
INSTANCES = "tai100a,sko100a,tai100b,wil100"


def run(name: str, limit: float, one_thread: bool) -> tuple[int, float]:
    """(moves, objective) of one tabu run on a QAPLIB instance."""
    inst = read_dat(QAPLIB / f"{name}.dat")
    keep = tabu_module.one_blas_thread
    if not one_thread:
        tabu_module.one_blas_thread = contextlib.nullcontext
    try:
        out = tsched.solve_qap(inst.flow, inst.distance, method="tabu", time_limit=limit, seed=0)
    finally:
        tabu_module.one_blas_thread = keep
    return int(out.iterations), float(out.objective)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=INSTANCES, help="QAPLIB instances, comma-separated")
    parser.add_argument("--limit", type=float, default=5.0, help="tabu time limit, seconds")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each setting")
    args = parser.parse_args(argv)
    rows = []
    for name in args.only.split(","):
        moves: dict[bool, list[int]] = {True: [], False: []}
        for _ in range(args.repeats):
            for one_thread in (True, False):  # alternating: drift falls on both
                moves[one_thread].append(run(name, args.limit, one_thread)[0])
        ratios = [a / b for a, b in zip(moves[True], moves[False], strict=True)]
        rows.append(
            [
                name,
                f"{statistics.median(moves[False]):,.0f}",
                f"{statistics.median(moves[True]):,.0f}",
                f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})",
            ]
        )
    command = "python -m benchmarks.tabu_threads " + " ".join(argv or [])
    text = "\n".join(
        [
            "# Tabu's searches side by side: BLAS threads",
            "",
            f"Machine: {machine()}",
            "",
            f"Command: `{command.strip()}`; tabu {tabu_module.THREADS} threads, "
            f"{args.limit:g} s, seed 0, {args.repeats} runs of each setting, alternating.",
            "",
            markdown_table(
                [
                    "instance",
                    "moves, BLAS as configured (median)",
                    "moves, one BLAS thread (median)",
                    "ratio, median of pairs (range)",
                ],
                rows,
            ),  # fmt: skip
            "",
        ]
    )
    print(text)
    write_result("tabu_threads", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
