"""The program-aware, OpenAI-compatible proxy: ``tsched agents serve``.

It sits in front of N engine replicas (each an OpenAI-compatible endpoint: a Dynamo frontend
with its own worker, or a bare vLLM/SGLang server) and sends every agent call through a
:class:`~tsched.agentic.core.ProgramScheduler`. aiohttp serves and proxies in one dependency
(client and server share the event loop and its timeouts; Dynamo already installs it), and
prometheus-client writes ``/metrics``.

Endpoints:

- ``POST /v1/chat/completions``, ``POST /v1/completions``: forwarded to the chosen replica,
  streaming passed through. The program is named by ``program_id`` in the body (top level or
  inside ``extra_body``; removed before forwarding) or by the ``x-dynamo-session-id`` header; a
  call without one is a one-call program. ``x-dynamo-session-final: true`` releases the program
  after this call's answer (the call itself is served).
- ``GET /programs``: the scheduler's programs, queue, replicas and counters.
- ``POST /programs/release`` ``{"program_id": …}`` → ``{"program_id": …, "released": bool}``.
- ``GET /health``: ``{"status": "ok"|"degraded", …}`` (503 when no replica is up).
- ``GET /metrics``: Prometheus text.
- ``GET /v1/models``: from the first replica that is up.

A replica is an OpenAI base URL, or ``URL#instance=ID``: one worker behind a Dynamo frontend
that serves several, reached by pinning each call to it (``nvext.backend_instance_id``, which
the frontend honours in every router mode). So one frontend over shared workers serves the
proxy and Dynamo's own routers alike. :func:`dynamo_backends` lists them from the frontend's
``/health``; a pinned worker the frontend stops listing is marked down (its programs resume on
the others) and comes back when it is listed again, or under its new instance id after a restart.

Safety: binds 127.0.0.1 unless told otherwise; an optional bearer token (every endpoint but
``/health``); request bodies above ``max_body_bytes`` get 413; every backend call has a connect
and a total timeout; errors are JSON ``{"error": {"message", "type"}}``. The scheduler runs on the
event loop and nothing awaits between its decision and the send, so a pause cannot race a call.
A client that disconnects while its call waits or runs has the call aborted in the scheduler (the
program acts again and its idle TTL runs). A replica that refuses connections is marked down —
its programs are queued for the others — and probed until it answers again. Shutdown fails the
calls still waiting with 503 and drains those in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tsched.agentic.core import ProgramScheduler, SchedulerConfig, Wakeups
from tsched.agentic.engine import EngineProfile
from tsched.errors import ExecutorError, InputError

__all__ = [
    "ProxySettings",
    "discover_capacity",
    "dynamo_backends",
    "make_app",
    "serve",
    "split_backend",
]

log = logging.getLogger(__name__)

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


def _error(status: int, message: str, kind: str, **extra: Any) -> Any:
    from aiohttp import web

    body = {"error": {"message": message, "type": kind, **extra}}
    return web.json_response(body, status=status)


def _usage(data: Any) -> tuple[int, int, int] | None:
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


class _State:
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

    async def instance_listed(self, replica: int) -> bool:
        """Whether the frontend still lists pinned ``replica``'s instance (True when the
        frontend cannot tell)."""
        import aiohttp

        from tsched.backends.dynamo import serving_instances

        base, pin = self.targets[replica]
        try:
            async with self.session.get(
                base + "/health", timeout=aiohttp.ClientTimeout(total=self.settings.connect_timeout)
            ) as resp:
                if resp.status != 200:
                    return True
                return pin in serving_instances(await resp.read())
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return True

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
                    fut.set_exception(_Withdrawn(message, 503, "no_backend"))
            self.waiting.pop(pid, None)


def make_app(settings: ProxySettings) -> Any:
    """The aiohttp application of the proxy (the one factory; tests and ``serve`` use it)."""
    from aiohttp import web

    state = _State(settings)
    app = web.Application(
        client_max_size=settings.max_body_bytes, middlewares=[_middleware_factory()]
    )
    app[_state_key()] = state
    app.router.add_post("/v1/chat/completions", _completions)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/programs", _programs)
    app.router.add_post("/programs/release", _release)
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    app.on_startup.append(_startup)
    app.on_shutdown.append(_shutdown)
    app.on_cleanup.append(_cleanup)
    return app


_KEY: Any = None


def _state_key() -> Any:
    global _KEY
    if _KEY is None:
        from aiohttp import web

        _KEY = web.AppKey("tsched_agents_state", _State)
    return _KEY


def state_of(app: Any) -> _State:
    """The proxy's running state (scheduler, counters) of an app made by :func:`make_app`."""
    return app[_state_key()]


