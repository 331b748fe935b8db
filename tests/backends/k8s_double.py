"""A loopback test double of the Kubernetes API: the REST subset the KAI adapter uses.

This is not Kubernetes and not KAI. It is a small HTTP server (stdlib) that speaks the same
wire contract as kube-apiserver for the calls tsched makes, so the adapter is exercised through
the real ``kubernetes`` Python client end to end:

* create / get / list / delete for pods, services, PodGroups (``scheduling.run.ai/v2alpha2``),
  queues (``scheduling.run.ai/v2``, cluster-scoped), nodes, and Dynamic Resource Allocation's
  ResourceClaims (namespaced) and ResourceSlices (cluster-scoped, ``resource.k8s.io/v1``);
  404 NotFound, 409 AlreadyExists, 401 without the bearer token;
* ``?watch=true`` list streams as chunked newline-delimited JSON events from a
  ``resourceVersion``, ended after ``timeoutSeconds``; a version older than the compaction
  point gets the ``ERROR`` event with code 410 (Expired), as the real server sends;
* label selectors (``k=v,…``) and the ``spec.nodeName`` field selector;
* SelfSubjectAccessReview answering from a deny list;
* a toy gang scheduler: once all ``minMember`` pods of a PodGroup exist, each is bound to the
  node its affinity names (if that node exists) and runs, then succeeds (or fails, if its name
  is in ``fail_pods``) after ``run_seconds``.

What it proves: the adapter's requests, error handling, rollback and watch logic are right
against the API contract. What it cannot: how the real KAI Scheduler would place the pods.
"""

from __future__ import annotations

import copy
import json
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

TOKEN = "tsched-test-token"

# path prefix → (collection, namespaced)
_ROUTES = {
    ("api", "v1", "pods"): "pods",
    ("api", "v1", "services"): "services",
    ("api", "v1", "nodes"): "nodes",
    ("apis", "scheduling.run.ai/v2alpha2", "podgroups"): "podgroups",
    ("apis", "scheduling.run.ai/v2", "queues"): "queues",
    ("apis", "resource.k8s.io/v1", "resourceclaims"): "resourceclaims",
    ("apis", "resource.k8s.io/v1", "resourceslices"): "resourceslices",
}
_KINDS = {"pods": "Pod", "services": "Service", "nodes": "Node", "podgroups": "PodGroup",
          "queues": "Queue", "resourceclaims": "ResourceClaim",
          "resourceslices": "ResourceSlice"}  # fmt: skip


