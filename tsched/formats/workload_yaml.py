"""Reader and writer of the ``tsched: workload/v1`` YAML format (DESIGN.md §3).

A workload file gives exactly one traffic source:

- ``layout`` + ``model``: a training job's parallel layout
  (see :func:`tsched.workload.layout_traffic`);
- ``serving`` + ``model``: an inference deployment (see :func:`tsched.workload.serving_traffic`);
- ``traffic``: an edge list ``[{src, dst, gb}, …]`` with ``workers``;
- ``traffic_matrix``: an inline square matrix (GB sent row → column);
- ``traffic_file``: a ``.npy`` square matrix, a square CSV matrix, or a CSV edge list whose header
  is ``src,dst,gb`` (relative paths are relative to the workload file).

Optional ``constraints: {gpu_models: [H100, H200], memory_gb: 60}`` restrict the GPUs a worker may
use (allowed models; minimum GPU memory per worker in GB).

Optional per-GPU linear costs (seconds per iteration; preferences that do not interact, such as a
NIC or memory locality): ``gpu_costs: [{worker, node, gpu, seconds}, …]`` (``gpu`` left out:
every GPU of the node; pairs not listed cost 0) or ``gpu_costs_file:`` a ``.npy`` table of
workers × the cluster's GPUs in the cluster's GPU order. With either, the traffic source may be
left out (``workers`` is then required): a workload with no pairwise traffic is a linear
assignment problem.
"""

from __future__ import annotations

import csv
import io
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from tsched._io import atomic_write_text, dump_yaml, load_yaml_text, read_text
from tsched.errors import InputError
from tsched.formats.check import Checker, join
from tsched.workload import (
    DEFAULT_ORDER,
    MAX_TRAFFIC_GB,
    PARALLEL_DIMS,
    GpuCosts,
    Layout,
    ModelSpec,
    PoolSpec,
    ServingSpec,
    Workload,
)

__all__ = [
    "WORKLOAD_VERSION",
    "workload_from_dict",
    "workload_to_dict",
    "read_workload",
    "write_workload",
    "parse_workload_text",
    "serving_spec",
]

WORKLOAD_VERSION = "workload/v1"
_SOURCES = ("layout", "serving", "traffic", "traffic_matrix", "traffic_file")
_COST_KEYS = ("gpu_costs", "gpu_costs_file")
_TOP_KEYS = (
    "tsched",
    "name",
    "description",
    "workers",
    "model",
    "constraints",
    *_SOURCES,
    *_COST_KEYS,
)
_MODEL_KEYS = (
    "params_b",
    "hidden",
    "layers",
    "seq_len",
    "micro_batch",
    "micro_batches",
    "bytes_per_element",
    "experts",
    "top_k",
    "expert_params_b",
)
_EDGE_KEYS = frozenset(("src", "dst", "gb"))


def read_workload(path: str | os.PathLike[str]) -> Workload:
    """Read a ``workload/v1`` YAML file; errors name the file and field.

    Examples
    --------
    >>> import tempfile, pathlib, tsched
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "ring.yaml"
    >>> lines = ["tsched: workload/v1", "name: ring", "workers: 3", "traffic:",
    ...          "  - {src: 0, dst: 1, gb: 2}", "  - {src: 1, dst: 2, gb: 2}",
    ...          "  - {src: 2, dst: 0, gb: 2}"]
    >>> _ = path.write_text("\\n".join(lines))
    >>> workload = tsched.read_workload(path)
    >>> workload.workers, float(workload.gb.sum())
    (3, 6.0)
    """
    text = read_text(path, "workload")
    return parse_workload_text(text, str(path), base=Path(path).parent)


def parse_workload_text(text: str, source: str, base: Path | None = None) -> Workload:
    """Parse ``workload/v1`` YAML text; ``source`` names it in error messages.

    A top-level ``traffic`` list written one flow mapping per line (``- {src: 0, dst: 1, gb:
    2.5}``, the form :func:`write_workload` emits) or in block style (three lines an edge, what
    PyYAML's ``safe_dump`` writes) is read by a fast path with regular expressions, so a
    100k-edge file loads in well under a second; any other form, and any list with a line of
    another shape, goes through the YAML parser unchanged (and its error messages).
    """
    rest, edges = _split_fast_traffic(text)
    data = load_yaml_text(rest, source)
    if edges is not None and isinstance(data, dict):
        data["traffic"] = _FastEdges(edges)
    return workload_from_dict(data, source, base=base)


