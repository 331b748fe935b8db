"""Calibrate the job time model on measured step times, and say how well it predicts.

The protocol (``tsched compare calibrate``) keeps every prediction out of its own fit:

1. **Application figures from its own small placements only.** Compute ``α + β·local_bsz`` is
   fitted on the application's rows that span at most ``fit_max_nodes`` nodes (measured step
   time minus measured sync time, least squares on relative error). The gradient size comes from
   the model's parameter count (:data:`GRADIENT_GB`), and the single-node fixed cost of an
   all-reduce from its single-node sync times beyond moving those bytes; an application not in
   the table gets both from a line fitted to its single-node sync times.
2. **Network figures from the other applications.** The network bandwidth (a common scale on the
   cluster's inter-node link classes) and the :class:`~tsched.compare.jobmodel.CollectiveModel`
   figures are fitted on the multi-node rows of every *other* application (leave one
   application out), so an application's multi-node measurements never shape its own predictions.
3. **Predict** every row of the application that spans more than ``fit_max_nodes`` nodes, and
   report the rank correlation (Spearman) and the median relative error.

Alongside, ``ceiling_rank_correlation`` is what the best possible *additive* model (one factor
per placement and one per batch size, fitted on the very rows being scored) reaches: measurement
noise puts the limit there, whatever the model. ``shape_ceiling_rank_correlation`` is the same
with one factor per placement *shape* (GPUs, nodes, GPUs on the busiest node) instead of per
placement: the job model sees a placement only by its shape, so its distance to the ceiling is
what placements of one shape differ by (which nodes, run-to-run drift), not the model's to
close. ``own_fit_rank_correlation`` is this model with its network figures fitted on the
application's own scored rows: what the model's form can reach on that application. The
distance from it to the prediction is the cost of borrowing the network figures from other
applications; the distance from the shape ceiling to it is, roughly, what the form cannot
express (the shape ceiling is additive in log step time, so a form in which compute and
communication interact can pass it).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tsched._io import atomic_write_text, read_text, save_figure
from tsched.cluster import Cluster
from tsched.compare.jobmodel import (
    AppModel,
    CollectiveModel,
    _network_link,
    placement_gpus,
    placement_shape,
)
from tsched.compare.traces import csv_rows
from tsched.errors import InputError

__all__ = [
    "GRADIENT_GB",
    "COLUMNS",
    "Measurement",
    "read_placements",
    "calibrate",
    "fit_app",
    "fit_network",
    "row_shapes",
    "scaled_network",
    "shot_rows",
    "fit_factor",
    "FACTOR_PRIOR",
    "shape_ceiling",
]

log = logging.getLogger(__name__)

COLUMNS = ("application", "placement", "local_bsz", "step_time", "sync_time")

#: fp32 gradient GB per step from published parameter counts (4 bytes per parameter):
#: bert = BERT-base (110 M), cifar10 = ResNet-18 (11.2 M), imagenet = ResNet-50 (25.6 M),
#: ncf = NeuMF on MovieLens-1M (0.4 M: 9,746 users+items × (8 + 32) embeddings + MLP),
#: deepspeech2 (≈ 38 M), yolov3 (61.9 M).
GRADIENT_GB: dict[str, float] = {
    "bert": 110e6 * 4 / 1e9,
    "cifar10": 11.2e6 * 4 / 1e9,
    "imagenet": 25.6e6 * 4 / 1e9,
    "ncf": 0.4e6 * 4 / 1e9,
    "deepspeech2": 38e6 * 4 / 1e9,
    "yolov3": 61.9e6 * 4 / 1e9,
}

#: Bounds of the network fit:
#: (bandwidth scale, overhead_factor, nic_sharing, two_node_factor, overlap).
#: κ (overhead_factor) ≥ 1: an all-reduce across nodes does all the per-call work of one on a
#: node and crosses the network besides. Left free at 0, the fit drops the fixed cost whenever
#: the other applications are bandwidth-bound (their fixed costs read as 0), and an application
#: whose multi-node time *is* its fixed cost (ncf) is then predicted at a third of its time.
_LOWER = np.array([1e-3, 1.0, 0.0, 0.2, 1.0])
_UPPER = np.array([1e3, 100.0, 2.0, 5.0, 10.0])
_START = np.array([1.0, 1.0, 0.3, 1.5, 1.5])


@dataclass(frozen=True)
class Measurement:
    application: str
    placement: str
    local_bsz: int
    step_time: float
    sync_time: float

    @property
    def nodes(self) -> int:
        return len(self.placement)


def read_placements(path: str | os.PathLike[str]) -> list[Measurement]:
    """Rows of a Pollux-style ``placements`` CSV (columns :data:`COLUMNS`)."""
    header, rows = csv_rows(path, "placements CSV")
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}"
        )
    out = []
    for line, row in enumerate(rows, 2):
        placement = row["placement"].strip()
        if not placement.isdigit() or "0" in placement:
            raise InputError(
                f"{path}:{line}: placement {placement!r}: expected digits 1-9, one per node"
            )
        try:
            m = Measurement(
                row["application"].strip(),
                placement,
                int(row["local_bsz"]),
                float(row["step_time"]),
                float(row["sync_time"]),
            )
        except ValueError as exc:
            raise InputError(f"{path}:{line}: {exc}") from None
        if not m.application:
            raise InputError(f"{path}:{line}: application: expected a name")
        if not (0 < m.step_time < math.inf and 0 <= m.sync_time < math.inf and m.local_bsz >= 1):
            raise InputError(
                f"{path}:{line}: step_time must be > 0, sync_time >= 0 (both finite seconds) "
                f"and local_bsz >= 1, got {m.step_time!r}, {m.sync_time!r}, {m.local_bsz!r}"
            )
        out.append(m)
    if not out:
        raise InputError(f"{path}: no measurements")
    return out


# ---------------------------------------------------------------------------- application fit
def fit_app(
    name: str, rows: list[Measurement], cluster: Cluster, fit_max_nodes: int = 1
) -> tuple[AppModel, str]:
    """Fit one application's compute and gradient size on its rows spanning ≤ ``fit_max_nodes``.

    Returns the model and where its gradient size came from (``parameters`` or ``fitted``).
    """
    small = [r for r in rows if r.nodes <= fit_max_nodes]
    if len({r.local_bsz for r in small}) < 2:
        raise InputError(
            f"application {name!r}: needs measurements at two or more local_bsz values on at "
            f"most {fit_max_nodes} node(s) to fit its compute time"
        )
    b = np.array([r.local_bsz for r in small], dtype=float)
    y = np.array([max(r.step_time - r.sync_time, 1e-9) for r in small])
    w = 1.0 / y
    coef = np.linalg.lstsq(np.column_stack([w, w * b]), np.ones_like(y), rcond=None)[0]
    alpha, beta = float(max(coef[0], 0.0)), float(max(coef[1], 0.0))
    overhead, grad_fit = _sync_fit(small, cluster)
    if name in GRADIENT_GB:
        grad, source = GRADIENT_GB[name], "parameters"
        overhead = _overhead(small, cluster, grad)
    elif grad_fit is not None:
        grad, source = grad_fit, "fitted"
    else:
        raise InputError(
            f"application {name!r}: gradient size unknown (not in GRADIENT_GB) and no "
            "single-node multi-GPU measurements to fit it from"
        )
    typical = int(np.median([r.local_bsz for r in rows]))
    return AppModel(name, alpha, beta, grad, typical, overhead), source


def _intra_terms(rows: list[Measurement], cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """For single-node multi-GPU rows: (sync time minus hop latencies, ring GB factor × s/GB)."""
    from tsched.compare.jobmodel import _hops

    sync, x = [], []
    for r in rows:
        gpus = placement_gpus(cluster, r.placement)
        n = len(gpus)
        if r.nodes == 1 and n > 1:
            spg, lat = _hops(cluster, gpus)
            sync.append(r.sync_time - 2 * (n - 1) * lat)
            x.append(2 * (n - 1) / n * spg)
    return np.asarray(sync), np.asarray(x)


def _overhead(rows: list[Measurement], cluster: Cluster, grad_gb: float) -> float:
    """The single-node fixed cost ``o``: median of sync time minus the bytes' time, ≥ 0."""
    sync, x = _intra_terms(rows, cluster)
    if not len(sync):
        return 0.0
    return float(max(np.median(sync - grad_gb * x), 0.0))


