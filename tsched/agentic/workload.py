"""Agentic workloads (``tsched: agentic-workload/v1``): what agent programs ask of the engines.

An agent *program* alternates LLM calls (*reasoning*) with tool calls (*acting*). Its first
prompt is a system prompt shared by every program (``system_tokens``) plus its own task
(``initial_tokens``); every later prompt is the previous prompt, the previous answer and the tool's
observation (``growth_tokens``). After its last LLM call the program ends. Programs run in a closed
loop (``concurrency`` programs at once, a new one starting as one ends, as ThunderAgent's paper
runs them) or arrive in an open loop (``arrival_rate`` programs per second, Poisson).

Every numeric field takes a number or a distribution::

    {dist: fixed, value: 3}
    {dist: uniform, low: 4, high: 12}
    {dist: lognormal, median: 1.0, sigma: 1.0}
    {dist: pareto, scale: 1.0, alpha: 1.5}

The presets ``swe``, ``openhands`` and ``heavy-tail`` are **assumptions**: ThunderAgent's paper
gives tool-time histograms but no per-turn token statistics, so the presets choose plausible values
(see :data:`PRESETS`) and the simulator sweeps around them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tsched._io import load_preset_or_file
from tsched.formats.check import Checker

__all__ = [
    "DISTRIBUTIONS",
    "FORMAT",
    "PRESETS",
    "AgenticWorkload",
    "Dist",
    "ProgramSpec",
    "load_agentic_workload",
    "parse_agentic_workload",
    "program_specs",
]

FORMAT = "tsched: agentic-workload/v1"
DISTRIBUTIONS = ("fixed", "uniform", "lognormal", "pareto")
_DIST_KEYS = {
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "lognormal": ("median", "sigma"),
    "pareto": ("scale", "alpha"),
}
_INT_FIELDS = ("turns", "system_tokens", "initial_tokens", "growth_tokens", "output_tokens")
_FIELDS = (*_INT_FIELDS, "tool_seconds")


@dataclass(frozen=True, slots=True)
class Dist:
    """A distribution of a non-negative quantity; ``sample`` draws with a passed-in generator."""

    kind: str
    a: float
    b: float = 0.0

    def sample(self, rng: np.random.Generator, size: int | None = None) -> Any:
        if self.kind == "fixed":
            return np.full(size, self.a) if size is not None else self.a
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b, size)
        if self.kind == "lognormal":
            return self.a * np.exp(self.b * rng.standard_normal(size))
        # pareto: scale · (1 + Lomax), i.e. P(X > x) = (scale / x)^alpha for x ≥ scale
        return self.a * (1.0 + rng.pareto(self.b, size))

    def median(self) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        if self.kind == "lognormal":
            return self.a
        return self.a * 2.0 ** (1.0 / self.b)

    def mean(self) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        if self.kind == "lognormal":
            return self.a * math.exp(self.b**2 / 2)
        return math.inf if self.b <= 1 else self.a * self.b / (self.b - 1)

    def to_data(self) -> Any:
        if self.kind == "fixed":
            return self.a
        names = _DIST_KEYS[self.kind]
        return {"dist": self.kind, names[0]: self.a, names[1]: self.b}


@dataclass(frozen=True, slots=True)
class AgenticWorkload:
    """A parsed ``agentic-workload/v1`` file. Exactly one of ``concurrency`` / ``arrival_rate``."""

    name: str
    programs: int
    concurrency: int | None
    arrival_rate: float | None
    turns: Dist
    system_tokens: Dist
    initial_tokens: Dist
    growth_tokens: Dist
    output_tokens: Dist
    tool_seconds: Dist

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None

    def with_load(
        self, *, concurrency: int | None = None, programs: int | None = None
    ) -> AgenticWorkload:
        """The same programs at another concurrency (closed loop) and/or program count."""
        return replace(
            self,
            concurrency=concurrency if concurrency is not None else self.concurrency,
            arrival_rate=None if concurrency is not None else self.arrival_rate,
            programs=programs if programs is not None else self.programs,
        )

    def mean_live_context(self) -> float:
        """Mean context of a program in flight, in tokens (half its turns' growth on average)."""
        per_turn = self.growth_tokens.mean() + self.output_tokens.mean()
        return (
            self.system_tokens.mean()
            + self.initial_tokens.mean()
            + per_turn * max(self.turns.mean() - 1, 0) / 2
        )

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"tsched": "agentic-workload/v1", "name": self.name}
        data["programs"] = self.programs
        if self.concurrency is not None:
            data["concurrency"] = self.concurrency
        else:
            data["arrival_rate"] = self.arrival_rate
        for field in _FIELDS:
            data[field] = getattr(self, field).to_data()
        return data


