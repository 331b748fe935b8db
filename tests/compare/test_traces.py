"""Job traces: the shipped samples, format detection, column mappings, bad rows."""

from __future__ import annotations

import pytest

from tests.compare.sim_helpers import TRACES
from tsched.compare.traces import detect_format, load_trace
from tsched.errors import InputError


# ---------------------------------------------------------------------------- traces
def test_real_traces_load_with_their_documented_counts() -> None:
    philly = load_trace(TRACES / "philly_jobs_pollux_2017-10-02_2017-10-30.csv")
    assert len(philly) == 46070
    assert philly[0].submit == 0.0 and all(
        a.submit <= b.submit for a, b in zip(philly, philly[1:], strict=False)
    )
    assert len({j.tenant for j in philly}) == 11
    assert {j.app for j in philly} == {"cifar10", "ncf", "bert", "imagenet"}
    pollux = load_trace(TRACES / "pollux_workload-6.csv")
    assert len(pollux) == 160 and max(j.gpus for j in pollux) == 48
    cifar = next(j for j in pollux if j.app == "cifar10")
    assert cifar.duration * cifar.gpus == pytest.approx(0.5 * 3600)
    ali = load_trace(TRACES / "alibaba_v2023_openb_pod_list_default.csv")
    assert 0 < len(ali) < 8152 and min(j.gpus for j in ali) >= 1
    assert load_trace(TRACES / "pollux_workload-6.csv", limit=5, max_gpus=8)[-1].gpus <= 8


def test_format_is_detected_from_the_header() -> None:
    assert detect_format(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"]) == "philly"
    assert detect_format(["name", "time", "application", "num_replicas", "batch_size"]) == "pollux"
    assert detect_format(["a", "b"]) == "generic"


POLLUX_HEAD = "name,time,application,num_replicas,batch_size\n"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("a,0,bert,2\n", r"t\.csv:2: 4 field\(s\), but the header has 5"),
        ("a,0,bert,2,64,x\n", r"t\.csv:2: 6 field\(s\), but the header has 5"),
        ("a,0,bert,1e400,64\n", r"t\.csv:2: num_replicas: expected a finite number >= 0"),
        ("a,0,bert,1.5,64\n", r"t\.csv:2: num_replicas: expected a whole number, got '1\.5'"),
        ("a,inf,bert,2,64\n", r"t\.csv:2: time: expected a finite number >= 0, got 'inf'"),
        ("a,0,bert,2,nan\n", r"t\.csv:2: batch_size: expected a finite number >= 0"),
        ('a,"0,bert,2,64\n', r"t\.csv:2: 2 field\(s\), but the header has 5"),
    ],
)
def test_bad_trace_rows_are_named_by_line_and_field(tmp_path, row, message) -> None:
    f = tmp_path / "t.csv"
    f.write_text(POLLUX_HEAD + row)
    with pytest.raises(InputError, match=message):
        load_trace(f)


def test_generic_trace_times_must_be_finite_and_header_names_may_be_padded(tmp_path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("id, start, n, secs\nj1, 10, 2, 100\nj2, nan, 1, 50\n")
    mapping = {"submit": "start", "gpus": "n", "duration": "secs", "name": "id"}
    with pytest.raises(InputError, match=r"t\.csv:3: start: expected a finite time, got ' nan'"):
        load_trace(f, mapping=mapping)
    f.write_text("id, start, n, secs\nj1, 10, 2, 100\n")
    assert [(j.name, j.gpus) for j in load_trace(f, mapping=mapping)] == [("j1", 2)]


def test_generic_csv_with_a_column_mapping(tmp_path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("id,start,n,secs,user\nj1,10,2,100,alice\nj2,5,1,50,bob\n")
    jobs = load_trace(f, mapping={"submit": "start", "gpus": "n", "duration": "secs",
                                  "name": "id", "tenant": "user"})  # fmt: skip
    assert [(j.name, j.submit, j.gpus, j.tenant) for j in jobs] == [
        ("j2", 0.0, 1, "bob"),
        ("j1", 5.0, 2, "alice"),
    ]
    with pytest.raises(InputError, match="not a known trace format"):
        load_trace(f)
    with pytest.raises(InputError, match=r"'duration' is required"):
        load_trace(f, mapping={"submit": "start", "gpus": "n"})
    with pytest.raises(InputError, match=r"column 'nope' \(for gpus\) not in header"):
        load_trace(f, mapping={"submit": "start", "gpus": "nope", "duration": "secs"})
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-02 00:00:00,x,1,1,a\n")
    with pytest.raises(InputError, match=r"bad.csv:2: duration: expected a number, got 'x'"):
        load_trace(bad)
