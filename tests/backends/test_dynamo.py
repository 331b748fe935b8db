"""Dynamo lifecycle: pure spec → workload → processes, and real Dynamo processes (the mocker
engine on CPU) under guardians owned by detached actors on a real local Ray cluster."""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

import pytest

import tsched
from tests.conftest import listening, with_marks
from tsched.backends.dynamo import (
    dynamo_processes,
    free_port,
    replicas_of,
    service_workload,
    spec_from_dict,
    tiny_model_files,
    tiny_model_path,
    write_tiny_model,
)
from tsched.backends.guardian import pid_alive
from tsched.errors import ExecutorError, InputError
from tsched.plan import Plan, PlanEntry

HAS_DYNAMO = importlib.util.find_spec("dynamo") is not None and (
    importlib.util.find_spec("dynamo.mocker") is not None
)


def spec_doc(**over) -> dict:
    doc = {
        "tsched": "dynamo/v1",
        "name": "tiny",
        "engine": "mocker",
        "model": {"name": "tiny", "path": "/models/tiny"},
        "serving": {"decode": {"replicas": 2, "tp": 1}},
        "frontend": {"port": 18000},
        "engine_args": ["--speedup-ratio", "10"],
    }
    doc.update(over)
    return doc


def plan_for(spec, nodes_gpus) -> Plan:
    w = service_workload(spec)
    entries = tuple(PlanEntry(i, n, g) for i, (n, g) in enumerate(nodes_gpus))
    assert len(entries) == w.workers
    return Plan("c", spec.name, "feasible", 0.0, None, None, "greedy", 0.0, 0, entries, {},
                roles=w.roles)  # fmt: skip


# ---------------------------------------------------------------------------- pure
def test_spec_workload_and_processes_aggregated(tmp_path) -> None:
    spec = spec_from_dict(spec_doc())
    assert not spec.disaggregated and service_workload(spec).workers == 2
    plan = plan_for(spec, [("a", 1), ("b", 3)])
    engines, frontend = dynamo_processes(plan, spec, tmp_path, ports=[9001, 9002])
    (r0, g0), (r1, g1) = engines
    assert (r0.role, r0.node, r0.gpus) == ("agg", "a", (1,))
    assert g0.env["CUDA_VISIBLE_DEVICES"] == "1" and g1.env["CUDA_VISIBLE_DEVICES"] == "3"
    assert g0.env["DYN_SYSTEM_PORT"] == "9001" and g0.env["DYN_DISCOVERY_BACKEND"] == "file"
    assert g0.env["DYN_FILE_KV"] == str(tmp_path / "kv")
    assert g0.argv[1:3] == ("-m", "dynamo.mocker") and "--disaggregation-mode" not in g0.argv
    assert g0.argv[-2:] == ("--speedup-ratio", "10")
    assert g0.checks[0]["url"] == "http://127.0.0.1:9001/health"
    assert frontend.argv[1:3] == ("-m", "dynamo.frontend")
    assert [c["url"].rsplit("/", 1)[-1] for c in frontend.checks] == ["health", "models",
                                                                       "completions"]  # fmt: skip
    assert frontend.checks[2]["body"]["model"] == "tiny"


def test_disaggregated_vllm_gets_modes_and_tp(tmp_path) -> None:
    spec = spec_from_dict(spec_doc(engine="vllm", serving={
        "prefill": {"replicas": 1, "tp": 2}, "decode": {"replicas": 1, "tp": 4}}))  # fmt: skip
    w = service_workload(spec)
    assert w.workers == 6 and w.gb.sum() > 0
    kv = [(s, d) for s, d in zip(w.src, w.dst, strict=True) if s < 2 <= d]
    assert kv, "prefill sends its KV cache to decode"
    plan = plan_for(spec, [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2), ("b", 3)])
    engines, _ = dynamo_processes(plan, spec, tmp_path, ports=[1, 2])
    (pre, gp), (dec, gd) = engines
    assert (pre.role, dec.role) == ("prefill", "decode")
    assert gp.argv[gp.argv.index("--disaggregation-mode") + 1] == "prefill"
    assert gd.argv[gd.argv.index("--tensor-parallel-size") + 1] == "4"
    assert gd.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


