"""The agentic proxy against real Dynamo mocker replicas (each a mocker worker and a frontend,
under tsched's guardian): routing and prefix hits, streaming, the control endpoints, bad input,
many concurrent programs with pauses (no 5xx), clients that disconnect, a replica that dies."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time

import pytest

from tsched.agentic.core import SchedulerConfig
from tsched.agentic.engine import PRESETS as ENGINES

HAS_DYNAMO = importlib.util.find_spec("dynamo") is not None and (
    importlib.util.find_spec("dynamo.mocker") is not None
)
pytestmark = [
    pytest.mark.dynamo,
    pytest.mark.slow,
    pytest.mark.skipif(not HAS_DYNAMO, reason="Dynamo not installed (scripts/install-dynamo)"),
]
aiohttp = pytest.importorskip("aiohttp")

CAPACITY = 8_000  # tokens per replica: 500 blocks of 16


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    from tsched.agentic.mocker import MockerReplicas

    with MockerReplicas(2, CAPACITY, ENGINES["mocker"], tmp_path_factory.mktemp("reps")) as reps:
        yield reps
    for proc in reps.guardians:
        assert proc.poll() is not None, "a guardian outlived the test"


def prompt(n: int, seed: int = 0) -> str:
    from tsched.agentic.bench import words

    return " ".join(words(n, seed))


async def with_proxy(urls, body, *, policy="tsched", token=None, **config):
    from tsched.agentic.proxy import ProxySettings, start, state_of

    settings = ProxySettings(
        tuple(urls), (CAPACITY,) * len(urls), policy=policy, port=0, token=token,
        max_body_bytes=64 * 1024, profile=ENGINES["mocker"], config=SchedulerConfig(**config),
    )  # fmt: skip
    runner, url = await start(settings)
    try:
        async with aiohttp.ClientSession() as session:
            return await body(session, url, state_of(runner.app))
    finally:
        await runner.cleanup()


def completion(pid: str, n: int, seed: int, out: int = 4) -> dict:
    return {"model": "tiny", "prompt": prompt(n, seed), "max_tokens": out, "program_id": pid}


def test_proxy_routes_programs_keeps_their_cache_and_serves_its_endpoints(replicas):
    async def body(s, url, state):
        answers = []
        for _ in range(2):
            async with s.post(f"{url}/v1/completions", json=completion("a", 1000, 1)) as r:
                assert r.status == 200
                answers.append(await r.json())
        assert answers[1]["usage"]["prompt_tokens_details"]["cached_tokens"] >= 976
        # the session header names a program too; streaming passes through with usage
        chat = {"model": "tiny", "messages": [{"role": "user", "content": prompt(300, 2)}],
                "max_tokens": 5, "stream": True}  # fmt: skip
        async with s.post(f"{url}/v1/chat/completions", json=chat,
                          headers={"x-dynamo-session-id": "b"}) as r:  # fmt: skip
            assert r.status == 200 and r.content_type == "text/event-stream"
            text = await r.text()
        assert text.count("data:") >= 3 and '"usage"' in text and "[DONE]" in text
        async with s.get(f"{url}/programs") as r:
            snap = await r.json()
        progs = {p["program_id"]: p for p in snap["programs"]}
        assert progs["a"]["steps"] == 2 and progs["b"]["steps"] == 1
        assert progs["a"]["tokens"] == 1004 and progs["a"]["phase"] == "acting"
        assert progs["a"]["service_s"] > 0 and progs["a"]["longest_pause_s"] >= 0
        async with s.post(f"{url}/programs/release", json={"program_id": "a"}) as r:
            assert await r.json() == {"program_id": "a", "released": True}
        async with s.post(f"{url}/programs/release", json={"program_id": "a"}) as r:
            assert await r.json() == {"program_id": "a", "released": False}
        async with s.get(f"{url}/health") as r:
            health = await r.json()
        assert r.status == 200 and health["status"] == "ok" and health["programs"] == 1
        async with s.get(f"{url}/metrics") as r:
            metrics = await r.text()
        assert 'tsched_agents_programs{state="active"} 1.0' in metrics
        assert "tsched_agents_proxy_calls_total 3.0" in metrics
        assert 'tsched_agents_program_service_seconds{program="b"}' in metrics
        assert 'tsched_agents_program_longest_pause_seconds{program="b"}' in metrics
        async with s.get(f"{url}/v1/models") as r:
            assert r.status == 200 and "tiny" in await r.text()
        # bad input: clear JSON errors, nothing forwarded
        async with s.post(f"{url}/v1/completions", data=b"{nope") as r:
            err = await r.json()
            assert r.status == 400 and "not JSON" in err["error"]["message"]
        async with s.post(f"{url}/v1/completions", json=completion("c", 20000, 3)) as r:
            assert r.status == 413 and (await r.json())["error"]["type"] == "request_too_large"
        assert "c" not in state.sched.programs
        # a prompt no replica can hold is refused at once, not queued forever
        async with s.post(f"{url}/v1/completions", json=completion("d", 9000, 4)) as r:
            err = await r.json()
            assert r.status == 400 and err["error"]["type"] == "context_too_large"
        assert "d" not in state.sched.programs

    asyncio.run(with_proxy(replicas.urls, body))


def test_bearer_token_is_required_except_for_health(replicas):
    async def body(s, url, state):
        async with s.get(f"{url}/programs") as r:
            assert r.status == 401 and "bearer token" in (await r.json())["error"]["message"]
        async with s.get(f"{url}/programs", headers={"Authorization": "Bearer s3cret"}) as r:
            assert r.status == 200
        async with s.get(f"{url}/health") as r:
            assert r.status == 200

    asyncio.run(with_proxy(replicas.urls, body, token="s3cret"))


@pytest.mark.parametrize("policy", ["tsched", "thunderagent"])
def test_many_programs_with_pauses_get_no_5xx(replicas, policy):
    """48 programs of growing contexts on 2 × 8k tokens: the scheduler pauses and resumes
    programs every 0.2 s while their calls race in; every call is answered 200."""

    async def program(s, url, k, statuses):
        for turn in range(3):
            call = completion(f"p{k}", 600 + 400 * turn, 100 + k)
            async with s.post(f"{url}/v1/completions", json=call) as r:
                statuses.append(r.status)
                await r.read()
            await asyncio.sleep(0.05 * (k % 5))
        async with s.post(f"{url}/programs/release", json={"program_id": f"p{k}"}) as r:
            await r.read()

    async def body(s, url, state):
        statuses: list[int] = []
        await asyncio.gather(*(program(s, url, k, statuses) for k in range(48)))
        assert statuses == [200] * 144
        sched = state.sched
        assert state.counts["waited"] > 0 and sched.stats["resumes"] > 0
        assert not sched.programs and not sched.queue and not state.waiting
        assert all(r.inflight == 0 for r in sched.replicas)

    asyncio.run(with_proxy(replicas.urls, body, policy=policy, tick_seconds=0.2))


def test_clients_that_disconnect_leave_nothing_held_after_the_ttl(replicas):
    async def body(s, url, state):
        sched = state.sched
        # one client leaves mid-call (a 400-token answer takes seconds), others while queued
        slow = s.post(f"{url}/v1/completions", json=completion("gone", 3000, 7, out=400))
        task = asyncio.create_task(slow.__aenter__())
        await until(lambda: "gone" in sched.programs and sched.programs["gone"].inflight == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        waiting = []
        for k in range(6):  # 6 × 3k tokens cannot all fit 2 × 8k: some wait in the queue
            call = s.post(f"{url}/v1/completions", json=completion(f"q{k}", 3000, 20 + k, out=200))
            waiting.append(asyncio.create_task(call.__aenter__()))
        await until(lambda: any(p.pending for p in sched.programs.values()))
        for t in waiting:
            t.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            any(p.inflight or p.pending for p in sched.programs.values()) or sched.programs
        ):
            await asyncio.sleep(0.2)
        assert not sched.programs, sched.snapshot()
        assert all(r.inflight == 0 and not r.programs for r in sched.replicas)
        assert state.counts["disconnects"] >= 2

    asyncio.run(with_proxy(replicas.urls, body, tick_seconds=0.2, idle_ttl=1.0))


async def until(condition, timeout: float = 30.0) -> None:
    """Wait for ``condition()`` to hold (checked every 20 ms on the event loop, so the proxy
    runs between checks); fail the test if it does not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def first_calls(s, url, state, prefix: str, tokens: int, seed: int) -> dict[str, int]:
    """Four programs' first calls, answered 200; returns each program's replica."""
    homes = {}
    for k in range(4):
        pid = f"{prefix}{k}"
        async with s.post(f"{url}/v1/completions", json=completion(pid, tokens, seed + k)) as r:
            assert r.status == 200
        homes[pid] = state.sched.programs[pid].replica
    return homes


