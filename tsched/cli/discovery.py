"""``tsched inventory``, ``tsched topology convert`` and ``tsched validate``: parse → call the
library → print. Registered on the main parser by :func:`add_parsers`."""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
from typing import Any

from tsched.cli._common import integer, number
from tsched.cluster import MAX_NODE_GPUS
from tsched.errors import DiscoveryError, InputError

__all__ = ["add_parsers", "CONVERT_FORMATS"]

CONVERT_FORMATS = (
    "tsched",
    "slurm-tree",
    "slurm-block",
    "k8s-labels",
    "kai-topology",
    "kueue-topology",
    "topograph",
    "slinky-configmap",
    "slurm-yaml",
    "graphml",
    "node-link",
)


def _hardware(args: argparse.Namespace) -> Any:
    """The node hardware the command line describes (``--gpus`` … ``--host``)."""
    from tsched.formats.detect import Hardware

    return Hardware(args.gpus, args.gpu_model, args.memory_gb or 0.0, args.intra_gbps, args.host)


def _stderr(args: argparse.Namespace, text: str) -> None:
    if not getattr(args, "quiet", False):
        sys.stderr.write(text + "\n")


# ---------------------------------------------------------------------- inputs
def read_any_cluster(source: str, args: argparse.Namespace) -> Any:
    """A cluster from a preset name or a file in any format tsched reads, with the command
    line's node hardware for formats that describe no GPUs."""
    from tsched.presets import load_any_cluster

    return load_any_cluster(source, _hardware(args), getattr(args, "topology", None))


# ---------------------------------------------------------------------- inventory
def _local(args: argparse.Namespace) -> Any:
    from tsched.discovery import nvml, sysfs
    from tsched.formats.nvidia_smi import cluster_from_topo, parse_topo

    host = args.host or socket.gethostname()
    inv = sysfs.collect(args.sysfs_root)
    for nic in inv.nics:
        speed = (
            f"{nic.speed_mbps} Mb/s"
            if nic.speed_mbps
            else (f"{nic.rate_gbps:g} Gb/s" if nic.rate_gbps else "speed unknown")
        )
        _stderr(args, f"nic {nic.name}: {nic.state}, {nic.link_layer}, {speed}, "
                      f"pci {nic.pci_address or '-'}, numa {nic.numa_node}")  # fmt: skip
    reasons = []
    try:
        record = nvml.collect()
        from tsched.discovery.nvml import topo_from_record

        gpus = record.gpus
        return cluster_from_topo(topo_from_record(record), host, gpus[0]["name"],
                                 float(gpus[0]["memory_gb"]), nvml.gpu_uuids(record))  # fmt: skip
    except DiscoveryError as exc:
        reasons.append(f"NVML: {exc}")
    exe = shutil.which("nvidia-smi")
    if exe:
        out = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=60)
        if out.returncode == 0:
            model, memory = _smi_gpu(exe)
            topo = parse_topo(out.stdout, "nvidia-smi topo -m")
            return cluster_from_topo(topo, host, model or args.gpu_model, memory)
        reasons.append(f"nvidia-smi topo -m exited {out.returncode}: {out.stderr.strip()[:200]}")
    else:
        reasons.append("nvidia-smi: not on PATH")
    reasons.append(f"sysfs: {len(inv.gpus)} NVIDIA GPU(s) on the PCI bus")
    raise DiscoveryError("no GPU inventory on this machine: " + "; ".join(reasons))


