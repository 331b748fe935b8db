"""Pictures of plans: the cluster's hierarchy with every GPU coloured by its worker group, busy
GPUs greyed, the traffic between nodes drawn by weight, and the plan's traffic and cost by link
class beside it. PNG and SVG through matplotlib; HTML as one self-contained file whose GPUs say,
on hover, which worker runs there and what it sends.

The drawing: one *column* per domain of the cluster's nearest network level (a leaf, or an NVL
domain when that is the nearest level), its nodes stacked in it, each node a row of GPU squares.
Columns are grouped under the next level (spine …) and wrapped into rows so the picture keeps a
landscape shape. Past :data:`AGGREGATE_GPUS` GPUs a node is one square (coloured by the group
holding most of its GPUs, greyed when all are busy), and past :data:`AGGREGATE_ARCS` node pairs
the traffic arcs join columns instead of nodes; the title says so. Arcs are drawn for traffic
between nodes only; traffic inside a node is in the bars.

Worker groups come from the workload's roles (``tp0-dp1-pp0``, ``prefill0-tp2``): ``tp`` colours
each TP group (workers that differ only in their TP rank), likewise ``cp`` and ``ep``; ``dp`` and
``pp`` colour DP replicas and pipeline stages; ``replica`` colours serving replicas. Workloads
without roles are coloured by the connected components of their traffic.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tsched.cluster import Cluster
from tsched.errors import InputError
from tsched.plan import Plan

__all__ = [
    "FORMATS",
    "COLOR_BY",
    "AGGREGATE_GPUS",
    "AGGREGATE_ARCS",
    "DOMAIN_GPUS",
    "Picture",
    "picture",
    "write_picture",
]

FORMATS = (".png", ".svg", ".html")
COLOR_BY = ("auto", "tp", "cp", "ep", "dp", "pp", "replica", "worker", "component")
#: Above this many GPUs, nodes are drawn as one square each.
AGGREGATE_GPUS = 2048
#: Above this many GPUs, each domain of the nearest level (a leaf) is one cell of a heat map:
#: the share of its GPUs the plan uses (in the colour of the group holding most), busy and free.
DOMAIN_GPUS = 8192
#: Above this many node pairs with traffic, arcs join columns (leaves) instead of nodes.
AGGREGATE_ARCS = 400
#: Busy GPUs: a grey no worker group uses, always hatched, so busy never reads as a group.
_BUSY, _FREE, _BUSY_HATCH = "#b3b3b3", "#ffffff", "xxxx"
#: Patterns that tell apart groups past the palette (the colours repeat, the pattern does not).
_HATCHES = ("", "////", "....", "\\\\\\\\", "oo", "--", "++")
#: Nodes are named beside their row up to this many nodes (past it, the columns are named).
LABELLED_NODES = 256
_SPLIT_DIMS = ("tp", "cp", "ep")  # a group is the workers that differ only in this rank


@dataclass(frozen=True)
class Picture:
    """What every renderer draws (all positions in drawing units, y downwards)."""

    title: str
    subtitle: str
    aggregated: bool
    #: whether nodes are named (up to :data:`LABELLED_NODES` nodes, not aggregated)
    labelled: bool
    color_by: str
    #: per node: (name, x, y, GPU squares per row, GPU count)
    nodes: tuple[tuple[str, float, float, int, int], ...]
    #: per column: (label, x, y, width, height, group label of the next level or "")
    columns: tuple[tuple[str, float, float, float, float, str], ...]
    #: per global GPU: group index (-1 free, -2 busy) and worker (-1 none)
    gpu_group: np.ndarray
    gpu_worker: np.ndarray
    group_names: tuple[str, ...]
    #: traffic arcs: (x0, y0, x1, y1, GB per iteration, link class)
    arcs: tuple[tuple[float, float, float, float, float, str], ...]
    traffic_by_link: dict[str, float]
    cost_by_link: dict[str, float]
    worker_text: tuple[str, ...]
    #: the cluster's link classes, nearest first (fixes each class's colour)
    links: tuple[str, ...]
    width: float
    height: float
    #: the heat map past :data:`DOMAIN_GPUS`: per column, (GPUs used by the plan, busy, all,
    #: the group holding most of the used ones or -1); empty below it
    domains: tuple[tuple[int, int, int, int], ...] = ()

    def link_colors(self) -> dict[str, str]:
        palette = ("#4d4d4d", "#b2182b", "#2166ac", "#1b7837", "#762a83", "#8c510a", "#01665e")
        return {name: palette[k % len(palette)] for k, name in enumerate(self.links)}


#: The most groups the automatic choice wants to tell apart by colour.
_DISTINCT = 20


def _auto_grouping(roles: Sequence[str]) -> str:
    """Serving replicas for serving plans; else the TP group when there are few enough to
    tell apart, otherwise the finest grouping with at most :data:`_DISTINCT` groups (pipeline
    stages of a large job), else the coarsest one."""
    first = roles[0].split("-")[0].rstrip("0123456789")
    if first not in (*_SPLIT_DIMS, "dp", "pp"):
        return "replica"

    # the dimensions every role has a rank in (a plan file's roles may disagree)
    def has(role: str, dim: str) -> bool:
        return any(t.rstrip("0123456789") == dim for t in role.split("-"))

    dims = [d for d in ("tp", "ep", "cp", "pp", "dp") if all(has(r, d) for r in roles)]
    counts = {}
    for dim in dims:
        tokens = [r.split("-") for r in roles]
        if dim in _SPLIT_DIMS:
            keys = {"-".join(t for t in ts if t.rstrip("0123456789") != dim) for ts in tokens}
        else:
            keys = {next(t for t in ts if t.rstrip("0123456789") == dim) for ts in tokens}
        counts[dim] = len(keys)
    if not counts:
        return "worker"
    few = [d for d in dims if 1 < counts[d] <= _DISTINCT]
    if few:
        return max(few, key=lambda d: counts[d])
    return min(dims, key=lambda d: counts[d])


def _groups(plan: Plan, workload: Any | None, color_by: str) -> tuple[np.ndarray, list[str], str]:
    """Group index per worker, group names, and the grouping actually used."""
    n = len(plan.assignment)
    roles = plan.roles or (workload.roles if workload is not None else None)
    if color_by == "auto":
        if roles:
            color_by = _auto_grouping(roles)
        else:
            color_by = "component" if workload is not None else "worker"
    if color_by == "worker":
        return np.arange(n), [f"worker {i}" for i in range(n)], color_by
    if color_by == "component":
        if workload is None:
            raise InputError("--color-by component needs the workload (--workload)")
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        graph = coo_matrix((np.ones(len(workload.src)), (workload.src, workload.dst)), (n, n))
        _, labels = connected_components(graph, directed=False)
        return labels, [f"component {k}" for k in range(int(labels.max()) + 1)], color_by
    if not roles:
        raise InputError(
            f"--color-by {color_by}: the plan's workers have no roles (a layout or "
            "serving workload has them); use worker or component"
        )
    keys = []
    for role in roles:
        tokens = role.split("-")
        if color_by == "replica":
            key = tokens[0]
        elif color_by in _SPLIT_DIMS:
            rest = [t for t in tokens if t.rstrip("0123456789") != color_by]
            key = ("-".join(rest) or "all") if len(rest) < len(tokens) else ""
        else:
            key = next((t for t in tokens if t.rstrip("0123456789") == color_by), "")
        if not key:
            raise InputError(f"--color-by {color_by}: role {role!r} has no {color_by} rank")
        keys.append(key)
    names = list(dict.fromkeys(keys))
    index = {k: i for i, k in enumerate(names)}
    prefix = {
        "tp": "TP group ",
        "cp": "CP group ",
        "ep": "EP group ",
        "dp": "DP replica ",
        "pp": "stage ",
        "replica": "",
    }[color_by]
    return np.array([index[k] for k in keys]), [prefix + k for k in names], color_by


def _layout(
    cluster: Cluster, aggregated: bool, gap: float, heat: bool = False
) -> tuple[list, list, np.ndarray, float, float]:
    """Node and column positions: columns by the nearest level, grouped by the next one,
    wrapped into rows of a landscape shape. With ``heat`` each column is one cell of the same
    size (nodes are not drawn)."""
    level = cluster.levels[0] if cluster.levels else None
    columns: dict[str, list[int]] = {}
    parent: dict[str, str] = {}
    for i, node in enumerate(cluster.nodes):
        key = node.at.get(level, "") if level else ""
        columns.setdefault(key, []).append(i)
        if len(cluster.levels) > 1:
            parent[key] = node.at.get(cluster.levels[1], "")
    per_row = [1 if aggregated else min(int(g), 8) for g in cluster.gpus_per_node]
    rows_of = [1 if aggregated else -(-int(g) // 8) for g in cluster.gpus_per_node]
    sizes = []
    for key, members in columns.items():
        width = 2.0 if heat else max(per_row[i] for i in members)
        height = 2.6 if heat else sum(rows_of[i] + (0.0 if aggregated else 0.6) for i in members)
        sizes.append((key, members, width, height))
    if heat:
        gap = 0.8
    area = sum((w + gap) * (h + 1.5) for _, _, w, h in sizes)
    target = max(max(w for _, _, w, _ in sizes) + gap, (area * 4.0) ** 0.5)
    nodes, cols = [], []
    node_column = np.zeros(cluster.n_nodes, dtype=np.int64)
    x = y = row_height = 0.0
    group_width: dict[str, float] = {}
    for key, _, width, _ in sizes:
        group_width[parent.get(key, "")] = group_width.get(parent.get(key, ""), 0.0) + width + gap
    previous = None
    for key, members, width, height in sizes:
        group = parent.get(key, "")
        starts = group != previous and group_width[group] <= target  # keep a group on one row
        if x > 0 and (x + width > target or (starts and x + group_width[group] - gap > target)):
            x, y, row_height = 0.0, y + row_height + 2.0, 0.0
        previous = group
        ny = y + 1.0
        for i in members:
            node_column[i] = len(cols)
            nodes.append((cluster.nodes[i].name, x, ny, per_row[i], int(cluster.gpus_per_node[i])))
            ny += rows_of[i] + (0.0 if aggregated else 0.6)
        cols.append((key or cluster.name, x, y, float(width), height + 1.0, parent.get(key, "")))
        row_height = max(row_height, height + 1.0)
        x += width + gap
    width = max(c[1] + c[3] for c in cols)
    return nodes, cols, node_column, width, y + row_height


def picture(
    plan: Plan,
    cluster: Cluster,
    workload: Any | None = None,
    *,
    color_by: str = "auto",
    note: str | None = None,
) -> Picture:
    """The drawing of ``plan`` on ``cluster`` (traffic arcs and bars need ``workload``).

    Examples
    --------
    >>> import tsched
    >>> cluster, workload = tsched.load_cluster("dgx-h100-4node"), tsched.load_workload(
    ...     "llama3-8b-tp4-pp2-dp2")
    >>> result = tsched.solve(tsched.PlacementProblem.build(cluster, workload), method="greedy")
    >>> pic = picture(result.plan(), cluster, workload)
    >>> pic.color_by, len(pic.group_names), sorted(pic.traffic_by_link)
    ('tp', 4, ['leaf', 'nvlink'])
    """
    if color_by not in COLOR_BY:
        raise InputError(f"--color-by {color_by!r}: expected one of {', '.join(COLOR_BY)}")
    if workload is not None and workload.workers != len(plan.assignment):
        raise InputError(
            f"workload {workload.name!r} has {workload.workers} workers; the plan "
            f"places {len(plan.assignment)}"
        )
    group_of, names, used = _groups(plan, workload, color_by)
    n_workers = len(plan.assignment)
    gpu_of = np.empty(n_workers, dtype=np.int64)
    for e in plan.assignment:
        try:
            gpu_of[e.worker] = cluster.gpu_id(e.node, e.gpu)
        except InputError as exc:
            raise InputError(f"plan does not fit cluster {cluster.name!r}: {exc}") from None
    gpu_group = np.where(cluster.busy_mask, -2, -1).astype(np.int64)
    gpu_worker = np.full(cluster.n_gpus, -1, dtype=np.int64)
    gpu_group[gpu_of] = group_of
    gpu_worker[gpu_of] = np.arange(n_workers)
    aggregated = cluster.n_gpus > AGGREGATE_GPUS
    heat = cluster.n_gpus > DOMAIN_GPUS and bool(cluster.levels)
    labelled = not aggregated and cluster.n_nodes <= LABELLED_NODES
    nodes, cols, node_column, width, height = _layout(cluster, aggregated, 4.0 if labelled else 1.5,
                                                      heat)  # fmt: skip
    traffic: dict[str, float] = {}
    arcs: list[tuple[float, float, float, float, float, str]] = []
    sent = np.zeros((n_workers, len(cluster.link_names)))
    if workload is not None and len(workload.src):
        a, b = gpu_of[workload.src], gpu_of[workload.dst]
        link = cluster.pair_link_index(a, b)
        for k, name in enumerate(cluster.link_names):
            mask = link == k
            if mask.any():
                traffic[name] = float(workload.gb[mask].sum())
                np.add.at(sent[:, k], workload.src[mask], workload.gb[mask])
        arcs = _arcs(cluster, nodes, cols, node_column, a, b, link, workload.gb, heat)
    worker_text = tuple(
        f"worker {w}{' (' + plan.roles[w] + ')' if plan.roles else ''} on "
        f"{e.node} GPU {e.gpu}, {names[group_of[w]]}"
        + (
            "; sends "
            + ", ".join(
                f"{cluster.link_names[k]} {sent[w, k]:.3g} GB" for k in np.flatnonzero(sent[w])
            )
            if sent[w].any()
            else ""
        )
        + " per iteration"
        for w, e in sorted(((e.worker, e) for e in plan.assignment), key=lambda t: t[0])
    )
    gap = "" if plan.gap is None else f", gap {100 * plan.gap:.2f}%"
    objective = "" if plan.objective is None else f"{plan.objective:.4g} s/iteration"
    head = f"{plan.status}, {objective}{gap}, {plan.method}" if note is None else note
    subtitle = (
        f"{head}; {n_workers} workers on "
        f"{cluster.n_gpus:,} GPUs ({int(cluster.free_mask().sum()):,} free); colour: {used}"
        + (
            "; one cell per leaf: the GPUs the plan uses, busy, free"
            if heat
            else "; one square per node"
            if aggregated
            else ""
        )
    )
    domains: tuple[tuple[int, int, int, int], ...] = ()
    if heat:  # one pass over the GPUs: counts per column, and per (column, group) for the top
        column = node_column[cluster.gpu_node]
        n_cols = len(cols)
        total = np.bincount(column, minlength=n_cols)
        busy = np.bincount(column[gpu_group == -2], minlength=n_cols)
        placed = gpu_group >= 0
        pairs = np.bincount(column[placed] * len(names) + gpu_group[placed],
                            minlength=n_cols * len(names)).reshape(n_cols, len(names))  # fmt: skip
        in_use = pairs.sum(axis=1)
        top = np.where(in_use > 0, pairs.argmax(axis=1), -1)
        domains = tuple(zip(in_use.tolist(), busy.tolist(), total.tolist(), top.tolist()))
    return Picture(
        title=f"{plan.workload} on {cluster.name}",
        subtitle=subtitle,
        aggregated=aggregated,
        labelled=labelled,
        color_by=used,
        nodes=tuple(nodes),
        columns=tuple(cols),
        gpu_group=gpu_group,
        gpu_worker=gpu_worker,
        group_names=tuple(names),
        arcs=tuple(arcs),
        traffic_by_link=traffic,
        cost_by_link={k: float(v) for k, v in plan.cost_by_link.items()},
        worker_text=worker_text,
        links=tuple(cluster.link_names),
        width=width,
        height=height,
        domains=domains,
    )


def _arcs(cluster, nodes, cols, node_column, a, b, link, gb, by_column: bool = False) -> list:
    """Traffic between nodes summed per unordered node pair (or column pair past
    :data:`AGGREGATE_ARCS`), heaviest first, with the link class that joins them."""
    na, nb = cluster.gpu_node[a], cluster.gpu_node[b]
    between = na != nb
    if not between.any():
        return []
    lo, hi = np.minimum(na, nb)[between], np.maximum(na, nb)[between]
    weight, links = gb[between], link[between]
    pairs, inverse = np.unique(lo * cluster.n_nodes + hi, return_inverse=True)
    sums = np.bincount(inverse, weights=weight)
    pair_link = np.zeros(len(pairs), dtype=np.int64)
    pair_link[inverse] = links
    centre = {name: (x + per_row / 2, y + 0.5) for name, x, y, per_row, _ in nodes}
    if (by_column or len(pairs) > AGGREGATE_ARCS) and cluster.levels:
        ca, cb = node_column[pairs // cluster.n_nodes], node_column[pairs % cluster.n_nodes]
        keep = ca != cb
        key = np.minimum(ca, cb)[keep] * len(cols) + np.maximum(ca, cb)[keep]
        uniq, inv = np.unique(key, return_inverse=True)
        col_sums = np.bincount(inv, weights=sums[keep])
        col_link = np.zeros(len(uniq), dtype=np.int64)
        col_link[inv] = pair_link[keep]
        mid = [(c[1] + c[3] / 2, c[2] + c[4] / 2) for c in cols]
        out = [
            (*mid[k // len(cols)], *mid[k % len(cols)], float(s), cluster.link_names[lk])
            for k, s, lk in zip(uniq, col_sums, col_link)
        ]
    else:
        names = [n.name for n in cluster.nodes]
        out = [
            (
                *centre[names[p // cluster.n_nodes]],
                *centre[names[p % cluster.n_nodes]],
                float(s),
                cluster.link_names[lk],
            )
            for p, s, lk in zip(pairs, sums, pair_link)
        ]
    out.sort(key=lambda t: -t[4])
    return out[:AGGREGATE_ARCS]


def _column_labels(pic: Picture) -> list[tuple[float, float, str]]:
    """(x, y, text) of the column headings: each column's name and its group at the next level,
    or past 32 columns one heading per group (``spine3: leaf24 … leaf31``) or every k-th column."""
    cols = pic.columns
    if len(cols) <= 32:
        return [(x + w / 2, y, label + (f" ({parent})" if parent else ""))
                for label, x, y, w, _, parent in cols]  # fmt: skip
    if any(c[5] for c in cols):
        runs: dict[tuple[str, float], list] = {}
        for col in cols:  # a group that wraps to the next row gets a heading there too
            runs.setdefault((col[5], col[2]), []).append(col)
        return [
            (members[0][1], y, f"{parent}: {members[0][0]}"
             + (f" … {members[-1][0]}" if len(members) > 1 else ""))
            for (parent, y), members in runs.items()
        ]  # fmt: skip
    step = -(-len(cols) // 32)
    return [(x + w / 2, y, label) for label, x, y, w, _, _ in cols[::step]]


#: Eighteen categorical colours in pairs (dark, light): the Tableau 20 palette without its two
#: greys, which would read as busy.
_PAIRS = ("#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
          "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#bcbd22", "#dbdb8d",
          "#17becf", "#9edae5")  # fmt: skip


def _colors(count: int) -> list[str]:
    """One colour per group: the 18 categorical colours, repeated past 18 (each repeat with a
    pattern of its own, :func:`_hatches`); past 18 × 7 groups a sweep of hues (neighbouring
    groups, e.g. successive pipeline stages, get neighbouring hues). No colour is grey, so no
    group reads as busy. Needs no plotting library, so the HTML picture does not either."""
    import colorsys

    if count <= len(_PAIRS) * len(_HATCHES):
        return [_PAIRS[i % len(_PAIRS)] for i in range(count)]
    out = []
    for i in range(count):
        r, g, b = colorsys.hsv_to_rgb(0.85 * i / max(count - 1, 1), 0.75, 0.85 - 0.25 * (i % 2))
        out.append(f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}")
    return out


def _hatches(count: int) -> list[str]:
    """The second cue of each group: none while the colours are distinct, else a pattern per
    repeat of the palette (or, for hue sweeps, per neighbour), so two groups never look alike.

    >>> _hatches(3), _hatches(20)[16:19]
    (['', '', ''], ['', '', '////'])
    """
    if count <= len(_PAIRS):
        return [""] * count
    if count <= len(_PAIRS) * len(_HATCHES):
        return [_HATCHES[i // len(_PAIRS)] for i in range(count)]
    return [_HATCHES[i % len(_HATCHES)] for i in range(count)]


def _gpu_cells(pic: Picture) -> list[tuple[str, float, float, int, int, int]]:
    """(node, x, y, first global GPU, GPUs, GPU index on the node) per drawn square: one per
    GPU, or one per node when aggregated (coloured by the group that holds most of its GPUs).
    None past :data:`DOMAIN_GPUS`, where the leaves are drawn instead."""
    if pic.domains:
        return []
    cells = []
    gpu = 0
    for name, x, y, per_row, count in pic.nodes:
        if pic.aggregated:
            cells.append((name, x, y, gpu, count, 0))
        else:
            cells.extend((name, x + k % per_row, y + k // per_row, gpu + k, 1, k)
                         for k in range(count))  # fmt: skip
        gpu += count
    return cells


def _node_group(pic: Picture, first: int, count: int) -> int:
    groups = pic.gpu_group[first : first + count]
    placed = groups[groups >= 0]
    if len(placed):
        return int(np.bincount(placed).argmax())
    return -2 if (groups == -2).all() else -1


def _domain_cells(
    pic: Picture, colors: Sequence[str], hatches: Sequence[str]
) -> list[tuple[float, float, float, float, list[tuple[str, str, float, float]], str]]:
    """The heat map's cells: per column (x, y, width, height, its bands, tooltip), the bands
    (colour, hatch, top, height) stacked from the bottom: the GPUs the plan uses (in the colour
    of the group holding most), then busy, then free."""
    out = []
    for (label, x, y, w, h, parent), (used, busy, total, top) in zip(pic.columns, pic.domains):
        cy, ch = y + 1.0, h - 1.4
        parts, bottom = [], cy + ch
        for count, color, hatch in (
            (used, colors[top] if top >= 0 else _FREE, hatches[top] if top >= 0 else ""),
            (busy, _BUSY, _BUSY_HATCH),
        ):
            if count:
                height = ch * count / max(total, 1)
                parts.append((color, hatch, bottom - height, height))
                bottom -= height
        group = f" ({pic.group_names[top]} most)" if top >= 0 else ""
        where = f"{label} ({parent})" if parent else label
        tip = (f"{where}: {total:,} GPUs, {used:,} used by the plan{group}, {busy:,} busy, "
               f"{total - used - busy:,} free")  # fmt: skip
        out.append((x, cy, w, ch, parts, tip))
    return out


def _cell_group(pic: Picture, gpu: int, count: int) -> int:
    return _node_group(pic, gpu, count) if pic.aggregated else int(pic.gpu_group[gpu])


def _fill(pic: Picture, colors: Sequence[str], gpu: int, count: int) -> str:
    group = _cell_group(pic, gpu, count)
    return _BUSY if group == -2 else _FREE if group == -1 else colors[group]


def _hatch(pic: Picture, hatches: Sequence[str], gpu: int, count: int) -> str:
    group = _cell_group(pic, gpu, count)
    return _BUSY_HATCH if group == -2 else "" if group == -1 else hatches[group]


def _tip(pic: Picture, name: str, gpu: int, count: int, local: int) -> str:
    """The tooltip of a drawn square: node, GPU index, worker and group, or what a node holds."""
    if pic.aggregated:
        used = int((pic.gpu_worker[gpu : gpu + count] >= 0).sum())
        busy = int((pic.gpu_group[gpu : gpu + count] == -2).sum())
        return f"{name}: {used} of {count} GPUs used by the plan, {busy} busy"
    worker = int(pic.gpu_worker[gpu])
    if worker >= 0:
        return pic.worker_text[worker]
    return f"{name} GPU {local}: {'busy' if pic.gpu_group[gpu] == -2 else 'free'}"


def _draw(pic: Picture, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        raise InputError(
            f"{path}: PNG and SVG pictures need matplotlib (pip install 'tsched[plot]'); "
            "an .html picture needs nothing more"
        ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    colors, hatches = _colors(len(pic.group_names)), _hatches(len(pic.group_names))
    link_colors = pic.link_colors()
    scale = min(0.22, 14.0 / max(pic.width, 1.0))
    fig_w = max(8.0, pic.width * scale + 4.5)
    fig_h = max(4.5, pic.height * scale * 1.0 + 2.2)
    fig = plt.figure(figsize=(fig_w, fig_h))
    ax = fig.add_axes((0.02, 0.08, (fig_w - 4.2) / fig_w, 0.78))
    label_nodes = pic.labelled
    titles: dict[str, str] = {}  # SVG element id → its tooltip
    if label_nodes:
        size = max(3.0, min(6.0, 60.0 * scale))
        for k, (name, x, y, _, count) in enumerate(pic.nodes):
            label = ax.text(x - 0.15, y + 0.45, name, ha="right", va="center", fontsize=size)
            label.set_gid(f"tsched-node-{k}")
            titles[f"tsched-node-{k}"] = f"{name}: {count} GPUs"
    with matplotlib.rc_context({"hatch.linewidth": 0.4, "hatch.color": "#404040"}):
        for k, (x, y, w, h, parts, tip) in enumerate(_domain_cells(pic, colors, hatches)):
            for color, hatch, y0, height in parts:
                ax.add_patch(Rectangle((x, y0), w, height, facecolor=color, hatch=hatch or None,
                                       edgecolor="none", linewidth=0))  # fmt: skip
            cell = Rectangle((x, y), w, h, fill=False, edgecolor="#555555", linewidth=0.4)
            cell.set_gid(f"tsched-domain-{k}")
            titles[f"tsched-domain-{k}"] = tip
            ax.add_patch(cell)
        for k, (name, x, y, g, count, local) in enumerate(_gpu_cells(pic)):
            cell = Rectangle((x, y), 0.9, 0.9, facecolor=_fill(pic, colors, g, count),
                             hatch=_hatch(pic, hatches, g, count) or None,
                             edgecolor="#555555", linewidth=0.3)  # fmt: skip
            cell.set_gid(f"tsched-gpu-{k}")
            titles[f"tsched-gpu-{k}"] = _tip(pic, name, g, count, local)
            ax.add_patch(cell)
    for _, x, y, w, h, _ in pic.columns:
        ax.add_patch(
            Rectangle(
                (x - 0.3, y + 0.5),
                w + 0.6,
                h - 0.3,
                fill=False,
                edgecolor="#999999",
                linewidth=0.6,
                linestyle="--",
            )
        )
    many = len(pic.columns) > 32
    for x, y, text in _column_labels(pic):
        ax.text(x, y + 0.35, text, ha="left" if many else "center", va="bottom", fontsize=6)
    if pic.arcs:
        top = max(a[4] for a in pic.arcs)
        for x0, y0, x1, y1, gb, link in reversed(pic.arcs):
            ax.add_patch(
                FancyArrowPatch(
                    (x0, y0),
                    (x1, y1),
                    connectionstyle="arc3,rad=0.25",
                    arrowstyle="-",
                    linewidth=0.4 + 3.6 * (gb / top) ** 0.5,
                    color=link_colors.get(link, "#333333"),
                    alpha=0.55,
                )
            )
    ax.set_xlim(-3.5 if label_nodes else -1, pic.width + 1)
    ax.set_ylim(pic.height + 0.5, -0.5)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.suptitle(pic.title, fontsize=11, x=0.02, ha="left")
    fig.text(0.02, 0.90, pic.subtitle, fontsize=8, ha="left")
    shown = list(enumerate(pic.group_names))[:16]
    handles = [Rectangle((0, 0), 1, 1, facecolor=colors[i], hatch=hatches[i] or None)
               for i, _ in shown]  # fmt: skip
    labels = [name for _, name in shown]
    if len(pic.group_names) > 16:
        handles.append(Rectangle((0, 0), 1, 1, facecolor="none", edgecolor="none"))
        labels.append(f"… {len(pic.group_names) - 16} more groups")
    handles += [
        Rectangle((0, 0), 1, 1, facecolor=_BUSY, hatch=_BUSY_HATCH),
        Rectangle((0, 0), 1, 1, facecolor=_FREE, edgecolor="#555555"),
    ]
    labels += ["busy", "free"]
    fig.legend(
        handles,
        labels,
        loc="lower left",
        ncol=min(6, len(labels)),
        fontsize=7,
        frameon=False,
        bbox_to_anchor=(0.02, 0.0),
    )
    # a panel with nothing to show (no workload: no traffic) is left out, not drawn empty
    panels = [(values, title) for values, title in (
        (pic.traffic_by_link, "traffic, GB per iteration"),
        (pic.cost_by_link, "cost, s per iteration"),
    ) if any(v > 0 for v in values.values())]  # fmt: skip
    links = [k for k in dict.fromkeys([*pic.traffic_by_link, *pic.cost_by_link])
             if any(values.get(k, 0.0) > 0 for values, _ in panels)]  # fmt: skip
    if panels and links:
        colours = [link_colors.get(k, "#777777") for k in links]
        bottoms = (0.55, 0.12) if len(panels) == 2 else (0.33,)
        for bottom, (values, title) in zip(bottoms, panels):
            bars = fig.add_axes(((fig_w - 3.4) / fig_w, bottom, 2.9 / fig_w, 0.3))
            bars.barh(links, [values.get(k, 0.0) for k in links], color=colours)
            bars.set_title(title, fontsize=8)
            bars.bar_label(bars.containers[0], fmt="%.3g", fontsize=7, padding=2)
            bars.tick_params(labelsize=7)
    from tsched._io import atomic_write_text, save_figure

    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text in SVG
        if path.suffix.lower() != ".svg":
            save_figure(fig, path, dpi=130)
            return
        import io

        svg = io.StringIO()
        try:
            fig.savefig(svg, format="svg", dpi=130)
        finally:
            plt.close(fig)
    atomic_write_text(path, _svg_titles(svg.getvalue(), titles))  # written once, whole


def _svg_titles(svg: str, titles: dict[str, str]) -> str:
    """Give the SVG's nodes and GPUs their tooltips: a ``<title>`` as the first child of each
    element matplotlib wrote for them (``<g id="tsched-gpu-7">``), as browsers show on hover."""
    import re

    def add(match: re.Match[str]) -> str:
        tip = titles.get(match.group(1))
        return match.group(0) + (f"<title>{html.escape(tip)}</title>" if tip else "")

    return re.sub(r'<g id="(tsched-(?:gpu|node|domain)-\d+)">', add, svg)


def _html(pic: Picture, plan: Plan) -> str:
    """One self-contained page: an inline SVG whose every GPU square has a tooltip (worker,
    GPU, traffic), the bars as a table, and the plan itself as JSON."""
    colors, hatches = _colors(len(pic.group_names)), _hatches(len(pic.group_names))
    unit = max(6.0, min(26.0, 1400.0 / max(pic.width, 1.0)))
    label_nodes = pic.labelled
    left = 70.0 if label_nodes else 10.0
    patterns = {(_BUSY, _BUSY_HATCH)} | {(c, h) for c, h in zip(colors, hatches) if h}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + (pic.width + 1) * unit:.0f}" '
        f'height="{(pic.height + 2) * unit:.0f}" font-family="sans-serif" id="tsched-picture">'
        f"<defs>{''.join(_svg_pattern(c, h) for c, h in sorted(patterns))}</defs>"
        f'<g transform="translate(0,{unit:.1f})">'
    ]

    def paint(color: str, hatch: str) -> str:
        return f"url(#{_pattern_id(color, hatch)})" if hatch else color

    def px(v: float, offset: float = 0.0) -> str:
        return f"{offset + v * unit:.1f}"

    for _, x, y, w, h, _ in pic.columns:
        parts.append(
            f'<rect x="{px(x - 0.3, left)}" y="{px(y + 0.5)}" width="{px(w + 0.6)}" '
            f'height="{px(h - 0.3)}" fill="none" stroke="#999" stroke-dasharray="4 3"/>'
        )
    anchor = "start" if len(pic.columns) > 32 else "middle"
    for x, y, text in _column_labels(pic):
        parts.append(
            f'<text x="{px(x, left)}" y="{px(y + 0.4)}" font-size="{max(unit * 0.6, 9):.0f}" '
            f'text-anchor="{anchor}">{html.escape(text)}</text>'
        )
    if label_nodes:
        for name, x, y, _, count in pic.nodes:
            parts.append(
                f'<text class="node" x="{px(x - 0.2, left)}" y="{px(y + 0.7)}" '
                f'font-size="{unit * 0.6:.0f}" text-anchor="end">{html.escape(name)}'
                f"<title>{html.escape(name)}: {count} GPUs</title></text>"
            )
    for k, (x, y, w, h, bands, tip) in enumerate(_domain_cells(pic, colors, hatches)):
        for color, hatch, y0, height in bands:
            parts.append(f'<rect x="{px(x, left)}" y="{px(y0)}" width="{px(w)}" '
                         f'height="{px(height)}" fill="{paint(color, hatch)}"/>')  # fmt: skip
        parts.append(
            f'<rect class="gpu domain" x="{px(x, left)}" y="{px(y)}" width="{px(w)}" '
            f'height="{px(h)}" fill="#fff" fill-opacity="0" stroke="#555" stroke-width="0.6" '
            f'data-domain="{k}"><title>{html.escape(tip)}</title></rect>'
        )
    for name, cx, cy, g, size, local in _gpu_cells(pic):
        worker = int(pic.gpu_worker[g])
        tip = _tip(pic, name, g, size, local)
        fill = paint(_fill(pic, colors, g, size), _hatch(pic, hatches, g, size))
        parts.append(
            f'<rect class="gpu" x="{px(cx, left)}" y="{px(cy)}" width="{unit * 0.9:.1f}" '
            f'height="{unit * 0.9:.1f}" fill="{fill}" stroke="#555" stroke-width="0.5" '
            f'data-node="{html.escape(name)}" data-gpu="{"" if pic.aggregated else local}" '
            f'data-worker="{worker}"><title>{html.escape(tip)}</title></rect>'
        )
    parts.append('<g id="tsched-arcs">')
    if pic.arcs:
        top = max(a[4] for a in pic.arcs)
        link_colors = pic.link_colors()
        for x0, y0, x1, y1, gb, link in pic.arcs:
            mx, my = (x0 + x1) / 2 + (y1 - y0) * 0.25, (y0 + y1) / 2 - (x1 - x0) * 0.25
            parts.append(
                f'<path d="M{px(x0, left)},{px(y0)} Q{px(mx, left)},{px(my)} '
                f'{px(x1, left)},{px(y1)}" '
                f'fill="none" stroke="{link_colors.get(link, "#333")}" stroke-opacity="0.5" '
                f'stroke-width="{0.5 + 5 * (gb / top) ** 0.5:.2f}"><title>{gb:.4g} GB per '
                f"iteration over {html.escape(link)}</title></path>"
            )
    parts.append("</g></g></svg>")
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{pic.traffic_by_link.get(k, 0.0):.4g}</td>"
        f"<td>{pic.cost_by_link.get(k, 0.0):.4g}</td></tr>"
        for k in dict.fromkeys([*pic.traffic_by_link, *pic.cost_by_link])
    )
    legend = "".join(
        f'<span class="key"><svg width="12" height="12"><rect width="12" height="12" '
        f'fill="{paint(c, h)}" stroke="#555"/></svg>{html.escape(n)}</span>'
        for c, n, h in zip(colors, pic.group_names, hatches)
    )
    busy_key = (f'<span class="key"><svg width="12" height="12"><rect width="12" height="12" '
                f'fill="{paint(_BUSY, _BUSY_HATCH)}" stroke="#555"/></svg>busy</span>')  # fmt: skip
    toggle = ('<label><input type="checkbox" id="tsched-show-arcs" checked '
              "onchange=\"document.getElementById('tsched-arcs').style.display="
              "this.checked?'':'none'\"> traffic between nodes</label>"
              if pic.arcs else "")  # fmt: skip
    data = json.dumps(plan.to_dict()).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(pic.title)}</title>
<style>body{{font-family:sans-serif;margin:1em}} .key{{margin-right:1em;white-space:nowrap}}
.key i{{display:inline-block;width:.9em;height:.9em;margin-right:.3em;border:1px solid #555}}
.key svg{{margin-right:.3em;vertical-align:-.1em}}
table{{border-collapse:collapse}} td,th{{padding:.2em .8em;border-bottom:1px solid #ddd}}
rect.gpu:hover{{stroke:#000;stroke-width:2}}
#tsched-tip{{position:fixed;display:none;pointer-events:none;background:#fffff0;
border:1px solid #888;padding:.3em .5em;font-size:.85em;max-width:32em;z-index:9}}</style>
</head>
<body><h2>{html.escape(pic.title)}</h2><p>{html.escape(pic.subtitle)}</p>
<p>{legend}{busy_key}
<span class="key"><i style="background:{_FREE}"></i>free</span></p>
<p>{toggle}</p>
{"".join(parts)}
<h3>By link class</h3><table><tr><th>link</th><th>GB per iteration</th><th>s per iteration</th></tr>
{rows}</table>
<p>Hover a GPU for its node, index, worker, group and what it sends; arcs join nodes (or
leaves) by traffic.</p>
<div id="tsched-tip" role="tooltip"></div>
<script type="application/json" id="tsched-plan">{data}</script>
<script>
// The tooltip of a hovered GPU or node, shown at once (the SVG titles stay for pages without
// scripts; with this script they move into the tooltip, so the two never show together).
(function () {{
  var tip = document.getElementById("tsched-tip");
  document.querySelectorAll("rect.gpu, text.node").forEach(function (el) {{
    var title = el.querySelector("title");
    if (!title) return;
    el.dataset.tip = title.textContent;
    title.remove();
    el.addEventListener("mouseenter", function (ev) {{
      tip.textContent = el.dataset.tip;
      tip.style.display = "block";
      tip.style.left = (ev.clientX + 12) + "px";
      tip.style.top = (ev.clientY + 12) + "px";
    }});
    el.addEventListener("mouseleave", function () {{ tip.style.display = "none"; }});
  }});
}})();
</script>
</body></html>
"""


