"""The proxy's replicas: pinned Dynamo workers, restarts, calls while no backend is up."""

from __future__ import annotations

import json

import pytest

from tsched.cli import main
from tsched.errors import InputError


def test_backend_pins_parse_and_a_frontend_without_workers_is_named(capsys):
    from tsched.agentic.proxy import split_backend

    assert split_backend("http://h:1/") == ("http://h:1", None)
    assert split_backend("http://h:1#instance=42") == ("http://h:1", 42)
    with pytest.raises(InputError, match="does not fit 64 bits"):
        split_backend(f"http://h:1#instance={1 << 64}")
    argv = ["agents", "serve", "--dynamo-frontend", "http://127.0.0.1:9", "--replicas", "2",
            "--discovery-timeout", "0.3", "--capacity-tokens", "1000"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--dynamo-frontend http://127.0.0.1:9: wanted 2 serving workers after 0.3 s" in err
    assert err.count("\n") == 1


def test_a_pinned_replica_comes_back_under_a_restarted_workers_new_instance_id():
    from tsched.agentic.proxy import ProxySettings, ProxyState

    state = ProxyState(ProxySettings(("http://f:1#instance=11", "http://f:1#instance=22"),
                                 (1000, 1000)))  # fmt: skip

    def health(*instances):
        return json.dumps({"instances": [
            {"component": c, "endpoint": "generate", "namespace": "ns", "instance_id": i}
            for c, i in instances]}).encode()  # fmt: skip

    # still listed: back as it was; gone with no other free worker: stays down
    assert state._repin(0, health(("backend", 11), ("backend", 22)))
    assert not state._repin(0, health(("backend", 22), ("thunderagent_router", 99)))
    assert state.targets[0] == ("http://f:1", 11)
    # a new worker (the restarted engine) is taken; a router's endpoint never is
    assert state._repin(0, health(("backend", 22), ("thunderagent_router", 99), ("backend", 33)))
    assert state.targets == [("http://f:1", 33), ("http://f:1", 22)]


def test_calls_waiting_while_no_backend_is_up_fail_with_503_and_hold_nothing():
    """Both backends refuse connections: the first calls find them down (502), later calls
    wait for a replica, and once none has been up for ``connect_timeout`` they get 503
    ``no_backend`` naming the backends, leaving no call pending in the scheduler."""
    import asyncio
    import socket

    aiohttp = pytest.importorskip("aiohttp")
    from tsched.agentic.proxy import ProxySettings, start, state_of

    ports = []
    for _ in range(2):  # two ports nothing listens on
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    urls = tuple(f"http://127.0.0.1:{p}" for p in ports)
    settings = ProxySettings(urls, (8000, 8000), port=0, connect_timeout=0.5, probe_seconds=0.2)

    async def run() -> None:
        runner, url = await start(settings)
        state = state_of(runner.app)
        try:
            async with aiohttp.ClientSession() as s:

                async def call(pid: str) -> tuple[int, dict]:
                    body = {"model": "m", "prompt": "hello " * 50, "max_tokens": 2,
                            "program_id": pid}  # fmt: skip
                    async with s.post(f"{url}/v1/completions", json=body) as r:
                        return r.status, await r.json()

                first = [await call("a"), await call("b")]
                assert [st for st, _ in first] == [502, 502]
                assert not any(r.up for r in state.sched.replicas)
                started = asyncio.get_running_loop().time()
                late = await asyncio.wait_for(asyncio.gather(call("a"), call("c")), 10.0)
                waited = asyncio.get_running_loop().time() - started
                for status, err in late:
                    assert status == 503 and err["error"]["type"] == "no_backend"
                    assert "no backend is up" in err["error"]["message"]
                    assert urls[0] in err["error"]["message"]
                assert waited < 5.0
                assert state.counts["no_backend"] == 2 and not state.waiting
                assert all(p.pending == 0 for p in state.sched.programs.values())
        finally:
            await runner.cleanup()

    asyncio.run(run())