def test_bad_specs_and_plans_are_refused(tmp_path) -> None:
    with pytest.raises(InputError, match="engine"):
        spec_from_dict(spec_doc(engine="tgi"))
    with pytest.raises(InputError, match=r"model\.path: required for engine 'vllm'"):
        spec_from_dict(spec_doc(engine="vllm", model={"name": "x"}))
    with pytest.raises(InputError, match="tsched"):
        spec_from_dict(spec_doc(tsched="dynamo/v9"))
    spec = spec_from_dict(spec_doc(serving={"decode": {"replicas": 1, "tp": 2}}))
    with pytest.raises(InputError, match="spans nodes"):
        replicas_of(plan_for(spec, [("a", 0), ("b", 0)]), spec)
    other = Plan("c", "w", "feasible", 0.0, None, None, "g", 0.0, 0,
                 (PlanEntry(0, "a", 0),), {})  # fmt: skip
    with pytest.raises(InputError, match="needs 2"):
        replicas_of(other, spec)


def test_a_mocker_spec_without_a_model_path_serves_the_packaged_tiny_model(tmp_path) -> None:
    from tsched.backends.dynamo import read_spec

    spec = spec_from_dict(spec_doc(model={"name": "tiny"}))
    assert Path(spec.model_path) == tiny_model_path()
    engines, _ = dynamo_processes(
        plan_for(spec, [("a", 0), ("a", 1)]), spec, tmp_path, ports=[1, 2]
    )
    argv = engines[0][1].argv
    assert argv[argv.index("--model-path") + 1] == str(tiny_model_path())
    # a path of the user's own that holds no model is refused when the spec is read
    (tmp_path / "svc.yaml").write_text(json.dumps(spec_doc(model={"name": "t", "path": "nope"})))
    with pytest.raises(InputError, match=r"svc\.yaml: model\.path .*nope.* has no config\.json"):
        read_spec(tmp_path / "svc.yaml")


def test_router_tsched_puts_the_program_aware_proxy_in_front(tmp_path) -> None:
    from tsched.backends.dynamo import mocker_capacity, router_process

    assert spec_from_dict(spec_doc()).router is None
    assert spec_from_dict(spec_doc(router="frontend")).router is None
    spec = spec_from_dict(spec_doc(
        namespace="ns1", router="tsched",
        engine_args=["--block-size", "16", "--num-gpu-blocks-override", "500"],
    ))  # fmt: skip
    assert spec.router.policy == "tsched" and spec.router.capacity_tokens == 8000
    g = router_process(spec, tmp_path, 2)
    argv = list(g.argv)
    assert argv[1:5] == ["-m", "tsched", "agents", "serve"]
    value = {k: argv[argv.index(k) + 1] for k in ("--dynamo-frontend", "--dynamo-namespace",
             "--replicas", "--capacity-tokens", "--port", "--host", "--policy")}  # fmt: skip
    assert value == {"--dynamo-frontend": "http://127.0.0.1:18000", "--dynamo-namespace": "ns1",
                     "--replicas": "2", "--capacity-tokens": "8000", "--port": "8300",
                     "--host": "127.0.0.1", "--policy": "tsched"}  # fmt: skip
    assert g.checks[0]["url"] == "http://127.0.0.1:8300/health"
    assert router_process(spec_from_dict(spec_doc()), tmp_path, 2) is None
    # the mocker's own defaults: 16,384 blocks of 64 tokens; a mapping sets the rest
    assert mocker_capacity([]) == 16384 * 64 and mocker_capacity(["--block-size=32"]) == 16384 * 32
    full = spec_from_dict(spec_doc(engine="vllm", router={
        "kind": "tsched", "policy": "thunderagent", "port": 9100, "capacity_tokens": 123456,
        "engine_profile": "prefill-heavy", "tick": 0.5}))  # fmt: skip
    argv = list(router_process(full, tmp_path, 2).argv)
    assert argv[argv.index("--engine") + 1] == "prefill-heavy"
    assert argv[argv.index("--tick") + 1] == "0.5" and "thunderagent" in argv
    assert spec_from_dict(spec_doc(engine="vllm", router="tsched")).router.capacity_tokens is None