class ApiDouble:
    """State and behaviour of the double; ``url`` once started."""

    def __init__(self, run_seconds: float = 0.2) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.events: list[tuple[int, str, str, str, dict[str, Any]]] = []
        self.rv = 100
        self.compacted_before = 0
        self.cond = threading.Condition()
        self.run_seconds = run_seconds
        self.fail_pods: set[str] = set()
        self.deny: set[tuple[str, str]] = set()  # (verb, resource)
        self.fail_create: dict[str, tuple[int, int]] = {}  # collection → (nth create, status)
        self.creates: dict[str, int] = {}
        self.requests: list[tuple[str, str]] = []
        self.watch_streams = 0
        self.gone_sent = 0
        self._server: ThreadingHTTPServer | None = None
        self._timers: list[threading.Timer] = []

    # ------------------------------------------------------------------ state
    def _bump(self, obj: dict[str, Any]) -> int:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return self.rv

    def put(self, collection: str, obj: dict[str, Any], event: str = "ADDED") -> dict[str, Any]:
        with self.cond:
            meta = obj.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ"))
            ns = (
                meta.get("namespace", "")
                if collection not in ("nodes", "queues", "resourceslices")
                else ""
            )
            rv = self._bump(obj)
            self.objects[(collection, ns, meta["name"])] = obj
            self.events.append((rv, collection, ns, event, copy.deepcopy(obj)))
            self.cond.notify_all()
            return obj

    def remove(self, collection: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.cond:
            obj = self.objects.pop((collection, ns, name), None)
            if obj is not None:
                rv = self._bump(obj)
                self.events.append((rv, collection, ns, "DELETED", copy.deepcopy(obj)))
                self.cond.notify_all()
            return obj

    def add_node(self, name: str, gpus: int, labels: dict[str, str] | None = None,
                 unschedulable: bool = False) -> None:  # fmt: skip
        self.put(
            "nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name,
                             "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
                "spec": {"unschedulable": unschedulable},
                "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"}},
            },
        )  # fmt: skip

    def add_slice(self, node: str, devices: list[tuple[str, dict[str, Any]]],
                  driver: str = "gpu.nvidia.com") -> None:  # fmt: skip
        """A ResourceSlice publishing ``devices`` ((name, {attribute: value})) of ``node``, with
        attribute values typed as the API types them (int, string)."""

        def typed(value: Any) -> dict[str, Any]:
            return {"int": value} if isinstance(value, int) else {"string": str(value)}

        self.put(
            "resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-{driver}-{len(self.names('resourceslices'))}"},
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": name, "attributes": {k: typed(v) for k, v in attrs.items()}}
                        for name, attrs in devices
                    ],
                },
            },
        )

    def add_queue(self, name: str) -> None:
        self.put("queues", {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                            "metadata": {"name": name}, "spec": {}})  # fmt: skip

    def compact(self) -> None:
        """Forget history, as etcd compaction does: an unrelated write moves the version on,
        and a watch from any version before it gets 410 Gone (the current one still works)."""
        with self.cond:
            self.put("queues", {"metadata": {"name": "compaction-marker"}, "spec": {}})
            self.compacted_before = self.rv

    def names(self, collection: str) -> list[str]:
        return sorted(k[2] for k in self.objects if k[0] == collection)

    # ------------------------------------------------------------------ toy gang scheduler
    def _schedule(self, ns: str) -> None:
        for (col, pns, name), pg in list(self.objects.items()):
            if col != "podgroups" or pns != ns:
                continue
            members = [
                o for (c, n, _), o in list(self.objects.items())
                if c == "pods" and n == ns
                and o["metadata"].get("annotations", {}).get("pod-group-name") == name
            ]  # fmt: skip
            waiting = [p for p in members if not p["spec"].get("nodeName")]
            if not waiting or len(members) < int(pg["spec"]["minMember"]):
                continue
            for pod in waiting:
                node = _affinity_node(pod)
                if ("nodes", "", node) not in self.objects:
                    pg["status"] = {
                        "schedulingConditions": [
                            {
                                "type": "UnschedulableOnNodePool",
                                "reasons": [
                                    {"reason": "Unschedulable",
                                     "message": f"node {node} not found"}
                                ],
                            }
                        ]
                    }  # fmt: skip
                    pod["status"] = {
                        "phase": "Pending",
                        "conditions": [{"type": "PodScheduled", "status": "False",
                                        "reason": "Unschedulable",
                                        "message": f"node {node} not found"}],
                    }  # fmt: skip
                    self.put("pods", pod, "MODIFIED")
                    continue
                pod["spec"]["nodeName"] = node
                pod["status"] = {"phase": "Running", "conditions": [
                    {"type": "PodScheduled", "status": "True"}]}  # fmt: skip
                self.put("pods", pod, "MODIFIED")
                timer = threading.Timer(
                    self.run_seconds, self._finish, (ns, pod["metadata"]["name"])
                )
                timer.daemon = True
                self._timers.append(timer)
                timer.start()

    def _finish(self, ns: str, name: str) -> None:
        with self.cond:
            pod = self.objects.get(("pods", ns, name))
            if pod is None:
                return
            failed = name in self.fail_pods
            pod["status"] = {"phase": "Failed" if failed else "Succeeded"}
            if failed:
                pod["status"].update(reason="Error", message="exit code 1")
            self.put("pods", pod, "MODIFIED")

    # ------------------------------------------------------------------ server
    def start(self) -> str:
        double = self

        class Handler(_Handler):
            api = double

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}"

    def stop(self) -> None:
        for t in self._timers:
            t.cancel()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _affinity_node(pod: dict[str, Any]) -> str:
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    return terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0]


def _matches(obj: dict[str, Any], labels: dict[str, str], fields: dict[str, str]) -> bool:
    have = obj.get("metadata", {}).get("labels") or {}
    if any(have.get(k) != v for k, v in labels.items()):
        return False
    for key, value in fields.items():
        cur: Any = obj
        for part in key.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if (cur or "") != value:
            return False
    return True


def _selector(text: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in text.split(",") if p) if text else {}


