"""The ``nvidia-smi topo -m`` reader on real recorded outputs and on broken ones."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tsched
from tests.conftest import DATA
from tsched.formats.nvidia_smi import cluster_from_topo, parse_topo, read_topo
from tsched.workload import Workload

TOPO = DATA / "nvidia-smi-topo"
FILES = sorted(TOPO.glob("*.txt"))

PCIE_ONLY = """\
        GPU0    GPU1    GPU2    GPU3    CPU Affinity    NUMA Affinity
GPU0     X      PIX     SOC     SYS     0-15            0
GPU1    PIX      X      SYS     SYS     0-15            0
GPU2    SOC     SYS      X      PIX     16-31           1
GPU3    SYS     SYS     PIX      X      16-31           1
"""


def test_every_fixture_reads() -> None:
    assert len(FILES) == 3
    for path in FILES:
        topo = read_topo(path)
        assert topo.gpus == tuple(f"GPU{i}" for i in range(8))
        for i in range(8):
            assert topo.links[i][i] == "X"
            assert all(t.startswith("NV") for j, t in enumerate(topo.links[i]) if j != i)
        cluster = cluster_from_topo(topo, "host", gpu_model="H100")
        assert cluster.n_gpus == 8


def test_hgx_h200_tabs_ansi_nics_and_numa() -> None:
    text = (TOPO / "hgx-h200-8gpu-10nic.txt").read_text()
    assert "\x1b[4m" in text and "\t" in text  # the fixture really has both
    topo = parse_topo(text)
    assert len(topo.nics) == 10 and topo.nic_names["NIC9"] == "mlx5_9"
    assert topo.numa_affinity == ("0",) * 4 + ("1",) * 4
    assert topo.cpu_affinity[4] == "64-127,192-255"
    assert topo.gpu_numa_id == ("N/A",) * 8
    near = topo.nearest_nics()
    assert near["GPU0"] == ["mlx5_3"] and near["GPU3"] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    # the same output space-aligned reads the same
    spaced = text.replace("\x1b[4m", "").replace("\x1b[0m", "").replace("\t", "    ")
    assert parse_topo(spaced).links == topo.links
    assert parse_topo(spaced).gpu_nic == topo.gpu_nic


def test_a100_vm_pxb_pairs_and_nv12_bandwidth() -> None:
    topo = read_topo(TOPO / "a100-sxm-8gpu-17nic-vm.txt")
    assert topo.nic_names["NIC16"] == "mlx5_bond_0"
    assert topo.nearest_nics()["GPU7"] == ["mlx5_14", "mlx5_15", "mlx5_16", "mlx5_17"]
    cluster = cluster_from_topo(topo, gpu_model="NVIDIA A100-SXM4-80GB")
    assert cluster.links["NV12"].bandwidth == 300.0  # 12 links × 25 GB/s per direction
    b200 = cluster_from_topo(topo, gpu_model="B200")
    assert b200.links["NV12"].bandwidth == 600.0


def test_older_layout_without_nics_or_gpu_numa_id() -> None:
    topo = read_topo(TOPO / "h100-sxm-8gpu-gpu-rows-only.txt")
    assert topo.nics == () and topo.gpu_numa_id == ()
    assert topo.numa_affinity[7] == "1"


def test_pcie_server_gives_a_priced_intra_matrix() -> None:
    topo = parse_topo(PCIE_ONLY)
    assert topo.links[0][2] == "SYS"  # SOC is the old name of SYS
    cluster = cluster_from_topo(topo)
    d = cluster.distance_matrix()
    assert d[0, 1] < d[0, 2]  # PIX is faster than SYS
    pair = Workload.from_matrix("pair", np.array([[0, 1.0], [1.0, 0]]))
    result = tsched.solve(tsched.PlacementProblem.build(cluster, pair), method="auto")
    assert result.status == "optimal"
    gpus = sorted(result.plan().assignment[i].gpu for i in range(2))
    assert gpus in ([0, 1], [2, 3])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello\nworld\n", "no header line with GPU0"),
        (
            PCIE_ONLY.replace("GPU3    SYS     SYS     PIX      X      16-31           1\n", ""),
            "no row for GPU3",
        ),
        (
            PCIE_ONLY.replace("GPU1    PIX      X      SYS     SYS", "GPU1    PIX      X      SYS"),
            ":3: row GPU1 has",
        ),
        (
            PCIE_ONLY.replace("GPU1    PIX      X      SYS", "GPU1    PIX      X      QPI"),
            "unknown link token 'QPI'",
        ),
        (
            PCIE_ONLY.replace("GPU1    PIX      X      SYS", "GPU1    PXB      X      SYS"),
            "inconsistent matrix: GPU0→GPU1 is PIX but GPU1→GPU0 is PXB",
        ),
        (
            PCIE_ONLY + "garbage line here\n",
            ":6: expected a row of a device the header names (GPU0, GPU1, GPU2, GPU3), got",
        ),
    ],
)
def test_bad_input_names_the_line(text: str, message: str) -> None:
    with pytest.raises(tsched.InputError, match=re.escape(message)):
        parse_topo(text, "topo.txt")


# The layout of older drivers (as on a DGX-1): NICs named by their devices, rows and columns,
# and a legend without the NIC map
DEVICE_NAMED_NICS = """\
        GPU0    GPU1    GPU2    GPU3    mlx5_0  mlx5_1  CPU Affinity