def _sync_fit(rows: list[Measurement], cluster: Cluster) -> tuple[float, float | None]:
    """``(o, S)`` by least squares of sync = o + S·x on single-node rows (S None if unfit)."""
    sync, x = _intra_terms(rows, cluster)
    if len(np.unique(x)) < 2:
        return 0.0, None
    coef = np.linalg.lstsq(np.column_stack([np.ones_like(x), x]), sync, rcond=None)[0]
    return float(max(coef[0], 0.0)), float(max(coef[1], 1e-6))


# ---------------------------------------------------------------------------- network fit
@dataclass(frozen=True)
class _Rows:
    """Vectorised features of measured rows for the network fit."""

    compute: np.ndarray
    grad: np.ndarray
    overhead: np.ndarray
    ring: np.ndarray
    m: np.ndarray
    two: np.ndarray
    spg: np.ndarray
    lat: np.ndarray
    measured: np.ndarray


def _features(rows: list[Measurement], apps: dict[str, AppModel], cluster: Cluster) -> _Rows:
    cols: dict[str, list[float]] = {k: [] for k in _Rows.__dataclass_fields__}
    shapes: dict[str, tuple[int, int, int, float, float]] = {}
    for r in rows:
        if r.placement not in shapes:
            gpus = placement_gpus(cluster, r.placement)
            n, k, m = placement_shape(cluster, gpus)
            spg, lat = _network_link(cluster, gpus) if k > 1 else (0.0, 0.0)
            shapes[r.placement] = (n, k, m, spg, lat)
        n, k, m, spg, lat = shapes[r.placement]
        app = apps[r.application]
        cols["compute"].append(float(app.compute_seconds(r.local_bsz)))
        cols["grad"].append(app.gradient_gb)
        cols["overhead"].append(app.sync_overhead_s)
        cols["ring"].append(2.0 * (n - 1) / n)
        cols["m"].append(m)
        cols["two"].append(1.0 if k == 2 else 0.0)
        cols["spg"].append(spg)
        cols["lat"].append(lat)
        cols["measured"].append(r.step_time)
    return _Rows(**{k: np.asarray(v, dtype=float) for k, v in cols.items()})


