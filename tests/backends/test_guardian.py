"""Process guardian with real processes: health gate, restarts with backoff, SIGTERM → SIGKILL,
owner death, lease expiry — and no process left behind on any path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tsched.backends.dynamo import free_port
from tsched.backends.guardian import GuardSpec, Lease, group_alive, launch
from tsched.backends.guardian import pid_alive as alive
from tsched.errors import InputError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux prctl")

ENGINE = textwrap.dedent(
    """
    import http.server, os, signal, subprocess, sys, time
    mode = sys.argv[1]
    with open(os.environ["PIDFILE"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    if mode == "crash":
        time.sleep(0.1)
        sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
        with open(os.environ["PIDFILE"], "a") as f:
            f.write(f"{child.pid}\\n")
    if mode == "sleep":
        time.sleep(600)

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
            self.wfile.write(b"ready")
        def log_message(self, *a):
            pass

    http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
    """
)


def spec_for(tmp_path: Path, mode: str, **kw) -> tuple[GuardSpec, int]:
    engine = tmp_path / "engine.py"
    engine.write_text(ENGINE)
    port = free_port()
    defaults = dict(
        name=f"engine-{mode}",
        argv=(sys.executable, str(engine), mode),
        env={"PIDFILE": str(tmp_path / "pids"), "PORT": str(port)},
        checks=({"url": f"http://127.0.0.1:{port}/health", "contains": "ready"},),
        health_timeout=15.0,
        receipt=str(tmp_path / "receipt.json"),
        stop_timeout=1.0,
        backoff=0.3,
    )
    defaults.update(kw)
    return GuardSpec(**defaults), port


def pids(tmp_path: Path) -> list[int]:
    f = tmp_path / "pids"
    return [int(x) for x in f.read_text().split()] if f.exists() else []


def receipt(tmp_path: Path) -> dict:
    f = tmp_path / "receipt.json"
    return json.loads(f.read_text()) if f.exists() else {}


def wait_for(cond, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def run_guardian(tmp_path):
    procs: list[subprocess.Popen] = []

    def start(spec: GuardSpec) -> subprocess.Popen:
        proc = launch(spec, tmp_path / f"{spec.name}.json")
        procs.append(proc)
        return proc

    yield start
    for proc in procs:  # never leave a guardian behind, even when a test fails
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    leftovers = [p for p in pids(tmp_path) if alive(p)]
    for p in leftovers:
        os.kill(p, signal.SIGKILL)
    assert leftovers == [], f"processes left behind: {leftovers}"


def test_health_gated_start_then_clean_stop(tmp_path, run_guardian) -> None:
    spec, port = spec_for(tmp_path, "serve")
    guardian = run_guardian(spec)
    assert wait_for(lambda: receipt(tmp_path).get("healthy_at"))
    engine = pids(tmp_path)[0]
    assert alive(engine) and os.getpgid(engine) == engine  # its own process group
    guardian.send_signal(signal.SIGTERM)
    assert guardian.wait(15) == 0
    r = receipt(tmp_path)
    assert r["end_reason"] == "stopped" and r["stop"] == {"sigterm": True, "sigkill": False}
    assert r["runs"][0]["pid"] == engine and r["runs"][0]["exit_code"] == -signal.SIGTERM
    assert not alive(engine)


def test_unhealthy_engine_is_stopped_and_reported(tmp_path, run_guardian) -> None:
    spec, _ = spec_for(tmp_path, "sleep", health_timeout=1.0)
    guardian = run_guardian(spec)
    assert guardian.wait(20) == 1
    r = receipt(tmp_path)
    assert r["end_reason"] == "unhealthy" and r["healthy_at"] is None
    assert not any(alive(p) for p in pids(tmp_path))


def test_restarts_with_backoff_then_gives_up(tmp_path, run_guardian) -> None:
    spec, _ = spec_for(tmp_path, "crash", checks=(), max_restarts=2, backoff=0.4)
    guardian = run_guardian(spec)
    assert guardian.wait(30) == 1
    r = receipt(tmp_path)
    assert r["end_reason"] == "gave-up" and r["restarts"] == 2
    assert [run["exit_code"] for run in r["runs"]] == [3, 3, 3]
    gaps = [b["started"] - a["ended"] for a, b in zip(r["runs"], r["runs"][1:], strict=False)]
    assert gaps[0] >= 0.4 and gaps[1] >= 0.8  # exponential backoff
    never, _ = spec_for(tmp_path, "crash", checks=(), restart="never", name="once")
    assert run_guardian(never).wait(20) == 1
    assert receipt(tmp_path)["end_reason"] == "failed"


def test_sigterm_ignored_escalates_to_sigkill_for_the_whole_group(tmp_path, run_guardian) -> None:
    spec, _ = spec_for(tmp_path, "stubborn", stop_timeout=1.0)
    guardian = run_guardian(spec)
    assert wait_for(lambda: receipt(tmp_path).get("healthy_at") and len(pids(tmp_path)) == 2)
    engine, grandchild = pids(tmp_path)
    assert os.getpgid(grandchild) == engine
    guardian.send_signal(signal.SIGTERM)
    assert guardian.wait(20) == 0
    r = receipt(tmp_path)
    assert r["stop"] == {"sigterm": True, "sigkill": True}
    assert wait_for(lambda: not alive(engine) and not alive(grandchild), 5)
    assert not group_alive(engine)


def test_owner_killed_with_sigkill_takes_the_engine_down(tmp_path) -> None:
    spec, _ = spec_for(tmp_path, "serve")
    owner_script = tmp_path / "owner.py"
    owner_script.write_text(textwrap.dedent(f"""
        import time
        from tsched.backends.guardian import GuardSpec, launch
        spec = GuardSpec.from_json(open({str(tmp_path / 'spec.json')!r}).read())
        launch(spec, {str(tmp_path / 'guardian.json')!r})
        time.sleep(600)
    """))  # fmt: skip
    (tmp_path / "spec.json").write_text(spec.to_json())
    owner = subprocess.Popen([sys.executable, str(owner_script)])
    try:
        assert wait_for(lambda: receipt(tmp_path).get("healthy_at"))
        engine = pids(tmp_path)[0]
        owner.kill()  # SIGKILL: the owner gets no chance to clean up
        owner.wait()
        assert wait_for(lambda: not alive(engine), 10)
        assert wait_for(lambda: receipt(tmp_path).get("end_reason") == "owner-gone", 10)
    finally:
        if owner.poll() is None:
            owner.kill()
        for p in pids(tmp_path):
            if alive(p):
                os.kill(p, signal.SIGKILL)
    assert not any(alive(p) for p in pids(tmp_path))


def test_expired_lease_stops_the_engine(tmp_path, run_guardian) -> None:
    lease = Lease(tmp_path / "lease")
    spec, _ = spec_for(tmp_path, "serve", lease_file=str(lease.path), lease_timeout=1.0)
    guardian = run_guardian(spec)

    def healthy() -> bool:  # the owner beats while it waits, as a real one does
        lease.beat()
        return bool(receipt(tmp_path).get("healthy_at"))

    assert wait_for(healthy)
    for _ in range(15):  # 1.5 s of beats: longer than the timeout, still alive
        lease.beat()
        time.sleep(0.1)
    assert guardian.poll() is None and alive(pids(tmp_path)[0])
    t0 = time.monotonic()
    assert guardian.wait(15) == 0  # no more beats
    assert time.monotonic() - t0 < 5
    assert receipt(tmp_path)["end_reason"] == "lease-expired"
    assert not alive(pids(tmp_path)[0])


def test_bad_specs_are_refused(tmp_path) -> None:
    with pytest.raises(InputError, match="restart 'sometimes'"):
        GuardSpec("x", ("true",), restart="sometimes")
    with pytest.raises(InputError, match="argv is empty"):
        GuardSpec("x", ())
    with pytest.raises(InputError, match=r"checks\[0\] needs a url"):
        GuardSpec("x", ("true",), checks=({"body": {}},))
    spec = GuardSpec("x", ("true",), env={"A": "1"}, checks=({"url": "http://h/health"},))
    assert GuardSpec.from_json(spec.to_json()) == spec
    with pytest.raises(InputError, match="not a guardian spec"):
        GuardSpec.from_json("{}")
