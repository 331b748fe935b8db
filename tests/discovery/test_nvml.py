"""NVML collector: the no-driver path on this machine, and records → link matrices."""

from __future__ import annotations

import importlib.util

import pytest

from tsched.discovery.nvml import collect, topo_from_record
from tsched.errors import DiscoveryError
from tsched.formats.nvidia_smi import cluster_from_topo


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="nvidia-ml-py missing")
def test_no_driver_says_so() -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is loaded here")
    except pynvml.NVMLError:
        pass
    with pytest.raises(DiscoveryError, match="no NVIDIA driver is loaded here"):
        collect()


def _gpu(i: int, bus: str, peers: list[str]) -> dict:
    return {
        "index": i,
        "uuid": f"GPU-{i}",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_gb": 85.0,
        "pci_bus_id": bus,
        "nvlink_peers": peers,
    }


def test_nvswitch_fabric_counts_links_per_gpu() -> None:
    switches = [f"00000000:{0xA0 + k:02X}:00.0" for k in range(4)]
    gpus = [_gpu(i, f"00000000:{0x18 + i:02X}:00.0", switches * 4 + switches[:2]) for i in range(4)]
    record = {"gpus": gpus, "common_ancestor": [[0, 40, 50, 50], [40, 0, 50, 50],
                                                [50, 50, 0, 40], [50, 50, 40, 0]]}  # fmt: skip
    topo = topo_from_record(record)
    assert all(topo.links[i][j] == "NV18" for i in range(4) for j in range(4) if i != j)
    cluster = cluster_from_topo(topo, gpu_model="H100")
    assert cluster.links["NV18"].bandwidth == 450.0


def test_direct_nvlink_pairs_and_pcie_elsewhere() -> None:
    bus = ["0000:18:00.0", "0000:19:00.0", "0000:3b:00.0", "0000:3c:00.0"]
    gpus = [
        _gpu(0, bus[0], [bus[1]] * 4),
        _gpu(1, bus[1], [bus[0]] * 4),
        _gpu(2, bus[2], [bus[3]] * 2),
        _gpu(3, "00000000:3C:00.0", [bus[2]] * 2),  # NVML's 8-digit domain, upper case
    ]
    anc = [[0, 10, 30, 30], [10, 0, 30, 30], [30, 30, 0, 20], [30, 30, 20, 0]]
    topo = topo_from_record({"gpus": gpus, "common_ancestor": anc})
    assert topo.links[0][1] == "NV4" and topo.links[2][3] == "NV2"
    assert topo.links[0][2] == "PHB" and topo.links[1][3] == "PHB"
    d = cluster_from_topo(topo, gpu_model="A100").distance_matrix()
    assert d[0, 1] < d[2, 3] < d[0, 2]
