"""The five checkpoints of an assignment problem, made explicit (``tsched solve --explain``).

A sound assignment workflow passes five checkpoints; tsched passes them on every solve, and this
module says how, for one cluster, workload and result:

1. **spec** — the problem as understood: workers, usable GPUs, levels, link classes with the
   provenance and age of their figures, and warnings (default bandwidths, mixed GPU models,
   nothing to optimise);
2. **objective** — what is minimised, in words and units, and where the lower bound comes from;
3. **interaction** — the traffic graph's connected components and whether any two workers
   interact at all (without interaction the problem is a linear assignment, solved exactly);
4. **solver** — the solver class chosen by scale and why: what ran, in what order, how long;
5. **validation** — the live drift check's verdict (given by the caller, who owns the
   connection to the live state).

:func:`explain` returns plain data (the ``explain`` member of ``tsched solve --json``);
:func:`explain_lines` renders it as text.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tsched.plan import PlacementResult
from tsched.problem import PlacementProblem

__all__ = ["explain", "explain_lines", "BOUND_SOURCES", "STALE_DAYS"]

#: Measured link figures older than this many days draw a warning.
STALE_DAYS = 30.0

#: How each lower bound is obtained, in words.
BOUND_SOURCES = {
    "basic": "every traffic pair at the cheapest link between two usable GPUs",
    "gilmore-lawler": "Gilmore–Lawler: each worker's cheapest pairing of its traffic with one "
    "GPU's distances, then a linear assignment over workers × GPUs",
    "profile": "each worker's traffic against the cheapest distance profile of any usable GPU "
    "(from the hierarchy; no dense matrix)",
    "spectral": "the hierarchy's cuts bounded by the traffic Laplacian's eigenvalues "
    "(Donath–Hoffman), level by level",
    "packing": "the hierarchy's cuts bounded, level by level, by the traffic no spread of the "
    "workers over the domains' free GPUs keeps inside them (each worker's heaviest pairs; a "
    "layout's factor graphs), by the lines of a layout each domain must touch "
    "(Loomis–Whitney), or by the eigenvalues, whichever is largest",
    "nested": "the hierarchy's cuts bounded together: one worker count per domain, nested, "
    "each level's cut a sum over its domains (densest subgraphs or the lines of a layout), "
    "minimised over the counts the free GPUs allow",
    "partition": "the hierarchy's cuts bounded, level by level, by the traffic that no spread of "
    "the workers over the domains' free GPUs can keep inside them (densest-subgraph weights), "
    "or by the eigenvalues where that is larger",
    "linear-assignment": "the exact optimum of the per-GPU costs (a linear assignment: no "
    "pairwise traffic)",
    "components": "the sum of each traffic component's own bound on all usable GPUs",
    "component-alone": "the component's bound when it had every usable GPU (fewer GPUs only "
    "cost more)",
    "cpsat": "CP-SAT's proved bound",
    "milp": "the MILP solver's proved bound",
    "bnb": "branch and bound's proof",
}


def _classes() -> list[str]:
    """Auto's solver classes by scale, from its own thresholds."""
    from tsched.solvers import auto

    return [
        "no pairwise traffic → linear assignment (exact, any size)",
        f"≤ {auto.BNB_MAX} workers on ≤ {auto.BNB_MAX + 4} GPUs → branch and bound (exact)",
        f"≤ {auto.QUICK_CPSAT_WORKERS} workers with a hierarchical view → a quick CP-SAT run on "
        "worker → node (exact)",
        f"≤ {auto.CPSAT_MAX_WORKERS} workers with a hierarchical view → greedy, decomposition, "
        "tabu, then CP-SAT (exact on worker → node)",
        f"≤ {auto.TABU_MAX_WORKERS} workers → greedy, decomposition, tabu search (bound from "
        "the hierarchy)",
        "larger → greedy, decomposition, iterated sparse local search (bound from the hierarchy)",
    ]


