"""Running-jobs CSV: read against the cluster model, every refusal naming file, row and field."""

from __future__ import annotations

import pytest

import tsched
from tsched.errors import InputError
from tsched.formats.running_csv import parse_running, read_running, write_running

HEAD = "job,node,gpu,restart_seconds,movable\n"


@pytest.fixture
def cluster() -> tsched.Cluster:
    return tsched.load_cluster("dgx-h100-4node")  # node002 GPUs 0 and 1 are busy


def test_rows_become_jobs_with_their_costs(cluster, tmp_path) -> None:
    text = HEAD + "a,node001,0,600,1\na,node001,1,600,1\nb,node003,2,,0\nc,node004,5,,\n"
    state = parse_running(text, cluster, "jobs.csv", restart_cost=120)
    jobs = {j.name: j for j in state.jobs}
    assert jobs["a"].gpus == (0, 1) and jobs["a"].weight == 1200.0
    assert jobs["b"].restart_seconds == 120 and not jobs["b"].movable
    assert jobs["c"].movable and jobs["c"].gpus == (cluster.gpu_id("node004", 5),)
    assert int(state.free_mask().sum()) == 32 - 2 - 4  # two busy in the model, four held
    write_running(state, tmp_path / "again.csv")  # a round trip keeps everything
    again = read_running(tmp_path / "again.csv", cluster)
    assert again.jobs == state.jobs


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "empty; expected a header row job,node,gpu"),
        ("job,node\n", "row 1: missing column 'gpu'"),
        ("job,node,gpu,colour\n", "row 1: unknown column 'colour'"),
        ("job,node,gpu,gpu\n", "row 1: a column is named twice"),
        ("job,node,gpu\na,node009,0\n", "row 2: field node: unknown node 'node009'"),
        ("job,node,gpu\na,node001,8\n", "row 2: field gpu: node 'node001' has GPUs 0..7, not 8"),
        ("job,node,gpu\na,node001,x\n", "row 2: field gpu: expected an integer, got 'x'"),
        ("job,node,gpu\na,node001,0\nb,node001,0\n",
         "row 3: field gpu: node001 GPU 0 is held twice (row 2, job 'a')"),
        ("job,node,gpu\na,node002,1\n", "row 2: field gpu: job 'a' on node002 GPU 1, which the "
         "cluster model marks busy"),
        (HEAD + "a,node001,0,60,1\na,node001,1,90,1\n",
         "row 3: field restart_seconds: job 'a' has 60.0 on row 2 and 90.0 here"),
        (HEAD + "a,node001,0,-5,1\n", "row 2: field restart_seconds: expected a number >= 0"),
        (HEAD + "a,node001,0,nan,1\n", "row 2: field restart_seconds: expected a number >= 0"),
        (HEAD + "a,node001,0,60,yes\n", "row 2: field movable: expected 1 or 0, got 'yes'"),
        ("job,node,gpu\na,node001\n", "row 2: 2 fields, the header has 3"),
        ("job,node,gpu\n,node001,0\n", "row 2: field job: empty"),
    ],
)  # fmt: skip
def test_bad_rows_are_refused_with_file_row_and_field(cluster, text, said) -> None:
    with pytest.raises(InputError) as info:
        parse_running(text, cluster, "jobs.csv")
    message = str(info.value)
    assert message.startswith("jobs.csv: ") and said in message and "\n" not in message


def test_a_missing_or_binary_file_is_refused(cluster, tmp_path) -> None:
    with pytest.raises(InputError, match="running-jobs CSV file not found"):
        read_running(tmp_path / "nope.csv", cluster)
    (tmp_path / "bin.csv").write_bytes(b"job,node,gpu\n\x00\x01")
    with pytest.raises(InputError, match="bin.csv: not a CSV text file"):
        read_running(tmp_path / "bin.csv", cluster)
