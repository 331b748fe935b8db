"""The comparison report."""

from __future__ import annotations

import json

import pytest

from tests.compare.sim_helpers import job, run
from tsched.compare.report import write_report


def test_write_report_without_plots(tmp_path) -> None:
    jobs = [job("a", 0, 1, 10), job("b", 0, 1, 20)]
    _, res = run(jobs, "fifo")
    paths = write_report(tmp_path, [res], usable_gpus=4, title="t", plots=False)
    assert {p.name for p in paths} == {"records.csv", "records.jsonl", "summary.json",
                                       "report.md"}  # fmt: skip
    s = json.loads((tmp_path / "summary.json").read_text())["runs"][0]
    assert s["jct_mean"] == 15.0 and s["makespan"] == 20.0
    assert s["utilisation"] == pytest.approx(30 / (4 * 20))
