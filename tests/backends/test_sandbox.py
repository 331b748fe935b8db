"""The sandbox (a local multi-node Ray cluster that emulates a cluster model) and the `ray start`
lines of the convention: pure argv building, the CLI's refusals, and real raylets started with
`ray start`, checked against the model and stopped without leaving a process behind."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import tsched
from tests.conftest import MODELS, listening, with_marks
from tsched.backends.ray import gpu_resource, ray_start_argv, ray_start_lines
from tsched.cli import main

HAS_RAY = all(
    __import__("importlib").util.find_spec(m) is not None for m in ("ray", "psutil")
)  # fmt: skip


#: Starts real raylets with `ray start` (several seconds each).
live = with_marks(
    pytest.mark.sandbox,
    pytest.mark.slow,
    pytest.mark.skipif(not HAS_RAY, reason="needs ray and psutil (pip install 'tsched[ray]')"),
)


@pytest.fixture
def sandbox_dir(tmp_path, monkeypatch):
    """A sandbox state folder of the test's own; whatever the test left up is stopped after it."""
    folder = tmp_path / "sandbox"
    monkeypatch.setenv("TSCHED_SANDBOX_DIR", str(folder))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    yield folder
    if HAS_RAY:
        from tsched.backends import sandbox

        sandbox.down()


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------ pure
def test_start_argv_of_a_head_and_of_a_joining_node() -> None:
    cluster = tsched.load_cluster("dgx-h100-4node")  # node002 has GPUs 0 and 1 busy
    head = ray_start_argv(cluster, "node001", None, head_port=7000)
    assert head[:5] == ["ray", "start", "--head", "--port=7000", "--num-gpus=8"]
    join = ray_start_argv(cluster, "node002", "10.0.0.1:6379", leave_out_busy=True, extra=["--x"])
    assert join[:4] == ["ray", "start", "--address=10.0.0.1:6379", "--num-gpus=6"]
    labels = dict(kv.split("=") for kv in join[4].removeprefix("--labels=").split(","))
    assert labels == {"tsched.io/node": "node002", "tsched.io/leaf": "l0",
                      "tsched.io/spine": "s0", "tsched.io/gpu-model": "H100",
                      "tsched.io/gpu-memory-gb": "80"}  # fmt: skip
    resources = json.loads(join[5].removeprefix("--resources="))
    assert resources == {gpu_resource("node002", i): 1 for i in range(2, 8)}
    assert join[-1] == "--x"
    every = ray_start_argv(cluster, "node002", "h:1")  # real clusters advertise every GPU
    assert "--num-gpus=8" in every


