"""The program-aware, OpenAI-compatible proxy: ``tsched agents serve``.

It sits in front of N engine replicas (each an OpenAI-compatible endpoint: a Dynamo frontend
with its own worker, or a bare vLLM/SGLang server) and sends every agent call through a
:class:`~tsched.agentic.core.ProgramScheduler`. aiohttp serves and proxies in one dependency
(client and server share the event loop and its timeouts; Dynamo already installs it), and
prometheus-client writes ``/metrics``.

Modules: :mod:`~tsched.agentic.proxy.settings` (settings, replica addresses),
:mod:`~tsched.agentic.proxy.state` (the scheduler, replicas and calls in flight),
:mod:`~tsched.agentic.proxy.capacity` (KV capacity from metrics) and
:mod:`~tsched.agentic.proxy.app` (the aiohttp endpoints, forwarding, start and shutdown).

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

from tsched.agentic.proxy.app import make_app, serve, start, state_of
from tsched.agentic.proxy.capacity import capacity_from_metrics, discover_capacity, parse_capacities
from tsched.agentic.proxy.settings import (
    COMPLETION_PATHS,
    FINAL_HEADER,
    SESSION_HEADER,
    ProxySettings,
    split_backend,
)
from tsched.agentic.proxy.state import (
    ProxyState,
    Withdrawn,
    dynamo_backends,
    error_response,
    usage_of,
)

__all__ = [
    "ProxySettings",
    "discover_capacity",
    "dynamo_backends",
    "make_app",
    "serve",
    "split_backend",
    "COMPLETION_PATHS",
    "SESSION_HEADER",
    "FINAL_HEADER",
    "ProxyState",
    "Withdrawn",
    "error_response",
    "usage_of",
    "capacity_from_metrics",
    "parse_capacities",
    "state_of",
    "start",
]