def _state(request: Any) -> _State:
    return state_of(request.app)


async def _startup(app: Any) -> None:
    import aiohttp

    state = state_of(app)
    state.session = aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(
            total=state.settings.backend_timeout, connect=state.settings.connect_timeout
        ),
        connector=aiohttp.TCPConnector(limit=0),
    )
    state.tasks.append(asyncio.create_task(state.ticker()))


async def _shutdown(app: Any) -> None:
    state = state_of(app)
    state.closing = True
    for futures in state.waiting.values():
        for fut in futures:
            if not fut.done():
                fut.set_exception(_Withdrawn("the proxy is shutting down"))
    state.waiting.clear()


async def _cleanup(app: Any) -> None:
    state = state_of(app)
    for task in state.tasks:
        task.cancel()
    for task in state.tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    if state.session is not None:
        await state.session.close()


def _middleware_factory() -> Any:
    from aiohttp import web

    @web.middleware
    async def middleware(request: Any, handler: Any) -> Any:
        state = _state(request)
        token = state.settings.token
        if token and request.path != "/health":
            if request.headers.get("Authorization", "") != f"Bearer {token}":
                return _error(401, "missing or wrong bearer token", "unauthorized")
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return _error(
                413,
                f"request body larger than {state.settings.max_body_bytes} bytes",
                "request_too_large",
            )
        except web.HTTPException as exc:
            if exc.status >= 400:
                return _error(exc.status, exc.reason, "http_error")
            raise

    return middleware


def _program_of(request: Any, body: dict[str, Any]) -> tuple[str, bool]:
    """The program id and whether the call carries it (else an anonymous one-call program)."""
    pid = body.pop("program_id", None)
    extra = body.get("extra_body")
    if isinstance(extra, dict) and "program_id" in extra:
        pid = pid if pid is not None else extra.get("program_id")
        extra.pop("program_id", None)
        if not extra:
            body.pop("extra_body")
    if pid is None:
        pid = request.headers.get(SESSION_HEADER)
    if pid is None or str(pid).strip() == "":
        return f"anon-{uuid.uuid4().hex}", False
    return str(pid), True


class _Withdrawn(Exception):
    """A waiting call's program was released (409), the proxy is shutting down (503), or no
    backend has been up for a while (503 ``no_backend``)."""

    def __init__(self, message: str, status: int = 503, kind: str = "withdrawn") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


async def _completions(request: Any) -> Any:
    from aiohttp import web

    state = _state(request)
    if state.closing:
        return _error(503, "the proxy is shutting down", "unavailable")
    try:
        body = json.loads(await request.read())
    except web.HTTPRequestEntityTooLarge:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        return _error(400, f"request body is not JSON: {exc}", "invalid_request")
    if not isinstance(body, dict):
        return _error(400, "request body must be a JSON object", "invalid_request")
    pid, named = _program_of(request, body)
    final = request.headers.get(FINAL_HEADER, "").strip().lower() in ("1", "true", "yes")
    stream = bool(body.get("stream"))
    if stream:
        options = body.setdefault("stream_options", {})
        if isinstance(options, dict):
            options.setdefault("include_usage", True)
    sched = state.sched
    estimate = state.estimate_tokens(body)
    largest = max(state.settings.capacities)
    if estimate > largest:  # no replica could ever hold it: waiting would be forever
        return _error(
            400,
            f"the prompt is about {estimate} tokens, more than the largest replica's KV "
            f"capacity ({largest} tokens)",
            "context_too_large",
            program_id=pid,
        )
    state.counts["calls"] += 1
    wakeups = sched.request(pid, estimate)
    replica = next((r for p, r in wakeups if p == pid), None)
    state.wake([(p, r) for p, r in wakeups if p != pid])
    if replica is None:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        state.waiting.setdefault(pid, []).append(fut)
        state.counts["waited"] += 1
        started = time.monotonic()
        try:
            replica = await fut
        except asyncio.CancelledError:  # the client left while its call waited
            state.counts["disconnects"] += 1
            resumed = fut.done() and not fut.cancelled() and fut.exception() is None
            with contextlib.suppress(ValueError, KeyError):
                state.waiting[pid].remove(fut)
            state.wake(sched.abort(pid, sent=resumed))
            if not named:
                state.wake(sched.release(pid))
            raise
        except _Withdrawn as exc:
            return _error(exc.status, str(exc), exc.kind)
        finally:
            state.wait_seconds += time.monotonic() - started
    return await _forward(request, state, replica, pid, body, stream, named, final)


