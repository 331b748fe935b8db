"""Agentic serving live: the tsched proxy's policies on the same real Dynamo mocker workers,
several runs per cell, against the simulator's prediction for the same setting.

Two mocker replicas (each a ``dynamo.mocker`` worker and a ``dynamo.frontend``, under the
guardian) of 59,000 KV tokens with the mocker's default timing; for each run and each arm a
``tsched agents serve`` process with that policy is started in front of them, the SWE-like
programs are driven through it for ``--duration`` seconds (``tsched.agentic.bench``), and the
proxy is stopped. Arms are interleaved within each run, so slow drift of this shared machine
hits all alike. The same cells are simulated with the same seeds.

Written under ``benchmarks/results/``: ``agentic_live.md`` and ``agentic_live/runs.csv``.

    python -m benchmarks.agentic_live [--runs 3] [--duration 60] [--concurrency 35,8]
        [--engine mocker|prefill-heavy]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import numpy as np

from benchmarks._common import RESULTS, machine, markdown_table, write_result
from tsched.agentic.bench import run_bench
from tsched.agentic.engine import PRESETS as ENGINES
from tsched.agentic.live import MockerReplicas
from tsched.agentic.sim import simulate
from tsched.agentic.workload import PRESETS as WORKLOADS
from tsched.backends.dynamo import free_port
from tsched.compare.study import ci95

CAPACITY = 59_000
ARMS = ["pass-through", "round-robin", "thunderagent", "tsched"]


def start_proxy(
    policy: str, backends: list[str], workdir: str, engine: str
) -> tuple[subprocess.Popen, str]:
    port = free_port()
    argv = [sys.executable, "-m", "tsched", "agents", "serve", "--policy", policy,
            "--port", str(port), "--capacity-tokens", str(CAPACITY), "--engine", engine,
            "--quiet"]  # fmt: skip
    for b in backends:
        argv += ["--backend", b]
    log = open(os.path.join(workdir, f"proxy-{policy}-{port}.log"), "wb")  # noqa: SIM115
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"proxy {policy} did not start (log in {workdir})")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per run")
    parser.add_argument("--concurrency", default="35,8")
    parser.add_argument(
        "--warmup",
        type=float,
        default=0.0,
        help="seconds at the start of each run left out of the metrics",
    )
    parser.add_argument("--arms", default=",".join(ARMS), help="proxy policies to compare")
    parser.add_argument(
        "--engine",
        default="mocker",
        choices=sorted(ENGINES),
        help="engine profile of the mocker workers (default: its own timing)",
    )
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    started = time.time()
    rows: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    profile = ENGINES[args.engine]
    with tempfile.TemporaryDirectory(prefix="tsched-agentic-live-") as work:
        with MockerReplicas(2, CAPACITY, profile, work) as reps:
            for conc in levels:
                w = WORKLOADS["swe"].with_load(concurrency=conc, programs=conc * 4)
                for run in range(args.runs):
                    for arm in args.arms.split(","):
                        proc, url = start_proxy(arm, reps.urls, work, args.engine)
                        try:
                            res = asyncio.run(
                                run_bench(w, url, seed=run, duration=args.duration,
                                          warmup=args.warmup)
                            )  # fmt: skip
                        finally:
                            stop(proc)
                        sim = simulate(w, profile, replicas=2, capacity_tokens=CAPACITY,
                                       policy=arm, seed=run, horizon=args.duration,
                                       warmup=args.warmup, keep_records=False)  # fmt: skip
                        row = {"concurrency": conc, "arm": arm, "run": run,
                               "errors": sum(res.errors.values()), **res.metrics}  # fmt: skip
                        row.update({f"sim_{k}": v for k, v in sim.metrics.items()})
                        rows.append(row)
                        records += [{"concurrency": conc, "arm": arm, "run": run, **rec}
                                    for rec in res.records]  # fmt: skip
                        live, model = res.metrics, sim.metrics
                        print(
                            f"  c={conc} run {run} {arm}: {live['steps_per_min']:.0f} steps/min "
                            f"(sim {model['steps_per_min']:.0f}), p50 {live['p50_step_s']:.2f} s "
                            f"(sim {model['p50_step_s']:.2f})",
                            file=sys.stderr,
                            flush=True,
                        )
    name = "agentic_live" if args.engine == "mocker" else f"agentic_live-{args.engine}"
    folder = RESULTS / name
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "runs.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with open(folder / "records.csv", "w", newline="") as fh:  # every measured step
        writer = csv.DictWriter(fh, fieldnames=list(records[0]), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
    text = [
        "# Agentic serving live: proxy policies on the same mocker workers",
        "",
        f"Command: `python -m benchmarks.agentic_live --runs {args.runs} --duration "
        f"{args.duration:g} --warmup {args.warmup:g} --concurrency {args.concurrency} "
        f"--engine {args.engine} --arms {args.arms}` — "
        f"{len(rows)} runs in "
        f"{(time.time() - started) / 60:.1f} min on {machine()}.",
        "",
        f"Setting: 2 Dynamo mocker replicas (ai-dynamo 1.6.1, block 16) of {CAPACITY:,} KV "
        f"tokens with engine profile `{args.engine}` "
        + (
            "(the mocker's own timing)"
            if args.engine == "mocker"
            else "(given to the mocker as `--planner-profile-data` tables)"
        )
        + ", each behind its own frontend; `tsched agents serve` with each "
        "policy in front, one proxy process per run; SWE-like programs (preset `swe`) from "
        f"`tsched agents bench`, {args.duration:g} s per run, the first {args.warmup:g} s left "
        "out of the metrics; the simulator run with the same seed, horizon and warm-up beside "
        "it. Mean ± 95 % CI half-width over runs.",
        "",
    ]
    for conc in levels:
        sub = [r for r in rows if r["concurrency"] == conc]
        table = []
        base = {m: np.mean([r[m] for r in sub if r["arm"] == "round-robin"])
                for m in ("steps_per_min", "p50_step_s", "p99_step_s")}  # fmt: skip
        for arm in args.arms.split(","):
            rs = [r for r in sub if r["arm"] == arm]

            def cell(metric: str, digits: int = 1, rs: list = rs) -> str:
                m, lo, hi = ci95([r[metric] for r in rs])
                return f"{m:.{digits}f} ± {(hi - lo) / 2:.{digits}f}"

            live_p50 = np.mean([r["p50_step_s"] for r in rs])
            sim_p50 = np.mean([r["sim_p50_step_s"] for r in rs])
            table.append([
                arm, cell("steps_per_min"),
                f"{np.mean([r['steps_per_min'] for r in rs]) / base['steps_per_min']:.2f}×",
                cell("cache_hit_rate", 3), cell("p50_step_s", 2), cell("p99_step_s", 2),
                cell("fairness", 3), sum(r["errors"] for r in rs),
                f"{np.mean([r['sim_steps_per_min'] for r in rs]):.0f}",
                f"{sim_p50:.2f} ({(sim_p50 - live_p50) / live_p50:+.0%})",
            ])  # fmt: skip
        header = ["arm", "steps/min", "vs round-robin", "hit rate", "p50 s", "p99 s", "fairness",
                  "errors", "sim steps/min", "sim p50 s (vs live)"]  # fmt: skip
        text += [f"## {conc} programs in flight", "", markdown_table(header, table), ""]
    path = write_result(name, "\n".join(text))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
