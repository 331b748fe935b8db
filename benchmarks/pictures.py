"""Pictures of three plans for the docs: the default job, a disaggregated serving plan and a
4,096-worker job on the 16,384-GPU fabric (drawn as a heat map of leaves).

    python -m benchmarks.pictures

writes ``benchmarks/results/pictures/{default,serving,fabric-16384}.png`` and the command
(``COMMAND.txt``, with the commit), and copies the pictures to ``docs/img/`` for the docs site."""

from __future__ import annotations

import shutil
import sys
import time

import tsched
from benchmarks._common import RESULTS, ROOT, commit, compact_pngs
from tsched.show import write_picture

CASES = (
    ("default", "dgx-h100-4node", "llama3-8b-tp4-pp2-dp2", "auto"),
    ("serving", "dgx-h100-4node", "llama3-70b-serving-disagg", "auto"),
    ("fabric-16384", str(ROOT / "models/clusters/fabric-16384.yaml"),
     str(ROOT / "models/workloads/gpt3-175b-tp8-pp8-dp64.yaml"), "greedy"),
)  # fmt: skip


def main() -> None:
    out = RESULTS / "pictures"
    out.mkdir(parents=True, exist_ok=True)
    for name, cluster_source, workload_source, method in CASES:
        start = time.perf_counter()
        cluster = tsched.load_cluster(cluster_source)
        workload = tsched.load_workload(workload_source)
        problem = tsched.PlacementProblem.build(cluster, workload)
        plan = tsched.solve(problem, method=method, seed=0).plan()
        path = write_picture(plan, cluster, out / f"{name}.png", workload)
        print(f"{path.relative_to(ROOT)}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    compact_pngs(out)
    (out / "COMMAND.txt").write_text(f"python -m benchmarks.pictures (commit {commit()})\n")
    docs = ROOT / "docs" / "img"
    docs.mkdir(parents=True, exist_ok=True)
    for name, *_ in CASES:
        shutil.copyfile(out / f"{name}.png", docs / f"{name}.png")


if __name__ == "__main__":
    main()