GPU0     X      NV1     NV2     SYS     PIX     SYS     0-19,40-59
GPU1    NV1      X      SYS     NV2     PHB     SYS     0-19,40-59
GPU2    NV2     SYS      X      NV1     SYS     PIX     20-39,60-79
GPU3    SYS     NV2     NV1      X      SYS     PHB     20-39,60-79
mlx5_0  PIX     PHB     SYS     SYS      X      SYS
mlx5_1  SYS     SYS     PIX     PHB     SYS      X

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def test_nics_named_by_their_devices_as_older_drivers_print_them() -> None:
    topo = parse_topo(DEVICE_NAMED_NICS)
    assert topo.gpus == ("GPU0", "GPU1", "GPU2", "GPU3") and topo.nics == ("mlx5_0", "mlx5_1")
    assert topo.links[0] == ("X", "NV1", "NV2", "SYS") and topo.cpu_affinity[3] == "20-39,60-79"
    cluster = cluster_from_topo(topo, "dgx1", gpu_model="V100")
    nt = cluster.node_types["node"]
    assert nt.nic_affinity == (("mlx5_0",), ("mlx5_0",), ("mlx5_1",), ("mlx5_1",))
    assert cluster.links["NV2"].bandwidth == 50.0


def test_a_machine_with_one_gpu_is_a_cluster_of_one_gpu(tmp_path) -> None:
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-15\t0\t\tN/A\n"
    cluster = cluster_from_topo(parse_topo(text), "one", gpu_model="L4")
    assert cluster.n_gpus == 1 and not cluster.links
    from tsched.formats.cluster_yaml import read_cluster, write_cluster

    write_cluster(cluster, tmp_path / "one.yaml")
    back = read_cluster(tmp_path / "one.yaml")
    problem = tsched.PlacementProblem.build(back, Workload.from_edges("w", 1, []))
    assert tsched.solve(problem).status == "optimal"


def test_nic_affinity_is_kept_in_the_cluster_file(tmp_path) -> None:
    cluster = cluster_from_topo(read_topo(TOPO / "hgx-h200-8gpu-10nic.txt"), gpu_model="H200")
    affinity = cluster.node_types["node"].nic_affinity
    assert affinity[0] == ("mlx5_3",) and affinity[3] == ("mlx5_0", "mlx5_1", "mlx5_2")
    path = tmp_path / "c.yaml"
    tsched.write_cluster(cluster, path)
    assert tsched.read_cluster(path).node_types["node"].nic_affinity == affinity
    text = path.read_text().replace("    - [mlx5_3]\n", "", 1)
    path.write_text(text)
    with pytest.raises(
        tsched.InputError, match="nic_affinity: needs one list of NIC names per GPU"
    ):
        tsched.read_cluster(path)