@dataclass(frozen=True, slots=True)
class ProgramSpec:
    """One sampled program: per turn, the new prompt tokens, the answer's tokens and the tool time
    that follows the answer (the last turn has no tool call)."""

    index: int
    arrival: float  # seconds; 0 for the closed loop (start order is the index)
    system_tokens: int
    new_tokens: tuple[int, ...]  # turn 0: initial task; later: tool observation
    output_tokens: tuple[int, ...]
    tool_seconds: tuple[float, ...]  # len(turns) - 1

    @property
    def turns(self) -> int:
        return len(self.new_tokens)

    def prompt_tokens(self, turn: int) -> int:
        """The prompt of ``turn``: system + every earlier new part and answer + this new part."""
        return (
            self.system_tokens + sum(self.new_tokens[: turn + 1]) + sum(self.output_tokens[:turn])
        )


def _presets() -> dict[str, AgenticWorkload]:
    def logn(median: float, sigma: float) -> Dist:
        return Dist("lognormal", median, sigma)

    return {
        # SWE-agent-like: short shell tools (1 s median), observations of ~1.5k tokens, short
        # answers; contexts reach ~15k tokens. Matches the live measurement of issue 17 (growth
        # 1,500 tokens a turn, 32 output tokens, 1 s tool median).
        "swe": AgenticWorkload(
            name="swe",
            programs=128,
            concurrency=32,
            arrival_rate=None,
            turns=Dist("uniform", 4, 10),
            system_tokens=Dist("fixed", 1024),
            initial_tokens=Dist("fixed", 1000),
            growth_tokens=logn(1500, 0.3),
            output_tokens=Dist("fixed", 32),
            tool_seconds=logn(1.0, 0.8),
        ),
        # OpenHands-like: a longer system prompt, bigger observations, longer tools (editing,
        # running tests: 3 s median, occasional minute-long runs).
        "openhands": AgenticWorkload(
            name="openhands",
            programs=128,
            concurrency=32,
            arrival_rate=None,
            turns=Dist("uniform", 6, 14),
            system_tokens=Dist("fixed", 4096),
            initial_tokens=Dist("fixed", 2000),
            growth_tokens=logn(2500, 0.5),
            output_tokens=logn(96, 0.4),
            tool_seconds=logn(3.0, 1.0),
        ),
        # Heavy-tailed tools (remote APIs, test suites): Pareto with alpha 1.2, so p99 ≈ 46 s and
        # the mean is dominated by rare long calls (the paper's ToolOrchestra/HLE histograms).
        "heavy-tail": AgenticWorkload(
            name="heavy-tail",
            programs=128,
            concurrency=32,
            arrival_rate=None,
            turns=Dist("uniform", 6, 14),
            system_tokens=Dist("fixed", 1024),
            initial_tokens=Dist("fixed", 1500),
            growth_tokens=logn(1000, 0.5),
            output_tokens=Dist("fixed", 64),
            tool_seconds=Dist("pareto", 0.5, 1.2),
        ),
    }


PRESETS: Mapping[str, AgenticWorkload] = _presets()


def _dist(ck: Checker, value: Any, where: str, *, integer: bool) -> Dist:
    if not isinstance(value, Mapping):
        number = ck.number(value, where, minimum=0.0)
        if integer and number != int(number):
            raise ck.fail(where, f"expected a whole number of tokens, got {value!r}")
        return Dist("fixed", number)
    kind = ck.choice(value.get("dist"), f"{where}.dist", DISTRIBUTIONS)
    names = _DIST_KEYS[kind]
    example = ", ".join(f"{n}: 1" for n in names)
    ck.mapping(value, where, required=("dist", *names), example=f"{{dist: {kind}, {example}}}")
    first = ck.number(value[names[0]], f"{where}.{names[0]}", minimum=0.0)
    if kind == "fixed":
        return Dist("fixed", first)
    second = ck.number(value[names[1]], f"{where}.{names[1]}", minimum=0.0)
    if kind == "uniform" and second < first:
        raise ck.fail(f"{where}.high", f"must be >= low ({first:g}), got {second:g}")
    if kind in ("lognormal", "pareto") and first <= 0:
        raise ck.fail(f"{where}.{names[0]}", f"must be > 0, got {first:g}")
    if kind == "pareto" and second <= 0:
        raise ck.fail(f"{where}.alpha", f"must be > 0, got {second:g}")
    return Dist(kind, first, second)


