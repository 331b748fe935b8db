"""QAPLIB n ≤ 100: tabu search at 1 s and 10 s against scipy's FAQ, best of 10 randomized starts.

Tabu's own start on a raw QAP is the better of its greedy construction and FAQ (its own
randomised starts, inside its time limit), so "never worse than FAQ x10" is not true by
construction: the baseline below draws its own 10 starts.

Everything runs in one process on the same machine; gaps are relative to QAPLIB's best known
values (``tests/data/qaplib/index.csv``). FAQ is scipy's ``quadratic_assignment(method="faq")``
with ``P0="randomized"``, best of 10 seeds, timed as a whole.

    python -m benchmarks.qaplib [--quick] [--limits 1,10] [--max-n 100] [--only tai100a]
        [--tenure 0.9,1.1] [--option chunk=500] [--seeds 0,1,2] [--name qaplib-robust]

Tabu runs its default two threads side by side (``tsched.solvers.tabu.THREADS``), each with its
own tenure range (``TENURES``); ``--tenure lo,hi`` gives every thread the range
(lo·n, hi·n) instead, the ablation of that portfolio. ``--option key=value`` passes a tabu
option (``chunk``, ``jumps``: the ablation of the restarts; ``cross=0``: of the crossovers).
With several ``--seeds`` each instance runs once per seed: a cell holds the mean gap over the
seeds, and the summary counts hits and losses to FAQ per run.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time

import numpy as np
from scipy.optimize import quadratic_assignment

import tsched
from benchmarks._common import ROOT, machine, markdown_table, warm_tabu, write_result
from tsched.formats.qaplib import qap_cost, read_dat
from tsched.solvers.tabu import TENURES, THREADS, tenure_range

QAPLIB = ROOT / "tests" / "data" / "qaplib"


def faq_best_of(flow: np.ndarray, dist: np.ndarray, restarts: int = 10) -> tuple[int, float]:
    start = time.perf_counter()
    best = None
    for seed in range(restarts):
        res = quadratic_assignment(
            flow, dist, method="faq", options={"P0": "randomized", "rng": seed}
        )
        value = qap_cost(flow, dist, res.col_ind)
        best = value if best is None else min(best, value)
    return int(best), time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="n ≤ 30, every third instance, 1 s only (under 2 minutes)",
    )
    parser.add_argument("--limits", default="1,10", help="tabu time limits in seconds")
    parser.add_argument("--max-n", type=int, default=100)
    parser.add_argument("--only", default="", help="comma-separated instance names")
    parser.add_argument(
        "--tenure", default="", help="one tenure range for every thread, as fractions lo,hi of n"
    )
    parser.add_argument("--name", default="",
                        help="a variant: its section of qaplib.md (default: the whole report)")
    parser.add_argument(
        "--option", action="append", default=[], help="a tabu option key=value (repeatable)"
    )
    parser.add_argument("--seeds", default="0", help="tabu seeds, comma-separated")
    args = parser.parse_args(argv)
    limits = [1.0] if args.quick else [float(x) for x in args.limits.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    if any("=" not in item for item in args.option):
        parser.error("--option takes key=value (e.g. --option chunk=500)")
    extra = dict(item.split("=", 1) for item in args.option)
    max_n = 30 if args.quick else args.max_n
    with open(QAPLIB / "index.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if int(r["n"]) <= max_n]
    rows.sort(key=lambda r: (int(r["n"]), r["instance"]))
    if args.quick:
        rows = rows[::3]
    if args.only:
        wanted = set(args.only.split(","))
        rows = [r for r in rows if r["instance"] in wanted]
    warm_tabu()  # int32 and float64 (tai*b's) kernels compiled outside the timings

    tenures = (
        " and ".join(f"{lo:g}–{hi:g}" for lo, hi in TENURES[:THREADS])
        if not args.tenure
        else args.tenure.replace(",", "–") + " in every thread"
    )
    table = []
    gaps: dict[str, list[float]] = {f"tabu {t:g}s": [] for t in limits}
    gaps["FAQx10"] = []
    hits: dict[str, int] = {k: 0 for k in gaps}
    worse_than_faq: dict[str, int] = {k: 0 for k in gaps if k != "FAQx10"}
    per_seed: dict[str, list[int]] = {k: [0] * len(seeds) for k in gaps if k != "FAQx10"}
    for r in rows:
        name, n, best = r["instance"], int(r["n"]), int(r["best_known"])
        inst = read_dat(QAPLIB / "instances" / f"{name}.dat")
        faq, faq_s = faq_best_of(inst.flow, inst.distance)
        cells = [name, str(n), str(best)]
        results = {}
        options = dict(extra)
        if args.tenure:
            lo, hi = (float(x) for x in args.tenure.split(","))
            options["tenure"] = "{},{}".format(*tenure_range(lo, hi, n))
        for t in limits:
            runs = [
                tsched.solve_qap(
                    inst.flow, inst.distance, method="tabu", time_limit=t, seed=s, options=options
                )
                for s in seeds
            ]
            results[f"tabu {t:g}s"] = [(r.objective, r.wall_time) for r in runs]
        results["FAQx10"] = [(faq, faq_s)]
        for key, found in results.items():
            run_gaps = [100.0 * (value - best) / best if best else 0.0 for value, _ in found]
            gaps[key] += run_gaps
            run_hits = [int(value <= best) for value, _ in found]
            hits[key] += sum(run_hits)
            seconds = statistics.mean(s for _, s in found)
            cells += [f"{statistics.mean(run_gaps):.3f}", f"{seconds:.2f}"]
            if key != "FAQx10":
                worse_than_faq[key] += sum(int(value > faq) for value, _ in found)
                per_seed[key] = [a + b for a, b in zip(per_seed[key], run_hits)]
                if len(seeds) > 1:
                    cells.append(f"{sum(run_hits)}/{len(run_hits)}")
        table.append(cells)
        print(" | ".join(cells), flush=True)
    header = ["instance", "n", "best known"]
    for key in gaps:
        header += [f"{key} gap %", f"{key} s"]
        if len(seeds) > 1 and key != "FAQx10":
            header.append(f"{key} hits")
    summary = [
        [
            key,
            f"{statistics.mean(v):.3f}",
            f"{statistics.median(v):.3f}",
            f"{hits[key]}/{len(v)}",
            str(worse_than_faq.get(key, "—")),
        ]
        for key, v in gaps.items()
    ]
    text = "\n".join(
        [
            "# QAPLIB: tabu search vs scipy FAQ x10\n",
            f"Machine: {machine()}\n",
            f"Tabu: {THREADS} threads side by side, tenure ranges (fractions of n) {tenures}"
            + "".join(f"; {key}={value}" for key, value in extra.items())
            + ".\n",
            f"Command: `python -m benchmarks.qaplib {' '.join(argv or sys.argv[1:])}`; "
            f"{len(rows)} instances with n ≤ {max_n}; tabu seed{'s' if len(seeds) > 1 else ''} "
            f"{args.seeds}"
            + (
                " (a cell: the mean gap over the seeds; hits and losses counted per run)"
                if len(seeds) > 1
                else ""
            )
            + ".\n",
            "## Summary\n",
            markdown_table(
                ["method", "mean gap %", "median gap %", "best known hit", "worse than FAQx10 on"],
                summary,
            )
            + "\n",
            *(
                [
                    "Best known hit per seed: "
                    + "; ".join(
                        f"{key}: " + ", ".join(f"seed {s} {h}" for s, h in zip(seeds, counts))
                        for key, counts in per_seed.items()
                    )
                    + ".\n"
                ]
                if len(seeds) > 1
                else []
            ),
            "## Per instance\n",
            markdown_table(header, table) + "\n",
        ]
    )
    print(text)
    name = "qaplib-quick" if args.quick else "qaplib"
    section = args.name.removeprefix("qaplib-") or None
    if args.only:
        section = section or "-".join(sorted(wanted))[:60]
    write_result(name, text, section=section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