def test_a_replica_that_dies_fails_its_calls_clearly_its_programs_move_and_it_comes_back(
    tmp_path,
):
    from tsched.agentic.mocker import MockerReplicas

    with MockerReplicas(2, CAPACITY, ENGINES["mocker"], tmp_path) as reps:

        async def body(s, url, state):
            homes = await first_calls(s, url, state, "m", 500, 50)
            victims = [p for p, r in homes.items() if r == 0]
            assert victims
            long_call = asyncio.create_task(
                s.post(f"{url}/v1/completions",
                       json=completion(victims[0], 700, 50, out=2000)).__aenter__()
            )  # fmt: skip
            await until(lambda: state.sched.programs[victims[0]].inflight == 1)
            await asyncio.to_thread(reps.kill_replica, 0)
            resp = await long_call
            err = json.loads(await resp.read())
            assert resp.status == 502
            assert err["error"]["type"] == "backend_unavailable"
            assert reps.urls[0] in err["error"]["message"]
            assert not state.sched.replicas[0].up
            for pid in victims:  # every program of the dead replica goes on elsewhere
                async with s.post(f"{url}/v1/completions", json=completion(pid, 800, 9)) as r:
                    assert r.status == 200
                assert state.sched.programs[pid].replica == 1
            async with s.get(f"{url}/health") as r:
                assert (await r.json())["status"] == "degraded"
            # the replica comes back: the proxy's probe finds it, and new programs use it again
            await asyncio.to_thread(reps.restart_replica, 0)
            await until(lambda: state.sched.replicas[0].up, timeout=60)
            async with s.get(f"{url}/health") as r:
                assert (await r.json())["status"] == "ok"
            homes = await first_calls(s, url, state, "back", 500, 70)
            assert 0 in homes.values()

        asyncio.run(with_proxy(reps.urls, body))


