"""The policy sweep benchmark on a user's own trace and cluster, and why a goal is missed."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig, simulate


@pytest.fixture
def own_study():
    """benchmarks.cluster_policies with its module state (the studies measured) restored."""
    from benchmarks import cluster_policies as cp

    saved = dict(cp.ACTIVE), set(cp.WINDOWED), dict(cp.COLUMNS)
    yield cp
    cp.LOAD_BASIS[:] = ["offered"]
    cp.ACTIVE.clear()
    cp.ACTIVE.update(saved[0])
    cp.WINDOWED.clear()
    cp.WINDOWED.update(saved[1])
    cp.COLUMNS.clear()
    cp.COLUMNS.update(saved[2])


def test_the_policy_sweep_measures_a_users_own_trace_and_cluster(own_study, tmp_path,
                                                                 capsys) -> None:  # fmt: skip
    root = Path(__file__).parents[2]
    lines = (root / "tests/data/traces/pollux_workload-6.csv").read_text().splitlines()
    trace = tmp_path / "mine.csv"
    trace.write_text("\n".join(lines[:31]) + "\n")
    out = tmp_path / "out"
    code = own_study.main(["--trace", str(trace), "--cluster", "leaf-spine-64", "--loads", "1.2",
                           "--replicas", "2", "--admission", "compact", "--workers", "1",
                           "--out", str(out)])  # fmt: skip
    assert code == 0
    text = (out / "cluster_policies-mine.md").read_text()
    assert "## mine, `compact` admission" in text and "## pollux-6" not in text
    assert (
        "`mine`: `mine.csv` (all 30 jobs) on `leaf-spine-64` (64 GPUs, 8 nodes of up to 8)" in text
    )
    assert "--trace " + str(trace) in text and "- mine `compact` load 1.20:" in text
    with open(out / "cluster_policies-mine" / "runs.csv") as fh:
        rows = list(csv.DictReader(fh))
    # every policy of the regime and the ceiling, twice, on the one study at the one load
    assert len(rows) == 2 * (len(own_study.policies_for("compact")) + 1)
    assert {r["trace"] for r in rows} == {"mine"} and {r["load"] for r in rows} == {"1.2"}
    assert (out / "cluster_policies-mine" / "mine-load.png").stat().st_size > 0
    # the report rewritten from its runs.csv says the same
    code = own_study.main(["--trace", str(trace), "--cluster", "leaf-spine-64", "--replicas",
                           "2", "--out", str(out), "--from-csv",
                           str(out / "cluster_policies-mine" / "runs.csv")])  # fmt: skip
    assert code == 0
    again = (out / "cluster_policies-mine.md").read_text()
    assert again.split("## Goals")[1] == text.split("## Goals")[1]


def test_the_policy_sweep_scales_to_the_load_in_the_window(own_study, tmp_path) -> None:
    root = Path(__file__).parents[2]
    lines = (root / "tests/data/traces/pollux_workload-6.csv").read_text().splitlines()
    trace = tmp_path / "mine.csv"
    trace.write_text("\n".join(lines[:31]) + "\n")
    out = tmp_path / "out"
    base = ["--trace", str(trace), "--cluster", "leaf-spine-64", "--replicas", "2",
            "--admission", "compact", "--workers", "1", "--out", str(out)]  # fmt: skip
    assert own_study.main([*base, "--loads", "0.6"]) == 0
    offered = (out / "cluster_policies-mine.md").read_text()
    # 30 jobs of up to 8 hours: at offered load 0.6 the window holds far less, and it says so
    row = next(x for x in offered.splitlines() if x.startswith("| mine | "))
    o, w = (float(v) for v in row.split("|")[2].split("/"))
    assert o == pytest.approx(0.6, abs=0.005) and w < 0.3
    assert "**Note.** `mine` at offered load 0.6" not in offered  # a sweep below 1 is not warned
    assert own_study.main([*base, "--loads", "1.0", "--replicas", "2"]) == 0
    assert (
        "**Note.** `mine` at offered load 1 demands only 0."
        in (out / "cluster_policies-mine.md").read_text()
    )
    assert own_study.main([*base, "--loads", "0.6", "--load-basis", "window"]) == 0
    window = (out / "cluster_policies-mine-window.md").read_text()
    assert "--load-basis window" in window and "demanded inside the arrival window" in window
    row = next(x for x in window.splitlines() if x.startswith("| mine | "))
    o2, w2 = (float(v) for v in row.split("|")[2].split("/"))
    assert w2 == pytest.approx(0.6, abs=0.005) and o2 > 1.5

    def queueing(folder: str) -> float:  # best fit's mean queueing delay over the replicas
        with open(out / folder / "runs.csv") as fh:
            return float(np.mean([float(r["queue_mean"]) for r in csv.DictReader(fh)
                                  if r["policy"] == "best-fit"]))  # fmt: skip

    assert queueing("cluster_policies-mine-window") > queueing("cluster_policies-mine")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--trace", "t.csv"], "--trace and --cluster go together"),
        (["--trace", "missing.csv", "--cluster", "leaf-spine-64"], "missing.csv"),
        (["--loads", "0.9,high"], "--loads: expected comma-separated numbers"),
        (["--loads", "0,1"], "--loads: expected positive"),
        (["--replicas", "1"], "--replicas: expected at least 2"),
        (["--name", "x"], "--columns and --name go with --trace"),
        (["--load-basis", "window", "--loads", "1000"], "window load 1000 is out of reach"),
    ],
)
def test_the_policy_sweep_refuses_bad_input_in_one_line(own_study, argv, says, capsys,
                                                        tmp_path) -> None:  # fmt: skip
    assert own_study.main([*argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("jobs", [100, 158, 160, 512])
def test_few_jobs_names_the_jcts_numpy_p99_lies_between(jobs) -> None:
    import re

    from benchmarks.cluster_policies import _few_jobs

    text = _few_jobs(jobs, 60.0)
    words = {"longest": 1, "2nd longest": 2, "3rd longest": 3}
    found = re.search(r"between a replica's (.+?) and (.+?) JCT", text)
    ranks = [words.get(g) or int(g.split("th")[0]) for g in found.groups()]
    jct = np.random.default_rng(jobs).permutation(np.arange(jobs, dtype=float) * 7 + 1)
    longest = np.sort(jct)[::-1]
    p99 = np.percentile(jct, 99)
    assert longest[ranks[0] - 1] <= p99 <= longest[ranks[1] - 1]
    assert ranks[0] == ranks[1] + 1 and "+1.0 min" in text
    assert _few_jobs(46_000, 60.0) == ""  # a p99 over many jobs needs no such note


def test_below_ceiling_says_why_only_where_the_baseline_beats_it_by_delaying_large_jobs() -> None:
    from benchmarks.cluster_policies import below_ceiling

    sizes = ["1 GPU", "2-7 GPUs", "8 GPUs", ">8 GPUs"]
    nan = float("nan")

    def stats(mean, large, mid=nan):
        return {"mean": (mean, mean, mean), "buckets": [(1.0,), (2.0,), (mid,), (large,)]}

    ours, ceiling = stats(100.0, 50.0), 110.0
    text = below_ceiling(ours, stats(80.0, 90.0), "spread", ceiling, sizes)
    assert "spread's mean is 27.3 % below the ceiling's and fgd's 9.1 % below" in text
    assert "jobs of >8 GPUs average 0.03 h against fgd's 0.01 h" in text
    above = below_ceiling(stats(120.0, 50.0), stats(80.0, 90.0), "spread", ceiling, sizes)
    assert "fgd's 9.1 % above" in above
    # a baseline not below the ceiling, one whose large jobs fare no worse, no ceiling: silent
    assert below_ceiling(ours, stats(115.0, 90.0), "spread", ceiling, sizes) == ""
    assert below_ceiling(ours, stats(108.0, 90.0), "spread", ceiling, sizes) == ""  # 1.8 %
    assert below_ceiling(ours, stats(80.0, 40.0), "spread", ceiling, sizes) == ""
    assert below_ceiling(ours, stats(80.0, 90.0), "spread", nan, sizes) == ""
    # the bucket above one GPU that rises the most is the evidence, and only beyond 2 %
    mid = below_ceiling(stats(100.0, 50.0, 36.0), stats(80.0, 60.0, 72.0), "spread", ceiling,
                        sizes)  # fmt: skip
    assert "jobs of 8 GPUs average 0.02 h against fgd's 0.01 h" in mid
    assert below_ceiling(ours, stats(80.0, 51.0), "spread", ceiling, sizes) == ""
    assert "jobs of 8 GPUs" in below_ceiling(stats(100.0, nan, 36.0), stats(80.0, nan, 72.0),
                                             "spread", ceiling, sizes)  # fmt: skip


def test_pollux_p99_is_set_by_its_long_yolov3_jobs() -> None:
    """The README's reading of Pollux's p99: the JCTs it lies between (the 3rd and 2nd longest
    of a replica's 158 jobs) are 8-hour, 4-GPU yolov3 runs, under fgd and under whole-nodes."""
    from benchmarks.cluster_policies import STUDIES, cluster_file, replica_jobs

    trace, cluster = STUDIES["pollux-6"]
    jobs = replica_jobs(trace, cluster, 1.4, 0, None)
    assert len(jobs) == 158
    for policy in ("fgd", "whole-nodes"):
        config = parse_policies([policy], SimConfig(queue="backfill"))[0]
        records = simulate(jobs, cluster_file(cluster), config).records
        tail = sorted(records, key=lambda r: -r.jct)[1:3]
        assert all(r.app == "yolov3" and r.gpus == 4 for r in tail), policy
        assert all(abs(r.ideal / 3600 - 8) < 0.5 for r in tail), policy
