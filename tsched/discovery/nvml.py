"""NVML collector (optional dependency ``nvidia-ml-py``): GPUs, NVLink peers, PCI ancestry.

For every GPU: index, UUID, model name, memory, PCI bus id; for every active NVLink, the PCI bus
id of the peer (GPU pairs count their links: NV#); for every GPU pair without NVLink, the
closest common PCI ancestor (``nvmlDeviceGetTopologyCommonAncestor``: internal, single or
multiple PCIe switches, host bridge, NUMA node, system — the same classes ``nvidia-smi topo -m``
prints). :func:`collect` returns plain data (a JSON-able dict, also what the Ray inventory ships
between nodes); :func:`topo_from_record` turns it into the same :class:`TopoMatrix` the
``nvidia-smi`` reader gives, so both paths build clusters the same way.
"""

from __future__ import annotations

from typing import Any

from tsched.errors import DiscoveryError
from tsched.formats.nvidia_smi import TopoMatrix

__all__ = ["collect", "gpu_uuids", "topo_from_record", "ANCESTOR_TOKENS"]

#: nvmlGpuTopologyLevel_t → nvidia-smi token.
ANCESTOR_TOKENS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def collect() -> dict[str, Any]:
    """Query NVML on this machine. Raises :class:`DiscoveryError` when the library or driver is
    missing, saying so."""
    try:
        import pynvml
    except ImportError:
        raise DiscoveryError(
            "NVML collector needs nvidia-ml-py (pip install 'tsched[nvml]')"
        ) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise DiscoveryError(
            f"NVML is not available on this machine ({exc}): no NVIDIA driver is loaded here; "
            "use `tsched inventory nvidia-smi FILE` with output recorded on the GPU machine"
        ) from None
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = []
        for i, h in enumerate(handles):
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            pci = pynvml.nvmlDeviceGetPciInfo(h)
            links = []
            for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(h, link) != pynvml.NVML_FEATURE_ENABLED:
                        continue
                    remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link)
                except pynvml.NVMLError:
                    continue  # link not present / not supported
                links.append(_text(remote.busId).lower())
            gpus.append(
                {
                    "index": i,
                    "uuid": _text(pynvml.nvmlDeviceGetUUID(h)),
                    "name": _text(pynvml.nvmlDeviceGetName(h)),
                    "memory_gb": round(mem.total / 1e9, 1),
                    "pci_bus_id": _text(pci.busId).lower(),
                    "nvlink_peers": links,
                }
            )
        ancestors = [[0] * count for _ in range(count)]
        for i in range(count):
            for j in range(i + 1, count):
                try:
                    level = int(pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j]))
                except pynvml.NVMLError:
                    level = 50
                ancestors[i][j] = ancestors[j][i] = level
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
    except pynvml.NVMLError as exc:
        raise DiscoveryError(f"NVML query failed: {exc}") from None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return {"driver": driver, "gpus": gpus, "common_ancestor": ancestors}


def _bus(bus_id: str) -> str:
    """Normalise a PCI bus id: NVML pads the domain to 8 digits (00000000:18:00.0)."""
    domain, _, rest = bus_id.lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus_id.lower()


def gpu_uuids(record: dict[str, Any]) -> tuple[str, ...]:
    """The UUIDs of a :func:`collect` record's GPUs in index order; empty unless every GPU has
    one (a cluster model records all of a node's UUIDs or none)."""
    gpus = sorted(record.get("gpus") or [], key=lambda g: g["index"])
    return tuple(g["uuid"] for g in gpus) if gpus and all(g.get("uuid") for g in gpus) else ()


def topo_from_record(record: dict[str, Any]) -> TopoMatrix:
    """The GPU × GPU matrix of a :func:`collect` record: NV# where GPUs share # NVLinks (links
    to NVSwitches count towards every GPU on the switch fabric), else the PCIe class."""
    gpus = record["gpus"]
    n = len(gpus)
    by_bus = {_bus(g["pci_bus_id"]): g["index"] for g in gpus}
    count = [[0] * n for _ in range(n)]
    switched = [0] * n
    for g in gpus:
        for peer in g["nvlink_peers"]:
            j = by_bus.get(_bus(peer))
            if j is None:
                switched[g["index"]] += 1  # the peer is an NVSwitch, not a GPU
            elif j != g["index"]:
                count[g["index"]][j] += 1
    rows = []
    for i in range(n):
        row = []
        for j in range(n):
            if i == j:
                row.append("X")
            elif count[i][j] or (switched[i] and switched[j]):
                row.append(f"NV{count[i][j] or min(switched[i], switched[j])}")
            else:
                row.append(ANCESTOR_TOKENS.get(int(record["common_ancestor"][i][j]), "SYS"))
        rows.append(tuple(row))
    return TopoMatrix(gpus=tuple(f"GPU{i}" for i in range(n)), links=tuple(rows))