def test_cli_bench_drives_two_arms_through_served_proxies(replicas, tmp_path, capsys):
    import subprocess
    import sys
    import urllib.request

    from tsched.backends.dynamo import free_port
    from tsched.cli import main

    procs, urls = [], {}
    try:
        for policy in ("round-robin", "tsched"):
            port = free_port()
            argv = [
                sys.executable,
                "-m",
                "tsched",
                "agents",
                "serve",
                "--policy",
                policy,
                "--port",
                str(port),
                "--capacity-tokens",
                str(CAPACITY),
                "--quiet",
            ]
            for url in replicas.urls:
                argv += ["--backend", url]
            procs.append(subprocess.Popen(argv))
            urls[policy] = f"http://127.0.0.1:{port}"
        for url in urls.values():
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    urllib.request.urlopen(url + "/health", timeout=2).close()
                    break
                except OSError:
                    time.sleep(0.2)
        out = tmp_path / "bench"
        small = tmp_path / "small.yaml"  # contexts stay well inside the replicas' 8k tokens
        small.write_text(
            "tsched: agentic-workload/v1\nname: small\nprograms: 6\nconcurrency: 3\n"
            "turns: 3\nsystem_tokens: 200\ninitial_tokens: 300\ngrowth_tokens: 300\n"
            "output_tokens: 8\ntool_seconds: {dist: fixed, value: 0.2}\n"
        )
        code = main(
            [
                "agents",
                "bench",
                "--workload",
                str(small),
                "--duration",
                "20",
                "--out",
                str(out),
                "--json",
                *[x for p, u in urls.items() for x in ("--target", f"{p}={u}")],
            ]
        )
        summary = json.loads(capsys.readouterr().out)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
    assert code == 0 and set(summary) == {"round-robin", "tsched"}
    for entry in summary.values():
        assert entry["steps_per_min"] > 0 and entry["errors"] == {}
        assert 0 < entry["cache_hit_rate"] < 1
    rows = (out / "records.csv").read_text().splitlines()
    assert len(rows) > 8 and (out / "throughput.png").exists()