def _predict(x: np.ndarray, f: _Rows, phi: float = 1.0) -> np.ndarray:
    scale, overhead, theta, two_node, gamma = x
    factor = phi * f.ring * f.m**theta * np.where(f.two > 0, two_node, 1.0)
    comm = factor * (overhead * f.overhead + f.lat + f.grad * f.spg / scale)
    return (f.compute**gamma + comm**gamma) ** (1.0 / gamma)


def fit_network(
    rows: list[Measurement], apps: dict[str, AppModel], cluster: Cluster
) -> tuple[float, CollectiveModel]:
    """Least squares on log step time over multi-node ``rows``: (bandwidth scale, model)."""
    from scipy.optimize import least_squares

    multi = [r for r in rows if r.nodes > 1]
    if not multi:
        raise InputError("network fit: no multi-node measurements to fit on")
    f = _features(multi, apps, cluster)
    res = least_squares(
        lambda x: np.log(_predict(x, f) / f.measured),
        _START,
        bounds=(_LOWER, _UPPER),
        x_scale="jac",
    )
    scale, overhead_factor, theta, two_node, gamma = (float(v) for v in res.x)
    return scale, CollectiveModel(theta, two_node, overhead_factor, gamma)


def shot_rows(rows: list[Measurement], k: int, seed: int = 0) -> list[Measurement]:
    """The first ``k`` of ``rows`` in a seeded random order: the few multi-node runs a user
    measured (nested: the shots for k are among those for k + 1)."""
    order = np.random.default_rng(seed).permutation(len(rows))
    return [rows[i] for i in order[:k]]


#: Prior spread of log φ across applications: one standard deviation is a factor e^0.5 ≈ 1.65.
FACTOR_PRIOR = 0.5


