"""``tsched inventory``, ``tsched topology convert`` and ``tsched validate`` end to end."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

import tsched
from tests.conftest import DATA
from tsched.cli import main
from tsched.formats.k8s_topology import validate as validate_topology

TOPO = DATA / "nvidia-smi-topo"
TG = DATA / "topograph"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_inventory_nvidia_smi_writes_a_cluster(capsys, tmp_path) -> None:
    out_file = tmp_path / "node.yaml"
    code, out, err = run(
        capsys, "inventory", "nvidia-smi", str(TOPO / "a100-sxm-8gpu-17nic-vm.txt"),
        "--gpu-model", "A100", "--host", "dgx01", "-o", str(out_file),
    )  # fmt: skip
    assert code == 0 and "cluster written to" in err
    cluster = tsched.read_cluster(out_file)
    assert cluster.nodes[0].name == "dgx01" and cluster.links["NV12"].bandwidth == 300


def test_inventory_with_nccl_tests_marks_the_link_measured(capsys, tmp_path) -> None:
    template = (DATA / "nccl-tests" / "all_reduce_perf.template.txt").read_text()
    ranks = "\n".join(
        f"#  Rank {r} Group  0 Pid  {10 + r} on {h} device {r % 8} [0x18] NVIDIA H100"
        for r, h in enumerate(["node001"] * 8 + ["node002"] * 8)
    )
    run_file = tmp_path / "leaf.txt"
    run_file.write_text(template.format(ranks=ranks))
    src = tmp_path / "topology.conf"
    code, _, _ = run(capsys, "topology", "convert", "dgx-h100-4node", "--to", "slurm-tree",
                     "-o", str(src), "--quiet")  # fmt: skip
    assert code == 0
    code, out, err = run(capsys, "inventory", "slurm", str(src), "--nccl-tests", str(run_file))
    assert code == 0, err
    doc = yaml.safe_load(out)
    assert doc["links"]["leaf"]["provenance"] == "measured"
    assert doc["links"]["leaf"]["bandwidth"] == pytest.approx(188.89)


def test_convert_round_trips_through_slurm(capsys, tmp_path) -> None:
    conf = tmp_path / "topology.conf"
    code, _, _ = run(capsys, "topology", "convert", str(TG / "large.yaml"),
                     "--to", "slurm-tree", "-o", str(conf))  # fmt: skip
    assert code == 0 and conf.read_text().startswith("SwitchName=core Switches=spine-[1-6]")
    code, out, _ = run(capsys, "topology", "convert", str(conf), "--to", "tsched", "--gpus", "4")
    assert code == 0
    back = tsched.formats.cluster_yaml.cluster_from_dict(yaml.safe_load(out))
    assert back.n_nodes == 96 and back.levels == ("leaf", "spine", "core")
    assert set(back.gpus_per_node) == {4}


@pytest.mark.parametrize("fmt", ["kai-topology", "kueue-topology"])
def test_convert_to_topology_objects(capsys, fmt: str) -> None:
    code, out, _ = run(capsys, "topology", "convert", str(TG / "nvl72.yaml"), "--to", fmt,
                       "--label-scheme", "nvidia-v2")  # fmt: skip
    assert code == 0
    obj = yaml.safe_load(out)
    validate_topology(obj, "kai" if fmt == "kai-topology" else "kueue")
    labels = [lv["nodeLabel"] for lv in obj["spec"]["levels"]]
    assert labels == [
        "network.topology.nvidia.com/core",
        "network.topology.nvidia.com/spine",
        "network.topology.nvidia.com/leaf",
        "network.topology.nvidia.com/accelerator",
        "kubernetes.io/hostname",
    ]


def test_inventory_reads_only_the_format_it_names(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "inventory", "slurm", str(TG / "nvl72.yaml"))
    assert code == 2 and "nvl72.yaml:" in err and "KEY=VALUE" in err


def test_bad_topology_input_is_one_line_exit_2(capsys, tmp_path) -> None:
    bad = tmp_path / "topo.txt"
    bad.write_text((TOPO / "h100-sxm-8gpu-gpu-rows-only.txt").read_text().replace("NV18", "NV?", 1))
    code, out, err = run(capsys, "inventory", "nvidia-smi", str(bad))
    assert code == 2 and out == "" and err.count("\n") == 1 and "unknown link token" in err
    cyclic = tmp_path / "topology.conf"
    cyclic.write_text("SwitchName=a Switches=b\nSwitchName=b Switches=a\n")
    code, _, err = run(capsys, "topology", "convert", str(cyclic), "--to", "tsched")
    assert code == 2 and "cycle" in err


def test_inventory_local_says_why_without_gpus(capsys) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    code, out, err = run(capsys, "inventory", "local", "--quiet")
    assert code == 3 and out == ""
    assert "no GPU inventory on this machine" in err and "NVML" in err


def test_inventory_local_without_nvml_asks_nvidia_smi_for_the_gpu_model(
    capsys, tmp_path, monkeypatch
) -> None:
    """Where NVML does not answer, `nvidia-smi topo -m` gives the links and `--query-gpu` the
    model and memory (here a stand-in nvidia-smi on PATH printing a recorded matrix)."""
    from tsched.discovery import nvml
    from tsched.errors import DiscoveryError

    def no_nvml() -> None:
        raise DiscoveryError("NVML library not found")

    monkeypatch.setattr(nvml, "collect", no_nvml)
    topo = TOPO / "hgx-h200-8gpu-10nic.txt"
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = topo ]; then cat "{topo}"; exit 0; fi\n'
        'case "$1" in --query-gpu=*) echo "NVIDIA H200, 143771"; exit 0;; esac\n'
        "exit 9\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")
    code, out, err = run(capsys, "inventory", "local", "--host", "h200", "--quiet")
    assert code == 0, err
    cluster = tsched.formats.cluster_yaml.parse_cluster_text(out, "out.yaml")
    nt = next(iter(cluster.node_types.values()))
    assert (nt.gpu_model, nt.memory_gb, nt.gpus) == ("NVIDIA H200", 140.4, 8)
    assert cluster.links["NV18"].bandwidth == 450.0 and cluster.links["NV18"].provenance == (
        "advertised"
    )


def test_validate_exit_codes(capsys, tmp_path) -> None:
    plan = tmp_path / "plan.json"
    code, _, _ = run(capsys, "solve", "--method", "greedy", "-o", str(plan), "--quiet")
    assert code == 0
    code, out, _ = run(capsys, "validate", str(plan), "--cluster", "dgx-h100-4node")
    assert code == 0 and "unchanged" in out
    doc = json.loads(plan.read_text())
    first = doc["assignment"][0]
    cluster = tsched.load_cluster("dgx-h100-4node").with_busy({first["node"]: [first["gpu"]]})
    now = tmp_path / "now.yaml"
    tsched.write_cluster(cluster, now)
    code, out, _ = run(capsys, "validate", str(plan), "--cluster", str(now), "--json")
    report = json.loads(out)
    assert code == 1 and report["valid"] is False
    assert report["drift"] == [
        {"worker": 0, "node": first["node"], "gpu": first["gpu"], "reason": "GPU is busy"}
    ]


@pytest.mark.ray
def test_inventory_ray_refuses_partial_unless_allowed(capsys, tmp_path, ray_cluster) -> None:
    out_file = tmp_path / "ray.yaml"
    code, _, err = run(capsys, "inventory", "ray", "--timeout", "20", "-o", str(out_file))
    assert code == 3 and "no-cpu" in err and "nothing written" in err
    assert not out_file.exists()
    code, _, err = run(capsys, "inventory", "ray", "--timeout", "20", "--allow-failed",
                       "-o", str(out_file))  # fmt: skip
    assert code == 0 and "node no-cpu failed" in err
    assert [n.name for n in tsched.read_cluster(out_file).nodes] == ["gpu-a", "gpu-b", "gpu-c"]


def test_solve_refuses_stale_measurements(capsys, tmp_path) -> None:
    from tsched.formats.nccl_tests import apply_measurement

    cluster = apply_measurement(
        tsched.load_cluster("dgx-h100-4node"), "leaf", 45.0, "2020-01-01T00:00:00Z"
    )
    path = tmp_path / "measured.yaml"
    tsched.write_cluster(cluster, path)
    code, _, err = run(capsys, "solve", "--cluster", str(path), "--max-age", "24", "--quiet")
    assert code == 2 and "measure again" in err
    code, _, _ = run(capsys, "solve", "--cluster", str(path), "--quiet", "--method", "greedy")
    assert code == 0
