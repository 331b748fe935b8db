"""``method="auto"``: pick a method by size and structure, and record why.

0. The interaction test. Without pairwise traffic the problem is a linear assignment (only
   per-GPU costs): scipy's ``linear_sum_assignment`` solves it exactly (``lap``). When the
   traffic graph falls into independent connected components (two jobs in one workload, a
   serving pool's replicas), greedy first plans the whole; if a bound proves that plan (or it
   is within the asked gap) nothing more is needed. Otherwise the components are planned one
   after another — heaviest traffic first, with a share of the time by size. Each is first
   solved alone on every usable GPU: that run's bound holds for the joint problem, and its
   plan is taken when its GPUs are still free; otherwise the component is solved again on the
   GPUs the earlier ones left. A component identical to an earlier one (the same traffic up to
   relabelling: replicas of a pool, independent pipelines) shares that one's proof: its run
   alone is not repeated, its bound is reused. Workers with no traffic come last, as one
   linear assignment.
   The bound is the larger of the whole problem's and the sum of the components' bounds; the
   better of this plan and the whole's greedy plan stands. Instances small enough for branch
   and bound (step 2) are solved whole instead, to keep the proof; past
   :data:`COMPONENTS_MAX` components they are planned together (the partitioner keeps them
   apart anyway). Raw QAPs are always solved whole, as before: QAPLIB's instances with
   isolated facilities (esc*, tai64c, tai256c) are tuned against the whole-problem tabu
   search, and single timed runs of the two ways did not separate them.
1. Run the topology-aware greedy (fast at any size) and compute the best lower bound
   (:func:`tsched.solvers.bounds.best_bound`, thorough: the partition bound included). If
   the partition bound's CP-SAT cut left a partition whose plan beats greedy's, that plan
   goes on instead (on NVL72 racks the objective is that cut). If plan and bound meet, the
   plan is proved optimal.
2. Small flat instances (up to :data:`BNB_MAX` facilities) go to branch and bound (on a
   cluster, for :data:`BNB_SHARE` of the time, then the hierarchical CP-SAT model); small
   hierarchical ones (up to :data:`QUICK_CPSAT_WORKERS` workers) get a quick CP-SAT run on the
   worker → node model (a quarter of the time), which usually proves the plan at once; up to
   :data:`CPSAT_ALONE_WORKERS` workers that run has all the time, and its plan stands.
3. On a cluster, the hierarchical decomposition (top-down partitioning + sparse local search)
   runs too (given a quarter of the time when the exact model is small, see
   :data:`UNIT_MODEL_CELLS`; above :data:`SPARSE_SEARCH_WORKERS` workers all the time left,
   and only if one pass — estimated as greedy's construction time per candidate set — fits
   in it, else it is skipped and ``--explain`` says so), and the better plan of the two goes
   on (MoE all-to-all traffic is where the partitioning wins; whole nodes and leaves where
   greedy's domain choice does).
   Above :data:`SPARSE_SEARCH_WORKERS` workers an iterated sparse local search (exchanges and
   moves near traffic partners, kicks, keep the better) improves it until the time limit or
   until it meets the bound.
4. Robust tabu search improves that plan (up to :data:`SPARSE_SEARCH_WORKERS` workers on a
   cluster, :data:`TABU_MAX_WORKERS` on a raw QAP), stopping
   early if it reaches the bound: with all the time left, or with a third of it when the
   hierarchical CP-SAT model (worker → node, up to :data:`CPSAT_MAX_WORKERS` workers, GPUs of a
   node interchangeable) can then try to prove optimality from that plan. Where that model is
   small (at most :data:`UNIT_MODEL_CELLS` workers × units; an NVL72 rack is one unit) tabu
   search is skipped and CP-SAT has all the time left.
5. The best plan found stands, with the best bound and its gap. With ``options={"gap": g}``
   auto stops as soon as the certified relative gap is at most ``g`` (after greedy, or after
   the decomposition), like a MIP solver's relative gap tolerance.

The choice and the reason are in ``result.stats["auto_choice"]`` / ``["auto_reason"]`` and in
the message; ``["auto_steps"]`` lists every stage run, in order, with its method, seconds and
objective (what ``tsched solve --explain`` shows). Without a time limit, ``auto`` allows itself
:data:`DEFAULT_TIME_LIMIT` seconds.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from tsched.problem import PlacementProblem, objective
from tsched.solvers.base import SolverOutput, get_solver, keep_better, register
from tsched.solvers.bounds import best_bound, linear_floor
from tsched.solvers.bounds.lagrange import LAGRANGE_MAX_WORKERS, LAGRANGE_SECONDS, lagrangian_bound
from tsched.solvers.hierarchical import sparse_refine
from tsched.solvers.node_model import hierarchical_view

__all__ = ["auto", "DEFAULT_TIME_LIMIT", "BNB_MAX", "CPSAT_MAX_WORKERS", "COMPONENTS_MAX"]

DEFAULT_TIME_LIMIT = 10.0
#: Largest flat QAP handed to branch and bound.
BNB_MAX = 16
#: Share of the time branch and bound gets on a small cluster instance before the hierarchical
#: CP-SAT model takes over. Each proves instances the other cannot in the default 10 s: the
#: flat search wins on random traffic over few nodes, the node model where a node's
#: interchangeable GPUs multiply the flat search's branches; branch and bound's proofs mostly
#: come within a few seconds.
BNB_SHARE = 0.4
#: Largest worker count handed to the hierarchical CP-SAT model.
CPSAT_MAX_WORKERS = 256
#: Largest worker count improved by tabu search (its moves scan a k × k delta matrix).
TABU_MAX_WORKERS = 1024
#: Largest worker count on a cluster improved by tabu search: above it the iterated sparse
#: local search (:func:`~tsched.solvers.hierarchical.sparse_refine`) has the time instead. Its
#: moves follow the hierarchy, where dense tabu search scans a k × k delta matrix per move.
#: Side by side at the default budget on 11 fragmented states of 288–1,024 workers and the
#: four 512-worker instances of ``benchmarks/clusters.py`` (one run each: evidence for a
#: default, not a comparison with intervals), it was better (up to 3.5 %) or level on all but
#: one (0.4 % worse).
SPARSE_SEARCH_WORKERS = 256
#: Largest worker count for which the hierarchical CP-SAT model is tried right after greedy.
QUICK_CPSAT_WORKERS = 32
#: Largest worker count for which that CP-SAT run has all the time and nothing else runs: on
#: small random clusters its plans were the optimum every time, and one run proves optima
#: that a quarter of the time, then the decomposition and tabu search, then the rest, do not
#: (``benchmarks/results/known_optima.md``).
CPSAT_ALONE_WORKERS = 16
#: Largest exact model (workers × model units) that gets most of the time: after a short
#: decomposition, CP-SAT runs from the better plan with the rest, and tabu search is skipped.
#: On NVL72 racks (a rack is one unit) such models prove what tabu search cannot improve.
UNIT_MODEL_CELLS = 4096
#: Most traffic components planned one after another (more are planned together).
COMPONENTS_MAX = 64


class _Steps:
    """What auto ran, in order: stage, method, seconds and objective."""

    def __init__(self, problem: PlacementProblem) -> None:
        self.problem = problem
        self.rows: list[dict[str, Any]] = []
        self.mark = time.perf_counter()

    def add(self, stage: str, method: str, out: SolverOutput | None, **extra: Any) -> None:
        now = time.perf_counter()
        value = None
        if out is not None and out.assignment is not None:
            value = objective(self.problem, out.assignment)
        row = {"stage": stage, "method": method, "seconds": round(now - self.mark, 4)}
        row["objective"] = value
        extra = {k: float(v) if isinstance(v, np.floating) else v for k, v in extra.items()}
        self.rows.append({**row, **extra})
        self.mark = now


@register(
    "auto",
    description="greedy + bound; proves small/hierarchical cases with bnb or "
    "CP-SAT; records the choice",
    options={
        "gap": "stop as soon as the certified relative gap is at most this (default 0: search "
        "until a bound proves the plan or the time limit)",
    },
)
def auto(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    start = time.perf_counter()
    limit = DEFAULT_TIME_LIMIT if time_limit is None else time_limit
    steps = _Steps(problem)
    target_gap = _gap_option(options)
    if problem.n_edges == 0:
        out = get_solver("lap").fn(problem, time_limit=limit, seed=seed, options={})
        steps.add("interaction test: no pairwise traffic", "lap", out)
        why = "no pairwise traffic: a linear assignment, solved exactly"
        return _choose(out, "lap", why, steps)
    parts = problem.components()
    linked = [c for c in parts if len(c) > 1]
    greedy = None
    if len(parts) > 1 and problem.cluster is not None and not _small_flat(problem):
        # a plan of the whole that its bound already proves needs no decomposition
        greedy = get_solver("greedy").fn(
            problem, time_limit=max(0.05, limit / 4), seed=seed, options={}
        )
        value = objective(problem, greedy.assignment)
        bound, source = best_bound(problem, target=value, thorough=True)
        slack = max(1e-9, target_gap) * max(1.0, abs(value))
        if bound is None or value - bound > slack:  # not proved, nor within the asked gap
            if len(linked) <= COMPONENTS_MAX:
                steps.add(f"construction of the whole and the {source} bound", "greedy", greedy,
                          bound=bound)  # fmt: skip
                out = _by_component(problem, parts, start, limit, seed, steps)
                if objective(problem, out.assignment) <= value:
                    return out
                # the whole's greedy plan was better: keep it, with the components' bound
                better = replace(greedy, bound=out.bound)
                why = "the greedy plan of the whole beat the components planned one by one"
                return _choose(better, "greedy", why, steps)
    return _single(problem, start, limit, seed, steps, greedy=greedy, target_gap=target_gap)


def _by_component(
    problem: PlacementProblem,
    parts: list[np.ndarray],
    start: float,
    limit: float,
    seed: int,
    steps: _Steps,
) -> SolverOutput:
    """Plan independent traffic components one after another (step 0 of the module doc)."""
    linked = [c for c in parts if len(c) > 1]
    alone = np.concatenate([c for c in parts if len(c) == 1] or [np.zeros(0, np.int64)])
    free = np.ones(problem.n_locations, dtype=bool)
    assignment = np.empty(problem.n_workers, dtype=np.int64)
    bound_sum = 0.0
    methods = []
    proofs: dict[bytes, tuple[float | None, int]] = {}  # one bound per distinct component
    for k, workers in enumerate(linked):
        began = time.perf_counter()
        left = limit - (began - start)
        share = max(0.05, left * len(workers) / sum(len(c) for c in linked[k:]))
        label = f"component {k + 1} of {len(linked)} ({len(workers)} workers)"
        key = _component_key(problem, workers)
        if key in proofs:  # the same traffic up to relabelling: the same bound alone
            part_bound, twin = proofs[key]
            label += (f" on the GPUs left (identical to component {twin + 1}: its bound alone "
                      "reused)")  # fmt: skip
            locs = np.flatnonzero(free)
            sub = problem.restrict(workers, locs)
            out = _single(sub, began, share, seed, _Steps(sub), known=part_bound, part=True)
        else:
            whole = problem.restrict(workers)  # the component alone, on every usable GPU
            solo = _single(whole, began, share if free.all() else share / 2, seed, _Steps(whole))
            solo_value = objective(whole, solo.assignment)
            # its bounds (cached on ``whole`` by the run; finished only if the run met none)
            part_bound, _ = best_bound(whole, target=solo_value, thorough=True)
            if solo.bound is not None:  # proved on every usable GPU: bounds the joint problem
                part_bound = max(part_bound if part_bound is not None else -np.inf, solo.bound)
            proofs[key] = (part_bound, k)
            if np.all(free[solo.assignment]):  # its own best plan is still free: take it
                out, locs, sub = solo, np.arange(problem.n_locations), whole
            else:
                steps.add(f"{label} alone on all GPUs, for its bound", solo.method or "auto",
                          None, objective=solo_value, bound=part_bound,
                          inner=solo.stats.get("auto_steps", []))  # fmt: skip
                locs = np.flatnonzero(free)
                sub = problem.restrict(workers, locs)
                now = time.perf_counter()
                rest = max(0.05, share - (now - began))
                # fewer GPUs can only cost more: the run alone bounds this one too
                out = _single(sub, now, rest, seed, _Steps(sub), known=part_bound, part=True)
                label += " on the GPUs left"
        bound_sum += part_bound if part_bound is not None else -np.inf
        used = out.method or "auto"
        methods.append(used)
        assignment[workers] = locs[out.assignment]
        free[locs[out.assignment]] = False
        steps.add(label, used, None, objective=objective(sub, out.assignment), bound=part_bound,
                  inner=out.stats.get("auto_steps", []))  # fmt: skip
    if len(alone):
        locs = np.flatnonzero(free)
        sub = problem.restrict(alone, locs)
        out = get_solver("lap").fn(sub, time_limit=None, seed=seed, options={})
        bound_sum += linear_floor(problem.restrict(alone))
        assignment[alone] = locs[out.assignment]
        steps.add(f"{len(alone)} workers without traffic", "lap", None,
                  objective=objective(sub, out.assignment))  # fmt: skip
    value = objective(problem, assignment)
    whole_bound = None
    if bound_sum < value - 1e-9 * max(1.0, abs(value)):  # not proved by the parts' bounds
        whole_bound, _ = best_bound(problem, target=value, thorough=True)
    bound = max(b for b in (whole_bound, bound_sum) if b is not None)
    out = SolverOutput(assignment, bound=float(bound) if np.isfinite(bound) else None)
    why = (
        f"{len(linked)} independent traffic components"
        + (f" and {len(alone)} workers without traffic" if len(alone) else "")
        + " planned one after another, heaviest first"
    )
    stats = {"components": [len(c) for c in parts], "component_methods": methods}
    return _choose(replace(out, stats=stats), "components", why, steps)


def _single(
    problem: PlacementProblem,
    start: float,
    limit: float,
    seed: int,
    steps: _Steps,
    known: float | None = None,
    greedy: SolverOutput | None = None,
    target_gap: float = 0.0,
    part: bool = False,
) -> SolverOutput:
    """Steps 1-5 of the module doc for one connected problem (``part``: one of several traffic
    components planned one after another); ``known`` is a lower bound
    proved elsewhere (a component's run on more GPUs), so the search may stop when it meets it;
    ``greedy`` a greedy run already made."""
    if greedy is None:
        greedy = get_solver("greedy").fn(
            problem, time_limit=max(0.05, limit / 4), seed=seed, options={}
        )
    value = objective(problem, greedy.assignment)
    bound, source = best_bound(problem, target=value, thorough=True)
    cut_plan = problem.peek("partition_plan")  # left by the partition bound's CP-SAT cut
    cut_value = np.inf if cut_plan is None else objective(problem, cut_plan)
    if cut_value < value:
        greedy = replace(greedy, assignment=cut_plan, message="greedy, then the bound's cut")
        value = cut_value
    if known is not None and (bound is None or known > bound):
        bound, source = known, "component-alone"
        greedy = replace(greedy, bound=known)  # carried to every plan that stops on it
    steps.add(f"construction and the {source} bound", "greedy", greedy, bound=bound)
    tol = 1e-9 * max(1.0, abs(value))
    if bound is not None and value - bound <= tol:
        why = f"greedy meets the {source} bound: proved optimal"
        return _choose(greedy, "greedy", why, steps)
    if bound is not None and target_gap > 0 and value - bound <= target_gap * abs(value):
        why = f"greedy is within the asked gap {100 * target_gap:g} % of the {source} bound"
        return _choose(greedy, "greedy", why, steps)
    n = problem.n_workers
    view, reason = (None, "raw QAP") if problem.cluster is None else hierarchical_view(problem)
    if _small_flat(problem):
        left = limit - (time.perf_counter() - start)
        share = left if view is None else BNB_SHARE * left
        out = get_solver("bnb").fn(
            problem, time_limit=max(0.05, share), seed=seed, options={"hint": greedy.assignment}
        )
        why = f"small flat instance ({n} facilities): branch and bound"
        out = keep_better(problem, out, greedy.assignment)
        steps.add("exact search", "bnb", out, bound=out.bound)
        left = limit - (time.perf_counter() - start)
        if view is None or out.proved_optimal or left <= 0.05:
            return _choose(out, "bnb", why, steps)
        # a cluster's GPUs of a node are interchangeable: the worker → node model has none of
        # the flat search's symmetric copies
        model = get_solver("cpsat").fn(
            problem, time_limit=left, seed=seed, options={"hint": out.assignment}
        )
        model = keep_better(problem, model, out.assignment)
        steps.add("exact search (hierarchical model)", "cpsat", model, bound=model.bound)
        known = [b for b in (out.bound, model.bound) if b is not None]
        model = replace(model, bound=max(known) if known else None)
        why += ", then the hierarchical CP-SAT model"
        return _choose(model, "cpsat", why, steps)
    exact = view is not None and n <= CPSAT_MAX_WORKERS
    # a small exact model (few units: an NVL72 rack is one) is worth most of the time
    compact = exact and view is not None and n * len(view.capacity) <= UNIT_MODEL_CELLS
    current, label = greedy, "greedy"
    if view is not None and n <= QUICK_CPSAT_WORKERS:
        # small enough that the hierarchical model usually proves the plan at once; up to
        # CPSAT_ALONE_WORKERS it has all the time (one run proves what two halves do not)
        alone = n <= CPSAT_ALONE_WORKERS
        share = limit - (time.perf_counter() - start) if alone else limit / 4
        out = get_solver("cpsat").fn(
            problem, time_limit=max(0.05, share), seed=seed,
            options={"hint": greedy.assignment},
        )  # fmt: skip
        out = keep_better(problem, out, greedy.assignment)
        steps.add("quick exact search (hierarchical model)", "cpsat", out, bound=out.bound)
        best = objective(problem, out.assignment)
        if out.bound is not None and out.bound > (bound if bound is not None else -np.inf):
            bound, source = out.bound, "cpsat"
        if out.proved_optimal or (bound is not None and best - bound <= tol):
            why = f"small hierarchical instance ({n} workers): CP-SAT proved the plan optimal"
            return _choose(replace(out, bound=bound), "cpsat", why, steps)
        if alone:  # keep_better: CP-SAT's plan is no worse than greedy's
            why = f"small hierarchical instance ({n} workers): the CP-SAT model, all the time"
            return _choose(replace(out, bound=bound), "cpsat", why, steps)
        if best < value - tol:
            current, label, value = out, "cpsat", best
    if problem.cluster is not None:
        left = limit - (time.perf_counter() - start)
        # no tabu stage: the decomposition, then the iterated sparse search to the end; a small
        # exact model takes the rest after a quarter of it
        large = n > SPARSE_SEARCH_WORKERS
        share = left if large else left / 4 if compact else left / 3
        # one decomposition of one candidate set costs about what greedy spent constructing
        # on one (the same sets, the same graph); it cannot stop midway
        per_pass = _pass_estimate(greedy)
        if large and left < per_pass:
            steps.add("decomposition skipped: one pass would overrun the budget",
                      "hierarchical", None, expected_pass_s=round(per_pass, 3),
                      left_s=round(left, 3))  # fmt: skip
        else:
            # a component's own best spread takes what the components after it need (15
            # pipelines on 4,096 GPUs: 0.38 % without it, 3.94 % with): not for components
            options: dict[str, Any] = {"kicks": 0} if large else {}
            if part:
                options["spread"] = False
            hier = get_solver("hierarchical").fn(
                problem, time_limit=max(0.05, share), seed=seed, options=options
            )
            why_run = (
                f"decomposition: one pass expected in {per_pass:.2f} s, {left:.2f} s left; "
                "it partitions the traffic where greedy grows it"
            )  # fmt: skip
            steps.add(why_run if large else "decomposition", "hierarchical", hier,
                      tried=hier.stats.get("candidates_tried"))  # fmt: skip
            if objective(problem, hier.assignment) < value - tol:
                current, label = hier, "hierarchical"
        left = limit - (time.perf_counter() - start)
        value = objective(problem, current.assignment)
        if large and n <= LAGRANGE_MAX_WORKERS and left > 1.0 and (
            bound is None or value - bound > tol
        ):
            # groups no domain holds (pipeline stages larger than any rack's free GPUs): the
            # Lagrangian bound's least cuts of their pieces, before the search to the end
            coupled = lagrangian_bound(
                problem, seconds=min(LAGRANGE_SECONDS, left / 4), target=value, splits_only=True
            )
            if coupled is not None:
                steps.add("groups no domain holds cut (Lagrangian bound)", "lagrangian", None,
                          bound=coupled)  # fmt: skip
            if coupled is not None and (bound is None or coupled > bound):
                bound, source = min(coupled, value), "lagrangian"
                stats = {**current.stats, "bound_source": source}
                current = replace(current, bound=bound, stats=stats)
            left = limit - (time.perf_counter() - start)
        if large and left < per_pass:  # a descent pass costs about a decomposition pass
            steps.add("iterated sparse search skipped: one pass would overrun the budget",
                      "hierarchical", None, expected_pass_s=round(per_pass, 3),
                      left_s=round(left, 3))  # fmt: skip
        elif large:
            # too large for dense tabu: iterated sparse search to the end
            refined, moves = sparse_refine(
                problem, current.assignment, start + limit, seed=seed, kicks=-1, target=bound
            )
            if objective(problem, refined) < objective(problem, current.assignment) - tol:
                message = f"{current.message} + iterated sparse search ({moves} moves)"
                current = replace(current, assignment=refined, message=message)
            steps.add("iterated sparse search", "hierarchical", current, moves=moves)
        best = objective(problem, current.assignment)
        if bound is not None and best - bound <= tol:
            why = f"{label} meets the {source} bound: proved optimal"
            return _choose(current, label, why, steps)
        if bound is not None and target_gap > 0 and best - bound <= target_gap * abs(best):
            why = f"{label} is within the asked gap {100 * target_gap:g} % of the {source} bound"
            return _choose(current, label, why, steps)
    # improve the start by tabu search: all the time left, or a third of it before CP-SAT
    tabu_applies = n <= (TABU_MAX_WORKERS if problem.cluster is None else SPARSE_SEARCH_WORKERS)
    left = limit - (time.perf_counter() - start)
    share = left / 3 if exact else left
    if compact:
        steps.add("improvement skipped (a small exact model takes the time)", "tabu", None,
                  cells=n * len(view.capacity) if view is not None else 0)  # fmt: skip
    elif left > 0.1 and tabu_applies:
        # a raw QAP: no hint, so tabu starts from the better of greedy and FAQ
        hint = {} if problem.cluster is None else {"hint": current.assignment}
        searched = get_solver("tabu").fn(problem, time_limit=share, seed=seed, options=hint)
        steps.add("improvement", "tabu", searched)
        if (
            searched.assignment is not None
            and objective(problem, searched.assignment)
            < objective(problem, current.assignment) - tol
        ):
            current, label = searched, "tabu"
        if objective(problem, current.assignment) - (bound if bound is not None else -1e300) <= tol:
            return _choose(current, label, f"{label} reached the {source} bound", steps)
    left = limit - (time.perf_counter() - start)
    if not exact or left <= 0.05:
        searched = "tabu search from " if tabu_applies else ""
        if view is None:
            why = f"{searched}the best of greedy and hierarchical (no exact model: {reason})"
        else:
            why = (
                f"{searched}the best of greedy and hierarchical ({n} workers > {CPSAT_MAX_WORKERS})"
            )
        return _choose(current, label, why, steps)
    assert view is not None
    # the levels coupled (a Lagrangian bound, seconds): before the exact model, which may
    # then stop at once
    value = objective(problem, current.assignment)
    if n <= LAGRANGE_MAX_WORKERS and left > 0.5 and (bound is None or value - bound > tol):
        seconds = min(LAGRANGE_SECONDS, left / 3)
        coupled = lagrangian_bound(problem, seconds=seconds, target=value)
        steps.add("the levels coupled, groups no domain holds cut (Lagrangian bound)", "lagrangian",
                  None, bound=coupled)  # fmt: skip
        if coupled is not None and (bound is None or coupled > bound):
            bound, source = min(coupled, value), "lagrangian"
            if value - bound <= tol:
                stats = {**current.stats, "bound_source": source}
                why = f"{label} meets the {source} bound: proved optimal"
                return _choose(replace(current, bound=bound, stats=stats), label, why, steps)
        left = limit - (time.perf_counter() - start)
    out = get_solver("cpsat").fn(
        problem, time_limit=max(0.05, left), seed=seed, options={"hint": current.assignment}
    )
    why = (
        f"greedy, hierarchical and tabu search, then the hierarchical CP-SAT model "
        f"({n} workers on {len(view.nodes)} nodes)"
    )
    out = keep_better(problem, out, current.assignment)
    steps.add("exact search (hierarchical model)", "cpsat", out, bound=out.bound)
    if source == "lagrangian" and bound is not None and (out.bound is None or bound > out.bound):
        out = replace(out, bound=bound, stats={**out.stats, "bound_source": source})
    return _choose(out, "cpsat", why, steps)


def _component_key(problem: PlacementProblem, workers: np.ndarray) -> bytes:
    """The traffic of a component (workers ascending) with its workers numbered 0 … k − 1,
    and their per-GPU costs if any: equal keys mean the same problem up to relabelling, so one
    proof of the component alone serves every copy (pools of replicas, independent
    pipelines)."""
    sub = problem.flow_csr()[workers][:, workers].tocsr()
    sub.sort_indices()
    parts = [np.int64(len(workers)).tobytes(), sub.indptr.astype(np.int64).tobytes(),
             sub.indices.astype(np.int64).tobytes(), sub.data.astype(np.float64).tobytes()]
    if problem.linear is not None:
        parts.append(np.ascontiguousarray(problem.linear[workers], dtype=np.float64).tobytes())
    return b"|".join(parts)


def _pass_estimate(greedy: SolverOutput) -> float:
    """Seconds one decomposition of one candidate set is expected to take: greedy's
    construction time per candidate set it tried (the decomposition partitions the same sets'
    traffic; measured at 131,072 GPUs: 2.0 s per set for greedy, 2.0–3.2 s per pass)."""
    seconds = float(greedy.stats.get("construct_seconds", 0.0))
    return seconds / max(1, int(greedy.stats.get("domains_tried", 1)))


def _gap_option(options: dict[str, Any]) -> float:
    from tsched.errors import InputError

    raw = options.get("gap", 0.0)
    try:
        gap = float(raw)
    except (TypeError, ValueError):
        gap = -1.0
    if not 0.0 <= gap < 1.0:
        raise InputError(f"method 'auto': option gap={raw!r} must be a fraction in [0, 1) "
                         "(e.g. gap=0.03 for 3 %)")  # fmt: skip
    return gap


def _small_flat(problem: PlacementProblem) -> bool:
    """Small enough for branch and bound to prove optimality as a whole."""
    flat = problem.cluster is None or problem.n_locations <= BNB_MAX
    return flat and problem.n_workers <= BNB_MAX and problem.n_locations <= BNB_MAX + 4


def _choose(out: SolverOutput, method: str, why: str, steps: _Steps) -> SolverOutput:
    stats = {**out.stats, "auto_choice": method, "auto_reason": why, "auto_steps": steps.rows}
    return replace(
        out, method=method, stats=stats, message=f"auto → {method}: {why}. {out.message}"
    )
