"""The CLI, run in-process: exit codes, one JSON document, one-line errors, atomic output."""

from __future__ import annotations

import json

import pytest

from tests.conftest import MODELS, QAPLIB
from tsched.cli import main


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_default_solve_prints_a_plan(capsys) -> None:
    code, out, err = run(capsys, "solve")
    assert code == 0
    assert "llama3-8b-tp4-pp2-dp2 on dgx-h100-4node" in out and "status" in out
    assert "communication by link" in out


def test_solve_json_is_one_document(capsys, tmp_path) -> None:
    plan = tmp_path / "plan.json"
    code, out, err = run(capsys, "solve", "--json", "--method", "greedy", "-o", str(plan))
    assert code == 0
    doc = json.loads(out)
    assert doc["tsched"] == "plan/v1" and len(doc["assignment"]) == 16
    assert json.loads(plan.read_text()) == doc
    assert err == ""


def test_solve_with_files_and_option(capsys) -> None:
    code, out, _ = run(
        capsys,
        "solve",
        "--cluster",
        str(MODELS / "clusters/hgx-h200-16node.yaml"),
        "--workload",
        str(MODELS / "workloads/mixtral-8x22b-tp2-ep8-dp2.yaml"),
        "--method",
        "kai-tas",
        "--option",
        "required_level=leaf",
        "--json",
    )
    assert code == 0 and json.loads(out)["method"] == "kai-tas"


def test_infeasible_exits_1_and_writes_nothing(capsys, tmp_path) -> None:
    plan = tmp_path / "plan.json"
    code, out, err = run(
        capsys,
        "solve",
        "--workload",
        str(MODELS / "workloads/llama3-70b-tp8-pp4-dp4.yaml"),
        "-o",
        str(plan),
        "--quiet",
    )
    assert code == 1 and not plan.exists()
    assert "needs 128 GPUs" in err and err.count("\n") == 1


