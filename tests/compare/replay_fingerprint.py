"""A fingerprint of the cluster replay: every queue discipline, admission regime, placement rule,
reservation, slack and consolidation rule replayed on two real trace windows, each replay's
records and time series rounded and hashed. ``data/replay_fingerprint.json`` holds the
fingerprint the replay gave before :class:`tsched.compare.simulator.Simulation` was split into
its parts; the test shows the split changed no replay.

    python -m tests.compare.replay_fingerprint  # rewrite the stored fingerprint
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig, simulate
from tsched.compare.study import at_load
from tsched.compare.traces import load_trace
from tsched.presets import load_cluster

ROOT = Path(__file__).parents[2]
STORED = Path(__file__).parent / "data" / "replay_fingerprint.json"
WINDOWS = {
    # trace, cluster, seconds of arrivals kept, load
    "philly": ("philly_jobs_pollux_2017-10-02_2017-10-30.csv", "dgx-a100-32node.yaml",
               48 * 3600.0, 1.4),
    "pollux-6": ("pollux_workload-6.csv", "g4dn-12xlarge-16node.yaml", 8 * 3600.0, 1.1),
}  # fmt: skip
CASES = (
    ("fifo", "any", ["greedy", "pack", "random", "spread"], {}),
    ("sjf", "compact", ["best-fit", "kai-tas", "slurm-tree"], {}),
    ("backfill", "any", ["fgd", "best-fit+topo", "whole-nodes", "fgd+slack0.5"], {}),
    ("backfill", "compact", ["fgd", "fgd+count", "best-fit+kai", "fgd+tsched"],
     {"restart_cost": 300.0, "min_runtime": 1800.0}),
    ("fair", "compact", ["fgd", "best-fit", "fgd+tsched", "best-fit+kai"],
     {"restart_cost": 300.0, "min_runtime": 1800.0}),
    ("fair", "any", ["fgd", "first-fit", "kai-tas"], {"restart_cost": 120.0}),
)  # fmt: skip


def _digest(result) -> str:
    h = hashlib.sha256()
    for r in result.records:
        row = (r.job, round(r.start, 4), round(r.end, 4), r.nodes, r.domains, r.preemptions,
               r.migrations, round(r.restart_gpu_s, 2))
        h.update(repr(row).encode())
    for series in (result.times, result.busy_gpus, result.queued, result.blocked):
        h.update(np.round(np.asarray(series, dtype=float), 4).tobytes())
    return h.hexdigest()[:16]


def fingerprint() -> dict[str, str]:
    """``{"trace/queue/admission/label": digest}`` for every case."""
    out = {}
    for name, (trace, cluster_file, span, load) in WINDOWS.items():
        cluster = load_cluster(ROOT / "models" / "clusters" / cluster_file)
        usable = int((~cluster.busy_mask).sum())
        jobs = load_trace(ROOT / "tests" / "data" / "traces" / trace, max_gpus=usable)
        t0 = min(j.submit for j in jobs)
        jobs, _ = at_load([j for j in jobs if j.submit - t0 < span], usable, load)
        for queue, admission, names, extra in CASES:
            base = SimConfig(queue=queue, admission=admission, seed=3, **extra)
            for cfg in parse_policies(names, base):
                out[f"{name}/{queue}/{admission}/{cfg.label}"] = _digest(simulate(jobs, cluster,
                                                                                   cfg))
    return out


if __name__ == "__main__":
    STORED.parent.mkdir(parents=True, exist_ok=True)
    STORED.write_text(json.dumps(fingerprint(), indent=1, sort_keys=True) + "\n")
    print(STORED)
