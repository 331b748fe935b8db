"""Consolidation in the replay: a large job blocked by fragments starts once running jobs move;
moves keep progress and pay the restart; protection, move limits and KAI's rules hold."""

from __future__ import annotations

import pytest

from tsched.compare.records import read_records, write_records
from tsched.compare.runner import parse_policies
from tsched.compare.simulator import SimConfig, simulate
from tsched.compare.traces import TraceJob
from tsched.errors import InputError
from tsched.formats.cluster_yaml import cluster_from_dict

CLUSTER = cluster_from_dict({
    "tsched": "cluster/v1", "name": "two-by-four",
    "links": {"nvlink": {"bandwidth": 450, "latency": 2}, "leaf": {"bandwidth": 50, "latency": 5}},
    "levels": ["leaf"],
    "node_types": {"box": {"gpus": 4, "gpu": {"model": "H100"}, "intra": "nvlink"}},
    "nodes": [{"name": f"n{i}", "type": "box", "at": {"leaf": "l0"}} for i in range(2)],
})  # fmt: skip


def fragmented(long: float = 20_000.0) -> list[TraceJob]:
    """Best fit packs a and b on n0, c and e on n1; a and c end at 500 s, leaving two GPUs free
    on each node; d (4 GPUs) arrives at 1,000 s and fits nowhere."""
    return [TraceJob("a", 0, 2, 500.0, "bert"), TraceJob("b", 1, 2, long, "bert"),
            TraceJob("c", 2, 2, 500.0, "bert"), TraceJob("e", 3, 2, long, "bert"),
            TraceJob("d", 1000, 4, 100.0, "bert")]  # fmt: skip


def run(consolidate: str, jobs=None, **over):
    settings = {"restart_cost": 60.0, "min_runtime": 600.0, **over}
    cfg = SimConfig(policy="best-fit", admission="compact", consolidate=consolidate, **settings)
    return {r.job: r for r in simulate(jobs or fragmented(), CLUSTER, cfg).records}


@pytest.mark.parametrize("rule", ["tsched", "kai"])
def test_a_blocked_large_job_starts_once_a_running_job_moves(rule: str) -> None:
    none, moved = run("none"), run(rule)
    assert none["d"].queue_delay > 15_000  # it waited for a long job to end
    assert moved["d"].queue_delay == 0.0  # it started on arrival
    movers = [r for r in moved.values() if r.migrations]
    assert len(movers) == 1 and movers[0].job in ("b", "e")
    mover = movers[0]
    # the move kept its progress and paid the restart: 60 s later than without it
    assert mover.end == pytest.approx(none[mover.job].end + 60.0, abs=1e-6)
    assert mover.restart_gpu_s == pytest.approx(60.0 * 2)
    assert sum(r.restart_gpu_s for r in moved.values()) == pytest.approx(120.0)
    if rule == "kai":  # the victims queue: the latest submitted job goes first
        assert mover.job == "e"


def test_protected_jobs_wait_for_their_protection_to_end() -> None:
    """With 2,000 s of protection the blockers cannot move at 1,000 s; a wake-up at the end of
    the first one's protection (2,001 s) moves it then."""
    got = run("tsched", min_runtime=2000.0)
    assert got["d"].start == pytest.approx(2001.0)
    assert sum(r.migrations for r in got.values()) == 1


def test_no_job_moves_more_than_max_moves() -> None:
    assert sum(r.migrations for r in run("tsched", max_moves=0).values()) == 0
    assert run("tsched", max_moves=0)["d"].queue_delay > 15_000


def test_tsched_weighs_the_restart_against_the_wait_kai_does_not() -> None:
    """Blockers that end 200 s after d arrives: waiting costs d 4 × 200 GPU-s, a move 2 × 900
    GPU-s of restart. tsched waits; KAI moves anyway."""
    jobs = fragmented(long=1200.0)
    tsched_run = run("tsched", jobs=jobs, restart_cost=900.0)
    kai_run = run("kai", jobs=jobs, restart_cost=900.0)
    assert sum(r.migrations for r in tsched_run.values()) == 0
    assert sum(r.migrations for r in kai_run.values()) == 1


def test_kai_does_not_consolidate_under_spread() -> None:
    jobs = [TraceJob("a", 0, 1, 20_000.0, "bert"), TraceJob("b", 1, 1, 20_000.0, "bert"),
            TraceJob("d", 1000, 4, 100.0, "bert")]  # fmt: skip
    cfg = dict(admission="compact", restart_cost=60.0, min_runtime=600.0)
    spread_kai = simulate(jobs, CLUSTER, SimConfig(policy="spread", consolidate="kai", **cfg))
    spread_ts = simulate(jobs, CLUSTER, SimConfig(policy="spread", consolidate="tsched", **cfg))
    assert sum(r.migrations for r in spread_kai.records) == 0
    assert sum(r.migrations for r in spread_ts.records) == 1


def test_policies_name_their_consolidation_and_records_keep_the_moves(tmp_path) -> None:
    configs = parse_policies("best-fit,best-fit+kai,fgd+slack0.25+tsched",
                             SimConfig(admission="compact"))  # fmt: skip
    assert [c.consolidate for c in configs] == ["none", "kai", "tsched"]
    assert [c.label for c in configs] == ["best-fit", "best-fit+kai", "fgd+slack0.25+tsched"]
    with pytest.raises(InputError, match="consolidate 'later'"):
        SimConfig(consolidate="later")
    with pytest.raises(InputError, match="needs compact admission"):
        parse_policies("best-fit+tsched", SimConfig(admission="any"))
    cfg = SimConfig(policy="best-fit", admission="compact", consolidate="tsched", restart_cost=60)
    result = simulate(fragmented(), CLUSTER, cfg)
    write_records(result.records, tmp_path / "records.csv")
    again = read_records(tmp_path / "records.csv")
    assert [r.migrations for r in again] == [r.migrations for r in result.records]
    assert sum(r.migrations for r in again) == 1
    assert "migrations" in (tmp_path / "records.csv").read_text().splitlines()[0]