def test_infeasible_json_still_one_document(capsys) -> None:
    code, out, err = run(
        capsys,
        "solve",
        "--workload",
        str(MODELS / "workloads/llama3-70b-tp8-pp4-dp4.yaml"),
        "--json",
    )
    assert code == 1 and json.loads(out)["status"] == "infeasible"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["solve", "--cluster", "missing.yaml"], "missing.yaml: cluster file not found"),
        (
            ["solve", "--cluster", "gb200-nvl72-4rack"],
            "gb200-nvl72-4rack: no cluster file of that name, and no cluster preset either "
            "(presets: dgx-h100-4node, ",
        ),
        (
            ["solve", "--workload", "llama3-405b"],
            "llama3-405b: no workload file of that name, and no workload preset either",
        ),
        (["solve", "--method", "magic"], "unknown method 'magic'"),
        (["solve", "--time-limit", "-1"], "argument --time-limit: expected a number > 0, got '-1'"),
        (["solve", "--time-limit", "nan"], "argument --time-limit: expected a finite number"),
        (["solve", "--seed", "x"], "argument --seed: expected an integer, got 'x'"),
        (
            ["solve", "--method", "tabu", "--option", "iterations=1e400"],
            "option iterations=inf must be an integer 1 or more",
        ),
        (
            ["solve", "--method", "faq", "--option", "starts=1,2"],
            "option starts='1,2' must be an integer 1..100000",
        ),
        (
            ["solve", "--method", "greedy", "--option", "refine=x"],
            "option refine='x' must be true or false",
        ),
        (
            ["solve", "--method", "tabu", "--option", "hint=x"],
            "option hint='x' must be a location per worker",
        ),
        (
            ["solve", "--method", "bnb", "--option", "hint=0,1"],
            "option hint: assignment: expected 16 locations (one per worker), got shape (2,)",
        ),
        (
            ["compare", "--seeds", "100000", "--trace", "t.csv"],
            "argument --seeds: expected an integer in 1..1000, got '100000'",
        ),
        (
            [
                "agents",
                "simulate",
                "--workload",
                "swe",
                "--replicas",
                "0",
                "--capacity-tokens",
                "9",
                "--policies",
                "thunder",
                "--out",
                "o",
            ],
            "argument --replicas: expected an integer >= 1",
        ),
        (["solve", "--option", "x"], "expected KEY=VALUE"),
        (["solve", "--bogus"], "unrecognized arguments: --bogus"),
        (["qap", "nowhere.dat"], "nowhere.dat: QAPLIB instance file not found"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, args, message) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_yaml_names_line(capsys, tmp_path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("tsched: cluster/v1\nname: [\n")
    code, _, err = run(capsys, "solve", "--cluster", str(bad))
    assert code == 2 and f"{bad}:3:1: YAML syntax error" in err


def test_existing_output_survives_a_failed_solve(capsys, tmp_path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text("keep me")
    code, _, _ = run(capsys, "solve", "--workload", "no-such-workload.yaml", "-o", str(plan))
    assert code == 2 and plan.read_text() == "keep me"


def test_qap_json(capsys) -> None:
    code, out, _ = run(
        capsys, "qap", str(QAPLIB / "instances/nug12.dat"), "--json", "--method", "greedy"
    )
    doc = json.loads(out)
    assert code == 0 and doc["tsched"] == "qap-result/v1" and doc["n"] == 12
    assert sorted(doc["permutation"]) == list(range(12)) and doc["objective"] >= 578


def test_qap_and_solve_print_results_with_one_formatter(capsys) -> None:
    import re

    code, out, _ = run(capsys, "qap", str(QAPLIB / "instances/nug12.dat"), "--method", "greedy",
                       "--seed", "3")  # fmt: skip
    line = out.splitlines()[1]
    pattern = (r"status (optimal|feasible)  objective (\d+)  bound (\d+|unknown)  "
               r"gap (\d+\.\d\d%|unknown)  method greedy  (\d+\.\d{2,3}) s  seed 3")  # fmt: skip
    match = re.fullmatch(pattern, line)
    assert code == 0 and out.startswith("nug12: 12 facilities") and match, line
    assert int(match.group(2)) >= 578
    assert out.splitlines()[2].startswith("permutation (1-based, location of facility i): ")
    code, out, _ = run(capsys, "solve", "--method", "greedy")
    line = next(x for x in out.splitlines() if x.startswith("status "))
    assert re.fullmatch(r"status optimal  objective [\d.]+ s/iteration  bound [\d.]+ s  "
                        r"gap 0\.00%  method greedy  \d+\.\d{2,3} s", line), line  # fmt: skip


def test_human_numbers_and_times() -> None:
    from tsched.cli._common import format_number, format_seconds

    assert [format_number(x) for x in (578.0, 21329310.0, 1.946581234, 0.0)] == [
        "578", "21329310", "1.94658", "0"]  # fmt: skip
    assert [format_seconds(t) for t in (0.0109, 2.000081, 123.4)] == ["0.011 s", "2.00 s", "123 s"]


def test_methods_and_presets(capsys) -> None:
    code, out, _ = run(capsys, "methods", "--json")
    names = {row["name"] for row in json.loads(out)}
    assert code == 0 and {"auto", "greedy", "pack", "spread", "random", "kai-tas"} <= names
    code, out, _ = run(capsys, "presets", "--json")
    rows = json.loads(out)
    assert {"dgx-h100-4node", "llama3-8b-tp4-pp2-dp2"} <= {r["name"] for r in rows}
    code, out, _ = run(capsys, "methods")
    assert "installed?" in out


def test_every_preset_loads() -> None:
    import tsched

    for name in tsched.presets.CLUSTERS:
        assert tsched.presets.cluster(name).n_gpus > 0
    for name in tsched.presets.WORKLOADS:
        assert tsched.presets.workload(name).workers > 0