def test_bad_router_settings_are_refused() -> None:
    with pytest.raises(InputError, match=r"router\.kind.*'nginx'"):
        spec_from_dict(spec_doc(router="nginx"))
    with pytest.raises(InputError, match=r"router\.policy"):
        spec_from_dict(spec_doc(router={"kind": "tsched", "policy": "fastest"}))
    with pytest.raises(InputError, match="port apply to kind 'tsched' only"):
        spec_from_dict(spec_doc(router={"kind": "frontend", "port": 1}))
    with pytest.raises(InputError, match="aggregated services only"):
        spec_from_dict(spec_doc(router="tsched", serving={
            "prefill": {"replicas": 1, "tp": 1}, "decode": {"replicas": 1, "tp": 1}}))  # fmt: skip
    with pytest.raises(InputError, match=r"router\.capacity_tokens"):
        spec_from_dict(spec_doc(router={"kind": "tsched", "capacity_tokens": 0}))


def test_the_shipped_tiny_model_is_what_the_builder_writes() -> None:
    shipped = {p.name: p.read_text() for p in tiny_model_path().glob("*.json")}
    assert shipped == tiny_model_files()
    tokenizers = pytest.importorskip("tokenizers")
    vocab = json.loads(shipped["tokenizer.json"])["model"]["vocab"]
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    assert json.loads(tok.to_str()) == json.loads(shipped["tokenizer.json"])
    loaded = tokenizers.Tokenizer.from_file(str(tiny_model_path() / "tokenizer.json"))
    assert loaded.encode("w1 w2 w255 zz").ids == [4, 5, 258, 0]


def test_example_service_specs_parse() -> None:
    from tsched.backends.dynamo import read_spec

    for path in sorted((Path(__file__).parents[2] / "models" / "services").glob("*.yaml")):
        spec = read_spec(path)
        assert service_workload(spec).workers >= 1, path


# ---------------------------------------------------------------------------- live
#: Real Dynamo processes on the session's local Ray cluster.
live = with_marks(
    pytest.mark.ray,
    pytest.mark.dynamo,
    pytest.mark.skipif(not HAS_DYNAMO, reason="Dynamo not installed (scripts/install-dynamo)"),
)


def alive(pid: int | None) -> bool:
    return bool(pid) and pid_alive(pid)


def completion(port: int, prompt: str = "w1 w2 w3") -> dict:
    import urllib.request

    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 8}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture
def service(ray_cluster, tmp_path):
    """Bring a service up from a spec dict; after the test, bring it down and check that no
    process, port, actor or placement group is left."""
    from tsched.backends.dynamo import down, up
    from tsched.backends.dynamo.owners import find_parts
    from tsched.discovery.ray import inventory

    model = write_tiny_model(tmp_path / "tiny")
    started: list[tuple[str, list[int], Path]] = []

    def start(name: str, serving: dict, *, cluster=None, replace_lost=True, **over):
        port = free_port()
        restart = {"health_timeout": 90, "lease_timeout": 3, "replace_lost": replace_lost}
        spec = spec_from_dict(spec_doc(name=name, serving=serving, frontend={"port": port},
                                       model={"name": "tiny", "path": str(model)},
                                       restart=restart, **over))  # fmt: skip
        cluster = cluster or inventory(timeout=20).cluster
        problem = tsched.PlacementProblem.build(cluster, service_workload(spec))
        plan = tsched.solve(problem, method="greedy", seed=0).plan()
        work = tmp_path / name
        ports = [port] + ([spec.router.port] if spec.router is not None else [])
        started.append((name, ports, work))
        state = up(spec, plan, workdir=work, timeout=120, cluster=cluster, method="greedy")
        return spec, plan, state, port, work

    yield start
    import ray
    from ray.util.placement_group import placement_group_table

    for name, ports, work in started:
        if find_parts(ray, name):
            down(name)
        receipts = [json.loads(p.read_text()) for p in work.glob("*.receipt.json")]
        pids = [run["pid"] for r in receipts for run in r["runs"]]
        assert receipts and not any(alive(p) for p in pids), "engine processes left behind"
        assert not any(listening(p) for p in ports), "frontend port still open"
        assert not find_parts(ray, name), "actors left behind"
        tables = placement_group_table().values()
        assert not [t for t in tables if t.get("name", "").startswith(f"tsched-dynamo-{name}-")
                    and t.get("state") != "REMOVED"], "placement group left behind"  # fmt: skip


@live
def test_aggregated_service_answers_then_goes_down_cleanly(service) -> None:
    import urllib.request

    spec, plan, state, port, work = service("agg", {"decode": {"replicas": 2, "tp": 1}})
    assert state["healthy"] and set(state["parts"]) == {
        "decode0",
        "decode1",
        "frontend",
        "supervisor",
    }
    out = completion(port)
    assert out["usage"]["completion_tokens"] == 8
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as resp:
        health = json.loads(resp.read())
    generate = [i for i in health["instances"] if i["endpoint"] == "generate"]
    assert len(generate) == 2  # both replicas registered with the frontend
    from tsched.backends.dynamo import down, status

    assert status("agg")["healthy"]
    receipts = down("agg")
    assert {r["end_reason"] for r in receipts} == {"stopped"} and len(receipts) == 3
    with pytest.raises(ExecutorError, match="no service 'agg'"):
        status("agg")