def fit_factor(
    shots: list[Measurement], apps: dict[str, AppModel], cluster: Cluster, scale: float,
    coll: CollectiveModel, noise: float = 0.1,
) -> float:  # fmt: skip
    """φ, the application's network factor (:class:`~tsched.compare.jobmodel.AppModel`), fitted
    on its ``shots`` with everything else fixed; 1 without shots.

    A few noisy rows would swing φ far (one slow run of a small job reads as a slow network),
    so the fit is the most probable φ under a log-normal prior around 1 (spread
    :data:`FACTOR_PRIOR`) and log-normal measurement noise of spread ``noise`` (the network
    fit's residual on the other applications' rows): Σ (log error)² / noise² + (log φ)² /
    prior², φ in [0.05, 20]. With many shots the data decide; with one or two the prior holds
    φ near 1 unless they agree."""
    if not shots:
        return 1.0
    from scipy.optimize import minimize_scalar

    f = _features(shots, apps, cluster)
    x = np.array(_as_vector(scale, coll))
    noise = max(float(noise), 1e-3)

    def loss(log_phi: float) -> float:
        errors = np.log(_predict(x, f, math.exp(log_phi)) / f.measured)
        return float(np.sum(errors**2) / noise**2 + log_phi**2 / FACTOR_PRIOR**2)

    res = minimize_scalar(loss, bounds=(math.log(0.05), math.log(20.0)), method="bounded")
    return float(math.exp(res.x))


def _as_vector(scale: float, coll: CollectiveModel) -> list[float]:
    """The network fit's parameter vector (the order of :data:`_LOWER`)."""
    return [scale, coll.overhead_factor, coll.nic_sharing, coll.two_node_factor, coll.overlap]


def scaled_network(cluster: Cluster, scale: float) -> Cluster:
    """A copy of ``cluster`` whose inter-node link bandwidths are multiplied by ``scale``."""
    names = {cluster.link_names[i] for i in np.unique(cluster.level_link) if i >= 0}
    links = {
        k: (replace(v, bandwidth=v.bandwidth * scale, provenance="measured") if k in names else v)
        for k, v in cluster.links.items()
    }
    return replace(cluster, links=links)


# ---------------------------------------------------------------------------- protocol
def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(spearmanr(a, b).statistic)


def _additive_ceiling(rows: list[Measurement], groups: list[Any] | None = None) -> float:
    """Rank correlation of the best placement × batch additive model of log step time; with
    ``groups`` (one per row), one factor per group of placements instead of per placement."""
    if len(rows) < 3:
        return float("nan")
    groups = groups if groups is not None else [r.placement for r in rows]
    pl = sorted(set(groups))
    bs = sorted({r.local_bsz for r in rows})
    pi = np.array([pl.index(g) for g in groups])
    bi = np.array([bs.index(r.local_bsz) for r in rows])
    y = np.log([r.step_time for r in rows])
    pe, be = np.zeros(len(pl)), np.zeros(len(bs))
    for _ in range(50):  # alternating medians (robust two-way fit)
        for k in range(len(pl)):
            pe[k] = np.median(y[pi == k] - be[bi[pi == k]])
        for k in range(len(bs)):
            be[k] = np.median(y[bi == k] - pe[pi[bi == k]])
    return _spearman(pe[pi] + be[bi], y)


def row_shapes(rows: list[Measurement], cluster: Cluster) -> list[tuple[int, int, int]]:
    """Each row's placement shape on ``cluster``: (GPUs, nodes, GPUs on the busiest node), the
    job model's view of a placement (each placement resolved once)."""
    shapes: dict[str, tuple[int, int, int]] = {}
    for p in {r.placement for r in rows}:
        shapes[p] = placement_shape(cluster, placement_gpus(cluster, p))
    return [shapes[r.placement] for r in rows]


def shape_ceiling(rows: list[Measurement], cluster: Cluster) -> float:
    """:func:`_additive_ceiling` with one factor per placement shape (:func:`row_shapes`),
    fitted on ``rows``. Its distance to the per-placement ceiling is what placements of one
    shape differ by (which nodes, run-to-run drift)."""
    return _additive_ceiling(rows, row_shapes(rows, cluster))


