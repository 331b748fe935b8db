"""tsched compare: records, summary, report and plots from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.compare.sim_helpers import G4DN, TRACES
from tsched.cli import main
from tsched.compare.records import (
    read_records,
)
from tsched.compare.simulator import representative_jobs
from tsched.compare.traces import load_trace


def test_compare_cli_writes_records_summary_report_and_plots(tmp_path, capsys) -> None:
    out = tmp_path / "cmp"
    code = main(["compare", "--trace", str(TRACES / "pollux_workload-6.csv"), "--policies",
                 "greedy,random", "--cluster", str(G4DN), "--limit", "40", "--seeds", "2",
                 "--out", str(out), "--quiet"])  # fmt: skip
    assert code == 0
    for name in ("records.csv", "records.jsonl", "summary.json", "report.md", "jct_cdf.png",
                 "utilisation.png", "slowdown_by_size.png"):  # fmt: skip
        assert (out / name).stat().st_size > 0, name
    recs = read_records(out / "records.csv")
    assert len(recs) == 40 * 4
    assert {r.policy for r in recs} == {"greedy@0", "greedy@1", "random@0", "random@1"}
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["runs"]) == 4 and len(summary["paired_with_baseline"]) == 3
    report = (out / "report.md").read_text()
    assert "Job by job against greedy@0" in report
    assert (out / "jct_cdf.png").read_bytes()[:4] == b"\x89PNG"
    # representative placements: the same jobs under each policy (first seed), drawn
    jobs = load_trace(TRACES / "pollux_workload-6.csv", limit=40)
    chosen = representative_jobs(jobs)
    assert chosen and "## Representative placements" in report
    for name in chosen:
        assert f"### Job {name} (" in report
        for policy in ("greedy@0", "random@0"):
            picture = out / f"placement-{name}-{policy.replace('@', '_')}.png"
            assert picture.read_bytes()[:4] == b"\x89PNG" and f"]({picture.name})" in report
        assert not list(out.glob(f"placement-{name}-*_1.png"))  # one seed is enough
    capsys.readouterr()
    code = main(["compare", "--trace", str(TRACES / "pollux_workload-6.csv"), "--policies",
                 "greedy,bogus", "--cluster", str(G4DN), "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "unknown policy 'bogus'" in err and err.count("\n") == 1
    code = main(["compare", "--trace", str(TRACES / "pollux_workload-6.csv"), "--cluster",
                 str(G4DN), "--queue", "fair", "--restart-cost", "-5",
                 "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--restart-cost" in err and err.count("\n") == 1


def test_compare_cli_runs_rules_under_compact_admission(tmp_path, capsys) -> None:
    import json

    from tsched.cli import main

    root = Path(__file__).parents[2]
    out = tmp_path / "cmp"
    code = main(["compare", "--trace", str(root / "tests/data/traces/pollux_workload-6.csv"),
                 "--policies", "fgd,best-fit,slurm-tree", "--cluster",
                 str(root / "models/clusters/g4dn-12xlarge-16node.yaml"), "--limit", "60",
                 "--queue", "backfill", "--admission", "compact", "--out", str(out), "--json",
                 "--no-plots"])  # fmt: skip
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in summary["runs"]] == ["fgd", "best-fit", "slurm-tree"]
    # compact admission: every job of up to a node ran on one node
    from tsched.compare.records import read_records

    assert all(r.nodes == 1 for r in read_records(out / "records.csv") if r.gpus <= 4)


def test_compare_cli_consolidates_and_records_the_moves(tmp_path, capsys) -> None:
    import yaml

    cluster = tmp_path / "two.yaml"
    cluster.write_text(yaml.safe_dump({
        "tsched": "cluster/v1", "name": "two-by-four",
        "links": {"nvlink": {"bandwidth": 450, "latency": 2},
                  "leaf": {"bandwidth": 50, "latency": 5}},
        "levels": ["leaf"],
        "node_types": {"box": {"gpus": 4, "gpu": {"model": "H100"}, "intra": "nvlink"}},
        "nodes": [{"name": f"n{i}", "type": "box", "at": {"leaf": "l0"}} for i in range(2)],
    }))  # fmt: skip
    trace = tmp_path / "jobs.csv"
    # best fit leaves two GPUs free on each node once a and c end; d (4 GPUs) fits nowhere
    trace.write_text("name,submit,gpus,duration,app\na,0,2,500,bert\nb,1,2,20000,bert\n"
                     "c,2,2,500,bert\ne,3,2,20000,bert\nd,1000,4,100,bert\n")  # fmt: skip
    out = tmp_path / "cmp"
    common = ["compare", "--trace", str(trace), "--columns",
              "name=name,submit=submit,gpus=gpus,duration=duration,app=app",
              "--cluster", str(cluster), "--policies", "best-fit,best-fit+kai",
              "--restart-cost", "60", "--min-runtime", "300", "--out", str(out),
              "--no-plots", "--quiet"]  # fmt: skip
    code = main([*common, "--admission", "compact", "--consolidate", "tsched"])
    assert code == 0
    recs = {(r.policy, r.job): r for r in read_records(out / "records.csv")}
    # --consolidate sets the default; a +kai suffix overrides it for that policy
    assert {p for p, _ in recs} == {"best-fit+tsched", "best-fit+kai"}
    for policy in ("best-fit+tsched", "best-fit+kai"):
        assert sum(recs[(policy, j)].migrations for j in "abcde") == 1
        assert recs[(policy, "d")].start == 1000.0
    report = (out / "report.md").read_text()
    assert "| moves | restart GPU-h |" in report
    capsys.readouterr()
    code = main([*common, "--consolidate", "tsched"])  # any admission: refused in one line
    err = capsys.readouterr().err
    assert code == 2 and "needs compact admission" in err and err.count("\n") == 1
