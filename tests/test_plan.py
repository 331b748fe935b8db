from __future__ import annotations

import json

import pytest

import tsched
from tests.conftest import small_cluster
from tsched.errors import InputError
from tsched.plan import Plan, plan_table, read_plan, relative_gap, write_plan
from tsched.problem import PlacementProblem
from tsched.workload import Workload


def _plan() -> Plan:
    w = Workload.from_edges("pair", 3, [(0, 1, 4.0), (1, 2, 1.0)])
    result = tsched.solve(PlacementProblem.build(small_cluster(), w), method="greedy")
    return result.plan()


def test_plan_round_trip(tmp_path) -> None:
    plan = _plan()
    path = tmp_path / "plan.json"
    write_plan(plan, path)
    back = read_plan(path)
    assert back == plan
    doc = json.loads(path.read_text())
    assert doc["tsched"] == "plan/v1" and doc["cost_by_link"] == {"nvlink": pytest.approx(5 / 400)}
    assert {e["node"] for e in doc["assignment"]} == {"n0"}


def test_plan_json_matches_design_keys() -> None:
    doc = _plan().to_dict()
    assert list(doc) == [
        "tsched",
        "cluster",
        "workload",
        "status",
        "objective",
        "bound",
        "gap",
        "method",
        "wall_time",
        "seed",
        "assignment",
        "cost_by_link",
        "message",
    ]


def test_read_plan_errors(tmp_path) -> None:
    path = tmp_path / "p.json"
    path.write_text("{")
    with pytest.raises(InputError, match=r"p\.json:1:2: JSON syntax error"):
        read_plan(path)
    doc = _plan().to_dict()
    doc["assignment"][1]["worker"] = 0
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"assignment\[1\]\.worker: worker 0 appears twice"):
        read_plan(path)
    doc = _plan().to_dict()
    doc["status"] = "great"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"status: unknown value 'great'"):
        read_plan(path)


def test_write_plan_keeps_old_file_on_failure(tmp_path, monkeypatch) -> None:
    path = tmp_path / "plan.json"
    path.write_text("old")
    plan = _plan()

    def boom(self, indent=2):
        raise RuntimeError("disk full")

    monkeypatch.setattr(Plan, "to_json", boom)
    with pytest.raises(RuntimeError):
        write_plan(plan, path)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_relative_gap() -> None:
    assert relative_gap(10.0, 9.0) == pytest.approx(0.1)
    assert relative_gap(0.0, 0.0) == 0.0
    assert relative_gap(5.0, None) is None


def test_plan_table_groups_by_node() -> None:
    from rich.console import Console

    console = Console(record=True, width=120)
    console.print(plan_table(_plan()))
    text = console.export_text()
    assert "n0" in text and "0,1,2" in text