def calibrate(
    measurements: list[Measurement],
    cluster: Cluster,
    fit_max_nodes: int = 1,
    network: str = "loo",
    collective: CollectiveModel | None = None,
    progress: Callable[[str], None] | None = None,
    shots: int = 0,
    held_out: int | None = None,
    shot_seed: int = 0,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the protocol; return ``(prediction rows, calibration summary)``.

    ``network="loo"`` fits the network on the other applications (module docstring);
    ``network="fixed"`` takes the cluster's link figures as they are with ``collective``.
    ``shots`` (few-shot calibration): the application's network factor φ is fitted on that many
    of its own multi-node rows (:func:`shot_rows`) on top of everything else; the first
    ``held_out`` rows of that order (default ``shots``) are left out of the scoring, so that
    runs with different shot counts can be scored on the same rows; ``shot_seed`` draws
    another set of shots.
    """
    if fit_max_nodes < 1:
        raise InputError(f"--fit-max-nodes must be >= 1, got {fit_max_nodes}")
    held_out = shots if held_out is None else held_out
    if shots < 0 or held_out < shots:
        raise InputError(f"--shots must be >= 0 (and no more than the rows held out), got {shots}")
    if network not in ("loo", "fixed"):
        raise InputError(f"network fit {network!r}: expected 'loo' or 'fixed'")
    by_app: dict[str, list[Measurement]] = {}
    for r in measurements:
        by_app.setdefault(r.application, []).append(r)
    for placement in {r.placement for r in measurements}:  # each must fit on the cluster
        placement_gpus(cluster, placement)
    apps: dict[str, AppModel] = {}
    sources: dict[str, str] = {}
    for name, rows in by_app.items():
        apps[name], sources[name] = fit_app(name, rows, cluster, fit_max_nodes)
    if network == "loo" and len(by_app) < 2:
        raise InputError(
            "leave-one-application-out network fit needs two or more applications; "
            "use --network fixed"
        )
    predictions: list[dict[str, Any]] = []
    summary_apps: dict[str, Any] = {}
    for name, rows in by_app.items():
        if progress:
            progress(name)
        multi = [r for r in rows if r.nodes > fit_max_nodes]
        if network == "loo":
            others = [r for r in measurements if r.application != name]
            scale, coll = fit_network(others, apps, cluster)
        else:
            scale, coll = 1.0, collective or CollectiveModel()
        if shots > len(multi):
            raise InputError(f"--shots {shots}: application {name!r} has {len(multi)} rows "
                             f"spanning more than {fit_max_nodes} node(s)")  # fmt: skip
        kept = shot_rows(multi, held_out, shot_seed)
        noise = 0.1
        if shots and network == "loo":  # the borrowed network's spread on the rows it saw
            seen = _features([r for r in others if r.nodes > 1], apps, cluster)
            errors = np.log(_predict(np.array(_as_vector(scale, coll)), seen) / seen.measured)
            noise = float(np.sqrt(np.mean(errors**2)))
        phi = fit_factor(kept[:shots], apps, cluster, scale, coll, noise)
        apps[name] = replace(apps[name], network_factor=phi)
        skip = {id(r) for r in kept}
        target = [r for r in multi if id(r) not in skip]
        entry: dict[str, Any] = {
            "model": apps[name].to_dict(),
            "gradient_source": sources[name],
            "fit_rows": len(rows) - len(multi),
            "shots": shots,
            "network_factor": phi,
            "predicted_rows": len(target),
            "network": {"bandwidth_scale": scale, **coll.to_dict()},
        }
        if target:
            f = _features(target, apps, cluster)
            pred = _predict(np.array(_as_vector(scale, coll)), f, phi)
            own = _predict(np.array(_as_vector(*fit_network(target, apps, cluster))), f)
            for prefix, values in (("", pred), ("own_fit_", own)):
                entry[prefix + "rank_correlation"] = _spearman(values, f.measured)
                entry[prefix + "median_relative_error"] = float(
                    np.median(np.abs(values - f.measured) / f.measured)
                )
            entry["ceiling_rank_correlation"] = _additive_ceiling(target)
            entry["shape_ceiling_rank_correlation"] = shape_ceiling(target, cluster)
            for r, p in zip(target, pred, strict=True):
                predictions.append(
                    {
                        "application": name,
                        "placement": r.placement,
                        "local_bsz": r.local_bsz,
                        "measured": r.step_time,
                        "predicted": float(p),
                    }
                )
        summary_apps[name] = entry
    if network == "loo":
        scale_all, coll_all = fit_network(measurements, apps, cluster)
    else:
        scale_all, coll_all = 1.0, collective or CollectiveModel()
    summary = {
        "protocol": (
            f"applications fitted on their rows spanning <= {fit_max_nodes} node(s); network "
            + ("fitted leaving the predicted application out" if network == "loo" else "fixed")
            + (
                f"; each application's network factor fitted on {shots} of its multi-node rows"
                if shots
                else ""
            )
            + (f" ({held_out} held out of the scoring)" if held_out else "")
        ),
        "shots": shots,
        "fit_max_nodes": fit_max_nodes,
        "cluster": cluster.name,
        "goal": {"rank_correlation": 0.9, "median_relative_error": 0.15},
        "applications": summary_apps,
        "network_all_applications": {"bandwidth_scale": scale_all, **coll_all.to_dict()},
    }
    return predictions, summary


def write_calibration(
    out: str | os.PathLike[str],
    predictions: list[dict[str, Any]],
    summary: dict[str, Any],
    cluster: Cluster,
) -> list[Path]:
    """Write ``predictions.csv``, ``calibration.json``, ``jobmodel.json`` (applications and the
    all-application network fit, loadable by the simulator) and ``cluster.yaml`` (the cluster with
    the fitted network bandwidth). Returns the paths written."""
    from tsched.formats.cluster_yaml import write_cluster

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf,
        fieldnames=["application", "placement", "local_bsz", "measured", "predicted"],
        lineterminator="\n",
    )
    writer.writeheader()
    for row in predictions:
        writer.writerow({**row, "measured": f"{row['measured']:.6g}",
                         "predicted": f"{row['predicted']:.6g}"})  # fmt: skip
    paths = [folder / "predictions.csv", folder / "calibration.json"]
    atomic_write_text(paths[0], buf.getvalue())
    atomic_write_text(paths[1], json.dumps(summary, indent=2, allow_nan=True) + "\n")
    net = dict(summary["network_all_applications"])
    scale = net.pop("bandwidth_scale")
    jobmodel = {
        "tsched": "jobmodel/v1",
        "cluster": cluster.name,
        "collective": net,
        "applications": [a["model"] for a in summary["applications"].values()],
    }
    paths.append(folder / "jobmodel.json")
    atomic_write_text(paths[2], json.dumps(jobmodel, indent=2) + "\n")
    paths.append(folder / "cluster.yaml")
    write_cluster(scaled_network(cluster, scale), paths[3])
    plot = _plot_predictions(folder / "predictions.png", predictions, summary)
    if plot is not None:
        paths.append(plot)
    return paths


def _plot_predictions(
    path: Path, predictions: list[dict[str, Any]], summary: dict[str, Any]
) -> Path | None:
    """Predicted against measured step time, one panel per application (log-log)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - matplotlib is in [all]
        return None
    apps = list(summary["applications"])
    if not predictions or not apps:
        return None
    fig, axes = plt.subplots(
        1, len(apps), figsize=(3.8 * len(apps), 3.8), squeeze=False, layout="constrained"
    )
    for ax, name in zip(axes[0], apps, strict=True):
        rows = [p for p in predictions if p["application"] == name]
        if not rows:
            ax.set_visible(False)
            continue
        m = np.array([p["measured"] for p in rows])
        pr = np.array([p["predicted"] for p in rows])
        nodes = np.array([len(p["placement"]) for p in rows])
        sc = ax.scatter(m, pr, c=nodes, s=6, cmap="viridis", alpha=0.7)
        lo, hi = min(m.min(), pr.min()), max(m.max(), pr.max())
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        e = summary["applications"][name]
        ax.set_title(f"{name}: ρ={e['rank_correlation']:.2f}, "
                     f"median err {e['median_relative_error']:.0%}", fontsize=9)  # fmt: skip
        ax.set_xlabel("measured step time (s)")
        ax.set_ylabel("predicted (s)")
    fig.colorbar(sc, ax=axes[0].tolist(), label="nodes")
    return save_figure(fig, path, dpi=100)


def load_jobmodel(path: str | os.PathLike[str]) -> tuple[CollectiveModel, dict[str, AppModel]]:
    """Read a ``jobmodel/v1`` JSON file (what :func:`write_calibration` writes)."""
    try:
        data = json.loads(read_text(path, "job model"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("tsched") != "jobmodel/v1":
        raise InputError(f"{path}: expected a 'tsched: jobmodel/v1' document")
    coll = CollectiveModel.from_dict(data.get("collective", {}), f"{path}: collective")
    listed = data.get("applications", [])
    if not isinstance(listed, list):
        raise InputError(f"{path}: applications: expected a list of applications")
    apps = {}
    for k, a in enumerate(listed):
        app = AppModel.from_dict(a, f"{path}: applications[{k}]")
        apps[app.name] = app
    return coll, apps