def parse_agentic_workload(data: Any, source: str) -> AgenticWorkload:
    """Check and convert plain data (from YAML) into an :class:`AgenticWorkload`.

    Raises
    ------
    InputError
        Naming ``source``, the field, the rule and the bad value.

    Examples
    --------
    >>> w = parse_agentic_workload({"tsched": "agentic-workload/v1", "name": "t", "programs": 4,
    ...     "concurrency": 2, "turns": 3, "system_tokens": 100, "initial_tokens": 50,
    ...     "growth_tokens": 20, "output_tokens": 8, "tool_seconds": {"dist": "fixed", "value": 1}},
    ...     "t.yaml")
    >>> w.turns.median(), w.closed_loop
    (3.0, True)
    """
    ck = Checker(source)
    ck.mapping(
        data,
        "",
        required=("tsched", "name", "programs", *_FIELDS),
        optional=("concurrency", "arrival_rate"),
        example="tsched: agentic-workload/v1",
    )
    tag = f"tsched: {data['tsched']}"
    if tag != FORMAT:
        raise ck.fail("tsched", f"expected 'agentic-workload/v1', got {data['tsched']!r}")
    name = ck.string(data["name"], "name")
    programs = ck.integer(data["programs"], "programs", minimum=1)
    has_c, has_r = "concurrency" in data, "arrival_rate" in data
    if has_c == has_r:
        raise ck.fail(
            "",
            "give exactly one of 'concurrency' (closed loop: programs in flight) or "
            "'arrival_rate' (open loop: programs per second)",
        )
    concurrency = ck.integer(data["concurrency"], "concurrency", minimum=1) if has_c else None
    rate = ck.number(data["arrival_rate"], "arrival_rate", positive=True) if has_r else None
    fields = {f: _dist(ck, data[f], f, integer=f in _INT_FIELDS) for f in _FIELDS}
    turns = fields["turns"]
    if turns.kind == "fixed" and turns.a < 1:
        raise ck.fail("turns", f"must be >= 1, got {turns.a:g}")
    return AgenticWorkload(
        name=name, programs=programs, concurrency=concurrency, arrival_rate=rate, **fields
    )


def load_agentic_workload(spec: str | Path) -> AgenticWorkload:
    """A preset name (``swe``, ``openhands``, ``heavy-tail``) or an ``agentic-workload/v1`` file."""
    return load_preset_or_file(spec, PRESETS, "agentic workload", parse_agentic_workload)


def program_specs(workload: AgenticWorkload, seed: int | None = 0) -> list[ProgramSpec]:
    """Sample every program of ``workload``; the same seed gives the same programs.

    Each program draws from its own stream (``seed`` and the program's index), so program ``i``
    is the same whatever the program count, and the policies of one study see identical programs.
    """
    specs = []
    clock = 0.0
    arrivals = np.random.default_rng([0 if seed is None else seed, 1 << 30])
    for i in range(workload.programs):
        rng = np.random.default_rng([0 if seed is None else seed, i])
        turns = max(1, round(float(workload.turns.sample(rng))))
        system = max(0, round(float(workload.system_tokens.sample(rng))))
        initial = max(1, round(float(workload.initial_tokens.sample(rng))))
        growth = [max(1, round(float(x))) for x in workload.growth_tokens.sample(rng, turns - 1)]
        outputs = [max(1, round(float(x))) for x in workload.output_tokens.sample(rng, turns)]
        tools = [max(0.0, float(x)) for x in workload.tool_seconds.sample(rng, turns - 1)]
        if workload.arrival_rate is not None:
            clock += float(arrivals.exponential(1.0 / workload.arrival_rate))
        specs.append(
            ProgramSpec(
                index=i,
                arrival=clock if workload.arrival_rate is not None else 0.0,
                system_tokens=system,
                new_tokens=(initial, *growth),
                output_tokens=tuple(outputs),
                tool_seconds=tuple(tools),
            )
        )
    return specs
