"""Collector over Linux sysfs: network interfaces, InfiniBand ports, NVIDIA GPUs on PCI, and
which NIC each GPU should use.

Read from ``ROOT/sys`` (``ROOT`` is ``/`` on a live machine; tests point it at a synthetic tree):

- ``/sys/class/net/<if>``: ``operstate``, ``mtu``, ``speed`` (Mb/s; unreadable on virtual
  links), ``type`` (ARPHRD: 1 Ethernet, 32 InfiniBand, 772 loopback), ``address``, and the
  ``device`` link to its bus device (absent for virtual interfaces);
- ``/sys/class/infiniband/<dev>/ports/<p>``: ``state``, ``rate`` and ``link_layer``;
- ``/sys/bus/pci/devices/<bdf>``: ``vendor`` (NVIDIA is 0x10de), ``class`` (0x0300 VGA, 0x0302
  3D controller), ``numa_node``.

A device's place in the PCI tree is its resolved ``/sys/devices/pci<domain>:<bus>/…`` path.
Between a GPU and a NIC the relation is, nearest first: ``switch`` (a common PCI bridge below the
root port: nvidia-smi's PIX/PXB), ``root-complex`` (the same host bridge, PHB), ``numa`` (same
NUMA node, NODE) and ``cross-numa`` (SYS).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NicInfo", "GpuInfo", "SysfsInventory", "collect", "relation", "RELATIONS"]

_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_ROOT_BUS = re.compile(r"^pci[0-9a-fA-F]{4}:[0-9a-fA-F]{2}$")
RELATIONS = ("switch", "root-complex", "numa", "cross-numa")
_ARPHRD = {1: "ethernet", 32: "infiniband", 772: "loopback"}
NVIDIA_VENDOR = "0x10de"


@dataclass(frozen=True)
class NicInfo:
    """A network interface (``kind="net"``) or an InfiniBand port (``kind="ib"``)."""

    name: str
    kind: str
    state: str
    link_layer: str
    mtu: int | None = None
    speed_mbps: int | None = None
    rate_gbps: float | None = None
    numa_node: int | None = None
    pci_address: str | None = None
    pci_path: tuple[str, ...] = ()
    address: str = ""


@dataclass(frozen=True)
class GpuInfo:
    """An NVIDIA GPU seen on the PCI bus."""

    pci_address: str
    device_id: str
    numa_node: int | None
    pci_path: tuple[str, ...]


@dataclass(frozen=True)
class SysfsInventory:
    nics: tuple[NicInfo, ...]
    gpus: tuple[GpuInfo, ...]

    def nearest_nic(self, physical_only: bool = True) -> dict[str, tuple[str, str] | None]:
        """Per GPU (PCI address): (nearest NIC name, relation), or None without any NIC.

        ``physical_only`` leaves out NICs with no PCI device (loopback, bridges, veth). Ties
        go to the NIC that is up, then by name.
        """
        nics = [n for n in self.nics if n.pci_path or not physical_only]
        out: dict[str, tuple[str, str] | None] = {}
        for gpu in self.gpus:
            best = None
            for nic in nics:
                rel = relation(gpu.pci_path, gpu.numa_node, nic.pci_path, nic.numa_node)
                key = (RELATIONS.index(rel), nic.state not in ("up", "active"), nic.name)
                if best is None or key < best[0]:
                    best = (key, nic.name, rel)
            out[gpu.pci_address] = None if best is None else (best[1], best[2])
        return out


def relation(
    path_a: tuple[str, ...], numa_a: int | None, path_b: tuple[str, ...], numa_b: int | None
) -> str:
    """How two PCI devices are joined (see the module docstring)."""
    common = 0
    for x, y in zip(path_a, path_b):
        if x != y:
            break
        common += 1
    shared = path_a[:common]
    if any(_BDF.match(c) for c in shared):  # a common PCI bridge (root port or switch)
        return "switch"
    if shared and _ROOT_BUS.match(shared[0]):
        return "root-complex"
    if numa_a is not None and numa_a == numa_b:
        return "numa"
    return "cross-numa"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # EINVAL for speed on virtual links, ENOENT, EACCES
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def _numa(device: Path) -> int | None:
    value = _int(_read(device / "numa_node"))
    return None if value is None or value < 0 else value


def _pci_path(root: Path, device: Path) -> tuple[tuple[str, ...], str | None]:
    """Components of a device's resolved path below ``/sys/devices`` and its PCI address."""
    try:
        real = Path(os.path.realpath(device))
        rel = real.relative_to(Path(os.path.realpath(root / "sys" / "devices")))
    except (OSError, ValueError):
        return (), None
    parts = rel.parts
    if not parts or not _ROOT_BUS.match(parts[0]):
        return (), None  # virtio, platform or virtual devices: not on a PCI tree
    bdfs = [p for p in parts if _BDF.match(p)]
    keep = tuple(p for p in parts if _ROOT_BUS.match(p) or _BDF.match(p))
    return keep, (bdfs[-1] if bdfs else None)