def explain(
    problem: PlacementProblem,
    result: PlacementResult,
    *,
    method: str = "auto",
    time_limit: float | None = None,
    validation: Mapping[str, Any] | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """The five checkpoints for ``problem`` solved as ``result`` (plain, JSON-ready data).

    ``validation`` is the drift check's verdict when one ran: ``{"against": str, "valid": bool,
    "problems": [str, …]}``; without it checkpoint 5 says how to run one.
    """
    now = now or dt.datetime.now(dt.timezone.utc)
    return {
        "spec": _spec(problem, now),
        "objective": _objective(problem, result),
        "interaction": _interaction(problem),
        "solver": _solver(problem, result, method, time_limit),
        "validation": dict(validation) if validation is not None else {
            "ran": False,
            "note": "no live check: give --validate-against CLUSTER.yaml or a Ray address",
        },
    }  # fmt: skip


# ---------------------------------------------------------------------- 1. the spec
def _spec(problem: PlacementProblem, now: dt.datetime) -> dict[str, Any]:
    cl, wl = problem.cluster, problem.workload
    warnings: list[str] = []
    out: dict[str, Any] = {"workers": problem.n_workers, "usable_gpus": problem.n_locations}
    if cl is not None:
        busy = int(cl.busy_mask.sum())
        out["cluster"] = {
            "name": cl.name,
            "source": cl.source or "preset",
            "nodes": cl.n_nodes,
            "gpus": cl.n_gpus,
            "busy": busy,
            "levels": ["node", *cl.levels],
            "gpu_models": sorted(set(np.asarray(cl.gpu_models())[problem.locations].tolist())),
        }
        links = []
        unstated = []
        for name, link in cl.links.items():
            row: dict[str, Any] = {
                "name": name,
                "gb_per_s": link.bandwidth,
                "s_per_gb": link.seconds_per_gb,
                "latency_us": link.latency,
                "provenance": link.provenance or "not stated",
            }
            if link.measured_at:
                row["measured_at"] = link.measured_at
                age = _age_days(link.measured_at, now)
                if age is not None:
                    row["age_days"] = round(age, 2)
                    if age > STALE_DAYS:
                        warnings.append(
                            f"link {name}: measured {age:.0f} days ago (re-measure, or refuse "
                            f"old figures with --max-age)"
                        )
            if link.provenance == "default":
                warnings.append(
                    f"link {name}: {link.bandwidth:g} GB/s is a generic default, not a "
                    f"measurement (measure with `tsched inventory ray --measure` or nccl-tests)"
                )
            if not link.provenance:
                unstated.append(name)
            links.append(row)
        out["links"] = links
        if unstated:
            warnings.append(
                f"links {', '.join(unstated)}: no provenance stated; figures taken as written"
            )
        models = out["cluster"]["gpu_models"]
        if len(models) > 1 and (wl is None or wl.gpu_models is None):
            warnings.append(
                f"usable GPUs mix models {', '.join(models)}; the objective prices traffic only "
                f"(restrict with constraints.gpu_models, or price them with gpu_costs)"
            )
    if wl is not None:
        out["workload"] = {"name": wl.name, "description": wl.describe()}
        if wl.gpu_models is not None or wl.memory_gb is not None:
            out["workload"]["constraints"] = {
                k: v
                for k, v in (("gpu_models", wl.gpu_models), ("memory_gb", wl.memory_gb))
                if v is not None
            }
    out["traffic_pairs"] = problem.n_edges
    out["traffic_gb"] = float(problem.gb.sum())
    if problem.linear is not None:
        lin = problem.linear
        out["gpu_costs"] = {
            "workers_with_costs": int(np.count_nonzero(np.any(lin != 0, axis=1))),
            "min_seconds": float(lin.min()),
            "max_seconds": float(lin.max()),
        }
    if problem.n_edges == 0 and (problem.linear is None or not np.any(problem.linear)):
        warnings.append("no traffic and no per-GPU costs: every plan costs 0")
    if not problem.feasible:
        warnings.append(problem.infeasible_reason)
    out["warnings"] = warnings
    return out


def _age_days(stamp: str, now: dt.datetime) -> float | None:
    try:
        when = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return (now - when).total_seconds() / 86400.0


# ---------------------------------------------------------------------- 2. the objective
def _objective(problem: PlacementProblem, result: PlacementResult) -> dict[str, Any]:
    wl = problem.workload
    serving = wl is not None and wl.serving is not None
    unit = "seconds of link time per second of service" if serving else "seconds per iteration"
    words = (
        "minimise the serialised communication time: the sum over traffic pairs (i → j) of the "
        "GB i sends j times the seconds per GB of the link that joins their GPUs"
    )
    if problem.linear is not None:
        words += ", plus each worker's own cost on its GPU (gpu_costs)"
    source = (result.stats or {}).get("bound_source")
    return {
        "words": words,
        "unit": unit,
        "value": result.objective,
        "bound": result.bound,
        "gap": result.gap,
        "bound_source": source,
        "bound_how": BOUND_SOURCES.get(str(source), "the solver's own bound") if source else
        "no bound known",
    }  # fmt: skip


# ---------------------------------------------------------------------- 3. interaction
def _interaction(problem: PlacementProblem) -> dict[str, Any]:
    parts = problem.components()
    linked = [len(c) for c in parts if len(c) > 1]
    alone = sum(1 for c in parts if len(c) == 1)
    if problem.n_edges == 0:
        verdict = (
            "no two workers exchange traffic: the choices do not interact, so this is a linear "
            "assignment problem, solved exactly by scipy.optimize.linear_sum_assignment"
        )
    elif len(parts) == 1:
        verdict = f"one connected traffic graph over all {problem.n_workers} workers: a "
        verdict += "quadratic assignment problem, planned as a whole"
    else:
        verdict = (
            f"{len(linked)} independent traffic components"
            + (f" and {alone} workers without traffic" if alone else "")
            + ": each component is a quadratic assignment of its own"
        )
    return {
        "interacting": problem.n_edges > 0,
        "traffic_pairs": problem.n_edges,
        "components": linked,
        "workers_without_traffic": alone,
        "verdict": verdict,
    }


# ---------------------------------------------------------------------- 4. the solver
def _solver(
    problem: PlacementProblem, result: PlacementResult, method: str, time_limit: float | None
) -> dict[str, Any]:
    stats = dict(result.stats or {})
    out: dict[str, Any] = {
        "requested": method,
        "ran": result.method,
        "time_limit": time_limit,
        "wall_time": result.wall_time,
        "status": result.status,
        "scale": {
            "workers": problem.n_workers,
            "gpus": problem.n_locations,
            "nodes": len(np.unique(problem.location_node())) if problem.n_locations else 0,
        },
        "classes": _classes(),
    }
    if "auto_reason" in stats:
        out["reason"] = stats["auto_reason"]
        out["steps"] = _steps(stats.get("auto_steps", []))
    elif not problem.feasible:
        out["reason"] = f"no solver ran: {problem.infeasible_reason}"
        out["steps"] = []
    else:
        from tsched.solvers.registry import get_solver

        info = get_solver(result.method)
        kind = "exact" if info.exact else "heuristic"
        out["reason"] = f"method {method!r} asked for by name ({kind}: {info.description})"
        out["steps"] = [
            {"stage": "solve", "method": result.method, "seconds": round(result.wall_time, 4),
             "objective": result.objective}
        ]  # fmt: skip
    return out


def _steps(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        clean = {k: v for k, v in row.items() if k != "inner"}
        if row.get("inner"):
            clean["inner"] = _steps(row["inner"])
        out.append(clean)
    return out


# ---------------------------------------------------------------------- text
def explain_lines(doc: Mapping[str, Any]) -> list[str]:
    """The checkpoints as plain text lines, numbered 1-5."""
    spec, obj, inter, solver, val = (
        doc["spec"], doc["objective"], doc["interaction"], doc["solver"], doc["validation"]
    )  # fmt: skip
    lines = ["1. spec as understood"]
    cl = spec.get("cluster")
    if cl:
        lines.append(
            f"   cluster {cl['name']} ({cl['source']}): {cl['nodes']} nodes, {cl['gpus']} GPUs, "
            f"{cl['busy']} busy; levels {' < '.join(cl['levels'])}; usable "
            f"{spec['usable_gpus']} GPUs of model {', '.join(cl['gpu_models']) or '-'}"
        )
        for link in spec.get("links", []):
            age = f", {link['age_days']:g} days old" if "age_days" in link else ""
            lines.append(
                f"   link {link['name']}: {link['gb_per_s']:g} GB/s ({link['s_per_gb']:.4g} s/GB), "
                f"{link['latency_us']:g} µs; {link['provenance']}{age}"
            )
    if "workload" in spec:
        lines.append(f"   workload {spec['workload']['description']}")
        if "constraints" in spec["workload"]:
            lines.append(f"   constraints {spec['workload']['constraints']}")
    if "gpu_costs" in spec:
        g = spec["gpu_costs"]
        lines.append(
            f"   per-GPU costs for {g['workers_with_costs']} workers, "
            f"{g['min_seconds']:.4g} … {g['max_seconds']:.4g} s"
        )
    for w in spec["warnings"]:
        lines.append(f"   warning: {w}")
    lines.append("2. objective")
    lines.append(f"   {obj['words']}; in {obj['unit']}")
    if obj["value"] is not None:
        bound = "none" if obj["bound"] is None else f"{obj['bound']:.6g}"
        gap = "" if obj["gap"] is None else f" (gap {100 * obj['gap']:.2f}%)"
        lines.append(f"   plan {obj['value']:.6g}, lower bound {bound}{gap}")
    lines.append(f"   bound from {obj['bound_source'] or '-'}: {obj['bound_how']}")
    lines.append("3. interaction test")
    comps = ", ".join(str(c) for c in inter["components"]) or "none"
    lines.append(
        f"   {inter['traffic_pairs']} traffic pairs; components of sizes {comps}; "
        f"{inter['workers_without_traffic']} workers without traffic"
    )
    lines.append(f"   {inter['verdict']}")
    lines.append("4. solver class by scale")
    sc = solver["scale"]
    limit = "none" if solver["time_limit"] is None else f"{solver['time_limit']:g} s"
    lines.append(
        f"   {sc['workers']} workers on {sc['gpus']} GPUs ({sc['nodes']} nodes); asked for "
        f"{solver['requested']}, ran {solver['ran']}; time limit {limit}"
    )
    lines.append(f"   why: {solver['reason']}")
    lines += _step_lines(solver["steps"], "   ")
    lines.append(f"   {solver['status']} in {solver['wall_time']:.3g} s")
    lines.append("5. live validation")
    if not val.get("ran"):
        lines.append(f"   {val.get('note', 'not run')}")
    elif val["valid"]:
        lines.append(f"   against {val['against']}: every planned GPU exists and is free")
    else:
        lines.append(f"   against {val['against']}: {len(val['problems'])} problem(s); "
                     "the plan is not written")  # fmt: skip
        lines += [f"   - {p}" for p in val["problems"][:10]]
    return lines


def _step_lines(steps: Sequence[Mapping[str, Any]], indent: str) -> list[str]:
    out = []
    for k, row in enumerate(steps, 1):
        value = "" if row.get("objective") is None else f" → {row['objective']:.6g}"
        bound = "" if row.get("bound") is None else f" (bound {row['bound']:.6g})"
        out.append(
            f"{indent}{k}. {row['stage']}: {row['method']}, {row['seconds']:.3g} s{value}{bound}"
        )
        if row.get("inner"):
            out += _step_lines(row["inner"], indent + "   ")
    return out
