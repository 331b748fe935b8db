"""Scotch's static mapping (``scotch_gmap``) as a reference column, where it is installed.

Scotch maps a weighted source graph onto a target architecture. A uniform, nested cluster is a
``tleaf`` target: from the top level down, the number of children of a group and the cost of a
pair whose nearest common group is at that level, down to the GPUs of a node (integer costs, in
units of the cheapest link; the plan is scored afterwards with tsched's exact objective). The
job's traffic is the source graph (symmetrised, integer weights scaled so the heaviest is 10⁶),
with one isolated vertex per other GPU so that a strictly balanced mapping puts exactly one
vertex on each GPU; busy GPUs get isolated vertices fixed on them (``-f``). Clusters that are not
uniform (mixed node types, intra-node matrices, uneven fan-out, nodes out of tree order) cannot
be written as ``tleaf`` and are skipped. Never a test dependency: ``available()`` says whether
``scotch_gmap`` is on the PATH (Debian/Ubuntu: ``apt-get install scotch``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from tsched.problem import PlacementProblem

__all__ = ["available", "tleaf", "scotch_map"]


def available() -> bool:
    return shutil.which("scotch_gmap") is not None


def tleaf(problem: PlacementProblem) -> str | None:
    """The ``tleaf`` target of the problem's cluster, or None when it cannot be one."""
    cl = problem.cluster
    if cl is None or len(cl.node_types) != 1 or not cl.levels:
        return None
    node_type = next(iter(cl.node_types.values()))
    if node_type.intra is None and node_type.gpus > 1:
        return None
    # group ids from the top down, each keyed by its parent: [top groups, …, nodes]
    columns = [cl.node_group[:, k].astype(np.int64) for k in range(len(cl.levels) - 1)]
    keys = [np.zeros(cl.n_nodes, dtype=np.int64)]
    for col in reversed(columns):
        _, inverse = np.unique(np.stack([keys[-1], col]), axis=1, return_inverse=True)
        keys.append(inverse.reshape(-1))
    keys.append(np.arange(cl.n_nodes))
    for key in keys:  # nodes must be in tree order: every group a contiguous, ordered run
        if np.any(np.diff(key) < 0):
            return None
    sizes = []
    for parent, child in zip(keys[:-1], keys[1:]):
        per_parent = np.unique(np.unique(np.stack([parent, child]), axis=1)[0],
                               return_counts=True)[1]  # fmt: skip
        if len(np.unique(per_parent)) != 1:
            return None
        sizes.append(int(per_parent[0]))
    level_cost = cl.level_costs()[::-1]  # top first
    intra = cl.links[node_type.intra].seconds_per_gb if node_type.intra else level_cost[-1]
    costs = [*level_cost, intra]
    unit = min(costs)
    parts = []
    for size, cost in zip([*sizes, node_type.gpus], costs):
        if size > 1:  # a level of one child joins no pairs (and Scotch refuses it)
            parts += [str(size), str(max(1, int(round(cost / unit))))]
    return f"tleaf {len(parts) // 2} " + " ".join(parts)


def scotch_map(problem: PlacementProblem, seed: int = 0) -> tuple[np.ndarray | None, float, str]:
    """Scotch's placement of the problem: (assignment or None, seconds of ``scotch_gmap``,
    note). The seconds cover the mapping run only (files are written before the clock)."""
    target = tleaf(problem)
    if target is None:
        return None, 0.0, "cluster is not a uniform tree (no tleaf target)"
    cl = problem.cluster
    assert cl is not None
    total, n = cl.n_gpus, problem.n_workers
    sym = problem.flow_symmetric()
    top = float(sym.data.max()) if sym.nnz else 1.0
    weights = np.maximum(1, np.round(sym.data * (1e6 / top))).astype(np.int64)
    lines = ["0", f"{total} {sym.nnz}", "0 010"]
    for v in range(total):
        if v < n:
            lo, hi = sym.indptr[v], sym.indptr[v + 1]
            pairs = " ".join(f"{w} {u}" for w, u in zip(weights[lo:hi], sym.indices[lo:hi]))
            lines.append(f"{hi - lo} {pairs}".rstrip())
        else:
            lines.append("0")
    busy = np.flatnonzero(cl.busy_mask)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "job.grf").write_text("\n".join(lines) + "\n")
        (folder / "fabric.tgt").write_text(target + "\n")
        cmd = ["scotch_gmap", str(folder / "job.grf"), str(folder / "fabric.tgt"),
               str(folder / "out.map"), "-b0", "-cb", "-Cf"]  # fmt: skip
        if len(busy):
            # the last isolated vertices sit on the busy GPUs
            fixed = [f"{total - len(busy) + k} {g}" for k, g in enumerate(busy)]
            (folder / "fixed.map").write_text(f"{len(fixed)}\n" + "\n".join(fixed) + "\n")
            cmd.append(f"-f{folder / 'fixed.map'}")
        start = time.perf_counter()
        run = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if run.returncode != 0:
            return None, seconds, f"scotch_gmap failed: {run.stderr.strip()[:200]}"
        rows = np.loadtxt(folder / "out.map", dtype=np.int64, skiprows=1, ndmin=2)
    terminal = np.empty(total, dtype=np.int64)
    terminal[rows[:, 0]] = rows[:, 1]
    gpus = terminal[:n]  # tleaf terminals in tree order = the cluster's GPU order
    location = np.full(total, -1, dtype=np.int64)
    location[problem.locations] = np.arange(problem.n_locations)
    assignment = location[gpus]
    if np.any(assignment < 0) or len(np.unique(assignment)) != n:
        clash = n - len(np.unique(assignment[assignment >= 0]))
        return None, seconds, f"not a placement ({clash} workers share or sit on busy GPUs)"
    return assignment, seconds, target