async def _forward(
    request: Any,
    state: _State,
    replica: int,
    pid: str,
    body: dict[str, Any],
    stream: bool,
    named: bool,
    final: bool,
) -> Any:
    """Send one call to ``replica``; every path tells the scheduler how the call ended (its
    usage, or an abort) exactly once."""
    import aiohttp
    from aiohttp import web

    backend = state.label(replica)
    base, pin = state.targets[replica]
    if pin is not None:
        nvext = body.get("nvext")
        body["nvext"] = {**(nvext if isinstance(nvext, dict) else {}), "backend_instance_id": pin}
    usage: tuple[int, int, int] | None = None
    out: Any = None
    gone = False
    try:
        async with state.session.post(base + request.path, json=body) as resp:
            if not stream or resp.status != 200:
                payload = await resp.read()
                if resp.status == 200:
                    with contextlib.suppress(ValueError):
                        usage = _usage(json.loads(payload))
                elif pin is not None and not await state.instance_listed(replica):
                    gone = True  # the frontend refuses a pin to a worker it no longer lists
                elif resp.status >= 500:
                    state.counts["errors"] += 1
                out = web.Response(
                    body=payload,
                    status=resp.status,
                    content_type=resp.content_type or "application/json",
                )
            else:
                out = web.StreamResponse(status=200)
                out.content_type = "text/event-stream"
                await out.prepare(request)
                pending = b""
                async for chunk in resp.content.iter_any():
                    await out.write(chunk)
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.startswith(b"data:") and b'"usage"' in line:
                            with contextlib.suppress(ValueError):
                                usage = _usage(json.loads(line[5:].strip())) or usage
                await out.write_eof()
    except asyncio.CancelledError:  # the client left mid-call
        state.counts["disconnects"] += 1
        _ended(state, pid, None, release=not named)
        raise
    except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError) as exc:
        return _replica_lost(state, replica, pid, named, f"{exc.__class__.__name__}: {exc}")
    except asyncio.TimeoutError:
        state.counts["errors"] += 1
        _ended(state, pid, None, release=not named)
        limit = state.settings.backend_timeout
        return _error(
            504, f"backend {backend} did not answer within {limit:g} s", "backend_timeout",
            program_id=pid,
        )  # fmt: skip
    except (aiohttp.ClientError, ConnectionResetError) as exc:
        state.counts["errors"] += 1
        _ended(state, pid, None, release=not named)
        if out is not None and out.prepared:  # the stream broke after it started
            return out
        return _error(502, f"backend {backend} failed: {exc}", "backend_error", program_id=pid)
    if gone:
        return _replica_lost(state, replica, pid, named, "its worker left the frontend")
    if usage is not None:
        state.learn_ratio(body, usage[0])
    _ended(state, pid, usage, release=final or not named)
    state.counts["released"] += int(final and named)
    return out


def _replica_lost(state: _State, replica: int, pid: str, named: bool, why: str) -> Any:
    state.counts["errors"] += 1
    _ended(state, pid, None, release=not named)
    state.mark_down(replica)
    return _error(
        502,
        f"backend {state.label(replica)} failed ({why}); the program resumes on another replica",
        "backend_unavailable",
        program_id=pid,
    )


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


