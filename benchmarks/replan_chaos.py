"""A node dies mid-run, again and again: how long from the node's loss to the job running again
on the nodes that are left (``tsched run ray --replan``).

A local Ray cluster (``ray.cluster_utils.Cluster``: a head and four simulated 2-GPU nodes with
tsched's labels and per-GPU resources) runs a TP2 × DP3 job of 6 workers planned by ``greedy``;
``--kill-after`` seconds in, the node holding rank 4 is removed. :func:`run_replanning` notices
the lost rank, finds the node gone, re-plans on the three nodes left and starts the workers
again. Measured per repeat: seconds from the node's removal to the first failure seen (Ray's
detection), to the re-plan's end, and to the restarted workers being submitted; the removed
node joins again before the next repeat.

    python -m benchmarks.replan_chaos [--repeats 20] [--kill-after 3]

writes ``benchmarks/results/replan_chaos.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks._common import machine, markdown_table, write_result

NODES = ("chaos-1", "chaos-2", "chaos-3", "chaos-4")


def _add(cluster, name: str):
    from tsched.backends.ray import gpu_resource

    return cluster.add_node(num_cpus=1, num_gpus=2, labels={"tsched.io/node": name},
                            resources={gpu_resource(name, g): 1 for g in range(2)})  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--kill-after", type=float, default=3.0, metavar="S")
    args = parser.parse_args()
    import ray
    from ray.cluster_utils import Cluster as RayCluster

    import tsched
    from tsched.backends.replan import run_replanning
    from tsched.cluster import Cluster, LinkClass, Node, NodeType
    from tsched.workload import Layout, ModelSpec, Workload

    model = Cluster(
        name="chaos",
        links={"nvlink": LinkClass("nvlink", 450.0, 2.0), "leaf": LinkClass("leaf", 50.0, 5.0)},
        levels=("leaf",),
        node_types={"pair": NodeType("pair", 2, "H100", 80.0, intra="nvlink")},
        nodes=tuple(Node(n, "pair", {"leaf": "l0"}) for n in NODES),
    )
    spec = ModelSpec(params_b=1, hidden=1024, layers=4, seq_len=1024, micro_batches=2)
    workload = Workload.from_layout("job", Layout(tp=2, dp=3), spec)
    cluster = RayCluster(initialize_head=True, head_node_args={"num_cpus": 1})
    handles = {name: _add(cluster, name) for name in NODES}
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    rows, detect, replanned, running = [], [], [], []
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "ranks.log"
            script = (f"import os, time\nopen({str(log)!r}, 'a').write(os.environ['RANK'] + ' ' "
                      "+ os.environ['TSCHED_RESTART'] + chr(10))\n"
                      "time.sleep(4 * args.kill_after if os.environ['TSCHED_RESTART'] == '0' "
                      "else 0.5)\n").replace("args.kill_after", repr(args.kill_after))  # fmt: skip
            for k in range(args.repeats):
                problem = tsched.PlacementProblem.build(model, workload)
                plan = tsched.solve(problem, method="greedy", seed=k).plan()
                victim = next(e.node for e in plan.assignment if e.worker == 4)
                marks: dict[str, float] = {}

                def kill(victim: str = victim, marks: dict[str, float] = marks) -> None:
                    marks["killed"] = time.monotonic()
                    cluster.remove_node(handles[victim])

                def started_again(count: int, marks: dict[str, float] = marks) -> None:
                    if "killed" in marks:
                        marks["running"] = time.monotonic()

                def restarted(record, marks: dict[str, float] = marks) -> None:
                    marks["replanned"] = time.monotonic()
                    marks["detected"] = marks["replanned"] - record.replan_seconds

                timer = threading.Timer(args.kill_after, kill)
                timer.start()
                try:
                    _, restarts, final = run_replanning(
                        plan, model, workload, command=[sys.executable, "-c", script],
                        max_restarts=2, method="greedy", on_restart=restarted,
                        on_started=started_again, reservation_timeout=60,
                    )  # fmt: skip
                finally:
                    timer.join()
                    handles[victim] = _add(cluster, victim)  # the node joins again
                    cluster.wait_for_nodes()
                times = [marks[m] - marks["killed"] for m in ("detected", "replanned", "running")]
                detect.append(times[0])
                replanned.append(times[1])
                running.append(times[2])
                rows.append([k, victim, len(restarts), f"{times[0]:.2f}", f"{times[1]:.2f}",
                             f"{times[2]:.2f}", len(final.assignment)])  # fmt: skip
                print(f"repeat {k}: lost {victim}, running again after {times[2]:.2f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
    finally:
        ray.shutdown()
        cluster.shutdown()
    minutes = (time.perf_counter() - started) / 60
    med = [statistics.median(x) for x in (detect, replanned, running)]
    text = "\n".join([
        "# A node dies mid-run: from its loss to the job running again",
        "",
        f"{machine()}; {args.repeats} repeats in {minutes:.1f} min, node removed "
        f"{args.kill_after:g} s into the run.",
        "",
        "A local Ray cluster (head and four simulated 2-GPU nodes), a TP2 × DP3 job of 6 workers "
        "planned by `greedy`; the node holding rank 4 is removed (`Cluster.remove_node`) while "
        "the workers run, and rejoins before the next repeat. `run_replanning` (what `tsched "
        "run ray --replan` calls) sees the lost rank, finds the node gone, re-plans on the three "
        "nodes left and starts the 6 workers again. Seconds after the removal: when the first "
        "failure was seen (Ray's detection of the lost worker), when the re-plan ended, when "
        "the restarted workers were submitted.",
        "",
        f"Medians: failure seen after {med[0]:.2f} s, re-planned after {med[1]:.2f} s, running "
        f"again after **{med[2]:.2f} s** (range {min(running):.2f}–{max(running):.2f} s).",
        "",
        markdown_table(["repeat", "node lost", "restarts", "seen s", "re-planned s",
                        "running again s", "workers"], rows),  # fmt: skip
        "",
    ])  # fmt: skip
    write_result("replan_chaos", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
