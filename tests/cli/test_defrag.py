"""``tsched defrag``: the table, --json, -o (defrag/v1 read back), --picture, and one-line
refusals that leave no file behind."""

from __future__ import annotations

import json

import pytest

import tsched
from tsched.cli import main
from tsched.defrag import read_defrag


@pytest.fixture
def running(tmp_path):
    """leaf-spine-64 (8 nodes of 8 GPUs), every node holding a 5-GPU job at 600 s, a 1-GPU job
    at 60 s and another at 120 s: one GPU free on each."""
    cluster = tsched.load_cluster("leaf-spine-64")
    rows = ["job,node,gpu,restart_seconds"]
    for i, node in enumerate(n.name for n in cluster.nodes):
        rows += [f"big{i},{node},{g},600" for g in range(5)]
        rows += [f"small{i},{node},5,60", f"mid{i},{node},6,120"]
    path = tmp_path / "running.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_defrag_prints_a_table_and_writes_the_plan_and_picture(running, tmp_path, capsys) -> None:
    out, png = tmp_path / "plan.json", tmp_path / "plan.png"
    code = main(["defrag", "--cluster", "leaf-spine-64", "--running", str(running), "--gpus",
                 "3", "-o", str(out), "--picture", str(png)])  # fmt: skip
    said = capsys.readouterr().out
    assert code == 0 and "optimal" in said and "cost 180 GPU-s" in said
    assert "small0" in said and "mid0" in said and "waiting job: node01:5-7" in said
    plan = read_defrag(out)
    assert plan.status == "optimal" and plan.cost == 180.0 and plan.gap == 0.0
    assert sorted(m.job for m in plan.moves) == ["mid0", "small0"]
    assert plan.target == (("node01", 5), ("node01", 6), ("node01", 7))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["defrag", "--cluster", "leaf-spine-64", "--running", str(running), "--gpus",
                 "3", "--json"]) == 0  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert doc["tsched"] == "defrag/v1" and doc["cost"] == 180.0


def test_no_room_at_all_exits_1_with_the_reason(running, capsys) -> None:
    code = main(["defrag", "--cluster", "leaf-spine-64", "--running", str(running),
                 "--gpus", "12", "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["status"] == "infeasible" and doc["target"] == []
    assert "12 GPUs wanted, 8 free in all" in doc["message"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--gpus", "65"], "gpus: 65 GPUs wanted, cluster 'leaf-spine-64' has 64"),
        (["--gpus", "0"], "--gpus: expected an integer >= 1"),
        (["--gpus", "2", "--admission", "whole"], "--admission: invalid choice"),
        (["--gpus", "2", "-o", "nowhere/plan.json"], "-o nowhere/plan.json: folder nowhere"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(running, tmp_path, capsys, args, said) -> None:
    before = set(tmp_path.iterdir())
    code = main(["defrag", "--cluster", "leaf-spine-64", "--running", str(running), *args])
    err = capsys.readouterr().err
    assert code == 2 and said in err and err.count("\n") == 1
    assert set(tmp_path.iterdir()) == before


def test_a_bad_running_file_names_its_row(running, tmp_path, capsys) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(running.read_text() + "x,node01,9,60\n")
    out = tmp_path / "plan.json"
    code = main(["defrag", "--cluster", "leaf-spine-64", "--running", str(bad), "--gpus", "2",
                 "-o", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and f"{bad}: row 58: field gpu: node 'node01' has GPUs 0..7, not 9" in err
    assert not out.exists()