def _ended(state: _State, pid: str, usage: tuple[int, int, int] | None, *, release: bool) -> None:
    sched = state.sched
    state.wake(sched.response(pid, *usage) if usage is not None else sched.abort(pid))
    if release:
        state.wake(sched.release(pid))


async def _models(request: Any) -> Any:
    import aiohttp
    from aiohttp import web

    state = _state(request)
    for i, (url, _) in enumerate(state.targets):
        if not state.sched.replicas[i].up:
            continue
        try:
            async with state.session.get(url + "/v1/models") as resp:
                return web.Response(
                    body=await resp.read(), status=resp.status, content_type="application/json"
                )
        except (aiohttp.ClientError, asyncio.TimeoutError):
            continue
    return _error(503, "no backend answered /v1/models", "unavailable")


async def _programs(request: Any) -> Any:
    from aiohttp import web

    return web.json_response(_state(request).sched.snapshot())


async def _release(request: Any) -> Any:
    from aiohttp import web

    state = _state(request)
    try:
        body = await request.json()
    except ValueError:
        return _error(400, "request body is not JSON", "invalid_request")
    pid = body.get("program_id") if isinstance(body, dict) else None
    if not isinstance(pid, (str, int)) or str(pid) == "":
        return _error(400, 'expected {"program_id": "<id>"}', "invalid_request")
    known = str(pid) in state.sched.programs
    state.wake(state.sched.release(str(pid)))
    for fut in state.waiting.pop(str(pid), []):
        if not fut.done():
            fut.set_exception(
                _Withdrawn(f"program {pid!r} was released while its call waited", 409)
            )
    state.counts["released"] += int(known)
    return web.json_response({"program_id": str(pid), "released": known})


async def _health(request: Any) -> Any:
    from aiohttp import web

    state = _state(request)
    up = [r.up for r in state.sched.replicas]
    status = "ok" if all(up) else ("degraded" if any(up) else "down")
    body = {
        "status": status,
        "policy": state.settings.policy,
        "regime": state.sched.regime,
        "backends": [{"url": state.label(i), "up": ok} for i, ok in enumerate(up)],
        "programs": len(state.sched.programs),
        "queued": len(state.sched.queue),
        "waiting_calls": sum(len(v) for v in state.waiting.values()),
    }
    return web.json_response(body, status=200 if any(up) else 503)


async def _metrics(request: Any) -> Any:
    from aiohttp import web
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    state = _state(request)
    sched = state.sched

    class Collector:
        def collect(self) -> Any:
            g = GaugeMetricFamily("tsched_agents_programs", "programs by state", labels=["state"])
            for name in ("active", "paused"):
                g.add_metric([name], sum(p.state == name for p in sched.programs.values()))
            yield g
            rep = GaugeMetricFamily(
                "tsched_agents_replica_used_tokens", "tokens counted per replica",
                labels=["backend"],
            )  # fmt: skip
            cap = GaugeMetricFamily(
                "tsched_agents_replica_capacity_tokens", "KV capacity per replica",
                labels=["backend"],
            )  # fmt: skip
            upg = GaugeMetricFamily("tsched_agents_replica_up", "1 when up", labels=["backend"])
            fly = GaugeMetricFamily(
                "tsched_agents_replica_inflight_tokens",
                "prompt + answer tokens of the calls in flight per replica (the call gate's count)",
                labels=["backend"],
            )  # fmt: skip
            for i, url in enumerate(state.settings.backends):
                fly.add_metric([url], sched.inflight_tokens(i))
                rep.add_metric([url], sched.used_tokens(i))
                cap.add_metric([url], sched.replicas[i].capacity)
                upg.add_metric([url], 1.0 if sched.replicas[i].up else 0.0)
            yield rep
            yield cap
            yield upg
            yield fly
            yield GaugeMetricFamily(
                "tsched_agents_waiting_calls",
                "calls waiting for their program's resume or at the call gate",
                value=sum(len(v) for v in state.waiting.values()),
            )  # fmt: skip
            for key, value in sched.stats.items():
                yield CounterMetricFamily(f"tsched_agents_{key}", f"scheduler {key}", value=value)
            for key, value in state.counts.items():
                yield CounterMetricFamily(f"tsched_agents_proxy_{key}", f"proxy {key}", value=value)
            yield CounterMetricFamily(
                "tsched_agents_wait_seconds", "seconds calls waited in the queue",
                value=state.wait_seconds,
            )  # fmt: skip

    registry = CollectorRegistry()
    registry.register(Collector())  # type: ignore[arg-type]
    return web.Response(body=generate_latest(registry), content_type="text/plain")


