"""The defragmentation problem on random fragmented states, 64 to 16,384 GPUs: how often the
optimum is proved, how far the rest are from their bound, how long it takes.

Each state is a cluster of 8-GPU nodes filled with running jobs whose sizes follow a trace-like
mix (mostly 1–4 GPUs, some whole nodes, a few of 2–8 nodes), placed compactly at random until
80–95 % of the GPUs are held; a share of the jobs is inside its minimum-runtime protection (may
not move); restart seconds are drawn per job (60 s to 30 min). The waiting job is one that does
not fit now but could after moves (up to a node, or 2–8 nodes): the states where the choice of
moves matters. Up to 1,024 GPUs ``auto`` runs (the heuristic, then CP-SAT until proved, 10 s);
above, the heuristic alone with a 1 s limit. An exhaustive check is out of reach here; the
suite compares the same code with an exhaustive search on small states
(``tests/defrag/test_defrag.py``).

    python -m benchmarks.defrag [--states 60] [--seed 0]

writes ``benchmarks/results/defrag.md`` and ``benchmarks/results/defrag/gap.png``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from benchmarks._common import RESULTS, machine, markdown_table, write_result

SIZES = [(1, 30), (2, 15), (4, 15), (8, 20), (16, 8), (32, 6), (64, 4), (128, 2)]
GPUS = (64, 128, 256, 1024, 4096, 16384)


def fragmented(seed: int, nodes: int, per_node: int = 8):
    """A random fragmented running state on ``nodes`` nodes (see the module's description)."""
    from tsched.formats.cluster_yaml import cluster_from_dict
    from tsched.formats.running_csv import RunningJob, RunningState

    rng = random.Random(seed)
    leaves = max(1, nodes // 16)
    cluster = cluster_from_dict({
        "tsched": "cluster/v1", "name": f"frag-{nodes * per_node}-{seed}",
        "links": {"nvlink": {"bandwidth": 450, "latency": 2},
                  "leaf": {"bandwidth": 50, "latency": 5},
                  "spine": {"bandwidth": 25, "latency": 8}},
        "levels": ["leaf", "spine"],
        "node_types": {"box": {"gpus": per_node, "gpu": {"model": "H100"}, "intra": "nvlink"}},
        "nodes": [{"name": f"n{i:05d}", "type": "box",
                   "at": {"leaf": f"l{i * leaves // nodes}", "spine": "s0"}}
                  for i in range(nodes)],
    })  # fmt: skip
    free = [list(range(per_node)) for _ in range(nodes)]
    fill = rng.uniform(0.80, 0.95) * nodes * per_node
    sizes, weights = zip(*[(s, w) for s, w in SIZES if s <= nodes * per_node // 4], strict=True)
    pinned = rng.uniform(0.05, 0.25)
    jobs, held, misses = [], 0, 0
    while held < fill and misses < 200:
        size = rng.choices(sizes, weights)[0]
        if size <= per_node:
            room = [i for i in range(nodes) if len(free[i]) >= size]
            if not room:
                misses += 1
                continue
            i = rng.choice(room)
            take = [(i, free[i].pop(rng.randrange(len(free[i])))) for _ in range(size)]
        else:
            whole = [i for i in range(nodes) if len(free[i]) == per_node]
            k, rest = divmod(size, per_node)
            if len(whole) < k:
                misses += 1
                continue
            chosen = rng.sample(whole, k)
            take = [(i, g) for i in chosen for g in free[i]]
            for i in chosen:
                free[i] = []
            if rest:
                part = [i for i in range(nodes) if len(free[i]) >= rest]
                if not part:
                    misses += 1
                    continue
                p = rng.choice(part)
                take += [(p, free[p].pop()) for _ in range(rest)]
        gids = tuple(sorted(cluster.gpu_id(i, g) for i, g in take))
        restart = rng.choice([60.0, 120.0, 300.0, 300.0, 600.0, 1800.0])
        jobs.append(RunningJob(f"j{len(jobs)}", gids, restart, rng.random() > pinned))
        held += size
    state = RunningState(cluster, tuple(jobs), cluster.name)
    per = [len(f) for f in free]
    total = sum(per)
    whole_free = sum(1 for f in per if f == per_node)
    # a waiting job that does not fit now but could: more than the most free on one node (up
    # to a node), or more than the whole free nodes and the best partial hold
    options = [n for n in range(max(per) + 1, per_node + 1)]
    if total > per_node:
        best_multi = whole_free * per_node + max([f for f in per if f < per_node] + [0])
        options += [n for n in (16, 24, 32, 48, 64) if best_multi < n <= total]
    if not options:
        return None
    return state, rng.choice(options)


def _tightness(seed: int, states: int) -> dict[str, float]:
    """Heuristic plan and bound against CP-SAT's proved optimum on 128-GPU states whose waiting
    job needs several nodes."""
    from tsched.defrag.exact import solve_exact
    from tsched.defrag.heuristic import bound_and_plan
    from tsched.defrag.model import counts_of

    out = {"states": 0, "plan": 0, "bound": 0, "ratio": 0.0}
    ratios = []
    for k in range(20 * states):
        made = fragmented(seed + k, 16)
        if made is None or made[1] <= 8:
            continue
        counts = counts_of(made[0])
        found = bound_and_plan(counts, made[1], "compact")
        hint = (found.target, found.moved) if found.target is not None else None
        best = solve_exact(counts, made[1], time_limit=20, hint=hint)
        if best.status != "optimal" or best.cost <= 0:
            continue
        out["states"] += 1
        out["plan"] += abs(found.cost - best.cost) < 1e-6
        out["bound"] += abs(found.bound - best.cost) < 1e-6
        ratios.append(found.bound / best.cost)
        if out["states"] >= states:
            break
    out["ratio"] = statistics.mean(ratios) if ratios else float("nan")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import tsched
    from tsched._io import save_figure

    rows, records = [], []
    started = time.perf_counter()
    k = 0
    seed = args.seed
    while k < args.states:
        gpus = GPUS[k % len(GPUS)]
        made = fragmented(seed, gpus // 8)
        seed += 1
        if made is None:
            continue
        state, n = made
        small = gpus <= 1024
        start = time.perf_counter()
        plan = tsched.defrag(state.cluster, state, n, method="auto" if small else "heuristic",
                             time_limit=10.0 if small else 1.0)  # fmt: skip
        wall = time.perf_counter() - start
        records.append((gpus, n, plan, wall))
        rows.append([k, gpus, len(state.jobs), n, plan.status,
                     "—" if plan.cost is None else f"{plan.cost:,.0f}",
                     "—" if plan.bound is None else f"{plan.bound:,.0f}",
                     "—" if plan.gap is None else f"{plan.gap:.2%}", len(plan.moves),
                     plan.method, f"{wall:.3f}"])  # fmt: skip
        print(f"state {k}: {gpus} GPUs, job of {n}: {plan.status} gap {plan.gap} in "
              f"{wall:.2f} s", file=sys.stderr, flush=True)  # fmt: skip
        k += 1
    minutes = (time.perf_counter() - started) / 60
    summary = []
    for gpus in GPUS:
        mine = [r for r in records if r[0] == gpus]
        planned = [r for r in mine if r[2].status in ("optimal", "feasible")]
        proved = [r for r in mine if r[2].status in ("optimal", "infeasible")]
        gaps = [r[2].gap for r in planned]
        summary.append([gpus, len(mine), len(planned), len(proved),
                        sum(r[2].status == "infeasible" for r in mine),
                        f"{max(gaps):.2%}" if gaps else "—",
                        f"{statistics.median(r[3] for r in mine):.3f}",
                        f"{max(r[3] for r in mine):.3f}"])  # fmt: skip
    small = [r for r in records if r[0] <= 256]
    large = [r for r in records if r[0] == 16384]
    small_ok = all(r[2].status in ("optimal", "infeasible") and r[3] <= 10.5 for r in small)
    large_gaps = [r[2].gap for r in large if r[2].gap is not None]
    proved_small = sum(r[2].status in ("optimal", "infeasible") for r in small)
    large_ok = all(r[3] <= 1.0 for r in large) and all(g <= 0.05 for g in large_gaps) and all(
        r[2].status in ("optimal", "feasible") for r in large
    )
    tight = _tightness(args.seed + 1000, 25)
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for status, marker in (("optimal", "o"), ("feasible", "^")):
        pts = [(r[0], r[3]) for r in records if r[2].status == status]
        if pts:
            ax.scatter(*zip(*pts, strict=True), marker=marker, label=status, alpha=0.7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs in the cluster")
    ax.set_ylabel("seconds to the plan")
    ax.set_title("tsched defrag on random fragmented states")
    ax.legend(fontsize=8)
    (RESULTS / "defrag").mkdir(parents=True, exist_ok=True)
    save_figure(fig, RESULTS / "defrag" / "time.png")
    text = "\n".join([
        "# Defragmentation on random fragmented states",
        "",
        f"{machine()}; {len(records)} states in {minutes:.1f} min, seeds from {args.seed}.",
        "",
        "Clusters of 8-GPU nodes filled to 80–95 % with running jobs of a trace-like size mix, "
        "5–25 % of them inside their minimum-runtime protection, restart seconds 60–1,800 per "
        "job; the waiting job does not fit now but could after moves. Up to 1,024 GPUs `auto` "
        "(the evict-and-re-place heuristic with its bound, then CP-SAT until proved, 10 s); "
        "above, the heuristic alone with a 1 s limit. *proved*: optimal (cost = bound) or "
        "infeasible with a proof.",
        "",
        markdown_table(["GPUs", "states", "planned", "proved", "infeasible", "largest gap",
                        "median s", "max s"], summary),  # fmt: skip
        "",
        "Goals: optimum proved on every state of ≤ 256 GPUs within 10 s — "
        f"**{'met' if small_ok else 'missed'}** ({proved_small} of {len(small)}); "
        "at 16,384 GPUs a plan within 1 s with a certified gap ≤ 5 % — "
        f"**{'met' if large_ok else 'missed'}** (largest gap "
        f"{max(large_gaps) if large_gaps else float('nan'):.2%}, slowest "
        f"{max((r[3] for r in large), default=float('nan')):.2f} s).",
        "",
        "![seconds to the plan](defrag/time.png)",
        "",
        "## Which side of a gap is loose",
        "",
        f"On {tight['states']} states of 128 GPUs whose waiting job needs several nodes (the "
        "kind that leaves gaps above), CP-SAT proves the optimum; against it the heuristic's "
        f"plan is optimal on {tight['plan']} and its bound equals the optimum on "
        f"{tight['bound']} (the bound averages {tight['ratio']:.0%} of the optimum). The bound "
        "is the weak side: it prices the jobs that must leave the waiting job's nodes but not "
        "the further moves needed to find them a place in a nearly full cluster.",
        "",
        "## Every state",
        "",
        markdown_table(["#", "GPUs", "jobs", "waiting GPUs", "status", "cost GPU-s", "bound",
                        "gap", "moved", "method", "s"], rows),  # fmt: skip
        "",
    ])  # fmt: skip
    write_result("defrag", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
