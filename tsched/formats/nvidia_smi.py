"""``nvidia-smi topo -m`` reader: GPU×GPU link classes, NIC affinity, CPU and NUMA affinity.

The matrix uses these tokens (nvidia-smi's own legend):

=========  ==================================================================================
``X``      the device itself
``NV#``    a bonded set of # NVLinks
``PIX``    at most a single PCIe bridge
``PXB``    multiple PCIe bridges, without the PCIe host bridge
``PHB``    a PCIe host bridge (typically the CPU)
``NODE``   PCIe and the interconnect between PCIe host bridges within a NUMA node
``SYS``    PCIe and the SMP interconnect between NUMA nodes (QPI/UPI); older drivers: ``SOC``
=========  ==================================================================================

The reader accepts tab- or space-separated output, ANSI escape codes (nvidia-smi underlines the
header on a terminal), NIC rows and the NIC legend, empty trailing cells, and the older layouts:
without a ``GPU NUMA ID`` column, without NIC rows, and with NICs named by their devices
(``mlx5_0``) instead of ``NIC0`` and a legend. Anything else — a row with missing cells,
an unknown token, an asymmetric GPU matrix, a GPU row missing — is an :class:`InputError` naming
the line.

The node type records each GPU's nearest NICs (``nic_affinity``: the NICs at the closest PCIe
class it has to any NIC, legend names when given).

Link costs. An ``NV#`` pair gets ``#`` × the per-link bandwidth of the GPU's NVLink generation
(per direction: 25 GB/s for NVLink 2-4, i.e. V100/A100/H100/H200; 50 GB/s for NVLink 5, i.e.
B200/GB200), so NV18 on an H100 is 450 GB/s and NV12 on an A100 300 GB/s. PCIe classes get
figures for a PCIe Gen4 x16 path (``PCIE_GBPS``). Each class is marked with its provenance
(``advertised`` for NVLink figures of a known GPU model, ``default`` otherwise), so measured
numbers (nccl-tests, probes) can replace them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from tsched._io import read_text
from tsched.cluster import Cluster, LinkClass, Node, NodeType
from tsched.errors import InputError

__all__ = [
    "TopoMatrix",
    "parse_topo",
    "read_topo",
    "node_type_from_topo",
    "cluster_from_topo",
    "NVLINK_GBPS_PER_LINK",
    "PCIE_GBPS",
]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU = re.compile(r"^GPU\d+$")
_NV = re.compile(r"^NV(\d+)$")
_LINKISH = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_AFFINITY = re.compile(r"^(\d[\d,\-]*|N/A)$")
PCIE_TOKENS = ("PIX", "PXB", "PHB", "NODE", "SYS")
#: GB/s per direction of a PCIe path of each class (PCIe Gen4 x16 ≈ 25 GB/s usable; crossing a
#: host bridge, NUMA interconnect or socket link costs more the farther it goes).
PCIE_GBPS = {"PIX": 24.0, "PXB": 22.0, "PHB": 20.0, "NODE": 18.0, "SYS": 12.0}
#: NVLink bandwidth per link per direction (GB/s) by GPU model prefix.
NVLINK_GBPS_PER_LINK = {
    "V100": 25.0,
    "A100": 25.0,
    "A800": 25.0,
    "H100": 25.0,
    "H800": 25.0,
    "H200": 25.0,
    "H20": 25.0,
    "GH200": 25.0,
    "B100": 50.0,
    "B200": 50.0,
    "GB200": 50.0,
    "B300": 50.0,
    "GB300": 50.0,
}
_DEFAULT_NVLINK_PER_LINK = 25.0


@dataclass(frozen=True)
class TopoMatrix:
    """What ``nvidia-smi topo -m`` says about one machine."""

    gpus: tuple[str, ...]  # GPU0 … in order
    links: tuple[tuple[str, ...], ...]  # GPU × GPU tokens, "X" on the diagonal
    nics: tuple[str, ...] = ()  # NIC0 …
    nic_names: dict[str, str] = field(default_factory=dict)  # NIC0 → mlx5_0 (legend)
    gpu_nic: tuple[tuple[str, ...], ...] = ()  # GPU × NIC tokens
    cpu_affinity: tuple[str, ...] = ()  # per GPU ("" when absent)
    numa_affinity: tuple[str, ...] = ()  # per GPU ("" when absent)
    gpu_numa_id: tuple[str, ...] = ()  # per GPU ("" when the column is absent)

    def nearest_nics(self) -> dict[str, list[str]]:
        """Per GPU, the NICs at the closest PCIe class it has to any NIC (names from the
        legend when given)."""
        order = {t: k for k, t in enumerate(PCIE_TOKENS)}
        out: dict[str, list[str]] = {}
        for g, row in zip(self.gpus, self.gpu_nic):
            if not row:
                out[g] = []
                continue
            best = min(order.get(t, len(order)) for t in row)
            out[g] = [
                self.nic_names.get(n, n)
                for n, t in zip(self.nics, row)
                if order.get(t, len(order)) == best
            ]
        return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("\t")] if "\t" in line else line.split()


def _header_columns(line: str) -> list[str]:
    if "\t" in line:
        return [c.strip() for c in line.split("\t") if c.strip()]
    return [c for c in re.split(r"\s{2,}", line.strip()) if c]


def _check_token(token: str, where: str) -> str:
    if token == "SOC":  # older drivers' name for SYS
        return "SYS"
    if token == "X" or token in PCIE_TOKENS or _NV.match(token):
        return token
    raise InputError(
        f"{where}: unknown link token {token!r} (expected X, NV#, PIX, PXB, PHB, NODE or SYS)"
    )


def parse_topo(text: str, source: str = "nvidia-smi topo -m") -> TopoMatrix:
    """Parse the text printed by ``nvidia-smi topo -m``."""
    lines = [_ANSI.sub("", raw).rstrip("\r\n") for raw in text.splitlines()]
    head = next((k for k, ln in enumerate(lines) if re.search(r"\bGPU0\b", ln)), None)
    if head is None:
        raise InputError(f"{source}: no header line with GPU0 (is this `nvidia-smi topo -m`?)")
    columns = _header_columns(lines[head])
    # device columns lead (GPUs, then NICs: NIC0 … or, from older drivers, the devices' own
    # names such as mlx5_0); then the named columns (CPU Affinity, NUMA Affinity, GPU NUMA ID),
    # which have spaces
    lead = next((k for k, c in enumerate(columns) if " " in c), len(columns))
    devices, trailing = columns[:lead], columns[lead:]
    gpu_cols = [c for c in devices if _GPU.match(c)]
    nic_cols = [c for c in devices if not _GPU.match(c)]
    if devices != gpu_cols + nic_cols:
        raise InputError(f"{source}:{head + 1}: header lists NIC columns before GPU columns")
    rows: dict[str, tuple[list[str], list[str]]] = {}
    nic_names: dict[str, str] = {}
    in_legend = False
    for k in range(head + 1, len(lines)):
        line = lines[k]
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("Legend") or stripped.startswith("NIC Legend"):
            in_legend = True
            continue
        if in_legend:
            m = re.match(r"^(NIC\d+)\s*:\s*(\S+)$", stripped)
            if m:
                nic_names[m.group(1)] = m.group(2)
            continue
        cells = _cells(line)
        label = cells[0] if cells else ""
        if label not in devices:
            raise InputError(
                f"{source}:{k + 1}: expected a row of a device the header names "
                f"({', '.join(devices)}), got {stripped[:40]!r}"
            )
        values = [c for c in cells[1:] if c != ""]
        link_like = 0
        while link_like < len(values) and _LINKISH.match(values[link_like]):
            link_like += 1
        if link_like < len(devices) and not (
            link_like < len(values) and not _AFFINITY.match(values[link_like])
        ):
            raise InputError(
                f"{source}:{k + 1}: row {label} has {link_like} link cells, the header has "
                f"{len(devices)} device columns (truncated output?)"
            )
        where = f"{source}:{k + 1}"
        links = [
            _check_token(v, f"{where} ({label}/{devices[j]})")
            for j, v in enumerate(values[: len(devices)])
        ]
        extra = values[len(devices) :]
        if len(extra) > len(trailing):
            raise InputError(
                f"{where}: row {label} has {len(extra)} cells after the matrix, the header "
                f"names {len(trailing)} ({', '.join(trailing) or 'none'})"
            )
        if label in rows:
            raise InputError(f"{where}: row {label} appears twice")
        rows[label] = (links, extra)
    missing = [g for g in gpu_cols if g not in rows]
    if missing:
        raise InputError(f"{source}: no row for {', '.join(missing)} (truncated output?)")
    n = len(gpu_cols)
    matrix = tuple(tuple(rows[g][0][:n]) for g in gpu_cols)
    for i in range(n):
        if matrix[i][i] != "X":
            raise InputError(f"{source}: {gpu_cols[i]} row has {matrix[i][i]!r} on the diagonal")
        for j in range(i + 1, n):
            if matrix[i][j] != matrix[j][i]:
                raise InputError(
                    f"{source}: inconsistent matrix: {gpu_cols[i]}→{gpu_cols[j]} is "
                    f"{matrix[i][j]} but {gpu_cols[j]}→{gpu_cols[i]} is {matrix[j][i]}"
                )
            if matrix[i][j] == "X":
                raise InputError(f"{source}: X off the diagonal ({gpu_cols[i]}, {gpu_cols[j]})")

    def column(name: str) -> tuple[str, ...]:
        if name not in trailing:
            return ()
        idx = trailing.index(name)
        return tuple(rows[g][1][idx] if idx < len(rows[g][1]) else "" for g in gpu_cols)

    return TopoMatrix(
        gpus=tuple(gpu_cols),
        links=matrix,
        nics=tuple(nic_cols),
        nic_names=nic_names,
        gpu_nic=tuple(tuple(rows[g][0][n:]) for g in gpu_cols),
        cpu_affinity=column("CPU Affinity"),
        numa_affinity=column("NUMA Affinity"),
        gpu_numa_id=column("GPU NUMA ID"),
    )


def read_topo(path: str | os.PathLike[str]) -> TopoMatrix:
    """Read a saved ``nvidia-smi topo -m`` output file."""
    return parse_topo(read_text(path, "nvidia-smi topo -m output"), str(path))


def _nvlink_per_link(gpu_model: str | None) -> tuple[float, str]:
    if gpu_model:
        key = gpu_model.upper().replace("NVIDIA", "").strip()
        for prefix in sorted(NVLINK_GBPS_PER_LINK, key=len, reverse=True):
            if key.startswith(prefix) or f" {prefix}" in f" {key}":
                return NVLINK_GBPS_PER_LINK[prefix], "advertised"
    return _DEFAULT_NVLINK_PER_LINK, "default"


def node_type_from_topo(
    topo: TopoMatrix,
    name: str = "node",
    gpu_model: str | None = None,
    memory_gb: float = 0.0,
) -> tuple[NodeType, dict[str, LinkClass], dict[str, str]]:
    """A node type with an intra-node matrix, its link classes, and each class's provenance."""
    per_link, nv_source = _nvlink_per_link(gpu_model)
    links: dict[str, LinkClass] = {}
    provenance: dict[str, str] = {}
    n = len(topo.gpus)
    matrix = []
    for i in range(n):
        row = []
        for j in range(n):
            token = topo.links[i][j]
            if token == "X":
                row.append("X")
                continue
            nv = _NV.match(token)
            if nv:
                count = int(nv.group(1))
                links.setdefault(token, LinkClass(token, per_link * max(count, 1), 1.0, nv_source))
                provenance[token] = nv_source
            else:
                links.setdefault(token, LinkClass(token, PCIE_GBPS[token], 2.0, "default"))
                provenance[token] = "default"
            row.append(token)
        matrix.append(tuple(row))
    near = topo.nearest_nics()
    node_type = NodeType(
        name,
        n,
        gpu_model or "GPU",
        memory_gb,
        intra_matrix=tuple(matrix) if n > 1 else None,
        nics=len(topo.nics),
        nic_affinity=tuple(tuple(near[g]) for g in topo.gpus) if topo.nics else None,
    )
    return node_type, links, provenance


def cluster_from_topo(
    topo: TopoMatrix,
    host: str = "node0",
    gpu_model: str | None = None,
    memory_gb: float = 0.0,
    gpu_uuids: tuple[str, ...] = (),
) -> Cluster:
    """A one-node cluster from one machine's matrix (join several with network levels later);
    ``gpu_uuids`` (from NVML, local index order) are recorded on the node."""
    node_type, links, provenance = node_type_from_topo(topo, "node", gpu_model, memory_gb)
    notes = ", ".join(f"{k}: {v}" for k, v in sorted(provenance.items()))
    return Cluster(
        name=host,
        links=links,
        levels=(),
        node_types={node_type.name: node_type},
        nodes=(Node(host, node_type.name, gpu_uuids=tuple(gpu_uuids)),),
        source="nvidia-smi topo -m",
        description="from nvidia-smi topo -m" + (f"; link figures {notes}" if notes else ""),
    )
