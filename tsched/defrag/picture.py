"""Before and after a defragmentation plan: the nodes it touches, one row of GPU squares each,
every running job in its colour, the moved jobs outlined in red on both sides, the waiting job's
GPUs black on the right."""

from __future__ import annotations

import os
from pathlib import Path

from tsched.defrag.plan import DefragPlan
from tsched.formats.running_csv import RunningState

__all__ = ["draw_defrag", "MAX_ROWS"]

#: Nodes drawn at most: those the plan touches first, then their neighbours in cluster order.
MAX_ROWS = 48
_FREE, _BUSY, _WAITING, _MOVED = "#ffffff", "#9e9e9e", "#111111", "#d62728"


def _rows(state: RunningState, plan: DefragPlan) -> tuple[list[int], int]:
    """The node indices drawn (cluster order) and how many the plan touches."""
    cl = state.cluster
    index = {n.name: i for i, n in enumerate(cl.nodes)}
    touched = {index[n] for n, _ in plan.target}
    for m in plan.moves:
        touched |= {index[n] for n, _ in m.source} | {index[n] for n, _ in m.dest}
    rows = set(sorted(touched)[:MAX_ROWS])
    for i in sorted(touched):  # context: the next node of each touched one
        if len(rows) >= min(MAX_ROWS, len(cl.nodes)):
            break
        rows.add(min(i + 1, len(cl.nodes) - 1))
    k = 0
    while len(rows) < min(MAX_ROWS, len(cl.nodes), max(len(touched), 8)):
        rows.add(k)
        k += 1
    return sorted(rows), len(touched)


def draw_defrag(
    state: RunningState, plan: DefragPlan, path: str | os.PathLike[str], *, dpi: int = 110
) -> Path:
    """Draw ``plan`` on ``state`` to ``path`` (PNG or SVG by its suffix), atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    from tsched._io import save_figure

    cl = state.cluster
    rows, touched = _rows(state, plan)
    width = int(cl.gpus_per_node[rows].max()) if rows else 1
    owner = state.held()
    names = [j.name for j in state.jobs]
    moved = {m.job for m in plan.moves}
    palette = plt.get_cmap("tab20").colors
    colour = {k: palette[k % len(palette)] for k in range(len(names))}
    index = {n.name: i for i, n in enumerate(cl.nodes)}
    after = owner.copy()
    job_of = {name: k for k, name in enumerate(names)}
    for m in plan.moves:
        k = job_of[m.job]
        for n, g in m.source:
            after[cl.gpu_id(index[n], g)] = -1
    for m in plan.moves:
        k = job_of[m.job]
        for n, g in m.dest:
            after[cl.gpu_id(index[n], g)] = k
    waiting = {cl.gpu_id(index[n], g) for n, g in plan.target}
    busy = ~cl.free_mask()
    height = max(2.4, 0.3 * len(rows) + 1.5)
    fig, axes = plt.subplots(1, 2, figsize=(max(6.5, 2 * (0.3 * width + 1.3)), height),
                             sharey=True)  # fmt: skip
    for ax, held, title in ((axes[0], owner, "before"), (axes[1], after, "after")):
        for r, i in enumerate(rows):
            y = len(rows) - 1 - r
            for local in range(int(cl.gpus_per_node[i])):
                gid = cl.gpu_id(i, local)
                k = int(held[gid])
                edge, lw, face, hatch = "#555555", 0.6, _FREE, None
                if busy[gid]:
                    face, hatch = _BUSY, "///"
                elif title == "after" and gid in waiting:
                    face = _WAITING
                elif k >= 0:
                    face = colour[k]
                    if names[k] in moved:
                        edge, lw = _MOVED, 2.2
                ax.add_patch(Rectangle((local, y), 0.9, 0.9, facecolor=face, edgecolor=edge,
                                       linewidth=lw, hatch=hatch))  # fmt: skip
        ax.set_xlim(-0.2, width + 0.1)
        ax.set_ylim(-0.2, len(rows) + 0.1)
        ax.set_yticks([len(rows) - 1 - r + 0.45 for r in range(len(rows))])
        ax.set_yticklabels([cl.nodes[i].name for i in rows], fontsize=7)
        ax.set_xticks([g + 0.45 for g in range(width)])
        ax.set_xticklabels([str(g) for g in range(width)], fontsize=7)
        ax.set_title(title, fontsize=10)
        ax.set_aspect("equal")
        for side in ("top", "right", "bottom", "left"):
            ax.spines[side].set_visible(False)
    shown = (f"{len(rows)} of {len(cl.nodes)} nodes shown, the {touched} the plan touches "
             f"first" if len(rows) < len(cl.nodes) else f"{len(cl.nodes)} nodes")  # fmt: skip
    cost = "—" if plan.cost is None else f"{plan.cost:,.0f} GPU-s"
    fig.suptitle(f"{cl.name}: a {plan.gpus}-GPU job ({plan.admission}) — {plan.status}, "
                 f"{len(plan.moves)} job(s) moved, {cost} lost to restarts\n{shown}",
                 fontsize=9)  # fmt: skip
    handles = [Patch(facecolor=_WAITING, label=f"waiting job ({plan.gpus} GPUs)"),
               Patch(facecolor="#cccccc", edgecolor=_MOVED, linewidth=2, label="moved job"),
               Patch(facecolor=_BUSY, hatch="///", label="busy (model)"),
               Patch(facecolor=_FREE, edgecolor="#555555", label="free")]  # fmt: skip
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 0.9))
    return save_figure(fig, path, dpi=dpi)