def _pattern_id(color: str, hatch: str) -> str:
    return f"hatch-{color.lstrip('#')}-{sum(map(ord, hatch))}"


def _svg_pattern(color: str, hatch: str) -> str:
    """An SVG fill: ``color`` under lines that stand for matplotlib's ``hatch`` (diagonals,
    crosses, dots, rings or bars), the same second cue in the HTML as in the PNG."""
    marks = {
        "/": '<path d="M0,8 L8,0" stroke="#404040" stroke-width="0.8"/>',
        "\\": '<path d="M0,0 L8,8" stroke="#404040" stroke-width="0.8"/>',
        "x": '<path d="M0,0 L8,8 M0,8 L8,0" stroke="#404040" stroke-width="0.8"/>',
        ".": '<circle cx="4" cy="4" r="1" fill="#404040"/>',
        "o": '<circle cx="4" cy="4" r="2" fill="none" stroke="#404040" stroke-width="0.7"/>',
        "-": '<path d="M0,4 L8,4" stroke="#404040" stroke-width="0.8"/>',
        "+": '<path d="M0,4 L8,4 M4,0 L4,8" stroke="#404040" stroke-width="0.8"/>',
    }
    return (f'<pattern id="{_pattern_id(color, hatch)}" width="8" height="8" '
            f'patternUnits="userSpaceOnUse"><rect width="8" height="8" fill="{color}"/>'
            f"{marks.get(hatch[:1], '')}</pattern>")  # fmt: skip


def write_picture(
    plan: Plan,
    cluster: Cluster,
    path: str | os.PathLike[str],
    workload: Any | None = None,
    *,
    color_by: str = "auto",
    note: str | None = None,
) -> Path:
    """Draw ``plan`` to ``path`` (``.png``, ``.svg`` or ``.html``, written atomically).

    ``note`` replaces the status, objective and method at the head of the subtitle."""
    target = Path(path)
    if target.suffix.lower() not in FORMATS:
        raise InputError(f"{target}: expected a file ending in {', '.join(FORMATS)}")
    pic = picture(plan, cluster, workload, color_by=color_by, note=note)
    if target.suffix.lower() == ".html":
        from tsched._io import atomic_write_text

        atomic_write_text(target, _html(pic, plan))
    else:
        _draw(pic, target)
    return target