@live
def test_router_tsched_serves_agents_through_the_proxy_on_pinned_replicas(service) -> None:
    import urllib.request

    rport = free_port()
    router = {"kind": "tsched", "port": rport}
    _spec, _plan, state, _port, _work = service(
        "routed", {"decode": {"replicas": 2, "tp": 1}}, router=router,
        engine_args=["--speedup-ratio", "10", "--block-size", "16",
                     "--num-gpu-blocks-override", "500"],
    )  # fmt: skip
    assert state["healthy"] and set(state["parts"]) == {
        "decode0",
        "decode1",
        "frontend",
        "router",
        "supervisor",
    }
    base = f"http://127.0.0.1:{rport}"
    with urllib.request.urlopen(base + "/health", timeout=10) as resp:
        health = json.loads(resp.read())
    assert health["status"] == "ok" and len(health["backends"]) == 2
    assert all("#instance=" in b["url"] for b in health["backends"])

    def call(agent: str, turn: int) -> dict:
        req = urllib.request.Request(
            base + "/v1/completions",
            data=json.dumps({"model": "tiny", "prompt": f"w1 w2 w{turn}",
                             "max_tokens": 4}).encode(),
            headers={"Content-Type": "application/json", "x-dynamo-session-id": agent},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    for turn in range(2):
        for agent in ("a", "b", "c"):
            assert call(agent, turn)["usage"]["completion_tokens"] == 4
    with urllib.request.urlopen(base + "/programs", timeout=10) as resp:
        programs = {p["program_id"]: p for p in json.loads(resp.read())["programs"]}
    assert set(programs) == {"a", "b", "c"} and all(p["steps"] == 2 for p in programs.values())
    assert {p["replica"] for p in programs.values()} == {0, 1}  # spread over both workers

    # an engine killed and restarted by its guardian comes back under a new instance id: the
    # proxy marks its replica down once the frontend drops the old id, re-pins it to the new
    # one, and every program is answered again
    import signal

    before = {b["url"] for b in health["backends"]}
    os.kill(state["parts"]["decode0"]["pid"], signal.SIGKILL)
    deadline, streak = time.monotonic() + 120, 0
    while time.monotonic() < deadline and streak < 2:
        answered = 0
        for agent in ("a", "b", "c"):
            try:
                answered += call(agent, 9)["usage"]["completion_tokens"] == 4
            except OSError:
                time.sleep(0.5)
        with urllib.request.urlopen(base + "/health", timeout=10) as resp:
            health = json.loads(resp.read())
        now = {b["url"] for b in health["backends"]}
        moved = len(now & before) == 1 and health["status"] == "ok"
        streak = streak + 1 if moved and answered == 3 else 0
    assert streak == 2, health


@live
def test_disaggregated_prefill_decode_service(service) -> None:
    spec, plan, state, port, work = service(
        "disagg", {"prefill": {"replicas": 1, "tp": 1}, "decode": {"replicas": 1, "tp": 2}}
    )
    assert (
        set(state["parts"]) == {"prefill0", "decode0", "frontend", "supervisor"}
        and state["healthy"]
    )
    for replica in replicas_of(plan, spec):  # each engine got exactly its planned GPUs
        guard = json.loads((work / f"disagg-{replica.name}.guardian.json").read_text())
        assert guard["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, replica.gpus))
        assert len(replica.gpus) == (2 if replica.role == "decode" else 1)
    assert completion(port)["usage"]["completion_tokens"] == 8


@live
def test_killed_engine_is_restarted_by_its_guardian(service) -> None:
    import signal

    from tsched.backends.dynamo import status

    _spec, _plan, state, port, _work = service("restart", {"decode": {"replicas": 1, "tp": 1}})
    pid = state["parts"]["decode0"]["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        part = status("restart")["parts"]["decode0"]
        if part["restarts"] == 1 and part["state"] == "up" and part["pid"] != pid:
            break
        time.sleep(0.5)
    assert part["restarts"] == 1 and part["pid"] != pid and part["state"] == "up"
    assert not alive(pid)
    # the frontend drops the killed instance (its discovery lease lapses) and finds the new one:
    # wait for five answers in a row
    deadline, streak = time.monotonic() + 90, 0
    while time.monotonic() < deadline and streak < 5:
        try:
            streak = streak + 1 if completion(port)["usage"]["completion_tokens"] == 8 else 0
        except OSError:
            streak = 0
            time.sleep(0.5)
    assert streak == 5


@live
def test_owner_killed_takes_its_engine_down(service) -> None:
    import ray

    from tsched.backends.dynamo.owners import actor_name

    _spec, _plan, state, _port, work = service(
        "owner", {"decode": {"replicas": 1, "tp": 1}}, replace_lost=False
    )
    pid = state["parts"]["decode0"]["pid"]
    actor = ray.get_actor(actor_name("owner", "decode0"), namespace="tsched")
    ray.kill(actor)  # SIGKILL of the owning actor's process
    deadline = time.monotonic() + 15  # well within lease timeout + stop timeout
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.2)
    assert not alive(pid)
    # Either the guardian saw its owner go (SIGHUP, parent change, lease) and wrote how it
    # ended, or Ray's cleanup of the killed worker's children SIGKILLed the guardian too and
    # the kernel took the engine down with it (PR_SET_PDEATHSIG). Both leave nothing behind.
    receipt = json.loads((work / "decode0.receipt.json").read_text())
    guardian = receipt["guardian_pid"]
    deadline = time.monotonic() + 15
    while receipt.get("end_reason") is None and alive(guardian) and time.monotonic() < deadline:
        time.sleep(0.2)
        receipt = json.loads((work / "decode0.receipt.json").read_text())
    assert not alive(guardian)
    assert receipt.get("end_reason") in (None, "owner-gone", "lease-expired")


def _chaos_model(names: tuple[str, ...]) -> tsched.Cluster:
    """A model of the chaos nodes: 2 GPUs each under one leaf."""
    from tsched.formats.cluster_yaml import cluster_from_dict

    return cluster_from_dict({
        "tsched": "cluster/v1", "name": "dyn-chaos",
        "links": {"nvlink": {"bandwidth": 450, "latency": 2},
                  "leaf": {"bandwidth": 50, "latency": 5}},
        "levels": ["leaf"],
        "node_types": {"pair": {"gpus": 2, "gpu": {"model": "H100"}, "intra": "nvlink"}},
        "nodes": [{"name": n, "type": "pair", "at": {"leaf": "l0"}} for n in names],
    })  # fmt: skip


@live
def test_a_replica_whose_node_dies_is_replaced_while_the_frontend_keeps_serving(
    ray_cluster, service, capsys
) -> None:
    """Two TP2 replicas on two of three chaos nodes; the node of one is removed from the Ray
    cluster. The frontend keeps answering from the other replica, the supervisor re-plans the
    lost one onto the third node, and the service is back to two healthy replicas. Then the
    third node goes too: with no room the replacement fails and says why, until the first node
    joins again and the replica is placed there. `tsched dynamo status` tells the story; the
    fixture checks that `down` leaves nothing, the lost replicas' engines included."""
    import threading

    from tsched.backends.dynamo import status
    from tsched.backends.ray import gpu_resource
    from tsched.cli import main

    names = ("dyn-1", "dyn-2", "dyn-3")
    nodes = {n: ray_cluster.add_node(num_cpus=1, num_gpus=2, labels={"tsched.io/node": n},
                                     resources={gpu_resource(n, g): 1 for g in range(2)})
             for n in names}  # fmt: skip
    ray_cluster.wait_for_nodes()
    answers: list[tuple[float, bool]] = []
    done = threading.Event()
    work = None
    try:
        spec, plan, state, port, work = service(
            "heal", {"decode": {"replicas": 2, "tp": 2}}, cluster=_chaos_model(names)
        )
        assert state["healthy"] and set(state["parts"]) >= {"decode0", "decode1", "supervisor"}
        where = {r.name: r.node for r in replicas_of(plan, spec)}
        assert len(set(where.values())) == 2
        victim, spare = where["decode0"], next(n for n in names if n not in where.values())

        def ask() -> None:
            while not done.is_set():
                try:
                    ok = completion(port)["usage"]["completion_tokens"] == 8
                except OSError:
                    ok = False
                answers.append((time.monotonic(), ok))
                time.sleep(0.1)

        asker = threading.Thread(target=ask, daemon=True)
        asker.start()
        time.sleep(1.0)
        removed = time.monotonic()
        ray_cluster.remove_node(nodes.pop(victim))
        deadline, events = removed + 150, []
        while time.monotonic() < deadline:
            now = status("heal")
            events = now.get("events", [])
            if any(e["event"] == "replica-replaced" for e in events) and now["healthy"]:
                break
            time.sleep(0.5)
        back = time.monotonic() - removed
        kinds = [e["event"] for e in events]
        assert "replica-lost" in kinds and "replica-replaced" in kinds, events
        lost = next(e for e in events if e["event"] == "replica-lost")
        moved = next(e for e in events if e["event"] == "replica-replaced")
        assert lost["part"] == moved["part"] == "decode0" and lost["node"] == victim
        assert moved["node"] == spare and moved["from_node"] == victim and moved["seconds"] < back
        assert now["healthy"] and now["replicas"]["decode0"]["node"] == spare
        # the frontend lists both replicas again and answers; it answered throughout
        from tsched.backends.dynamo import wait_listed

        listed, said = wait_listed(f"http://127.0.0.1:{port}", 2, 60)
        assert len(listed) == 2, said
        time.sleep(1.0)
        done.set()
        asker.join(60)
        during = [ok for t, ok in answers if removed <= t <= removed + back]
        assert sum(during) >= max(1, len(during) // 2), (sum(during), len(during))
        assert answers[-1][1]
        assert (work / "decode0.lost-0.receipt.json").exists()
        replanned = json.loads((work / "plan.json").read_text())
        assert {e["node"] for e in replanned["assignment"]} == {spare, where["decode1"]}

        # no room: the spare's node goes too; the replacement fails, said, until the first
        # node joins again, and is tried again there
        ray_cluster.remove_node(nodes.pop(spare))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            failed = [e for e in status("heal")["events"] if e["event"] == "replace-failed"]
            if failed:
                break
            time.sleep(0.5)
        assert "no alive node has 2 free GPUs for replica 'decode0'" in failed[0]["reason"]
        assert status("heal")["parts"]["decode0"]["state"] == "replacing"
        nodes[victim] = ray_cluster.add_node(
            num_cpus=1, num_gpus=2, labels={"tsched.io/node": victim},
            resources={gpu_resource(victim, g): 1 for g in range(2)},
        )  # fmt: skip
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            now = status("heal")
            if now["healthy"] and now["replicas"]["decode0"]["node"] == victim:
                break
            time.sleep(0.5)
        assert now["healthy"] and now["replicas"]["decode0"]["node"] == victim, now
        capsys.readouterr()
        assert main(["dynamo", "status", "heal"]) == 0
        said = capsys.readouterr().out
        assert f"decode0 lost: node {spare} is dead" in said
        assert f"decode0 replaced on {victim} GPUs 0,1" in said and "not replaced" in said
    finally:
        done.set()
        import ray

        from tsched.backends.dynamo import down
        from tsched.backends.dynamo.owners import find_parts

        if find_parts(ray, "heal"):
            down("heal")  # before its nodes go; the fixture checks what is left
            assert work is None or not list(work.glob("*.lease")), "a lease left behind"
        for node in nodes.values():
            ray_cluster.remove_node(node)


@live
def test_cli_up_status_down(ray_cluster, tmp_path, capsys) -> None:
    import yaml

    from tsched.cli import main
    from tsched.discovery.ray import inventory
    from tsched.formats.cluster_yaml import write_cluster

    write_cluster(inventory(timeout=20).cluster, tmp_path / "cluster.yaml")
    write_tiny_model(tmp_path / "tiny-model")
    port = free_port()
    doc = spec_doc(name="cli", model={"name": "tiny", "path": "tiny-model"},
                   frontend={"port": port}, restart={"lease_timeout": 3})  # fmt: skip
    (tmp_path / "svc.yaml").write_text(yaml.safe_dump(doc))
    work = tmp_path / "work"
    try:
        code = main(["dynamo", "up", str(tmp_path / "svc.yaml"), "--cluster",
                     str(tmp_path / "cluster.yaml"), "--method", "greedy", "--workdir", str(work),
                     "--json"])  # fmt: skip
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and out["healthy"] and out["url"] == f"http://127.0.0.1:{port}"
        assert completion(port)["usage"]["completion_tokens"] == 8
        assert main(["dynamo", "status", "cli", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["healthy"]
    finally:
        code = main(["dynamo", "down", "cli", "--json"])
    receipts = json.loads(capsys.readouterr().out)["receipts"]
    assert code == 0 and {r["end_reason"] for r in receipts} == {"stopped"}
    pids = [run["pid"] for r in receipts for run in r["runs"]]
    assert not any(alive(p) for p in pids) and not listening(port)
    assert main(["dynamo", "down", "cli"]) == 3  # nothing left to stop
    assert "no service 'cli'" in capsys.readouterr().err


def test_free_port_never_hands_out_a_port_twice() -> None:
    """A port is free when checked but taken only when its process binds it: twelve asked of
    a range of 40 all differ (drawn at random without the memory of what was handed out, two
    would coincide about five times in six)."""
    ports = [free_port(24960, 24999) for _ in range(12)]
    assert len(set(ports)) == 12
