"""The proxy's HTTP application (aiohttp): its endpoints, the forwarding of calls to the chosen
replica, start-up, shutdown and :func:`serve`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Any

from tsched.agentic.proxy.settings import FINAL_HEADER, SESSION_HEADER, ProxySettings
from tsched.agentic.proxy.state import ProxyState, Withdrawn, error_response, usage_of
from tsched.errors import ExecutorError

#: Seconds a pinned call's 5xx waits for the frontend to stop listing the call's worker before
#: the error is passed on as the engine's own: a worker that dies mid-call fails the call a
#: moment before its instance leaves the frontend's list.
LOST_GRACE = 3.0

__all__ = ["make_app", "state_of", "start", "serve"]


def make_app(settings: ProxySettings) -> Any:
    """The aiohttp application of the proxy (the one factory; tests and ``serve`` use it)."""
    from aiohttp import web

    state = ProxyState(settings)
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

        _KEY = web.AppKey("tsched_agents_state", ProxyState)
    return _KEY


def state_of(app: Any) -> ProxyState:
    """The proxy's running state (scheduler, counters) of an app made by :func:`make_app`."""
    return app[_state_key()]


def _state(request: Any) -> ProxyState:
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
                fut.set_exception(Withdrawn("the proxy is shutting down"))
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
                return error_response(401, "missing or wrong bearer token", "unauthorized")
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return error_response(
                413,
                f"request body larger than {state.settings.max_body_bytes} bytes",
                "request_too_large",
            )
        except web.HTTPException as exc:
            if exc.status >= 400:
                return error_response(exc.status, exc.reason, "http_error")
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


async def _completions(request: Any) -> Any:
    from aiohttp import web

    state = _state(request)
    if state.closing:
        return error_response(503, "the proxy is shutting down", "unavailable")
    try:
        body = json.loads(await request.read())
    except web.HTTPRequestEntityTooLarge:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        return error_response(400, f"request body is not JSON: {exc}", "invalid_request")
    if not isinstance(body, dict):
        return error_response(400, "request body must be a JSON object", "invalid_request")
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
        return error_response(
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
        except Withdrawn as exc:
            return error_response(exc.status, str(exc), exc.kind)
        finally:
            state.wait_seconds += time.monotonic() - started
    return await _forward(request, state, replica, pid, body, stream, named, final)


async def _forward(
    request: Any,
    state: ProxyState,
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
                        usage = usage_of(json.loads(payload))
                elif pin is not None and not await state.instance_listed(
                    replica, grace=LOST_GRACE if resp.status >= 500 else 0.0
                ):
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
                                usage = usage_of(json.loads(line[5:].strip())) or usage
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
        return error_response(
            504, f"backend {backend} did not answer within {limit:g} s", "backend_timeout",
            program_id=pid,
        )  # fmt: skip
    except (aiohttp.ClientError, ConnectionResetError) as exc:
        state.counts["errors"] += 1
        _ended(state, pid, None, release=not named)
        if out is not None and out.prepared:  # the stream broke after it started
            return out
        return error_response(
            502, f"backend {backend} failed: {exc}", "backend_error", program_id=pid
        )
    if gone:
        return _replica_lost(state, replica, pid, named, "its worker left the frontend")
    if usage is not None:
        state.learn_ratio(body, usage[0])
    _ended(state, pid, usage, release=final or not named)
    state.counts["released"] += int(final and named)
    return out


def _replica_lost(state: ProxyState, replica: int, pid: str, named: bool, why: str) -> Any:
    state.counts["errors"] += 1
    _ended(state, pid, None, release=not named)
    state.mark_down(replica)
    return error_response(
        502,
        f"backend {state.label(replica)} failed ({why}); the program resumes on another replica",
        "backend_unavailable",
        program_id=pid,
    )


def _ended(
    state: ProxyState, pid: str, usage: tuple[int, int, int] | None, *, release: bool
) -> None:
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
    return error_response(503, "no backend answered /v1/models", "unavailable")


async def _programs(request: Any) -> Any:
    from aiohttp import web

    return web.json_response(_state(request).sched.snapshot())


async def _release(request: Any) -> Any:
    from aiohttp import web

    state = _state(request)
    try:
        body = await request.json()
    except ValueError:
        return error_response(400, "request body is not JSON", "invalid_request")
    pid = body.get("program_id") if isinstance(body, dict) else None
    if not isinstance(pid, (str, int)) or str(pid) == "":
        return error_response(400, 'expected {"program_id": "<id>"}', "invalid_request")
    known = str(pid) in state.sched.programs
    state.wake(state.sched.release(str(pid)))
    for fut in state.waiting.pop(str(pid), []):
        if not fut.done():
            fut.set_exception(Withdrawn(f"program {pid!r} was released while its call waited", 409))
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
            served = GaugeMetricFamily(
                "tsched_agents_program_service_seconds",
                "seconds each program's calls took, sent to answered (attained service)",
                labels=["program"],
            )  # fmt: skip
            paused = GaugeMetricFamily(
                "tsched_agents_program_longest_pause_seconds",
                "the longest one of each program's calls waited to be sent",
                labels=["program"],
            )  # fmt: skip
            for pid, prog in sched.programs.items():
                served.add_metric([pid], prog.service)
                paused.add_metric([pid], prog.longest_pause)
            yield served
            yield paused
            yield GaugeMetricFamily(
                "tsched_agents_longest_pause_seconds",
                "the longest any call waited to be sent, released programs included",
                value=sched.longest_pause,
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
