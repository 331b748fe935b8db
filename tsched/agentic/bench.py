"""Drive an agentic workload against a live OpenAI-compatible service and measure it:
``tsched agents bench``.

Each program of the workload (:func:`~tsched.agentic.workload.program_specs`, the same programs
the simulator runs for the same seed) is an asyncio task: it sends its calls to
``/v1/completions`` with a prompt of exactly the sampled number of tokens for the tiny word-level
model tsched ships (``w0`` … ``w255``: one token per word), sleeps its tool times between calls
and releases itself at the end: ``POST /programs/release`` (the tsched proxy), a separate one-token
call carrying ``x-dynamo-session-final: true`` (Dynamo's ThunderAgent port, which drops the call
that carries it), or not at all (a plain frontend has no lifecycle). Every
prompt extends the program's previous one, and every program starts with the same system
prompt, so prefix caching behaves as with a real agent. Programs are named in the
``x-dynamo-session-id`` header (what the tsched proxy and Dynamo's routers read) unless
``id_in="body"``.

The step records and metrics have the simulator's fields (:data:`~tsched.agentic.sim.METRICS`),
computed from the measured responses, so a live run and a simulated one compare column by column.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tsched.agentic.engine import EngineProfile
from tsched.agentic.sim import metrics_of, step_record
from tsched.agentic.workload import AgenticWorkload, ProgramSpec, program_specs
from tsched.errors import InputError

__all__ = ["BenchResult", "run_bench", "words"]

VOCAB = 256
RELEASES = ("programs", "session-final", "none")


def words(count: int, seed: int) -> list[str]:
    """``count`` tokens of the tiny model, a stream fixed by ``seed``."""
    rng = random.Random(seed)
    return [f"w{rng.randrange(VOCAB)}" for _ in range(count)]


@dataclass
class BenchResult:
    """One measured run: metrics (the simulator's), step records, failures by kind."""

    target: str
    seed: int
    metrics: dict[str, float]
    records: list[dict[str, Any]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    counters: dict[str, float] = field(default_factory=dict)


async def run_bench(
    workload: AgenticWorkload,
    target: str,
    *,
    seed: int = 0,
    model: str = "tiny",
    id_in: str = "header",
    duration: float | None = None,
    timeout: float = 600.0,
    release: str = "programs",
    sample: Callable[[], float | None] | None = None,
    programs: Sequence[ProgramSpec] | None = None,
    warmup: float = 0.0,
    text_seed: int | None = None,
    profile: EngineProfile | None = None,
) -> BenchResult:
    """Run ``workload`` against ``target`` (base URL); see the module docstring.

    ``duration`` stops starting calls after that many seconds (calls in flight finish);
    ``warmup`` seconds at the start are left out of the metrics.
    ``sample`` (optional) returns the KV imbalance across replicas now; it is polled every second.
    ``profile`` (the engines' timing, optional) prices each program's time alone, for its
    slowdown (:func:`~tsched.agentic.sim.metrics_of`).
    ``text_seed`` (default ``seed``) picks the prompts' words: runs of the same programs with
    different words share no cached prefix on engines that outlive one run.
    """
    import aiohttp

    if id_in not in ("header", "body"):
        raise InputError(f"id_in must be 'header' or 'body', got {id_in!r}")
    if release not in RELEASES:
        raise InputError(f"release must be one of {', '.join(RELEASES)}, got {release!r}")
    specs = list(programs) if programs is not None else program_specs(workload, seed)
    text = seed if text_seed is None else text_seed
    system = words(max((s.system_tokens for s in specs), default=0), seed=-1 - text)
    started_at = [math.nan] * len(specs)
    ended_at = [math.nan] * len(specs)
    records: list[dict[str, Any]] = []
    errors: dict[str, int] = {}
    imbalance: list[float] = []
    t0 = time.monotonic()
    closed = workload.concurrency is not None
    next_index = 0
    window_end = [math.inf]
    stop_at = t0 + duration if duration is not None else math.inf

    def now() -> float:
        return time.monotonic() - t0

    async def one_program(session: aiohttp.ClientSession, spec: ProgramSpec) -> None:
        i = spec.index
        pid = f"bench-{seed}-{i}"
        own = words(sum(spec.new_tokens) + sum(spec.output_tokens), seed=text * 1_000_003 + i)
        started_at[i] = now()
        for k in range(spec.turns):
            if time.monotonic() >= stop_at:
                break
            length = spec.prompt_tokens(k) - spec.system_tokens
            prompt = " ".join(system[: spec.system_tokens] + own[:length])
            body: dict[str, Any] = {
                "model": model,
                "prompt": prompt,
                "max_tokens": spec.output_tokens[k],
                "ignore_eos": True,
            }
            headers = {}
            if id_in == "header":
                headers["x-dynamo-session-id"] = pid
            else:
                body["program_id"] = pid
            requested = now()
            try:
                async with session.post(f"{target}/v1/completions", json=body,
                                        headers=headers) as resp:  # fmt: skip
                    data = await resp.json(content_type=None)
                    status = resp.status
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                break
            done = now()
            if status != 200:
                errors[f"http_{status}"] = errors.get(f"http_{status}", 0) + 1
                break
            usage = data.get("usage") or {}
            cached = int(((usage.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0)
            prompt_tokens = int(usage.get("prompt_tokens") or 0)
            out = int(usage.get("completion_tokens") or 0)
            records.append(
                step_record(spec, k, -1, requested, requested, done, prompt_tokens, cached, out,
                            prompt_tokens - cached)
            )  # fmt: skip
            if k + 1 < spec.turns:
                await asyncio.sleep(spec.tool_seconds[k])
        ended_at[i] = now()
        try:
            if release == "programs":
                async with session.post(f"{target}/programs/release",
                                        json={"program_id": pid}) as resp:  # fmt: skip
                    await resp.read()
            elif release == "session-final":
                close = {"model": model, "prompt": system[0] if system else "w0", "max_tokens": 1}
                headers = {"x-dynamo-session-id": pid, "x-dynamo-session-final": "true"}
                async with session.post(f"{target}/v1/completions", json=close,
                                        headers=headers) as resp:  # fmt: skip
                    await resp.read()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            pass

    async def sampler() -> None:
        while True:
            await asyncio.sleep(1.0)
            if sample is not None:
                value = await asyncio.to_thread(sample)
                if value is not None:
                    imbalance.append(value)

    timeout_cfg = aiohttp.ClientTimeout(total=timeout, connect=10)
    async with aiohttp.ClientSession(
        timeout=timeout_cfg, connector=aiohttp.TCPConnector(limit=0)
    ) as session:
        sampling = asyncio.create_task(sampler()) if sample is not None else None
        try:
            if closed:
                running: set[asyncio.Task[None]] = set()
                while next_index < len(specs) or running:
                    while (
                        next_index < len(specs)
                        and len(running) < (workload.concurrency or 1)
                        and time.monotonic() < stop_at
                    ):
                        spec = specs[next_index]
                        next_index += 1
                        running.add(asyncio.create_task(one_program(session, spec)))
                    if not running:
                        break
                    finished, running = await asyncio.wait(
                        running, return_when=asyncio.FIRST_COMPLETED
                    )
                    for task in finished:
                        task.result()
                    if next_index >= len(specs) and window_end[0] == math.inf:
                        window_end[0] = now()
            else:
                tasks = []
                for spec in specs:
                    delay = t0 + spec.arrival - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    if time.monotonic() >= stop_at:
                        break
                    tasks.append(asyncio.create_task(one_program(session, spec)))
                await asyncio.gather(*tasks)
        finally:
            if sampling is not None:
                sampling.cancel()
    end = now()
    window = window_end[0] if window_end[0] != math.inf else end
    if duration is not None:
        window = min(window, duration)
    metrics = metrics_of(records, specs, started_at, ended_at, window, imbalance, warmup=warmup,
                         profile=profile)  # fmt: skip
    for rec in records:
        rec["policy"] = target
        rec["seed"] = seed
    return BenchResult(target, seed, metrics, records, errors, end)
