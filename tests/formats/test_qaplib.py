from __future__ import annotations

import csv

import numpy as np
import pytest

from tests.conftest import QAPLIB
from tsched.errors import InputError
from tsched.formats.qaplib import qap_cost, read_dat, read_sln
from tsched.problem import PlacementProblem, objective


def test_nug12_value_and_problem_objective_agree() -> None:
    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    sol = read_sln(QAPLIB / "solutions" / "nug12.sln", inst)
    assert inst.n == 12 and sol.stated_value == 578 and sol.verified_value == 578
    assert sol.convention == "direct" and sol.base == 1
    problem = PlacementProblem.from_qap(inst.flow, inst.distance)
    assert objective(problem, sol.permutation) == 578


@pytest.mark.parametrize(
    ("name", "convention", "base", "value"),
    [
        ("kra30a", "inverse", 1, 88900),
        ("tai40a", "direct", 0, 3139370),
        ("chr25a", "direct", 1, 3796),
    ],
)
def test_sln_quirks(name: str, convention: str, base: int, value: int) -> None:
    inst = read_dat(QAPLIB / "instances" / f"{name}.dat")
    sol = read_sln(QAPLIB / "solutions" / f"{name}.sln", inst)
    assert (sol.convention, sol.base, sol.verified_value) == (convention, base, value)
    assert qap_cost(inst.flow, inst.distance, sol.permutation) == value


def test_wrong_header_value_is_reported_not_trusted(tmp_path) -> None:
    inst = read_dat(QAPLIB / "instances" / "nug12.dat")
    text = (QAPLIB / "solutions" / "nug12.sln").read_text().split()
    (tmp_path / "nug12.sln").write_text(" ".join(["12", "600", *text[2:]]))
    sol = read_sln(tmp_path / "nug12.sln", inst)
    assert sol.stated_value == 600 and sol.verified_value == 578 and sol.convention == "direct"


def test_every_solution_matches_the_index() -> None:
    with open(QAPLIB / "index.csv") as handle:
        rows = list(csv.DictReader(handle))
    checked = 0
    for row in rows:
        if int(row["n"]) > 40 or not (QAPLIB / "solutions" / f"{row['instance']}.sln").exists():
            continue
        inst = read_dat(QAPLIB / "instances" / f"{row['instance']}.dat")
        sol = read_sln(QAPLIB / "solutions" / f"{row['instance']}.sln", inst)
        assert sol.verified_value == int(row["sln_verified_objective"]), row["instance"]
        assert sol.convention == row["sln_perm_convention"], row["instance"]
        checked += 1
    assert checked > 80


def test_linear_term_of_nonzero_diagonals() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, (5, 5)), rng.integers(0, 5, (5, 5))
    p = rng.permutation(5)
    problem = PlacementProblem.from_qap(a, b)
    assert objective(problem, p) == qap_cost(a, b, p)


def test_dat_errors(tmp_path) -> None:
    short = tmp_path / "short.dat"
    short.write_text("3\n1 2 3\n4 5 6\n")
    with pytest.raises(
        InputError,
        match=r"short\.dat: too few numbers: n=3 needs 18 matrix "
        r"entries after n, found 6",
    ):
        read_dat(short)
    bad = tmp_path / "bad.dat"
    bad.write_text("1\n1 x\n")
    with pytest.raises(InputError, match=r"matrix entries must be integers, got 'x'"):
        read_dat(bad)
    with pytest.raises(InputError, match=r"missing\.dat: QAPLIB instance file not found"):
        read_dat(tmp_path / "missing.dat")
    wrong = tmp_path / "w.sln"
    wrong.write_text("3 10\n1 1 2\n")
    with pytest.raises(InputError, match=r"not a permutation of 1\.\.3"):
        read_sln(wrong)
