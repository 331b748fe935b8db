"""How long a cluster replay takes as the cluster grows, with thousands of jobs waiting.

The Philly sample (jittered replica 0 of :mod:`benchmarks.cluster_policies`) is compressed in
time until the arrival window holds the given load (``basis="window"``, so the jobs keep
arriving faster than the cluster serves them) and replayed with ``backfill`` (EASY, a scan of up
to 500 waiting jobs an event) on the generated leaf/spine fabrics of 1,024, 4,096 and 16,384
GPUs (``models/clusters/fabric-*.yaml``). Each replay is timed in this process, one after
another (median of ``--repeats``), next to what it simulated: jobs, mean wait, and the jobs
waiting and GPUs busy while jobs arrive, so a fast replay that did not queue shows as such.

Writes ``benchmarks/results/replay_scaling.md`` (``-quick``: two clusters, three policies, one
repeat).

    python -m benchmarks.replay_scaling [--quick] [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from benchmarks._common import machine, markdown_table, write_result
from benchmarks.cluster_policies import STUDIES, cluster_file, replica_jobs
from tsched.compare.report import time_mean
from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig, simulate

PHILLY = STUDIES["philly"][0]
# (cluster file, days of the trace, load in the arrival window): above 1, so the queue grows
# while jobs arrive; the most these windows can hold are 7.2, 1.8 and 1.7 of the cluster
CASES = [("fabric-1024.yaml", 7.0, 1.2), ("fabric-4096.yaml", 7.0, 1.2),
         ("fabric-16384.yaml", 28.0, 1.2)]  # fmt: skip
POLICIES = {
    "compact": ["first-fit", "best-fit", "kai-tas", "slurm-tree", "whole-nodes", "fgd"],
    "any": ["best-fit", "fgd"],
}
QUICK_POLICIES = {"compact": ["best-fit", "kai-tas", "fgd"]}


def replay(cluster: str, days: float, load: float, admission: str, policy: str,
           repeats: int) -> list:  # fmt: skip
    """One table row: the replay's median wall time over ``repeats`` and what it simulated."""
    jobs = replica_jobs(PHILLY, cluster, load, 0, days, "jitter", "window")
    c = cluster_file(cluster)
    cfg = parse_policies([policy], SimConfig(queue="backfill", admission=admission))[0]
    walls = []
    for _ in range(repeats):
        t = time.perf_counter()
        res = simulate(jobs, c, cfg)
        walls.append(time.perf_counter() - t)
    recs = res.records
    wait = sum(r.queue_delay for r in recs) / len(recs) / 3600
    lo, hi = min(j.submit for j in jobs), max(j.submit for j in jobs)
    busy = time_mean(res.times, res.busy_gpus, (lo, hi)) / int((~c.busy_mask).sum())
    queued = time_mean(res.times, res.queued, (lo, hi))
    wall = statistics.median(walls)
    return [f"{c.n_gpus:,}", admission, policy, f"{len(recs):,}", f"{wait:.2f}",
            f"{queued:,.0f}", f"{busy:.2f}", f"{wall:.1f}", f"{len(recs) / wall:,.0f}"]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two clusters, three policies")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs a replay")
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    cases = CASES[:2] if args.quick else CASES
    policies = QUICK_POLICIES if args.quick else POLICIES
    todo = [(case, adm, pol) for case in cases for adm, pols in policies.items() for pol in pols]
    t0 = time.perf_counter()
    rows = []
    for i, ((cluster, days, load), adm, pol) in enumerate(todo, 1):
        # the largest cluster is timed once: each of its replays takes tens of seconds
        reps = 1 if cluster == CASES[-1][0] else repeats
        rows.append(replay(cluster, days, load, adm, pol, reps))
        print(f"  {i}/{len(todo)} {cluster} {adm} {pol}: {rows[-1][7]} s, "
              f"{time.perf_counter() - t0:.0f} s in all", file=sys.stderr, flush=True)  # fmt: skip
    minutes = (time.perf_counter() - t0) / 60
    cmd = "python -m benchmarks.replay_scaling" + (" --quick" if args.quick else "")
    if args.repeats:
        cmd += f" --repeats {args.repeats}"
    loads = "; ".join(f"`{c}`: first {d:g} days at window load {lo:g}" for c, d, lo in cases)
    text = (
        f"# Replay time at scale\n\n`{cmd}` — {machine()}; {minutes:.1f} min, one process.\n\n"
        f"The Philly sample, jittered replica 0, arrivals compressed until the arrival window "
        f"holds the load ({loads}); `backfill` (EASY, up to 500 waiting jobs scanned an event). "
        f"Wall: median of {repeats} timed replays, one for the 16,384-GPU cluster. Wait: mean "
        "queueing delay, hours. Queued and busy: the mean number of jobs waiting and the mean "
        "share of GPUs busy between the first and the last arrival (after the last arrival the "
        "queue drains and the long jobs run on alone). Each figure is one replica: the wait "
        "columns show that a replay queued, not which policy queues less (`cluster_policies.md` "
        "compares policies with replicas and intervals).\n\n"
        + markdown_table(["GPUs", "admission", "policy", "jobs", "wait h", "queued",
                          "busy", "wall s", "jobs/s"], rows)  # fmt: skip
        + "\n"
    )
    write_result("replay_scaling" + ("-quick" if args.quick else ""), text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