def _smi_gpu(exe: str) -> tuple[str | None, float]:
    """The first GPU's model and memory (GB) as ``nvidia-smi --query-gpu`` gives them, or
    ``(None, 0)`` when it does not answer (the model then decides the NVLink figures)."""
    out = subprocess.run(
        [exe, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    first = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    name, _, mib = first.partition(",")
    try:
        memory = round(float(mib) / 1024.0, 1)
    except ValueError:
        memory = 0.0
    return (name.strip() or None), memory


def _ray(args: argparse.Namespace) -> Any:
    from tsched.discovery.ray import inventory, measure_links

    mapping = None
    if args.mapping:
        from tsched._io import load_yaml_text, read_text

        mapping = load_yaml_text(read_text(args.mapping, "level mapping"), args.mapping)
        if not isinstance(mapping, dict) or not all(isinstance(v, dict) for v in mapping.values()):
            raise InputError(f"{args.mapping}: expected NODE: {{LEVEL: GROUP, …}} per node")
    inv = inventory(args.address, timeout=args.timeout, mapping=mapping)
    for node, reason in inv.failed.items():
        sys.stderr.write(f"tsched: node {node} failed: {reason}\n")
    for node, reason in inv.skipped.items():
        _stderr(args, f"node {node} left out: {reason}")
    if inv.failed and not args.allow_failed:
        raise DiscoveryError(
            f"{len(inv.failed)} node(s) did not report ({', '.join(sorted(inv.failed))}); "
            "nothing written (--allow-failed writes the nodes that did)"
        )
    if inv.cluster is None:
        raise DiscoveryError("no node of the Ray cluster advertises GPUs")
    cluster = inv.cluster
    if args.measure:
        cluster, results = measure_links(
            inv, max_bytes=args.max_bytes, max_seconds=args.max_seconds, address=args.address
        )
        for m in results:
            _stderr(args, f"measured {m.level}: {m.gbps:.3f} GB/s, rtt {m.rtt_us:.0f} µs "
                          f"({m.src} ↔ {m.dst})")  # fmt: skip
    return cluster


def cmd_inventory(args: argparse.Namespace) -> int:
    from tsched._io import dump_yaml
    from tsched.formats.cluster_yaml import cluster_to_dict, write_cluster

    if args.source == "local":
        cluster = _local(args)
    elif args.source == "ray":
        cluster = _ray(args)
    else:
        if not args.file:
            raise InputError(f"tsched inventory {args.source}: FILE is required")
        from tsched.formats.detect import read_topology

        cluster = read_topology(args.source, args.file, _hardware(args), args.topology)
    cluster = _apply_nccl(cluster, args)
    if args.output:
        write_cluster(cluster, args.output)
        _stderr(args, f"{cluster.describe()}\ncluster written to {args.output}")
    elif args.json:
        print(json.dumps(cluster_to_dict(cluster)))
    else:
        sys.stdout.write(dump_yaml(cluster_to_dict(cluster)))
    return 0


def _apply_nccl(cluster: Any, args: argparse.Namespace) -> Any:
    from tsched.formats.nccl_tests import apply_measurement, link_for_run, read_nccl_tests

    for path in args.nccl_tests or ():
        run = read_nccl_tests(path)
        link = link_for_run(cluster, run)
        cluster = apply_measurement(cluster, link, run.peak_busbw)
        _stderr(args, f"{path}: {link} measured at {run.peak_busbw:g} GB/s bus bandwidth")
    return cluster


# ---------------------------------------------------------------------- convert
def cmd_convert(args: argparse.Namespace) -> int:
    import yaml

    from tsched._io import atomic_write_text, dump_yaml
    from tsched.formats import k8s_topology, slurm, topograph
    from tsched.formats.cluster_yaml import cluster_to_dict
    from tsched.formats.topology import tree_from_cluster

    cluster = read_any_cluster(args.input, args)
    fmt = args.to
    if fmt == "tsched":
        text = dump_yaml(cluster_to_dict(cluster))
    elif fmt == "slurm-tree":
        text = slurm.write_tree(tree_from_cluster(cluster))
    elif fmt == "slurm-block":
        text = slurm.write_block(slurm.blocks_from_cluster(cluster))
    elif fmt == "slinky-configmap":
        from tsched.formats.slinky import configmap

        text = configmap(cluster, name=args.configmap_name, namespace=args.namespace,
                         plugin=args.slurm_plugin)  # fmt: skip
    elif fmt == "slurm-yaml":
        from tsched.formats.slurm_yaml import topology_yaml

        text = topology_yaml(cluster)
    elif fmt in ("graphml", "node-link"):
        from tsched.formats.graph import graph_text

        text = graph_text(cluster, fmt)
    elif fmt in ("k8s-labels", "topograph"):  # topograph: the current Topograph label scheme
        scheme = "topograph" if fmt == "topograph" else args.label_scheme
        labels = topograph.labels_from_cluster(cluster, scheme)
        text = json.dumps(topograph.nodes_document(labels), indent=2) + "\n"
    else:
        flavour = "kai" if fmt == "kai-topology" else "kueue"
        obj = k8s_topology.topology_object(cluster, flavour, args.name, args.label_scheme)
        k8s_topology.validate(obj, flavour)
        text = yaml.safe_dump(obj, sort_keys=False)
    if args.output:
        atomic_write_text(args.output, text)
        _stderr(args, f"{fmt} written to {args.output}")
    else:
        sys.stdout.write(text)
    return 0


# ---------------------------------------------------------------------- validate
def cmd_validate(args: argparse.Namespace) -> int:
    from tsched.plan import read_plan, validate_plan

    plan = read_plan(args.plan)
    current = read_any_cluster(args.cluster, args)
    drift = validate_plan(plan, current)
    if args.json:
        print(json.dumps({
            "plan": str(args.plan),
            "cluster": current.name,
            "valid": not drift,
            "drift": [{"worker": d.worker, "node": d.node, "gpu": d.gpu, "reason": d.reason}
                      for d in drift],
        }))  # fmt: skip
    elif drift:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"plan {args.plan} against {current.name}: {len(drift)} problem(s)")
        for col in ("worker", "node", "gpu", "drift"):
            table.add_column(col)
        for d in drift:
            table.add_row(str(d.worker), d.node, str(d.gpu), d.reason)
        Console(highlight=False).print(table)
    else:
        print(f"plan {args.plan}: all {len(plan.assignment)} workers' GPUs exist, are free and "
              f"unchanged on {current.name}")  # fmt: skip
    return 1 if drift else 0


# ---------------------------------------------------------------------- parsers
def _hardware_args(p: argparse.ArgumentParser) -> None:
    from tsched.formats.detect import Hardware

    d = Hardware()  # what formats that describe no GPUs assume
    g = p.add_argument_group("node hardware (formats that do not describe GPUs)")
    g.add_argument(
        "--gpus",
        type=integer(1, MAX_NODE_GPUS),
        default=d.gpus,
        help=f"GPUs per node (default {d.gpus})",
    )
    g.add_argument("--gpu-model", default=d.gpu_model, help=f"GPU model (default {d.gpu_model})")
    g.add_argument(
        "--memory-gb", type=number(minimum=0.0), default=d.memory_gb, help="memory per GPU"
    )
    g.add_argument("--intra-gbps", type=number(positive=True), default=d.intra_gbps,
                   help=f"intra-node GB/s per direction ({d.intra_gbps:g})")  # fmt: skip
    g.add_argument("--host", default=d.host, help="node name (nvidia-smi, local)")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "inventory",
        help="discover (local, ray) or import (nvidia-smi, topograph, slurm) a cluster",
    )
    p.add_argument("source", choices=("local", "ray", "nvidia-smi", "topograph", "slurm"))
    p.add_argument("file", nargs="?", help="the file to import (nvidia-smi, topograph, slurm)")
    p.add_argument("-o", "--output", metavar="CLUSTER.yaml", help="write cluster/v1 here")
    p.add_argument("--json", action="store_true", help="print the cluster as JSON")
    p.add_argument("--quiet", action="store_true")
    p.add_argument(
        "--nccl-tests",
        action="append",
        metavar="FILE",
        help="nccl-tests output whose bus bandwidth replaces the link it measured (repeatable)",
    )
    p.add_argument(
        "--topology",
        default=None,
        help="slurm: which topology of a topology.yaml (default: its cluster_default)",
    )
    p.add_argument("--sysfs-root", default="/", help="root of the sysfs tree (local)")
    p.add_argument(
        "--address", default=None, help="Ray address (default: the sandbox's, else auto)"
    )
    p.add_argument(
        "--timeout", type=number(positive=True), default=60.0, help="per-node probe timeout (ray)"
    )
    p.add_argument("--mapping", metavar="YAML", help="node → {level: group} (ray)")
    p.add_argument("--allow-failed", action="store_true", help="write even if nodes failed")
    p.add_argument("--measure", action="store_true", help="probe links per level (ray)")
    p.add_argument("--max-bytes", type=integer(1), default=64 << 20, help="per probe direction")
    p.add_argument(
        "--max-seconds", type=number(positive=True), default=5.0, help="per probe direction"
    )
    _hardware_args(p)
    p.set_defaults(func=cmd_inventory)

    p = sub.add_parser("topology", help="convert between topology formats")
    tsub = p.add_subparsers(dest="topology_command", metavar="convert", required=True)
    c = tsub.add_parser("convert", help="IN --to FORMAT")
    c.add_argument("input", metavar="IN", help="cluster/v1, Slurm, Topograph, nodes JSON, …")
    c.add_argument("--to", required=True, choices=CONVERT_FORMATS)
    c.add_argument("-o", "--output", metavar="OUT")
    c.add_argument(
        "--label-scheme", default="topograph", choices=("topograph", "nvidia-v1", "nvidia-v2")
    )
    c.add_argument("--name", default=None, help="object name (kai-/kueue-topology)")
    c.add_argument(
        "--configmap-name",
        default="slurm-config",
        help="ConfigMap name (slinky-configmap; default slurm-config)",
    )
    c.add_argument(
        "--namespace", default="slurm", help="ConfigMap namespace (slinky-configmap; default slurm)"
    )
    c.add_argument(
        "--slurm-plugin",
        choices=("tree", "block"),
        default="tree",
        help="Slurm topology plugin the ConfigMap holds (default tree)",
    )
    c.add_argument("--topology", default=None,
                   help="which topology of a Slurm topology.yaml to read (default: its "
                        "cluster_default)")  # fmt: skip
    c.add_argument("--quiet", action="store_true")
    _hardware_args(c)
    c.set_defaults(func=cmd_convert)

    p = sub.add_parser("validate", help="check a plan against the cluster as it is now")
    p.add_argument("plan", metavar="PLAN.json")
    p.add_argument("--cluster", required=True, help="the current cluster (any readable format)")
    p.add_argument("--json", action="store_true")
    _hardware_args(p)
    p.set_defaults(func=cmd_validate)
