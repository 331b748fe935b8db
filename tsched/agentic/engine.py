"""Engine profiles (``tsched: engine-profile/v1``): how long an inference engine's passes take.

A profile gives the paged-KV block size, the batch limits and two timing curves, in the form
NVIDIA Dynamo's mocker engine uses (its default "polynomial" model):

- a pass that prefills ``T`` uncached tokens in all takes
  ``prefill_ms = quadratic·T² + linear·T + constant`` (0 when ``T`` is 0);
- a decode step of the whole running batch takes
  ``decode_step_ms = max(min, quadratic·p² + linear·p + constant)`` with ``p`` the KV utilisation
  (active KV tokens / capacity, 0..1).

A pass that both prefills and decodes takes the sum. KV capacity is a property of the replica (the
simulator's ``--capacity-tokens``), not of the profile.

Presets:

- ``mocker``: the Dynamo mocker's defaults (ai-dynamo 1.6.1, ``perf_model.rs``'s polynomial; block
  size 16 as tsched starts it, 256 sequences, 8,192 batched tokens). Cheap prefill: re-prefilling a
  7k-token context costs about 0.15 s while 32 decode steps cost about 0.2–1 s.
- ``prefill-heavy``: stands for a large model (a 355B-class MoE in FP8 on one 8-GPU node, the
  setting of ThunderAgent's paper) on one replica: about 8,000 prefill tokens/s (re-prefilling a
  30k-token context takes about 4 s) and 20–50 ms decode steps. These figures are an assumption of
  the right order for such models, not a measurement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tsched._io import load_preset_or_file
from tsched.errors import InputError
from tsched.formats.check import Checker

__all__ = [
    "FORMAT",
    "PRESETS",
    "EngineProfile",
    "Poly",
    "load_engine_profile",
    "mocker_args",
    "parse_engine_profile",
]

FORMAT = "tsched: engine-profile/v1"


@dataclass(frozen=True, slots=True)
class Poly:
    """``max(min, quadratic·x² + linear·x + constant)`` in milliseconds."""

    quadratic: float
    linear: float
    constant: float
    min: float = 0.0

    def ms(self, x: float) -> float:
        return max(self.min, (self.quadratic * x + self.linear) * x + self.constant)

    def to_data(self) -> dict[str, float]:
        data = {"quadratic": self.quadratic, "linear": self.linear, "constant": self.constant}
        if self.min:
            data["min"] = self.min
        return data


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """A parsed ``engine-profile/v1``."""

    name: str
    block_size: int
    max_num_seqs: int
    max_batched_tokens: int
    prefill_ms: Poly
    decode_step_ms: Poly

    def prefill_seconds(self, tokens: int) -> float:
        """Seconds of one pass that prefills ``tokens`` uncached tokens (0 → 0)."""
        return self.prefill_ms.ms(tokens) / 1000.0 if tokens > 0 else 0.0

    def decode_seconds(self, utilisation: float) -> float:
        """Seconds of one decode step of the whole batch at KV utilisation 0..1."""
        return self.decode_step_ms.ms(min(max(utilisation, 0.0), 1.0)) / 1000.0

    def recompute_seconds(self, tokens: int) -> float:
        """Seconds to prefill ``tokens`` from scratch in passes of ``max_batched_tokens``."""
        full, rest = divmod(max(tokens, 0), self.max_batched_tokens)
        return full * self.prefill_seconds(self.max_batched_tokens) + self.prefill_seconds(rest)

    def to_data(self) -> dict[str, Any]:
        return {
            "tsched": "engine-profile/v1",
            "name": self.name,
            "block_size": self.block_size,
            "max_num_seqs": self.max_num_seqs,
            "max_batched_tokens": self.max_batched_tokens,
            "prefill_ms": self.prefill_ms.to_data(),
            "decode_step_ms": self.decode_step_ms.to_data(),
        }


PRESETS: Mapping[str, EngineProfile] = {
    "mocker": EngineProfile(
        name="mocker",
        block_size=16,
        max_num_seqs=256,
        max_batched_tokens=8192,
        prefill_ms=Poly(4.209989e-7, 1.518344e-2, 16.50142),
        decode_step_ms=Poly(-25.74, 54.01, 5.74, 1.0),
    ),
    "prefill-heavy": EngineProfile(
        name="prefill-heavy",
        block_size=16,
        max_num_seqs=256,
        max_batched_tokens=8192,
        prefill_ms=Poly(2.0e-6, 0.1, 30.0),
        decode_step_ms=Poly(0.0, 30.0, 20.0, 1.0),
    ),
}


def _poly(ck: Checker, value: Any, where: str) -> Poly:
    example = "{quadratic: 0, linear: 0.015, constant: 16.5}"
    ck.mapping(
        value,
        where,
        required=("quadratic", "linear", "constant"),
        optional=("min",),
        example=example,
    )
    q = ck.number(value["quadratic"], f"{where}.quadratic")
    lin = ck.number(value["linear"], f"{where}.linear")
    c = ck.number(value["constant"], f"{where}.constant")
    low = ck.number(value.get("min", 0.0), f"{where}.min", minimum=0.0)
    poly = Poly(q, lin, c, low)
    return poly


def parse_engine_profile(data: Any, source: str) -> EngineProfile:
    """Check and convert plain data into an :class:`EngineProfile`.

    Timing curves must be non-negative over their range (a pass never takes negative time):
    ``prefill_ms`` at 1 and at ``max_batched_tokens`` tokens, ``decode_step_ms`` at p = 0 and 1.

    Examples
    --------
    >>> p = parse_engine_profile(PRESETS["mocker"].to_data(), "mocker")
    >>> round(p.prefill_seconds(1900) * 1000, 1), round(p.decode_seconds(0.0) * 1000, 2)
    (46.9, 5.74)
    """
    ck = Checker(source)
    ck.mapping(
        data,
        "",
        required=("tsched", "name", "block_size", "prefill_ms", "decode_step_ms"),
        optional=("max_num_seqs", "max_batched_tokens"),
        example="tsched: engine-profile/v1",
    )
    if f"tsched: {data['tsched']}" != FORMAT:
        raise ck.fail("tsched", f"expected 'engine-profile/v1', got {data['tsched']!r}")
    profile = EngineProfile(
        name=ck.string(data["name"], "name"),
        block_size=ck.integer(data["block_size"], "block_size", minimum=1),
        max_num_seqs=ck.integer(data.get("max_num_seqs", 256), "max_num_seqs", minimum=1),
        max_batched_tokens=ck.integer(
            data.get("max_batched_tokens", 8192), "max_batched_tokens", minimum=1
        ),
        prefill_ms=_poly(ck, data["prefill_ms"], "prefill_ms"),
        decode_step_ms=_poly(ck, data["decode_step_ms"], "decode_step_ms"),
    )
    for x in (1, profile.max_batched_tokens):
        if profile.prefill_ms.ms(x) < 0:
            raise ck.fail("prefill_ms", f"gives a negative time at T = {x} tokens")
    for p in (0.0, 0.5, 1.0):
        if profile.decode_step_ms.ms(p) <= 0:
            raise ck.fail(
                "decode_step_ms", f"gives a time <= 0 at p = {p:g}; set 'min' (e.g. min: 1.0)"
            )
    return profile


def load_engine_profile(spec: str | Path) -> EngineProfile:
    """A preset name (``mocker``, ``prefill-heavy``) or an ``engine-profile/v1`` file."""
    return load_preset_or_file(spec, PRESETS, "engine profile", parse_engine_profile)


def write_mocker_tables(profile: EngineProfile, capacity_tokens: int, path: str | Path) -> Path:
    """Write ``profile`` as the mocker's interpolation tables, the NPZ that
    ``--planner-profile-data`` reads (keys ``prefill_isl``, ``prefill_ttft_ms``,
    ``decode_active_kv_tokens``, ``decode_context_length``, ``decode_itl``): a pass's prefill
    time for 1 … ``max_batched_tokens`` new tokens, and a decode step's time per active-KV level.
    The mocker's decode table also has a context-length axis; the profile's step time does not
    depend on it, so every column is the same."""
    import numpy as np

    isl = np.linspace(1, max(profile.max_batched_tokens, 2), 256)
    kv = np.linspace(0, capacity_tokens, 65)
    ctx = np.linspace(1, capacity_tokens, 9)
    itl = np.array([[profile.decode_step_ms.ms(k / capacity_tokens)] * len(ctx) for k in kv])
    target = Path(path)
    with open(target, "wb") as fh:
        np.savez(
            fh,
            prefill_isl=isl,
            prefill_ttft_ms=np.array([profile.prefill_ms.ms(x) for x in isl]),
            decode_active_kv_tokens=kv,
            decode_context_length=ctx,
            decode_itl=itl,
        )
    return target


def mocker_args(
    profile: EngineProfile,
    capacity_tokens: int,
    *,
    speedup_ratio: float = 1.0,
    tables: str | Path | None = None,
) -> list[str]:
    """The ``python -m dynamo.mocker`` flags that make a mocker worker follow ``profile``.

    The mocker's timing is its built-in polynomial divided by ``--speedup-ratio``; a profile whose
    curves are a common multiple ``k`` of the mocker preset's runs with ratio ``speedup_ratio / k``.
    Any other profile is written as interpolation tables to ``tables`` (an ``.npz`` path, see
    :func:`write_mocker_tables`) and passed as ``--planner-profile-data``; without ``tables`` it
    raises :class:`InputError`.

    Examples
    --------
    >>> mocker_args(PRESETS["mocker"], 3200)
    ['--block-size', '16', '--num-gpu-blocks-override', '200', '--max-num-seqs', '256', \
'--max-num-batched-tokens', '8192', '--speedup-ratio', '1']
    """
    base = PRESETS["mocker"]
    scale = _common_multiple(profile, base)
    blocks = capacity_tokens // profile.block_size
    if blocks < 1:
        raise InputError(
            f"capacity {capacity_tokens} tokens is less than one block of {profile.block_size}"
        )
    if scale is None and tables is None:
        raise InputError(
            f"engine profile {profile.name!r}: its timing is not a multiple of the mocker's "
            "polynomial, so flags alone cannot express it (give a path for its tables)"
        )
    flags = [
        "--block-size", str(profile.block_size),
        "--num-gpu-blocks-override", str(blocks),
        "--max-num-seqs", str(profile.max_num_seqs),
        "--max-num-batched-tokens", str(profile.max_batched_tokens),
    ]  # fmt: skip
    if scale is not None:
        return [*flags, "--speedup-ratio", f"{speedup_ratio / scale:g}"]
    assert tables is not None
    write_mocker_tables(profile, capacity_tokens, tables)
    return [*flags, "--speedup-ratio", f"{speedup_ratio:g}", "--planner-profile-data",
            str(tables)]  # fmt: skip


def _common_multiple(profile: EngineProfile, base: EngineProfile) -> float | None:
    pairs = []
    for mine, theirs in ((profile.prefill_ms, base.prefill_ms),
                         (profile.decode_step_ms, base.decode_step_ms)):  # fmt: skip
        pairs += [(mine.quadratic, theirs.quadratic), (mine.linear, theirs.linear),
                  (mine.constant, theirs.constant), (mine.min, theirs.min)]  # fmt: skip
    scale = profile.prefill_ms.constant / base.prefill_ms.constant
    if scale <= 0:
        return None
    for mine, theirs in pairs:
        if abs(mine - scale * theirs) > 1e-9 * max(1.0, abs(mine)):
            return None
    return scale
