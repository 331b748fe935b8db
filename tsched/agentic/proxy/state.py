"""The proxy's running state: the scheduler, the replicas (up, down, probed, pinned to Dynamo
workers) and the calls in flight; what every request handler shares."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from tsched.agentic.core import ProgramScheduler, Wakeups
from tsched.agentic.proxy.settings import ProxySettings, split_backend
from tsched.errors import InputError

__all__ = ["ProxyState", "Withdrawn", "error_response", "usage_of", "dynamo_backends"]

log = logging.getLogger(__name__)


def error_response(status: int, message: str, kind: str, **extra: Any) -> Any:
    from aiohttp import web

    body = {"error": {"message": message, "type": kind, **extra}}
    return web.json_response(body, status=status)


def usage_of(data: Any) -> tuple[int, int, int] | None:
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return (
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
        int(cached or 0),
    )


class Withdrawn(Exception):
    """A waiting call's program was released (409), the proxy is shutting down (503), or no
    backend has been up for a while (503 ``no_backend``)."""

    def __init__(self, message: str, status: int = 503, kind: str = "withdrawn") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


class ProxyState:
    """The running proxy: scheduler, waiting calls, HTTP session, counters."""

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self.targets = [split_backend(b) for b in settings.backends]
        self.sched = ProgramScheduler(
            list(settings.capacities),
            settings.policy,
            clock=time.monotonic,
            config=settings.config,
            profile=settings.profile,
        )
        self.waiting: dict[str, list[asyncio.Future[int]]] = {}
        self.session: Any = None
        self.tasks: list[asyncio.Task[Any]] = []
        self.probing: set[int] = set()
        self.closing = False
        self.chars_per_token = 4.0
        self.counts = {"calls": 0, "errors": 0, "waited": 0, "disconnects": 0, "released": 0,
                       "no_backend": 0}  # fmt: skip
        self.down_since: float | None = None  # since when no replica is up
        self.wait_seconds = 0.0

    def wake(self, wakeups: Wakeups) -> None:
        for pid, replica in wakeups:
            for fut in self.waiting.pop(pid, []):
                if not fut.done():
                    fut.set_result(replica)

    def estimate_tokens(self, body: dict[str, Any]) -> int:
        text = json.dumps(body.get("messages") or body.get("prompt") or "")
        return max(1, int(len(text) / self.chars_per_token))

    def learn_ratio(self, body: dict[str, Any], prompt_tokens: int) -> None:
        if prompt_tokens <= 0:
            return
        text = json.dumps(body.get("messages") or body.get("prompt") or "")
        sample = len(text) / prompt_tokens
        self.chars_per_token = 0.8 * self.chars_per_token + 0.2 * sample

    def mark_down(self, replica: int) -> None:
        self.wake(self.sched.set_replica_up(replica, False))
        if replica not in self.probing:
            self.probing.add(replica)
            self.tasks.append(asyncio.create_task(self._probe(replica)))

    async def _probe(self, replica: int) -> None:
        import aiohttp

        base, pin = self.targets[replica]
        url = base + ("/v1/models" if pin is None else "/health")
        try:
            while not self.closing:
                await asyncio.sleep(self.settings.probe_seconds)
                self.fail_if_no_backend()
                try:
                    async with self.session.get(
                        url, timeout=aiohttp.ClientTimeout(total=self.settings.connect_timeout)
                    ) as resp:
                        if resp.status != 200:
                            continue
                        if pin is not None and not self._repin(replica, await resp.read()):
                            continue
                        self.wake(self.sched.set_replica_up(replica, True))
                        log.info("backend %s is back", self.label(replica))
                        return
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    continue
        finally:
            self.probing.discard(replica)

    def label(self, replica: int) -> str:
        """How ``replica`` is named in messages: its URL, with its current pin."""
        base, pin = self.targets[replica]
        return base if pin is None else f"{base}#instance={pin}"

    def _repin(self, replica: int, health: bytes) -> bool:
        """A pinned replica is back when the frontend lists its instance again, or lists a
        worker (of component ``dynamo_component``) no other replica is pinned to: the engine
        restarted under a new instance id."""
        from tsched.backends.dynamo import serving_instances

        base, pin = self.targets[replica]
        if pin in serving_instances(health):
            return True
        listed = serving_instances(health, component=self.settings.dynamo_component)
        taken = {p for b, p in self.targets if b == base}
        free = sorted(listed - taken)
        if not free:
            return False
        self.targets[replica] = (base, free[0])
        log.info("replica %d re-pinned from instance %s to %s", replica, pin, free[0])
        return True

    async def instance_listed(self, replica: int, grace: float = 0.0) -> bool:
        """Whether the frontend still lists pinned ``replica``'s instance (True when the
        frontend cannot tell). With ``grace``, asked again every quarter second for that long
        while it is listed: a worker that dies mid-call can fail the call (a 5xx from the
        frontend) a moment before the frontend stops listing it."""
        import aiohttp

        from tsched.backends.dynamo import serving_instances

        base, pin = self.targets[replica]
        end = time.monotonic() + grace
        while True:
            try:
                async with self.session.get(
                    base + "/health",
                    timeout=aiohttp.ClientTimeout(total=self.settings.connect_timeout),
                ) as resp:
                    if resp.status == 200 and pin not in serving_instances(await resp.read()):
                        return False
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                pass
            if time.monotonic() >= end or self.closing:
                return True
            await asyncio.sleep(0.25)

    async def ticker(self) -> None:
        period = self.settings.config.tick_seconds
        while not self.closing:
            await asyncio.sleep(period)
            try:
                self.wake(self.sched.tick())
            except Exception:  # pragma: no cover - a bug; keep serving and say so
                log.exception("scheduler tick failed")

    def fail_if_no_backend(self) -> None:
        """Once every replica has been down for ``connect_timeout``, fail the calls waiting
        for one (503 ``no_backend``) instead of holding them until the probes find one: the
        clients learn at once, and their programs stay known, acting, for their next call.
        Checked by the probes of down replicas, on their schedule."""
        if any(r.up for r in self.sched.replicas):
            self.down_since = None
            return
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = now
        if now - self.down_since < self.settings.connect_timeout or not self.waiting:
            return
        message = (
            f"no backend is up: every replica has been down for {now - self.down_since:.0f} s "
            f"({', '.join(self.label(i) for i in range(len(self.targets)))})"
        )
        for pid, futures in list(self.waiting.items()):
            for fut in futures:
                if not fut.done():
                    self.counts["no_backend"] += 1
                    self.wake(self.sched.abort(pid, sent=False))
                    fut.set_exception(Withdrawn(message, 503, "no_backend"))
            self.waiting.pop(pid, None)


def dynamo_backends(
    frontend: str,
    *,
    namespace: str | None = None,
    replicas: int | None = None,
    component: str = "backend",
    timeout: float = 60.0,
) -> tuple[str, ...]:
    """One pinned backend (``URL#instance=ID``) per serving worker the Dynamo frontend at
    ``frontend`` lists, in instance-id order; with ``replicas``, waits (up to ``timeout``) until
    that many are listed. :class:`InputError` naming the frontend when none (or too few) are."""
    from tsched.backends.dynamo import wait_listed

    base = split_backend(frontend)[0]
    found, last = wait_listed(base, replicas, timeout, namespace=namespace, component=component)
    if not found or (replicas is not None and len(found) < replicas):
        want = f"{replicas}" if replicas is not None else "any"
        raise InputError(
            f"--dynamo-frontend {base}: wanted {want} serving workers"
            + (f" in namespace {namespace!r}" if namespace else "")
            + f" after {timeout:g} s, found {len(found)} ({last})"
        )
    return tuple(f"{base}#instance={i}" for i in sorted(found))