def collect(root: str | os.PathLike[str] = "/") -> SysfsInventory:
    """Read NICs, InfiniBand ports and NVIDIA GPUs from ``root``/sys."""
    base = Path(root)
    nics: list[NicInfo] = []
    net = base / "sys" / "class" / "net"
    for entry in sorted(net.iterdir()) if net.is_dir() else ():
        device = entry / "device"
        path, bdf = _pci_path(base, device) if device.exists() else ((), None)
        speed = _int(_read(entry / "speed"))
        nics.append(
            NicInfo(
                name=entry.name,
                kind="net",
                state=(_read(entry / "operstate") or "unknown").lower(),
                link_layer=_ARPHRD.get(_int(_read(entry / "type")) or -1, "other"),
                mtu=_int(_read(entry / "mtu")),
                speed_mbps=speed if speed is not None and speed > 0 else None,
                numa_node=_numa(device) if device.exists() else None,
                pci_address=bdf,
                pci_path=path,
                address=_read(entry / "address") or "",
            )
        )
    ib = base / "sys" / "class" / "infiniband"
    for entry in sorted(ib.iterdir()) if ib.is_dir() else ():
        device = entry / "device"
        path, bdf = _pci_path(base, device) if device.exists() else ((), None)
        ports = entry / "ports"
        for port in sorted(ports.iterdir(), key=lambda p: p.name) if ports.is_dir() else ():
            state = _read(port / "state") or "unknown"  # e.g. "4: ACTIVE"
            rate = _read(port / "rate") or ""  # e.g. "400 Gb/sec (4X NDR)"
            match = re.match(r"^\s*([\d.]+)\s*Gb", rate)
            nics.append(
                NicInfo(
                    name=f"{entry.name}/{port.name}",
                    kind="ib",
                    state=state.split(":")[-1].strip().lower(),
                    link_layer=(_read(port / "link_layer") or "unknown").lower(),
                    rate_gbps=float(match.group(1)) if match else None,
                    numa_node=_numa(device) if device.exists() else None,
                    pci_address=bdf,
                    pci_path=path,
                )
            )
    gpus: list[GpuInfo] = []
    pci = base / "sys" / "bus" / "pci" / "devices"
    for entry in sorted(pci.iterdir()) if pci.is_dir() else ():
        if (_read(entry / "vendor") or "").lower() != NVIDIA_VENDOR:
            continue
        cls = (_read(entry / "class") or "").lower()
        if not (cls.startswith("0x0300") or cls.startswith("0x0302")):
            continue  # NVSwitches, audio and USB functions of the same vendor
        path, bdf = _pci_path(base, entry)
        gpus.append(
            GpuInfo(
                pci_address=bdf or entry.name,
                device_id=_read(entry / "device") or "",
                numa_node=_numa(entry),
                pci_path=path,
            )
        )
    return SysfsInventory(tuple(nics), tuple(gpus))