def test_label_values_are_made_valid_and_bad_node_names_refused() -> None:
    from dataclasses import replace

    base = tsched.load_cluster("dgx-h100-4node")
    types = {k: replace(t, gpu_model="NVIDIA H100 80GB HBM3") for k, t in base.node_types.items()}
    odd = replace(base, node_types=types,
                  nodes=(replace(base.nodes[0], at={"leaf": "rack 7/a", "spine": "s0"}),
                         *base.nodes[1:]))  # fmt: skip
    argv = ray_start_argv(odd, "node001", "h:1")
    labels = dict(kv.split("=") for kv in argv[4].removeprefix("--labels=").split(","))
    assert labels["tsched.io/gpu-model"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["tsched.io/leaf"] == "rack-7-a"
    bad = replace(base, nodes=(replace(base.nodes[0], name="node 1"), *base.nodes[1:]))
    with pytest.raises(tsched.InputError, match="node 'node 1': not usable as the Ray label"):
        ray_start_argv(bad, "node 1", "h:1")


def test_start_lines_make_the_first_node_the_head_unless_told() -> None:
    cluster = tsched.load_cluster("dgx-h100-4node")
    lines = ray_start_lines(cluster)
    assert [n for n, _ in lines] == ["node001", "node002", "node003", "node004"]
    assert shlex.split(lines[0][1])[2:4] == ["--head", "--port=6379"]
    assert all(shlex.split(line)[2] == "--address=node001:6379" for _, line in lines[1:])
    joined = ray_start_lines(cluster, ["node004"], head="10.1.1.1:6379")
    assert joined == [("node004", shlex.join(ray_start_argv(cluster, "node004", "10.1.1.1:6379")))]


def test_cli_start_flags_prints_a_runnable_script_and_json(capsys) -> None:
    code, out, _ = run_cli(capsys, "ray", "start-flags", "dgx-h100-4node")
    lines = out.splitlines()
    assert code == 0 and lines[0] == "# node001 (head)" and lines[2] == "# node002"
    assert shlex.split(lines[1])[:3] == ["ray", "start", "--head"]
    model = str(MODELS / "clusters/dgx-h100-4node.yaml")
    code, out, _ = run_cli(capsys, "ray", "start-flags", model, "--node", "node003",
                           "--head", "10.0.0.9:6379", "--json")  # fmt: skip
    doc = json.loads(out)
    assert code == 0 and [d["node"] for d in doc] == ["node003"]
    assert doc[0]["argv"][2] == "--address=10.0.0.9:6379"
    assert "tsched_gpu_node003_7" in json.loads(doc[0]["argv"][5].removeprefix("--resources="))
    code, _, err = run_cli(capsys, "ray", "start-flags", "dgx-h100-4node", "--node", "node9")
    assert (
        code == 2
        and err.strip() == "tsched: error: cluster 'dgx-h100-4node' has no node named 'node9'"
    )  # noqa: E501


def test_models_larger_than_max_nodes_are_refused_in_one_line(capsys, sandbox_dir) -> None:
    code, out, err = run_cli(capsys, "sandbox", "up", "--cluster",
                             str(MODELS / "clusters/fabric-16384.yaml"))  # fmt: skip
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "has 2,048 nodes" in err and "at most 8" in err and "--max-nodes" in err
    code, _, err = run_cli(capsys, "sandbox", "up", "--cluster", "gb200-nvl72-2rack",
                           "--max-nodes", "20")  # fmt: skip
    assert code == 2 and "has 36 nodes" in err and "at most 20" in err
    code, _, err = run_cli(capsys, "sandbox", "up", "--max-nodes", "0")
    assert code == 2 and "argument --max-nodes: expected an integer >= 1, got '0'" in err
    assert not (sandbox_dir / "sandbox.json").exists()


def test_status_and_down_without_a_sandbox(capsys, sandbox_dir) -> None:
    assert run_cli(capsys, "sandbox", "status")[:2] == (1, "no sandbox is up (tsched sandbox up)\n")
    code, out, _ = run_cli(capsys, "sandbox", "down", "--json")
    assert code == 0 and json.loads(out) is None
    assert run_cli(capsys, "sandbox", "down")[:2] == (0, "no sandbox was up\n")


def test_commands_find_the_sandbox_address_by_default(sandbox_dir, monkeypatch) -> None:
    from tsched.discovery.ray import default_address

    assert default_address() == "auto"
    sandbox_dir.mkdir()
    state = {"address": "10.2.3.4:7777", "cluster": "c", "cluster_file": "c.yaml",
             "temp_dir": "/nowhere", "nodes": []}  # fmt: skip
    (sandbox_dir / "sandbox.json").write_text(json.dumps(state))
    assert default_address() == "10.2.3.4:7777"
    monkeypatch.setenv("RAY_ADDRESS", "10.9.9.9:6379")
    assert default_address() == "10.9.9.9:6379"
    monkeypatch.delenv("RAY_ADDRESS")
    (sandbox_dir / "sandbox.json").write_text('{"address": "10.2.3.4:7777"}')  # not ours: ignored
    assert default_address() == "auto"


def test_a_sandbox_that_is_gone_is_named_in_the_error(sandbox_dir, tmp_path, capsys) -> None:
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray session is already open in this process")
    sandbox_dir.mkdir()
    state = {"address": "127.0.0.1:1", "cluster": "dgx-h100-4node", "cluster_file": "c.yaml",
             "temp_dir": str(tmp_path / "tsched-sb-gone"), "nodes": []}  # fmt: skip
    (sandbox_dir / "sandbox.json").write_text(json.dumps(state))
    code, out, _ = run_cli(capsys, "sandbox", "status")
    assert code == 1 and "not answering at 127.0.0.1:1 (tsched sandbox down clears it)" in out
    plan = tmp_path / "plan.json"
    assert main(["solve", "--method", "greedy", "-o", str(plan), "--quiet"]) == 0
    capsys.readouterr()
    code, _, err = run_cli(capsys, "run", "ray", str(plan), "--entrypoint",
                           "tsched.backends.ray:report")  # fmt: skip
    assert code == 3 and "cannot connect to Ray at 127.0.0.1:1" in err
    assert "the sandbox's address: is it still up?" in err
    code, out, _ = run_cli(capsys, "sandbox", "down")
    assert code == 0 and "is down (0 processes stopped)" in out
    assert not (sandbox_dir / "sandbox.json").exists()


# ------------------------------------------------------------------------------ live
def _port_host(address: str) -> tuple[int, str]:
    host, _, port = address.rpartition(":")
    return int(port), host


def sandbox_processes(temp_dir: str, groups: list[int]) -> list:
    from tsched.backends.sandbox import sandbox_processes as find

    return find(temp_dir, groups)


@live
def test_up_status_down_on_every_preset_that_fits(
    capsys, sandbox_dir, tmp_path, monkeypatch
) -> None:
    from tsched.backends.sandbox import DEFAULT_MAX_NODES

    # a token left by any earlier local ray.init() turns Ray's token authentication on for new
    # heads; the sandbox must work all the same
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("0123456789abcdef" * 4)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)

    fits = [n for n in tsched.presets.CLUSTERS
            if tsched.presets.cluster(n).n_nodes <= DEFAULT_MAX_NODES]  # fmt: skip
    assert {"dgx-h100-4node", "pcie-8gpu", "leaf-spine-64"} <= set(fits)
    for name in fits:
        cluster = tsched.presets.cluster(name)
        code, out, err = run_cli(capsys, "sandbox", "up", "--cluster", name, "--json", "--quiet")
        assert code == 0, err
        state = json.loads(out)
        assert state["cluster"] == name and len(state["nodes"]) == cluster.n_nodes
        address, temp_dir = state["address"], state["temp_dir"]
        assert listening(*_port_host(address))
        # a second sandbox is refused while this one is up
        code, _, err = run_cli(capsys, "sandbox", "up", "--cluster", name, "--quiet")
        assert code == 3 and f"already up at {address}" in err
        code, out, _ = run_cli(capsys, "sandbox", "status", "--json")
        status = json.loads(out)
        assert code == 0 and status["up"] and status["placement_groups"] == 0
        for node, model in zip(status["nodes"], cluster.nodes):
            free = int(cluster.gpus_per_node[cluster.node_index(model.name)]) - len(model.busy)
            assert (node["name"], node["alive"], node["free_gpus"]) == (model.name, True, free)
        code, out, _ = run_cli(capsys, "sandbox", "down")
        assert code == 0 and f"sandbox of {name} at {address} is down" in out
        groups = [n["pgid"] for n in state["nodes"]]
        assert not sandbox_processes(temp_dir, groups), f"{name}: processes left behind"
        assert not listening(*_port_host(address)) and not Path(temp_dir).exists()
        assert not (sandbox_dir / "sandbox.json").exists()
        assert run_cli(capsys, "sandbox", "down")[:2] == (0, "no sandbox was up\n")


