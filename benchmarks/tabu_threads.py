"""Tabu's moves a second, with and without one of its speed-ups: one BLAS thread while its two
searches run (``--ablation blas``), int32 tables for integer instances (``--ablation tables``),
or the Gram tables of its update (``--ablation gram``).

Each chunk of a search starts from a delta matrix made of a few small matrix products
(``tsched.solvers.tabu.dense_delta_matrix``); OpenBLAS's worker threads then spin on the cores
the other search needs. ``tabu`` runs its threads under
``tsched.solvers.tabu.one_blas_thread``; the ablation replaces it by a context that changes
nothing. With ``--ablation tables`` the kernel's tables are float64 however the data look
(``tsched.solvers.tabu.kernel_dtype`` replaced), against int32 where integers fit; the moves
are the same ones, only their pace differs. With ``--ablation gram`` the kernel's update sums
the exchanged facilities' pairs afresh each move (``tsched.solvers.tabu.GRAM`` off) instead of
reading them off the Gram tables it keeps current; again the same moves. The two settings
alternate run by run on each instance (same seed, same time limit), so the machine's drift falls
on both; each kernel specialisation is compiled before the first timing. The table gives the
median moves of each and the median of the per-pair ratios.

    python -m benchmarks.tabu_threads [--ablation blas|tables|gram] [--only tai100a,sko100a]
        [--limit 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Iterator

import numpy as np

import tsched
import tsched.solvers.tabu as tabu_module
from benchmarks._common import ROOT, machine, markdown_table, warm_tabu, write_result
from tsched.formats.qaplib import read_dat

QAPLIB = ROOT / "tests" / "data" / "qaplib" / "instances"
#: Instances of each ablation by default (integer ones that fit int32 for ``tables``).
INSTANCES = {
    "blas": "tai100a,sko100a,tai100b,wil100",
    "tables": "tai100a,sko100a,wil100,lipa90a,sko72,tai50a,sko56",
    "gram": "tai100a,sko100a,wil100,sko72,tai50a,lipa90a,tai100b,tai60b",
}
#: What each ablation measures: title, then the setting without the speed-up and with it.
WORDS = {
    "blas": ("BLAS threads", "BLAS as configured", "one BLAS thread"),
    "tables": ("int32 tables", "float64 tables", "int32 tables where integers fit"),
    "gram": ("Gram tables", "pairs summed afresh", "pairs from the Gram tables"),
}
#: The switch each ablation turns off (a module attribute of ``tsched.solvers.tabu``) and the
#: value that turns it off.
SWITCHES = {
    "blas": ("one_blas_thread", contextlib.nullcontext),
    "tables": ("kernel_dtype", lambda *_: np.float64),
    "gram": ("GRAM", False),
}


@contextlib.contextmanager
def without(ablation: str) -> Iterator[None]:
    """The speed-up ``ablation`` names switched off for the duration."""
    name, off = SWITCHES[ablation]
    keep = getattr(tabu_module, name)
    setattr(tabu_module, name, off)
    try:
        yield
    finally:
        setattr(tabu_module, name, keep)


def run(name: str, limit: float, ablation: str, on: bool) -> tuple[int, float]:
    """(moves, objective) of one tabu run on a QAPLIB instance, the speed-up on or off."""
    inst = read_dat(QAPLIB / f"{name}.dat")
    with contextlib.nullcontext() if on else without(ablation):
        out = tsched.solve_qap(inst.flow, inst.distance, method="tabu", time_limit=limit, seed=0)
    return int(out.iterations), float(out.objective)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ablation", choices=sorted(INSTANCES), default="blas")
    parser.add_argument("--only", help="QAPLIB instances, comma-separated (default: per ablation)")
    parser.add_argument("--limit", type=float, default=5.0, help="tabu time limit, seconds")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each setting")
    args = parser.parse_args(argv)
    title, off, on = WORDS[args.ablation]
    for state in (True, False):  # each kernel specialisation compiled outside the timings
        with contextlib.nullcontext() if state else without(args.ablation):
            warm_tabu()
    rows = []
    for name in (args.only or INSTANCES[args.ablation]).split(","):
        moves: dict[bool, list[int]] = {True: [], False: []}
        for _ in range(args.repeats):
            for state in (True, False):  # alternating: drift falls on both
                moves[state].append(run(name, args.limit, args.ablation, state)[0])
        ratios = [a / b for a, b in zip(moves[True], moves[False], strict=True)]
        rows.append(
            [
                name,
                f"{statistics.median(moves[False]):,.0f}",
                f"{statistics.median(moves[True]):,.0f}",
                f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})",
            ]
        )
    given = sys.argv[1:] if argv is None else argv
    command = "python -m benchmarks.tabu_threads " + " ".join(given)
    text = "\n".join(
        [
            f"# Tabu's searches side by side: {title}",
            "",
            f"Machine: {machine()}",
            "",
            f"Command: `{command.strip()}`; tabu {tabu_module.THREADS} threads, "
            f"{args.limit:g} s, seed 0, {args.repeats} runs of each setting, alternating.",
            "",
            markdown_table(
                [
                    "instance",
                    f"moves, {off} (median)",
                    f"moves, {on} (median)",
                    "ratio, median of pairs (range)",
                ],
                rows,
            ),  # fmt: skip
            "",
        ]
    )
    print(text)
    # one report: the BLAS ablation first, the other two as its sections
    write_result("tabu_threads", text, section=None if args.ablation == "blas" else args.ablation)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