def generate_calls(reps, k: int) -> float:
    """Calls worker ``k`` has served on its generate endpoint (not the KV router's queries)."""
    return reps.worker_metric(k, "dynamo_component_requests_total", 'dynamo_endpoint="generate"')


def test_shared_workers_serve_dynamo_routers_its_port_and_pinned_proxy_calls(tmp_path):
    """One set of workers behind a round-robin and a KV-mode frontend and Dynamo's ThunderAgent
    port: the proxy's pins reach exactly the worker the scheduler chose; the Dynamo arms serve
    the bench's programs; a pinned worker that dies fails its call clearly and its programs
    move to the other."""
    from tsched.agentic.bench import run_bench
    from tsched.agentic.mocker import NAMESPACE, MockerReplicas
    from tsched.agentic.proxy import dynamo_backends
    from tsched.agentic.workload import parse_agentic_workload

    with MockerReplicas(
        2, CAPACITY, ENGINES["mocker"], tmp_path, layout="shared",
        router_modes=("round-robin", "kv"), thunderagent=["--scheduler-interval-seconds", "1"],
    ) as reps:  # fmt: skip
        front = reps.frontends["round-robin"]
        listed = dynamo_backends(front, namespace=NAMESPACE, replicas=2, timeout=30)
        assert sorted(listed) == sorted(reps.urls)
        small = parse_agentic_workload({
            "tsched": "agentic-workload/v1", "name": "small", "programs": 4, "concurrency": 2,
            "turns": 3, "system_tokens": 100, "initial_tokens": 200, "growth_tokens": 100,
            "output_tokens": 4, "tool_seconds": {"dist": "fixed", "value": 0.1},
        }, "small")  # fmt: skip
        arms = ((reps.frontends["kv"], "tiny", "none"),
                (front, reps.thunderagent_model, "session-final"))  # fmt: skip
        for target, model, release in arms:
            res = asyncio.run(run_bench(small, target, model=model, release=release))
            assert res.errors == {} and len(res.records) == 12, (target, model, res.errors)

        async def body(s, url, state):
            worker = [reps.instance_ids.index(pin) for _, pin in state.targets]  # replica → k
            before = [generate_calls(reps, worker[r]) for r in range(2)]
            homes = await first_calls(s, url, state, "p", 300, 70)
            after = [generate_calls(reps, worker[r]) for r in range(2)]
            served = [a - b for a, b in zip(after, before, strict=True)]
            assert served == [sum(h == k for h in homes.values()) for k in range(2)]
            assert set(homes.values()) == {0, 1}
            victims = [p for p, r in homes.items() if r == 0]
            await asyncio.to_thread(reps.kill_replica, worker[0])
            async with s.post(f"{url}/v1/completions",
                              json=completion(victims[0], 400, 70)) as r:  # fmt: skip
                err = json.loads(await r.read())
                assert r.status == 502, err
            assert err["error"]["type"] == "backend_unavailable"
            assert "left the frontend" in err["error"]["message"]
            assert not state.sched.replicas[0].up
            for pid in victims:
                async with s.post(f"{url}/v1/completions", json=completion(pid, 500, 9)) as r:
                    assert r.status == 200
                assert state.sched.programs[pid].replica == 1

        asyncio.run(with_proxy(listed, body))
