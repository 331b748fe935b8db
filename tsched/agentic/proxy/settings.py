"""The proxy's settings and the replica addresses it is given (``URL`` or ``URL#instance=ID``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tsched.agentic.core import SchedulerConfig
from tsched.agentic.engine import EngineProfile
from tsched.errors import InputError

__all__ = ["COMPLETION_PATHS", "SESSION_HEADER", "FINAL_HEADER", "split_backend", "ProxySettings"]


COMPLETION_PATHS = ("/v1/chat/completions", "/v1/completions")


SESSION_HEADER = "x-dynamo-session-id"


FINAL_HEADER = "x-dynamo-session-final"


_PIN = re.compile(r"^instance=(\d+)$")


def split_backend(spec: str) -> tuple[str, int | None]:
    """``URL`` or ``URL#instance=ID`` → (base URL, Dynamo worker instance id or None)."""
    url, sep, pin = spec.partition("#")
    url = url.rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise InputError(f"--backend {spec!r}: expected http://HOST:PORT[#instance=ID]")
    if not sep:
        return url, None
    match = _PIN.match(pin)
    if match is None:
        raise InputError(
            f"--backend {spec!r}: after '#' expected instance=<Dynamo worker instance id, an "
            f"unsigned integer>, got {pin!r}"
        )
    value = int(match.group(1))
    if value >= 1 << 64:
        raise InputError(f"--backend {spec!r}: instance id {value} does not fit 64 bits")
    return url, value


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """Everything the proxy needs; ``capacities`` are KV tokens per backend, in order."""

    backends: tuple[str, ...]
    capacities: tuple[int, ...]
    policy: str = "tsched"
    host: str = "127.0.0.1"
    port: int = 8300
    token: str | None = None
    max_body_bytes: int = 8 << 20
    connect_timeout: float = 10.0
    backend_timeout: float = 600.0
    probe_seconds: float = 1.0
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    profile: EngineProfile | None = None
    dynamo_component: str = "backend"

    def __post_init__(self) -> None:
        if not self.backends:
            raise InputError("the proxy needs at least one --backend URL")
        for spec in self.backends:
            split_backend(spec)
        if len(self.capacities) != len(self.backends):
            raise InputError(
                f"{len(self.capacities)} capacities for {len(self.backends)} backends; give one "
                "--capacity-tokens for all or one per backend"
            )
        if self.max_body_bytes < 1024:
            raise InputError(f"max_body_bytes must be >= 1024, got {self.max_body_bytes}")
        for name in ("connect_timeout", "backend_timeout", "probe_seconds"):
            if not getattr(self, name) > 0:
                raise InputError(f"{name} must be > 0, got {getattr(self, name)!r}")
