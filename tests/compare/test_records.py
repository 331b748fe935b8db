"""JCT records: CSV and JSON lines round trips."""

from __future__ import annotations

import pytest

from tsched.compare.records import (
    JobRecord,
    read_jsonl,
    read_records,
    write_jsonl,
    write_records,
)
from tsched.errors import InputError


# ---------------------------------------------------------------------------- records, report
def test_records_round_trip_csv_and_jsonl(tmp_path) -> None:
    recs = [
        JobRecord.of("greedy", "j1", 0.0, 1.5, 10.25, 4, nodes=2, tenant="t", app="bert",
                     domains=1, comm_share=0.25, preemptions=1, ideal=8.0),
        JobRecord.of("pack", "j2", 1.0, 1.0, 2.0, 1),
    ]  # fmt: skip
    write_records(recs, tmp_path / "r.csv")
    write_jsonl(recs, tmp_path / "r.jsonl")
    assert read_records(tmp_path / "r.csv") == recs
    assert read_jsonl(tmp_path / "r.jsonl") == recs
    assert recs[0].slowdown == pytest.approx(10.25 / 8.0)
    (tmp_path / "bad.jsonl").write_text('{"policy": "p"}\n')
    with pytest.raises(InputError, match="bad.jsonl:1: missing job"):
        read_jsonl(tmp_path / "bad.jsonl")