_EDGE_LINE = re.compile(
    r"[ \t]*-[ \t]*\{[ \t]*src:[ \t]*(\d+)[ \t]*,[ \t]*dst:[ \t]*(\d+)[ \t]*,[ \t]*"
    r"gb:[ \t]*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)[ \t]*\}[ \t]*(?:#.*)?"
)
_TRAFFIC_KEY = re.compile(r"traffic:[ \t]*(?:#.*)?")


_KEY_LINE = re.compile(
    r"([ \t]*)(-[ \t]+)?(src|dst|gb):[ \t]*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
    r"[ \t]*(?:#.*)?"
)


def _block_edges(body: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Edges written in YAML's block style (PyYAML's default dump), three lines each::

        - src: 0          (the three keys in any order, the first after "- ",
          dst: 1           the other two aligned under it)
          gb: 2.5

    None when any line or triple does not have exactly this shape (the YAML parser then
    reads the list and reports what is wrong)."""
    if len(body) % 3:
        return None
    matches = [_KEY_LINE.fullmatch(line) for line in body]
    if not all(matches):
        return None
    values: dict[str, list[str]] = {"src": [], "dst": [], "gb": []}
    for k in range(0, len(matches), 3):
        first, second, third = matches[k : k + 3]
        if (
            first.group(2) is None  # type: ignore[union-attr]
            or second.group(2) is not None  # type: ignore[union-attr]
            or third.group(2) is not None  # type: ignore[union-attr]
        ):
            return None
        column = len(first.group(1)) + len(first.group(2))  # type: ignore[union-attr]
        if len(second.group(1)) != column or len(third.group(1)) != column:  # type: ignore[union-attr]
            return None
        keys = {m.group(3) for m in (first, second, third)}  # type: ignore[union-attr]
        if len(keys) != 3:
            return None
        for m in (first, second, third):
            values[m.group(3)].append(m.group(4))  # type: ignore[union-attr]
    if any("." in v or "e" in v.lower() for v in values["src"] + values["dst"]):
        return None  # worker ids must be integers: let the parser name the entry
    return (
        np.array(values["src"], dtype=np.int64),
        np.array(values["dst"], dtype=np.int64),
        np.array(values["gb"], dtype=np.float64),
    )


class _FastEdges(tuple):
    """Edge arrays (src, dst, gb) already parsed by the fast path."""


def _split_fast_traffic(text: str) -> tuple[str, tuple[np.ndarray, ...] | None]:
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if _TRAFFIC_KEY.fullmatch(line)), None)
    if start is None:
        return text, None
    end = start + 1
    while end < len(lines) and (not lines[end] or lines[end][0] in " \t-#"):
        end += 1
    block = lines[start + 1 : end]
    body = [line for line in block if line.strip() and not line.lstrip().startswith("#")]
    if len(body) < 1000:  # small lists: the YAML parser gives the best messages
        return text, None
    matches = [_EDGE_LINE.fullmatch(line) for line in body]
    if all(matches):
        src = np.array([m.group(1) for m in matches], dtype=np.int64)  # type: ignore[union-attr]
        dst = np.array([m.group(2) for m in matches], dtype=np.int64)  # type: ignore[union-attr]
        gb = np.array([m.group(3) for m in matches], dtype=np.float64)  # type: ignore[union-attr]
    else:
        parsed = _block_edges(body)
        if parsed is None:
            return text, None
        src, dst, gb = parsed
    # keep line numbers of the rest of the file for YAML error messages
    rest = lines[:start] + ["traffic: []"] + [""] * len(block) + lines[end:]
    return "\n".join(rest), (src, dst, gb)


def workload_from_dict(data: Any, source: str = "workload", base: Path | None = None) -> Workload:
    """Build a :class:`Workload` from a parsed ``workload/v1`` document."""
    ck = Checker(source)
    doc = ck.mapping(
        data, "", required=("tsched", "name"), optional=_TOP_KEYS, example="tsched: workload/v1"
    )
    if doc["tsched"] != WORKLOAD_VERSION:
        raise ck.fail("tsched", f"expected {WORKLOAD_VERSION!r}, got {doc['tsched']!r}")
    name = ck.string(doc["name"], "name")
    given = [k for k in _SOURCES if k in doc]
    costs = [k for k in _COST_KEYS if k in doc]
    if len(costs) > 1:
        raise ck.fail("", "give at most one of gpu_costs, gpu_costs_file (found both)")
    if not given and costs:
        given = ["traffic"]  # per-GPU costs only: no pairwise traffic
        doc = {**doc, "traffic": []}
    if len(given) != 1:
        what = "none" if not given else ", ".join(given)
        raise ck.fail("", f"give exactly one of {', '.join(_SOURCES)} (found: {what})")
    kind = given[0]
    extra: dict[str, Any] = {"description": str(doc.get("description", ""))}
    extra.update(_constraints(ck, doc.get("constraints")))
    if costs:
        extra["gpu_costs"] = _gpu_costs(ck, doc, costs[0], base)

    if kind in ("layout", "serving"):
        if "model" not in doc:
            raise ck.fail(
                "",
                f"'{kind}' needs a 'model' (e.g. model: {{params_b: 8, hidden: 4096,"
                " layers: 32}})",
            )
        if "workers" in doc:
            raise ck.fail(
                "workers", f"not allowed with '{kind}' (the worker count follows from it)"
            )
        model = _model(ck, doc["model"])
        try:
            if kind == "layout":
                return Workload.from_layout(name, _layout(ck, doc["layout"]), model, **extra)
            return Workload.from_serving(name, serving_spec(ck, doc["serving"]), model, **extra)
        except InputError as exc:
            if str(exc).startswith(source):
                raise
            raise InputError(f"{source}: {exc}") from exc
    if "model" in doc:
        raise ck.fail("model", f"only used with layout or serving, not with '{kind}'")

    if kind == "traffic_matrix":
        matrix = _matrix(ck, doc["traffic_matrix"], "traffic_matrix")
        _check_workers(ck, doc, matrix.shape[0])
        return _from_matrix(ck, name, matrix, "traffic_matrix", extra)
    if kind == "traffic_file":
        path = Path(ck.string(doc["traffic_file"], "traffic_file"))
        if not path.is_absolute() and base is not None:
            path = base / path
        src, dst, gb, workers = _traffic_file(ck, path, doc.get("workers"))
        return Workload(name, workers, src, dst, gb, **extra)
    if "workers" not in doc:
        what = "per-GPU costs without traffic need" if costs else "explicit 'traffic' needs"
        raise ck.fail("", f"{what} 'workers' (the number of workers)")
    workers = ck.integer(doc["workers"], "workers", minimum=1)
    src, dst, gb = _edges(ck, doc["traffic"])
    try:
        return Workload(name, workers, src, dst, gb, **extra)
    except InputError as exc:
        raise InputError(f"{source}: {str(exc).split(': ', 1)[-1]}") from exc


def _gpu_costs(ck: Checker, doc: Any, key: str, base: Path | None) -> GpuCosts:
    """``gpu_costs`` entries or a ``gpu_costs_file`` table, as :class:`GpuCosts`."""
    if key == "gpu_costs_file":
        path = Path(ck.string(doc[key], key))
        if not path.is_absolute() and base is not None:
            path = base / path
        where = f"{key} ({path})"
        if path.suffix != ".npy":
            raise ck.fail(key, f"expected a .npy table of workers × cluster GPUs, got {path}")
        try:
            matrix = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise ck.fail(key, f"file not found: {path}") from None
        except (OSError, ValueError) as exc:
            raise ck.fail(key, f"cannot read {path}: {exc}") from exc
        if matrix.ndim != 2 or not np.issubdtype(matrix.dtype, np.number):
            raise ck.fail(where, f"expected a 2-D numeric table, got shape {matrix.shape}")
        matrix = np.asarray(matrix, dtype=np.float64)
        bad = np.argwhere(~np.isfinite(matrix))
        if len(bad):
            i, j = bad[0]
            raise ck.fail(f"{where}[{i}][{j}]", f"must be a finite number of seconds, got "
                          f"{matrix[i, j]}")  # fmt: skip
        return GpuCosts(matrix=matrix, source=f"{ck.source}: {where}", file=str(path.resolve()))
    rows = ck.sequence(doc[key], key, example="[{worker: 0, node: node001, gpu: 0, seconds: 0.5}]")
    worker, node, gpu, seconds = [], [], [], []
    for i, row in enumerate(rows):
        where = join(key, i)
        entry = ck.mapping(
            row, where, required=("worker", "node", "seconds"), optional=("gpu",),
            example="{worker: 0, node: node001, gpu: 0, seconds: 0.5}",
        )  # fmt: skip
        worker.append(ck.integer(entry["worker"], join(where, "worker"), minimum=0))
        node.append(ck.string(entry["node"], join(where, "node")))
        gpu.append(ck.integer(entry.get("gpu", -1), join(where, "gpu"), minimum=-1))
        seconds.append(ck.number(entry["seconds"], join(where, "seconds")))
    return GpuCosts(
        worker=np.array(worker, dtype=np.int64),
        node=tuple(node),
        gpu=np.array(gpu, dtype=np.int64),
        seconds=np.array(seconds, dtype=np.float64),
        source=f"{ck.source}: {key}",
    )


def _constraints(ck: Checker, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    doc = ck.mapping(
        value,
        "constraints",
        optional=("gpu_models", "memory_gb"),
        example="{gpu_models: [H100], memory_gb: 60}",
    )
    out: dict[str, Any] = {}
    if "gpu_models" in doc:
        models = ck.sequence(doc["gpu_models"], "constraints.gpu_models", example="[H100, H200]")
        if not models:
            raise ck.fail("constraints.gpu_models", "must list at least one GPU model")
        out["gpu_models"] = tuple(
            ck.string(m, join("constraints.gpu_models", i)) for i, m in enumerate(models)
        )
    if "memory_gb" in doc:
        out["memory_gb"] = ck.number(doc["memory_gb"], "constraints.memory_gb", minimum=0.0)
    return out


def _layout(ck: Checker, value: Any) -> Layout:
    doc = ck.mapping(
        value, "layout", optional=(*PARALLEL_DIMS, "order"), example="{tp: 8, pp: 4, dp: 2}"
    )
    sizes = {d: ck.integer(doc.get(d, 1), join("layout", d), minimum=1) for d in PARALLEL_DIMS}
    order = ck.string(doc.get("order", DEFAULT_ORDER), "layout.order")
    return Layout(order=order, **sizes)


def _model(ck: Checker, value: Any) -> ModelSpec:
    doc = ck.mapping(
        value,
        "model",
        required=("params_b", "hidden", "layers"),
        optional=_MODEL_KEYS,
        example="{params_b: 70, hidden: 8192, layers: 80}",
    )
    ints = {
        k: ck.integer(doc[k], join("model", k), minimum=1)
        for k in ("hidden", "layers", "seq_len", "micro_batch", "micro_batches")
        if k in doc
    }
    ints.update(
        {
            k: ck.integer(doc[k], join("model", k), minimum=0)
            for k in ("experts", "top_k")
            if k in doc
        }
    )
    floats = {
        k: ck.number(doc[k], join("model", k), minimum=0.0)
        for k in ("params_b", "expert_params_b")
        if k in doc
    }
    if "bytes_per_element" in doc:
        floats["bytes_per_element"] = ck.number(
            doc["bytes_per_element"], "model.bytes_per_element", positive=True
        )
    return ModelSpec(**ints, **floats)


def serving_spec(ck: Checker, value: Any) -> ServingSpec:
    doc = ck.mapping(
        value,
        "serving",
        required=("decode",),
        optional=(
            "prefill",
            "decode",
            "requests_per_s",
            "prompt_tokens",
            "output_tokens",
            "kv_bytes_per_token",
        ),
        example="{prefill: {replicas: 2, tp: 4}, decode: {replicas: 1, tp: 8}}",
    )

    def pool(key: str) -> PoolSpec:
        p = ck.mapping(doc[key], join("serving", key), required=("replicas",), optional=("tp",))
        return PoolSpec(
            ck.integer(p["replicas"], f"serving.{key}.replicas", minimum=1),
            ck.integer(p.get("tp", 1), f"serving.{key}.tp", minimum=1),
        )

    kw: dict[str, Any] = {}
    if "requests_per_s" in doc:
        kw["requests_per_s"] = ck.number(
            doc["requests_per_s"], "serving.requests_per_s", positive=True
        )
    for key in ("prompt_tokens", "output_tokens"):
        if key in doc:
            kw[key] = ck.integer(doc[key], join("serving", key), minimum=1)
    if "kv_bytes_per_token" in doc:
        kw["kv_bytes_per_token"] = ck.number(
            doc["kv_bytes_per_token"], "serving.kv_bytes_per_token", positive=True
        )
    return ServingSpec(
        decode=pool("decode"), prefill=pool("prefill") if "prefill" in doc else None, **kw
    )


def _edges(ck: Checker, value: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if isinstance(value, _FastEdges):
        return value[0], value[1], value[2]
    edges = ck.sequence(value, "traffic", example="[{src: 0, dst: 1, gb: 10.0}]")
    src: list[Any] = []
    dst: list[Any] = []
    gb: list[Any] = []
    for i, edge in enumerate(edges):
        if type(edge) is not dict or edge.keys() != _EDGE_KEYS:  # fast path for big files
            ck.mapping(
                edge, join("traffic", i), required=_EDGE_KEYS, example="{src: 0, dst: 1, gb: 10.0}"
            )
        src.append(edge["src"])
        dst.append(edge["dst"])
        gb.append(edge["gb"])
    try:
        s = np.array(src, dtype=np.int64)
        d = np.array(dst, dtype=np.int64)
        g = np.array(gb, dtype=np.float64)
        if not (np.array_equal(s, src) and np.array_equal(d, dst)):
            raise TypeError
    except (TypeError, ValueError, OverflowError):
        for i, edge in enumerate(edges):
            for key in ("src", "dst"):
                if ck.integer(edge[key], f"traffic[{i}].{key}", minimum=0) >= 2**63:
                    raise ck.fail(
                        f"traffic[{i}].{key}", f"worker id {edge[key]} is out of range"
                    ) from None
            ck.number(edge["gb"], f"traffic[{i}].gb")
        raise
    return s, d, g


def _matrix(ck: Checker, value: Any, where: str) -> np.ndarray:
    rows = ck.sequence(value, where, example="[[0, 1.5], [1.5, 0]]")
    for i, row in enumerate(rows):
        ck.sequence(row, join(where, i))
    n = len(rows)
    for i, row in enumerate(rows):
        if len(row) != n:
            raise ck.fail(
                where, f"matrix is not square: {n} rows but row {i} has {len(row)} entries"
            )
    try:
        matrix = np.array(rows, dtype=float).reshape(n, n)
    except (TypeError, ValueError) as exc:
        raise ck.fail(where, f"entries must be numbers: {exc}") from exc
    return matrix


def _check_workers(ck: Checker, doc: Any, n: int) -> None:
    if "workers" in doc and ck.integer(doc["workers"], "workers", minimum=1) != n:
        raise ck.fail("workers", f"says {doc['workers']} but the traffic matrix is {n}x{n}")


def _from_matrix(
    ck: Checker, name: str, matrix: np.ndarray, where: str, extra: dict[str, Any]
) -> Workload:
    bad = np.argwhere(~np.isfinite(matrix))
    if len(bad):
        i, j = bad[0]
        raise ck.fail(f"{where}[{i}][{j}]", f"must be a finite number of GB, got {matrix[i, j]}")
    bad = np.argwhere((matrix < 0) | (matrix > MAX_TRAFFIC_GB))
    if len(bad):
        i, j = bad[0]
        raise ck.fail(
            f"{where}[{i}][{j}]", f"must be 0..{MAX_TRAFFIC_GB:g} GB, got {matrix[i, j]:g}"
        )
    if matrix.shape[0] < 1:
        raise ck.fail(where, "matrix is empty")
    return Workload.from_matrix(name, matrix, **extra)


def _traffic_file(
    ck: Checker, path: Path, workers: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    where = f"traffic_file ({path})"
    if path.suffix == ".npy":
        try:
            matrix = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise ck.fail("traffic_file", f"file not found: {path}") from None
        except (OSError, ValueError) as exc:
            raise ck.fail("traffic_file", f"cannot read {path}: {exc}") from exc
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise ck.fail(where, f"matrix must be square, got shape {matrix.shape}")
        return _matrix_edges(ck, np.asarray(matrix, dtype=float), where, workers)
    text = read_text(path, "traffic")
    first = text.lstrip().split("\n", 1)[0].replace(" ", "").lower()
    if first.startswith("src,dst,gb"):
        try:
            rows = list(csv.DictReader(io.StringIO(text.lstrip())))
            s = np.array([int(r["src"]) for r in rows], dtype=np.int64)
            d = np.array([int(r["dst"]) for r in rows], dtype=np.int64)
            g = np.array([float(r["gb"]) for r in rows])
        except (TypeError, ValueError) as exc:
            raise ck.fail(where, f"bad edge row: {exc}") from exc
        if workers is None:
            raise ck.fail("", "an edge-list traffic_file needs 'workers'")
        n = ck.integer(workers, "workers", minimum=1)
        return s, d, g, n
    try:
        matrix = np.loadtxt(io.StringIO(text), delimiter=",", ndmin=2)
    except ValueError as exc:
        raise ck.fail(
            where, f"expected a square CSV matrix or a src,dst,gb edge list: {exc}"
        ) from exc
    if matrix.shape[0] != matrix.shape[1]:
        raise ck.fail(where, f"matrix is not square: shape {matrix.shape}")
    return _matrix_edges(ck, matrix, where, workers)


def _matrix_edges(
    ck: Checker, matrix: np.ndarray, where: str, workers: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    n = matrix.shape[0]
    if workers is not None and ck.integer(workers, "workers", minimum=1) != n:
        raise ck.fail("workers", f"says {workers} but the traffic matrix is {n}x{n}")
    bad = np.argwhere(~np.isfinite(matrix) | (matrix < 0))
    if len(bad):
        i, j = bad[0]
        raise ck.fail(f"{where}[{i}][{j}]", f"must be a finite number >= 0 GB, got {matrix[i, j]}")
    s, d = np.nonzero(matrix)
    return s, d, matrix[s, d], n


def workload_to_dict(workload: Workload) -> dict[str, Any]:
    """Plain data for a workload: its layout/serving description, or its explicit traffic."""
    doc: dict[str, Any] = {"tsched": WORKLOAD_VERSION, "name": workload.name}
    if workload.description:
        doc["description"] = workload.description
    if workload.layout is not None or workload.serving is not None:
        assert workload.model is not None
        model = {k: _num(getattr(workload.model, k)) for k in _MODEL_KEYS}
        if workload.layout is not None:
            lay = workload.layout
            doc["layout"] = {**{d: lay.size(d) for d in PARALLEL_DIMS}, "order": lay.order}
        else:
            s = workload.serving
            assert s is not None
            serving: dict[str, Any] = {}
            if s.prefill is not None:
                serving["prefill"] = {"replicas": s.prefill.replicas, "tp": s.prefill.tp}
            serving["decode"] = {"replicas": s.decode.replicas, "tp": s.decode.tp}
            serving.update(
                requests_per_s=_num(s.requests_per_s),
                prompt_tokens=s.prompt_tokens,
                output_tokens=s.output_tokens,
            )
            if s.kv_bytes_per_token is not None:
                serving["kv_bytes_per_token"] = _num(s.kv_bytes_per_token)
            doc["serving"] = serving
        doc["model"] = model
    else:
        doc["workers"] = workload.workers
        doc["traffic"] = [
            {"src": int(a), "dst": int(b), "gb": float(g)}
            for a, b, g in zip(workload.src, workload.dst, workload.gb)
        ]
    constraints: dict[str, Any] = {}
    if workload.gpu_models is not None:
        constraints["gpu_models"] = list(workload.gpu_models)
    if workload.memory_gb is not None:
        constraints["memory_gb"] = _num(workload.memory_gb)
    if constraints:
        doc["constraints"] = constraints
    costs = workload.gpu_costs
    if costs is not None and costs.matrix is not None:
        if not costs.file:
            raise InputError(
                f"workload {workload.name!r}: a gpu_costs table is written as gpu_costs_file; "
                "save it as .npy and set GpuCosts.file"
            )
        doc["gpu_costs_file"] = costs.file
    elif costs is not None:
        assert costs.worker is not None and costs.gpu is not None and costs.node is not None
        doc["gpu_costs"] = [
            {"worker": int(w), "node": n, **({"gpu": int(g)} if g >= 0 else {}),
             "seconds": float(t)}
            for w, n, g, t in zip(costs.worker, costs.node, costs.gpu, costs.seconds)  # type: ignore[arg-type]
        ]  # fmt: skip
    return doc


def write_workload(workload: Workload, path: str | os.PathLike[str]) -> None:
    """Write ``workload`` as ``workload/v1`` YAML, atomically.

    Examples
    --------
    >>> import tempfile, pathlib, tsched
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "job.yaml"
    >>> tsched.write_workload(tsched.load_workload("llama3-8b-tp4-pp2-dp2"), path)
    >>> tsched.read_workload(path).workers
    16
    """
    atomic_write_text(Path(path), dump_yaml(workload_to_dict(workload)))


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)