_CACHE_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_DYN_BLOCKS = re.compile(r"^dynamo_frontend_model_total_kv_blocks\{[^}]*\}\s+([0-9.e+]+)", re.M)
_DYN_BLOCK = re.compile(r"^dynamo_frontend_model_kv_cache_block_size\{[^}]*\}\s+([0-9.e+]+)", re.M)


def capacity_from_metrics(text: str) -> int | None:
    """KV capacity in tokens from a backend's Prometheus text: vLLM's ``cache_config_info``
    (``num_gpu_blocks × block_size``) or a Dynamo frontend's model gauges; None if neither."""
    match = _CACHE_INFO.search(text)
    if match:
        labels = dict(_LABEL.findall(match.group(1)))
        try:
            blocks = int(float(labels["num_gpu_blocks"]))
            size = int(float(labels["block_size"]))
        except (KeyError, ValueError):
            blocks = size = 0
        if blocks > 0 and size > 0:
            return blocks * size
    blocks_m, size_m = _DYN_BLOCKS.search(text), _DYN_BLOCK.search(text)
    if blocks_m and size_m:
        total = int(float(blocks_m.group(1))) * int(float(size_m.group(1)))
        return total if total > 0 else None
    return None


def discover_capacity(url: str, timeout: float = 10.0) -> int:
    """Read a backend's KV capacity (tokens) from its ``/metrics``; :class:`InputError` saying
    to pass ``--capacity-tokens`` when the endpoint has no such figure."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/metrics", timeout=timeout) as resp:
            text = resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        raise InputError(
            f"--backend {url}: cannot read /metrics for its KV capacity ({exc}); "
            "pass --capacity-tokens"
        ) from None
    capacity = capacity_from_metrics(text)
    if capacity is None:
        raise InputError(
            f"--backend {url}: /metrics has no KV capacity (vllm:cache_config_info or "
            "dynamo_frontend_model_total_kv_blocks); pass --capacity-tokens"
        )
    return capacity


async def start(settings: ProxySettings) -> tuple[Any, str]:
    """Start the proxy on the running loop; returns (runner, base URL). ``runner.cleanup()``
    stops it."""
    from aiohttp import web

    app = make_app(settings)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=30.0)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    try:
        await site.start()
    except OSError as exc:  # nothing is left open: the session and the ticker go with the app
        await runner.cleanup()
        raise ExecutorError(
            f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}"
        ) from None
    port = settings.port
    if port == 0:
        port = runner.addresses[0][1]
    return runner, f"http://{settings.host}:{port}"


def serve(settings: ProxySettings, *, ready: Any = None) -> None:
    """Run the proxy until SIGINT/SIGTERM; ``ready(url)`` is called once it listens."""
    import signal

    async def main() -> None:
        runner, url = await start(settings)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        if ready is not None:
            ready(url)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())


def parse_capacities(values: Sequence[int] | None, backends: Sequence[str]) -> tuple[int, ...]:
    """One capacity for all backends, one per backend, or (None) read from each backend."""
    if not values:
        return tuple(discover_capacity(split_backend(b)[0]) for b in backends)
    if len(values) == 1:
        return tuple(values) * len(backends)
    if len(values) != len(backends):
        raise InputError(
            f"--capacity-tokens: {len(values)} values for {len(backends)} backends "
            "(give one for all, or one per backend)"
        )
    return tuple(values)
