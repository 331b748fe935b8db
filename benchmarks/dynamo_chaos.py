"""A Dynamo service loses a replica's node, again and again: does the frontend keep answering,
and how long until the service is back to its replicas?

A local Ray cluster (``ray.cluster_utils.Cluster``: a head and three simulated 2-GPU nodes with
tsched's labels and per-GPU resources) serves the packaged tiny model with two TP2 replicas of
Dynamo's mocker engine, planned by ``greedy``, behind Dynamo's frontend. A client sends a
completion every 0.1 s throughout. Each repeat removes the node of replica ``decode0``; the
service's supervisor (:mod:`tsched.backends.dynamo.healing`) sees the node dead, re-plans the
replica on the node that is free and starts it there; the removed node then joins again, the
spare of the next repeat. Measured per repeat: seconds from the removal to the supervisor's
``replica-lost`` event, to the replacement engine being healthy, and to the frontend listing two
replicas again; how many completions were answered and how many failed in between.

    python -m benchmarks.dynamo_chaos [--repeats 10]

writes ``benchmarks/results/dynamo_chaos.md``. Needs Dynamo (``scripts/install-dynamo``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from benchmarks._common import machine, markdown_table, write_result

NODES = ("dyn-1", "dyn-2", "dyn-3")


def _add(cluster, name: str):
    from tsched.backends.ray import gpu_resource

    return cluster.add_node(num_cpus=1, num_gpus=2, labels={"tsched.io/node": name},
                            resources={gpu_resource(name, g): 1 for g in range(2)})  # fmt: skip


def _completion(port: int) -> bool:
    body = json.dumps({"model": "tiny", "prompt": "w1 w2 w3", "max_tokens": 8}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())["usage"]["completion_tokens"] == 8
    except (OSError, ValueError, KeyError):
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--workdir", default=None, help="keep the logs and receipts here")
    args = parser.parse_args()
    import ray
    from ray.cluster_utils import Cluster as RayCluster

    import tsched
    from tsched.backends.dynamo import (
        down,
        free_port,
        service_workload,
        spec_from_dict,
        status,
        up,
        wait_listed,
        write_tiny_model,
    )
    from tsched.cluster import Cluster, LinkClass, Node, NodeType

    model = Cluster(
        name="dyn-chaos",
        links={"nvlink": LinkClass("nvlink", 450.0, 2.0), "leaf": LinkClass("leaf", 50.0, 5.0)},
        levels=("leaf",),
        node_types={"pair": NodeType("pair", 2, "H100", 80.0, intra="nvlink")},
        nodes=tuple(Node(n, "pair", {"leaf": "l0"}) for n in NODES),
    )
    cluster = RayCluster(initialize_head=True, head_node_args={"num_cpus": 1})
    handles = {name: _add(cluster, name) for name in NODES}
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    rows: list[list] = []
    seen, healthy, listed_after = [], [], []
    answered = failed = 0
    started = time.perf_counter()
    port = free_port()
    answers: list[tuple[float, bool]] = []
    done = threading.Event()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            tmp = args.workdir or scratch
            tiny = write_tiny_model(Path(tmp) / "tiny")
            spec = spec_from_dict({
                "tsched": "dynamo/v1", "name": "chaos", "engine": "mocker",
                "model": {"name": "tiny", "path": str(tiny)},
                "serving": {"decode": {"replicas": 2, "tp": 2}}, "frontend": {"port": port},
                "engine_args": ["--speedup-ratio", "10"],
                "restart": {"health_timeout": 90, "lease_timeout": 3},
            })  # fmt: skip
            problem = tsched.PlacementProblem.build(model, service_workload(spec))
            plan = tsched.solve(problem, method="greedy", seed=0).plan()
            up(spec, plan, workdir=Path(tmp) / "work", timeout=120, cluster=model,
               method="greedy")  # fmt: skip

            def ask() -> None:
                while not done.is_set():
                    answers.append((time.monotonic(), _completion(port)))
                    time.sleep(0.1)

            threading.Thread(target=ask, daemon=True).start()
            for k in range(args.repeats):
                time.sleep(2.0)
                victim = status("chaos")["replicas"]["decode0"]["node"]
                removed_wall, removed = time.time(), time.monotonic()
                cluster.remove_node(handles.pop(victim))
                deadline, events, back = removed + 180, [], None
                while time.monotonic() < deadline:
                    state = status("chaos")
                    events = [e for e in state.get("events", []) if e["at"] >= removed_wall]
                    if any(e["event"] == "replica-replaced" for e in events) and state["healthy"]:
                        break
                    time.sleep(0.2)
                lost = next(e for e in events if e["event"] == "replica-lost")
                moved = next(e for e in events if e["event"] == "replica-replaced")
                found, _ = wait_listed(f"http://127.0.0.1:{port}", 2, 60)
                back = time.monotonic() - removed
                window = [ok for t, ok in answers if removed <= t <= removed + back]
                ok, bad = sum(window), len(window) - sum(window)
                answered, failed = answered + ok, failed + bad
                times = (lost["at"] - removed_wall, moved["at"] - removed_wall, back)
                seen.append(times[0])
                healthy.append(times[1])
                listed_after.append(times[2])
                fails = [e for e in events if e["event"] == "replace-failed"]
                rows.append([k, victim, moved["node"], f"{times[0]:.2f}", f"{times[1]:.2f}",
                             f"{times[2]:.2f}", len(found), ok, bad, len(fails)])  # fmt: skip
                print(f"repeat {k}: lost {victim}, replaced on {moved['node']} after "
                      f"{times[1]:.2f} s, {ok} answered / {bad} failed meanwhile",
                      file=sys.stderr, flush=True)  # fmt: skip
                handles[victim] = _add(cluster, victim)  # the node joins again: next spare
                cluster.wait_for_nodes()
            done.set()
            down("chaos")
    finally:
        done.set()
        ray.shutdown()
        cluster.shutdown()
    minutes = (time.perf_counter() - started) / 60
    med = [statistics.median(x) for x in (seen, healthy, listed_after)]
    share = answered / max(answered + failed, 1)
    text = "\n".join([
        "# A Dynamo replica's node dies: serving meanwhile, and back to two replicas",
        "",
        f"{machine()}; {args.repeats} repeats in {minutes:.1f} min.",
        "",
        "A local Ray cluster (head and three simulated 2-GPU nodes) serves the tiny model with "
        "two TP2 replicas of Dynamo's mocker behind its frontend; a client sends a completion "
        "every 0.1 s. Each repeat removes the node of replica `decode0` "
        "(`Cluster.remove_node`); the service's supervisor re-plans it (`greedy`, the replica's "
        "traffic plus its traffic to the replica that stays) on the free node and starts it "
        "there; the removed node then rejoins as the next spare. Seconds after the removal: "
        "the supervisor's `replica-lost` event, the replacement engine healthy, and the "
        "frontend listing two replicas again; completions answered and failed in that window.",
        "",
        f"Medians: loss seen after {med[0]:.2f} s, replacement healthy after {med[1]:.2f} s, "
        f"**two replicas listed again after {med[2]:.2f} s** (range {min(listed_after):.2f}–"
        f"{max(listed_after):.2f} s). During the outages {answered} completions were answered "
        f"and {failed} failed ({share:.1%} answered).",
        "",
        markdown_table(["repeat", "node lost", "replaced on", "seen s", "healthy s",
                        "listed s", "replicas listed", "answered", "failed",
                        "failed tries"], rows),  # fmt: skip
        "",
    ])  # fmt: skip
    write_result("dynamo_chaos", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
