"""Placement policies of a comparison, and the (policy × seed) sweep, serial or on Ray.

A policy is a cluster placement rule (``first-fit``, ``best-fit``, ``kai-tas``, ``slurm-tree``,
``whole-nodes``, ``spread``, ``random``, ``fgd``; :mod:`tsched.compare.placement`) or a
registered solver name (``greedy``, ``auto`` …) with the suffix ``+frag`` for
fragmentation-aware placement (``greedy+frag``). Every run of a sweep gets
the same jobs in the same order; a run is a pure function of (jobs, cluster, config), so the Ray
sweep returns exactly what the serial one does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tsched.cluster import Cluster
from tsched.compare.jobmodel import AppModel, CollectiveModel
from tsched.compare.simulator import SimConfig, SimResult, simulate
from tsched.compare.traces import TraceJob
from tsched.errors import InputError

__all__ = ["FRAG_SUFFIX", "parse_policies", "sweep"]

FRAG_SUFFIX = "+frag"


def parse_policies(text: str | Sequence[str], base: SimConfig | None = None) -> list[SimConfig]:
    """``"fgd,best-fit,greedy+frag"`` → one :class:`SimConfig` per policy.

    A policy is a cluster placement rule (:data:`tsched.compare.placement.RULES`; ``pack`` stands
    for ``first-fit``) or a registered solver name, optionally followed by ``+frag``
    (fragmentation-aware subsets, solvers only), by ``+topo`` or ``+count`` (what the head
    job of ``backfill`` reserves; ``fgd`` reserves by topology, the others by count) and by
    ``+slackS`` (relaxed backfilling: the head's start may slip by ``S`` × its run time; see
    :class:`~tsched.compare.simulator.SimConfig`), and last by ``+kai``, ``+tsched`` or
    ``+none`` (consolidation, :mod:`tsched.compare.consolidation`; default ``--consolidate``).
    """
    from tsched.compare.placement import RULES, canonical
    from tsched.solvers.registry import get_solver, solvers

    names = [p.strip() for p in (text.split(",") if isinstance(text, str) else text)]
    names = [p for p in names if p]
    if not names:
        raise InputError("--policies: expected one or more policy names, e.g. fgd,best-fit")
    base = base or SimConfig()
    valid = sorted(set(RULES) | set(solvers()) | {"pack"})
    out = []
    for name in names:
        method, reservation, slack = name, base.reservation, base.slack
        consolidate = base.consolidate
        for rule_name in ("kai", "tsched", "none"):
            if method.endswith(f"+{rule_name}"):
                method, consolidate = method[: -len(rule_name) - 1], rule_name
        head, sep, tail = method.rpartition("+slack")
        if sep:
            try:
                slack = float(tail)
            except ValueError:
                slack = math.nan
            if not (slack >= 0 and math.isfinite(slack)):
                raise InputError(
                    f"--policies: {name!r}: +slack takes a share of the head's run time "
                    "(a number >= 0), e.g. fgd+slack0.25"
                )
            method = head
        for suffix, value in (("+topo", "topology"), ("+count", "count")):
            if method.endswith(suffix):
                method, reservation = method[: -len(suffix)], value
        frag = method.endswith(FRAG_SUFFIX)
        method = method[: -len(FRAG_SUFFIX)] if frag else method
        rule = canonical(method) in RULES
        if not rule and method not in solvers():
            raise InputError(
                f"--policies: unknown policy {name!r}; valid: {', '.join(valid)} "
                f"(optionally with {FRAG_SUFFIX}, +topo or +count, +slackS, +kai or +tsched)"
            )
        if frag and rule:
            raise InputError(
                f"--policies: {name!r}: {FRAG_SUFFIX} applies to solvers; the rule "
                f"{canonical(method)!r} chooses its own domain"
            )
        if not rule:
            get_solver(method)
        out.append(replace(base, policy=canonical(method), fragmentation_aware=frag,
                           reservation=reservation, slack=slack,
                           consolidate=consolidate))  # fmt: skip
    seen: dict[str, str] = {}
    for name, cfg in zip(names, out):
        if cfg.label in seen:
            same = "is named twice" if seen[cfg.label] == name else (
                f"runs as {cfg.label!r}, already named as {seen[cfg.label]!r}"
                + (" (a rule's own reservation needs no suffix)"
                   if name.endswith(("+topo", "+count")) else "")
            )  # fmt: skip
            raise InputError(f"--policies: {name!r} {same}; name each policy once")
        seen[cfg.label] = name
    return out


def _run(
    jobs: Sequence[TraceJob],
    cluster: Cluster,
    config: SimConfig,
    collective: CollectiveModel | None,
    apps: Mapping[str, AppModel] | None,
    on_job: Callable[[int, int], None] | None = None,
) -> SimResult:
    return simulate(jobs, cluster, config, collective=collective, apps=apps, progress=on_job)


def sweep(
    jobs: Sequence[TraceJob],
    cluster: Cluster,
    configs: Sequence[SimConfig],
    seeds: int = 1,
    *,
    collective: CollectiveModel | None = None,
    apps: Mapping[str, AppModel] | None = None,
    use_ray: bool = False,
    ray_address: str | None = None,
    progress: Callable[[SimResult], None] | None = None,
    on_job: Callable[[int, int], None] | None = None,
) -> list[SimResult]:
    """Simulate every config with seeds ``0 … seeds−1``; results in (config, seed) order.

    ``progress(result)`` is called after each run, ``on_job(done, total)`` after each job of a
    serial run.

    With ``use_ray`` each run is a Ray task on the cluster at ``ray_address`` (a local one when
    ``None``); the results are identical to the serial run.
    """
    if seeds < 1:
        raise InputError(f"--seeds must be >= 1, got {seeds}")
    runs = [replace(c, seed=s) for c in configs for s in range(seeds)]
    if not use_ray:
        out = []
        for cfg in runs:
            res = _run(jobs, cluster, cfg, collective, apps, on_job)
            if progress:
                progress(res)
            out.append(res)
        return out
    return _sweep_ray(jobs, cluster, runs, collective, apps, ray_address, progress)


def _sweep_ray(
    jobs: Sequence[TraceJob],
    cluster: Cluster,
    runs: list[SimConfig],
    collective: CollectiveModel | None,
    apps: Mapping[str, AppModel] | None,
    address: str | None,
    progress: Callable[[SimResult], None] | None,
) -> list[SimResult]:
    from tsched.discovery.ray import connect
    from tsched.errors import ExecutorError

    ray: Any
    if address is None:
        try:
            import ray
        except ImportError:
            raise ExecutorError("--ray needs ray (pip install 'tsched[ray]')") from None
        if not ray.is_initialized():  # a local cluster, gone when the process ends
            ray.init(logging_level="ERROR", log_to_driver=False, include_dashboard=False)
    else:
        ray = connect(address, error=ExecutorError)
    remote = ray.remote(num_cpus=1)(_run)
    jobs_ref = ray.put(list(jobs))
    cluster_ref = ray.put(cluster)
    futures = [remote.remote(jobs_ref, cluster_ref, cfg, collective, apps) for cfg in runs]
    index = {f: k for k, f in enumerate(futures)}
    out: list[SimResult | None] = [None] * len(futures)
    pending = list(futures)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            res = ray.get(ready[0])
            out[index[ready[0]]] = res
            if progress:
                progress(res)
    finally:
        for f in pending:
            ray.cancel(f)
    return [r for r in out if r is not None]