class _Handler(BaseHTTPRequestHandler):
    api: ApiDouble
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    # -------------------------------------------------------------- plumbing
    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else None

    def _send(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(code, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                          "status": "Failure", "message": message, "reason": reason,
                          "code": code})  # fmt: skip

    def _route(self) -> tuple[str, str, str | None, dict[str, list[str]]] | None:
        """(collection, namespace, name, query) of the request path."""
        url = urlparse(self.path)
        parts = [p for p in url.path.split("/") if p]
        query = parse_qs(url.query)
        if not parts:
            return None
        if parts[0] == "api":
            root, rest = ("api", parts[1]), parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            root, rest = ("apis", f"{parts[1]}/{parts[2]}"), parts[3:]
        else:
            return None
        ns = ""
        if len(rest) >= 2 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest:
            return None
        collection = _ROUTES.get((*root, rest[0]))
        if collection is None:
            if (*root, rest[0]) == ("apis", "authorization.k8s.io/v1", "selfsubjectaccessreviews"):
                return "ssar", ns, None, query
            return None
        return collection, ns, rest[1] if len(rest) > 1 else None, query

    def _auth(self) -> bool:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._body()
            self._status(401, "Unauthorized", "Unauthorized")
            return False
        return True

    # -------------------------------------------------------------- verbs
    def do_GET(self) -> None:  # noqa: N802
        if not self._auth():
            return
        route = self._route()
        self.api.requests.append(("GET", self.path))
        if route is None:
            self._status(404, "NotFound", f"no route {self.path}")
            return
        collection, ns, name, query = route
        if name is not None:
            obj = self.api.objects.get((collection, ns, name))
            if obj is None:
                self._status(404, "NotFound", f'{collection} "{name}" not found')
            else:
                self._send(200, obj)
            return
        labels = _selector(query.get("labelSelector", [""])[0])
        fields = _selector(query.get("fieldSelector", [""])[0])
        if query.get("watch", ["false"])[0] in ("true", "1"):
            self._watch(collection, ns, labels, fields, query)
            return
        with self.api.cond:
            items = [
                o
                for (c, n, _), o in self.api.objects.items()
                if c == collection and (not ns or n == ns) and _matches(o, labels, fields)
            ]
            rv = str(self.api.rv)
        self._send(200, {"kind": f"{_KINDS[collection]}List", "apiVersion": "v1",
                         "metadata": {"resourceVersion": rv}, "items": items})  # fmt: skip

    def do_POST(self) -> None:  # noqa: N802
        if not self._auth():
            return
        route = self._route()
        body = self._body()
        self.api.requests.append(("POST", self.path))
        if route is None:
            self._status(404, "NotFound", f"no route {self.path}")
            return
        collection, ns, _name, _q = route
        if collection == "ssar":
            attrs = body["spec"]["resourceAttributes"]
            allowed = (attrs["verb"], attrs["resource"]) not in self.api.deny
            self._send(201, {**body, "status": {"allowed": allowed}})
            return
        count = self.api.creates[collection] = self.api.creates.get(collection, 0) + 1
        fail = self.api.fail_create.get(collection)
        if fail and fail[0] == count:
            self._status(fail[1], "InternalError", f"injected failure on create #{count}")
            return
        name = body["metadata"]["name"]
        if (collection, ns, name) in self.api.objects:
            self._status(409, "AlreadyExists", f'{collection} "{name}" already exists')
            return
        body["metadata"]["namespace"] = ns
        if collection == "pods":
            body.setdefault("status", {"phase": "Pending"})
        with self.api.cond:
            obj = self.api.put(collection, body)
            if collection in ("pods", "podgroups"):
                self.api._schedule(ns)
        self._send(201, obj)

    def do_DELETE(self) -> None:  # noqa: N802
        if not self._auth():
            return
        self._body()  # read it, or the client's connection breaks
        route = self._route()
        self.api.requests.append(("DELETE", self.path))
        if route is None or route[2] is None:
            self._status(404, "NotFound", f"no route {self.path}")
            return
        collection, ns, name, _q = route
        obj = self.api.remove(collection, ns, name)
        if obj is None:
            self._status(404, "NotFound", f'{collection} "{name}" not found')
        else:
            self._send(200, obj)

    # -------------------------------------------------------------- watch
    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, collection: str, ns: str, labels: dict[str, str], fields: dict[str, str],
               query: dict[str, list[str]]) -> None:  # fmt: skip
        api = self.api
        api.watch_streams += 1
        timeout = float(query.get("timeoutSeconds", ["30"])[0])
        start = int(query.get("resourceVersion", ["0"])[0] or 0)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(kind: str, obj: dict[str, Any]) -> None:
            self._chunk((json.dumps({"type": kind, "object": obj}) + "\n").encode())

        deadline = time.monotonic() + timeout
        try:
            with api.cond:
                if start and start < api.compacted_before:
                    api.gone_sent += 1
                    send("ERROR", {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                   "message": f"too old resource version: {start}",
                                   "reason": "Expired", "code": 410})  # fmt: skip
                    self._chunk(b"")
                    return
                if not start:
                    for (c, n, _), o in list(api.objects.items()):
                        if c == collection and (not ns or n == ns) and _matches(o, labels, fields):
                            send("ADDED", o)
                    start = api.rv
                while True:
                    for rv, c, n, kind, o in api.events:
                        if (
                            rv > start
                            and c == collection
                            and (not ns or n == ns)
                            and _matches(o, labels, fields)
                        ):
                            send(kind, o)
                    start = max(start, api.rv)
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    api.cond.wait(left)
            self._chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            pass
