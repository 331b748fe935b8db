"""Few-shot calibration of the job time model: does fitting each application's network factor
on K of its own multi-node runs bring its predictions to what the measurements allow?

Pollux's testbed measurements (4 applications × 108 placements × batch sizes on 16
g4dn.12xlarge, ``tests/data/traces/pollux_placements_all.csv``) through ``tsched compare
calibrate``'s protocol: an application's compute from its single-node rows, the network figures
from the *other* applications' multi-node rows (leave one application out), and, with K shots,
its network factor φ fitted on K of its own multi-node rows drawn at random (a log-normal prior
around 1 keeps one or two noisy rows from swinging it). Every K is scored on the same rows: the
application's multi-node rows less the four that any K may draw. Each K is repeated over
``--draws`` sets of shots; the table gives the mean over draws and a 95 % interval.

    python -m benchmarks.few_shot [--draws 5]

writes ``benchmarks/results/few_shot.md``.
"""

from __future__ import annotations

import argparse
import time

from benchmarks._common import ROOT, machine, markdown_table, write_result

SHOTS = (0, 1, 2, 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=5)
    args = parser.parse_args()
    from tsched.compare.calibrate import calibrate, read_placements
    from tsched.presets import load_cluster
    from tsched.stats import ci95

    rows = read_placements(ROOT / "tests" / "data" / "traces" / "pollux_placements_all.csv")
    cluster = load_cluster(ROOT / "models" / "clusters" / "g4dn-12xlarge-16node.yaml")
    started = time.perf_counter()
    got: dict[tuple[int, str], list[dict]] = {}
    for k in SHOTS:
        for draw in range(args.draws if k else 1):
            _, summary = calibrate(rows, cluster, shots=k, held_out=max(SHOTS), shot_seed=draw)
            for name, entry in summary["applications"].items():
                got.setdefault((k, name), []).append(entry)
    apps = sorted({name for _, name in got})
    table, verdict = [], []
    for name in apps:
        ceiling = got[(0, name)][0]["ceiling_rank_correlation"]
        for k in SHOTS:
            entries = got[(k, name)]
            rank = [e["rank_correlation"] for e in entries]
            err = [e["median_relative_error"] for e in entries]
            phi = [e["network_factor"] for e in entries]
            (r_mean, r_lo, r_hi), (e_mean, _, _) = ci95(rank), ci95(err)
            span = f" [{r_lo:.3f}, {r_hi:.3f}]" if len(rank) > 1 else ""
            gap = ceiling - r_mean
            table.append([name, k, f"{min(phi):.2f}–{max(phi):.2f}", f"{r_mean:.3f}{span}",
                          f"{e_mean:.1%}", f"{ceiling:.3f}", f"{gap:+.3f}"])  # fmt: skip
            if k == 2:
                verdict.append((name, ceiling - r_mean))
    minutes = (time.perf_counter() - started) / 60
    missed = [(n, d) for n, d in verdict if d > 0.03]
    text = "\n".join([
        "# Few-shot calibration: the network factor from K of an application's own runs",
        "",
        f"{machine()}; {args.draws} draws of shots per K in {minutes:.1f} min.",
        "",
        "Each application's rank correlation (Spearman, predicted against measured step time) "
        "and median relative error on its multi-node rows (the four that any K may draw left "
        "out), with K = 0, 1, 2, 4 of its own multi-node rows fitting its network factor φ; "
        "the network figures are always fitted on the other applications. *Ceiling*: the best "
        "additive model (a free factor per placement and per batch size) fitted on the scored "
        "rows themselves. Mean over draws of shots, with a 95 % interval.",
        "",
        markdown_table(["application", "K", "φ (range)", "rank correlation", "median error",
                        "ceiling", "ceiling − rank"], table),  # fmt: skip
        "",
        "Goal: at K = 2 every application within 0.03 of its ceiling's rank correlation — "
        + ("**met**." if not missed else "**missed** by "
           + ", ".join(f"{n} {d - 0.03:.3f}" for n, d in missed) + " beyond the 0.03 allowed. ")
        + ("" if not missed else
           "One factor per application scales the cost of crossing nodes up or down; it "
           "moves the median error (ncf: 14 % at K = 0) but hardly the ranking, since it "
           "cannot reorder placements of one shape, nor change how the cost grows with the "
           "nodes a job spans. The distance to the ceiling is the form's (see the calibration "
           "guide's *shape ceiling* and *own fit* columns: even the network fitted on the "
           "application's own rows stays below it), and with one or two shots a noisy row "
           "can pull φ the wrong way (cifar10)."),
        "",
    ])  # fmt: skip
    write_result("few_shot", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
