"""The sysfs collector on synthetic trees and on this machine's real /sys."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tsched.discovery.sysfs import collect, relation


def _write(path: Path, **files: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        (path / name).write_text(value + "\n")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, link.parent), link)


def build_tree(root: Path) -> None:
    """Two sockets. Socket 0: root port 01.0 → switch (01:00.0) → GPU 03:00.0 and NIC 04:00.0
    on two downstream ports; root port 02.0 → NIC 05:00.0. Socket 1 (NUMA 1): GPU 81:00.0,
    IB HCA 82:00.0. Plus an NVSwitch (vendor 10de, class 0680) and a virtual interface."""
    dev = root / "sys" / "devices"
    s0 = dev / "pci0000:00"
    sw = s0 / "0000:00:01.0" / "0000:01:00.0"
    gpu0 = sw / "0000:02:00.0" / "0000:03:00.0"
    nic0 = sw / "0000:02:01.0" / "0000:04:00.0"
    nic1 = s0 / "0000:00:02.0" / "0000:05:00.0"
    s1 = dev / "pci0000:80"
    gpu1 = s1 / "0000:80:01.0" / "0000:81:00.0"
    hca = s1 / "0000:80:02.0" / "0000:82:00.0"
    nvsw = s1 / "0000:80:03.0" / "0000:83:00.0"
    for d, numa in ((gpu0, 0), (nic0, 0), (nic1, 0), (gpu1, 1), (hca, 1), (nvsw, 1)):
        _write(d, numa_node=str(numa))
    for d in (gpu0, gpu1):
        _write(d, vendor="0x10de", device="0x2330", **{"class": "0x030200"})
    _write(nvsw, vendor="0x10de", device="0x22a3", **{"class": "0x068000"})
    for d in (nic0, nic1, hca):
        _write(d, vendor="0x15b3", device="0x1021", **{"class": "0x020700"})
    pci = root / "sys" / "bus" / "pci" / "devices"
    for d in (gpu0, nic0, nic1, gpu1, hca, nvsw):
        _link(pci / d.name, d)
    net = root / "sys" / "class" / "net"
    _write(net / "ens1", operstate="up", mtu="9000", speed="200000", type="1", address="aa")
    _link(net / "ens1" / "device", nic0)
    _write(net / "ens2", operstate="down", mtu="1500", speed="-1", type="1", address="bb")
    _link(net / "ens2" / "device", nic1)
    _write(net / "lo", operstate="unknown", mtu="65536", type="772", address="00")
    ib = root / "sys" / "class" / "infiniband" / "mlx5_0"
    _write(ib / "ports" / "1", state="4: ACTIVE", rate="400 Gb/sec (4X NDR)",
           link_layer="InfiniBand")  # fmt: skip
    _link(ib / "device", hca)


def test_synthetic_tree(tmp_path: Path) -> None:
    build_tree(tmp_path)
    inv = collect(tmp_path)
    by_name = {n.name: n for n in inv.nics}
    assert set(by_name) == {"ens1", "ens2", "lo", "mlx5_0/1"}
    ens1 = by_name["ens1"]
    assert (ens1.state, ens1.mtu, ens1.speed_mbps, ens1.numa_node) == ("up", 9000, 200000, 0)
    assert ens1.pci_address == "0000:04:00.0" and ens1.link_layer == "ethernet"
    assert by_name["ens2"].speed_mbps is None  # -1: unknown speed
    assert by_name["lo"].pci_path == () and by_name["lo"].link_layer == "loopback"
    hca = by_name["mlx5_0/1"]
    assert (hca.state, hca.rate_gbps, hca.link_layer, hca.numa_node) == (
        "active",
        400.0,
        "infiniband",
        1,
    )
    assert [g.pci_address for g in inv.gpus] == ["0000:03:00.0", "0000:81:00.0"]  # no NVSwitch
    near = inv.nearest_nic()
    assert near["0000:03:00.0"] == ("ens1", "switch")
    assert near["0000:81:00.0"] == ("mlx5_0/1", "root-complex")


def test_relation_order() -> None:
    a = ("pci0000:00", "0000:00:01.0", "0000:01:00.0")
    assert relation(a, 0, ("pci0000:00", "0000:00:01.0", "0000:01:00.1"), 0) == "switch"
    assert relation(a, 0, ("pci0000:00", "0000:00:02.0", "0000:02:00.0"), 0) == "root-complex"
    assert relation(a, 0, ("pci0000:40", "0000:40:01.0"), 0) == "numa"
    assert relation(a, 0, ("pci0000:80", "0000:80:01.0"), 1) == "cross-numa"
    assert relation(a, None, ("pci0000:80",), None) == "cross-numa"


@pytest.mark.skipif(not Path("/sys/class/net").is_dir(), reason="no sysfs here")
@pytest.mark.skipif(shutil.which("ip") is None, reason="no iproute2 here")
def test_real_sysfs_matches_ip_link() -> None:
    out = subprocess.run(["ip", "-j", "link"], check=True, capture_output=True, text=True)
    links = {item["ifname"]: item for item in json.loads(out.stdout)}
    inv = collect("/")
    nets = {n.name: n for n in inv.nics if n.kind == "net"}
    assert set(nets) == set(links)
    for name, item in links.items():
        assert nets[name].mtu == item["mtu"]
        assert nets[name].state == item["operstate"].lower()
        if item.get("link_type") == "loopback":
            assert nets[name].link_layer == "loopback"