@live
def test_start_flags_fed_to_ray_start_give_a_cluster_the_executor_accepts(tmp_path) -> None:
    """A plain Ray head (no tsched conventions), then each line `tsched ray start-flags --head`
    prints, run by a shell as an operator would; `tsched run ray` then runs a plan on it."""
    from tsched.backends.dynamo import free_port
    from tsched.backends.sandbox import _stop

    cluster_file = tmp_path / "two.yaml"
    cluster_file.write_text(
        "tsched: cluster/v1\nname: two\nlinks: {nv: {bandwidth: 400}, leaf: {bandwidth: 50}}\n"
        "levels: [leaf]\nnode_types: {box: {gpus: 6, gpu: {model: L40S, memory_gb: 48}, "
        "intra: nv}}\nnodes:\n  - {name: alpha, type: box, at: {leaf: l0}}\n"
        "  - {name: beta, type: box, at: {leaf: l1}, busy: [0]}\n"
    )
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}  # fmt: skip
    env.pop("RAY_ADDRESS", None)
    import tempfile

    temp_dir = tempfile.mkdtemp(prefix="tsched-sb-flags-")
    port = free_port()
    groups: list[int] = []
    small = f"--num-cpus=1 --object-store-memory=100000000 --temp-dir={temp_dir}"
    try:
        head_start = subprocess.Popen(
            f"ray start --head --port={port} --num-gpus=0 --include-dashboard=false "
            f"--dashboard-port={free_port()} --ray-client-server-port={free_port()} {small}",
            shell=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        groups.append(head_start.pid)  # its daemons stay in its process group
        assert head_start.wait(120) == 0
        from ray.util import get_node_ip_address

        head = f"{get_node_ip_address()}:{port}"
        script = subprocess.run(
            [str(bin_dir / "tsched"), "ray", "start-flags", str(cluster_file), "--head", head],
            env=env, check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        commands = [line for line in script.splitlines() if not line.startswith("#")]
        assert len(commands) == 2
        for line in commands:  # verbatim, with the sandbox's small-raylet options appended
            joined = subprocess.Popen(f"{line} {small}", shell=True, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True)  # fmt: skip
            groups.append(joined.pid)
            assert joined.wait(120) == 0, line
        plan_file = tmp_path / "plan.json"
        subprocess.run(
            [str(bin_dir / "tsched"), "solve", "--cluster", str(cluster_file), "--workload",
             str(MODELS / "workloads/two-tp-groups.yaml"), "-o", str(plan_file), "--quiet"],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        done = subprocess.run(
            [str(bin_dir / "tsched"), "run", "ray", str(plan_file), "--address", head,
             "--entrypoint", "tsched.backends.ray:report", "--json", "--reservation-timeout", "60"],
            env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        plan = tsched.read_plan(plan_file)
        ran = {
            w["rank"]: (w["node"], w["cuda_visible_devices"])
            for w in json.loads(done.stdout)["workers"]
        }  # noqa: E501
        assert ran == {e.worker: (e.node, str(e.gpu)) for e in plan.assignment}
        assert ("beta", 0) not in {(e.node, e.gpu) for e in plan.assignment}  # left out: busy
    finally:
        _stop(temp_dir, groups)
        import shutil

        shutil.rmtree(temp_dir, ignore_errors=True)
    assert not sandbox_processes(temp_dir, groups)
