"""tsched agents simulate and serve from the command line."""

from __future__ import annotations

import json

import pytest

from tsched.cli import main


# ---------------------------------------------------------------- CLI
def test_cli_simulate_writes_summary_records_and_plots(tmp_path, capsys):
    out = tmp_path / "sim"
    code = main([
        "agents", "simulate", "--workload", "swe", "--engine", "prefill-heavy", "--replicas", "2",
        "--capacity-tokens", "40000", "--policies", "round-robin,tsched", "--seeds", "2",
        "--concurrency", "4,8", "--programs", "8", "--out", str(out), "--json",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0
    summary = json.loads(captured.out)
    assert set(summary) == {"round-robin", "tsched"}
    for entry in summary.values():
        assert {"steps_per_min", "programs_per_hour", "output_tokens_per_s", "cache_hit_rate",
                "recomputed_tokens", "p50_step_s", "p99_step_s", "kv_imbalance",
                "fairness"} <= set(entry)  # fmt: skip
        assert entry["seeds"] == 2 and set(entry["by_concurrency"]) == {"4", "8"}
    assert json.loads((out / "summary.json").read_text()) == summary
    header = (out / "records.csv").read_text().splitlines()[0]
    assert header.startswith("concurrency,policy,seed,program,turn,replica")
    for name in ("throughput.png", "cache_hit_rate.png", "kv_imbalance.png", "step_latency.png"):
        assert (out / name).stat().st_size > 1000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "fifo"], "--policies: unknown agentic policy 'fifo'"),
        (["--workload", "nope"], "nope: not an agentic workload preset"),
        (["--capacity-tokens", "8"], "--capacity-tokens: expected at least one KV block"),
        (["--concurrency", "4,x"], "--concurrency: expected whole numbers"),
    ],
)
def test_cli_simulate_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, message):
    base = {"--workload": "swe", "--replicas": "1", "--capacity-tokens": "40000",
            "--policies": "tsched", "--out": str(tmp_path / "o")}  # fmt: skip
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    args = ["agents", "simulate", *[x for kv in base.items() for x in kv]]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_cli_serve_starts_answers_health_and_stops_on_sigterm(tmp_path):
    import signal
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    from tsched.backends.dynamo import free_port

    port = free_port()
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tsched", "agents", "serve", "--backend", "http://127.0.0.1:9",
         "--capacity-tokens", "1000", "--port", str(port), "--token-file", str(token)],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = proc.stderr.readline()
        assert f"tsched proxy on http://127.0.0.1:{port}" in line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            health = json.loads(resp.read())
        assert health["status"] == "ok" and health["policy"] == "tsched"
        req = urllib.request.Request(f"http://127.0.0.1:{port}/programs")
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(req, timeout=5)
        req.add_header("Authorization", "Bearer t0ken")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert json.loads(resp.read())["programs"] == []
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policy", "lifo"], "--policy: unknown agentic policy 'lifo'"),
        (["--backend", "localhost:80"], "--backend 'localhost:80': expected http://HOST:PORT"),
        (["--capacity-tokens", "10,20"], "--capacity-tokens: 2 values for 1 backends"),
        (["--token-file", "/nonexistent/t"], "--token-file /nonexistent/t: cannot read"),
        (["--backend", "http://127.0.0.1:9#inst=3"], "after '#' expected instance=<Dynamo"),
        (["--dynamo-frontend", "http://127.0.0.1:9"], "give the replicas as --backend URL"),
    ],
)
def test_cli_serve_bad_input_is_one_line_exit_2(capsys, argv, message):
    base = {"--backend": "http://127.0.0.1:9", "--capacity-tokens": "1000"}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    assert main(["agents", "serve", *[x for kv in base.items() for x in kv]]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_serve_on_a_taken_port_says_so_in_one_line(capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["agents", "serve", "--backend", "http://127.0.0.1:9", "--capacity-tokens",
                "1000", "--port", str(port)]  # fmt: skip
        assert main(argv) == 3
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "in use" in err
    assert err.count("\n") == 1
