"""NVIDIA Dynamo lifecycle: placement-aware replicas, Ray-owned GPUs, guarded engine processes.

A **service spec** (``tsched: dynamo/v1``) names the model, the engine (``vllm``, ``sglang``,
``trtllm`` or ``mocker``) and the pools — aggregated (decode replicas only) or disaggregated
(prefill replicas feeding decode replicas) — with TP per replica. From it:

1. :func:`service_workload` is the traffic the planner places: TP all-reduces inside each
   replica and the KV-cache transfer from prefill to decode replicas
   (:func:`tsched.workload.serving_traffic`). A plan keeps each TP group on NVLink and puts
   prefill replicas near the decode replicas they feed.
2. :func:`replicas_of` groups the plan's workers into replicas (one node each; a TP group cannot
   span nodes) and :func:`dynamo_processes` gives each its process: module and arguments,
   ``CUDA_VISIBLE_DEVICES`` from the planned GPUs, ports, and Dynamo's environment (namespace,
   discovery backend, request and event planes), plus the frontend process.
3. :func:`up` reserves the GPUs as one Ray placement group (a bundle per replica, pinned to its
   planned node and GPUs) and starts one **detached** Ray actor per replica — it owns the
   bundle and runs the replica's :mod:`~tsched.backends.guardian`, beating its lease — plus a
   frontend actor; it waits until every engine is healthy and the frontend lists the model and
   answers a real completion. Any failure tears down what it started. The service outlives the
   CLI call; :func:`status` and :func:`down` find it again by name.
4. With ``router: tsched`` (aggregated services), :func:`router_process` adds tsched's
   program-aware proxy (:mod:`tsched.agentic.proxy`) in front: one more guarded process, owned
   by a detached actor like the rest, started once the frontend lists every replica. It reaches
   each replica through the frontend pinned to that worker, so agents talk to the proxy and the
   proxy decides which replica runs each program's next call, and when.

If an actor dies (``ray.kill``, a crash, its node), its guardian gets SIGHUP from the kernel or
sees its lease expire and stops the engine: no orphan process on any path. Every guardian writes
a receipt of what ran and how it ended.

The defaults target one machine (file discovery under a shared work directory, TCP request
plane, ZMQ events on 127.0.0.1); for several hosts set ``discovery: {backend: etcd}`` and the
hosts in ``env``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tsched.errors import ExecutorError, InputError
from tsched.plan import Plan

__all__ = [
    "tiny_model_path",
    "tiny_model_files",
    "write_tiny_model",
    "ENGINES",
    "DynamoSpec",
    "Replica",
    "read_spec",
    "spec_from_dict",
    "service_workload",
    "replicas_of",
    "dynamo_processes",
    "router_process",
    "RouterSpec",
    "serving_instances",
    "wait_listed",
    "up",
    "status",
    "down",
]

log = logging.getLogger(__name__)

ENGINES = ("vllm", "sglang", "trtllm", "mocker")
RAY_NAMESPACE = "tsched"
_TP_FLAG = {"vllm": "--tensor-parallel-size", "sglang": "--tp", "trtllm": "--tensor-parallel-size"}


@dataclass(frozen=True)
class RouterSpec:
    """``router: tsched``: the program-aware proxy in front of the frontend.

    ``capacity_tokens`` is each replica's KV capacity (None: from the mocker's flags, else read
    by the proxy from the frontend's metrics); ``engine_profile`` a preset name or file.
    """

    policy: str = "tsched"
    host: str = "127.0.0.1"
    port: int = 8300
    capacity_tokens: int | None = None
    engine_profile: str | None = None
    tick_seconds: float = 1.0


@dataclass(frozen=True)
class DynamoSpec:
    """A served model (see the module docstring and ``models/services/``)."""

    name: str
    engine: str
    model_name: str
    model_path: str
    serving: Any  # tsched.workload.ServingSpec
    model: Any  # tsched.workload.ModelSpec
    namespace: str = "dynamo"
    frontend_host: str = "127.0.0.1"
    frontend_port: int = 8000
    discovery: str = "file"
    engine_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    restart: str = "on-failure"
    max_restarts: int = 3
    health_timeout: float = 120.0
    lease_timeout: float = 10.0
    router: RouterSpec | None = None

    @property
    def disaggregated(self) -> bool:
        return self.serving.prefill is not None


def spec_from_dict(data: Any, source: str = "dynamo spec") -> DynamoSpec:
    """Validate a ``dynamo/v1`` document; errors name the field."""
    from tsched.formats.check import Checker
    from tsched.formats.workload_yaml import serving_spec
    from tsched.workload import ModelSpec

    ck = Checker(source)
    doc = ck.mapping(
        data,
        "",
        required=("tsched", "name", "engine", "model", "serving"),
        optional=("tsched", "name", "engine", "model", "serving", "namespace", "frontend",
                  "discovery", "engine_args", "env", "restart", "description", "router"),
    )  # fmt: skip
    if doc["tsched"] != "dynamo/v1":
        raise ck.fail("tsched", f"expected 'dynamo/v1', got {doc['tsched']!r}")
    engine = ck.choice(doc["engine"], "engine", ENGINES)
    m = ck.mapping(doc["model"], "model", required=("name",),
                   optional=("name", "path", "params_b", "hidden", "layers"))  # fmt: skip
    if "path" not in m and engine != "mocker":
        raise ck.fail("model.path", f"required for engine {engine!r} (only the mocker runs "
                      "without one, on tsched's packaged tiny model)")  # fmt: skip
    model = ModelSpec(
        params_b=ck.number(m.get("params_b", 8.0), "model.params_b", positive=True),
        hidden=ck.integer(m.get("hidden", 4096), "model.hidden", minimum=1),
        layers=ck.integer(m.get("layers", 32), "model.layers", minimum=1),
    )
    front = ck.mapping(doc.get("frontend", {}), "frontend", optional=("host", "port"))
    disc = ck.mapping(doc.get("discovery", {}), "discovery", optional=("backend",))
    restart_keys = ("policy", "max_restarts", "health_timeout", "lease_timeout")
    restart = ck.mapping(doc.get("restart", {}), "restart", optional=restart_keys)
    args = ck.sequence(doc.get("engine_args", []), "engine_args")
    env = ck.mapping(doc.get("env", {}), "env", free_keys=True)
    from tsched.backends.guardian import RESTART_POLICIES

    serving = serving_spec(ck, doc["serving"])
    router = _router(ck, doc.get("router", "frontend"), engine, tuple(str(a) for a in args))
    if router is not None and serving.prefill is not None:
        raise ck.fail("router", "tsched routes aggregated services only (decode replicas, no "
                      "prefill pool): with a prefill pool the frontend must pair each call "
                      "with a prefill worker")  # fmt: skip
    return DynamoSpec(
        name=ck.string(doc["name"], "name"),
        engine=engine,
        model_name=ck.string(m["name"], "model.name"),
        model_path=ck.string(m["path"], "model.path") if "path" in m else str(tiny_model_path()),
        serving=serving,
        model=model,
        namespace=ck.string(doc.get("namespace", "dynamo"), "namespace"),
        frontend_host=ck.string(front.get("host", "127.0.0.1"), "frontend.host"),
        frontend_port=ck.integer(front.get("port", 8000), "frontend.port", minimum=0),
        discovery=ck.choice(disc.get("backend", "file"), "discovery.backend", ("file", "etcd")),
        engine_args=tuple(str(a) for a in args),
        env={str(k): str(v) for k, v in env.items()},
        restart=ck.choice(restart.get("policy", "on-failure"), "restart.policy", RESTART_POLICIES),
        max_restarts=ck.integer(restart.get("max_restarts", 3), "restart.max_restarts", minimum=0),
        health_timeout=ck.number(
            restart.get("health_timeout", 120.0), "restart.health_timeout", positive=True
        ),  # fmt: skip
        lease_timeout=ck.number(
            restart.get("lease_timeout", 10.0), "restart.lease_timeout", positive=True
        ),  # fmt: skip
        router=router,
    )


ROUTER_KINDS = ("frontend", "tsched")
#: The proxy's policies (``tsched.agentic.core.POLICIES``, a layer above; a test keeps the two
#: equal), named here so that a spec is checked when it is read.
ROUTER_POLICIES = ("pass-through", "round-robin", "sticky", "thunderagent", "tsched")


def _router(ck: Any, data: Any, engine: str, engine_args: tuple[str, ...]) -> RouterSpec | None:
    """``router``: ``frontend`` (Dynamo's own routing, the default), ``tsched``, or a mapping
    ``{kind, policy, host, port, capacity_tokens, engine_profile, tick}``."""
    if isinstance(data, str):
        data = {"kind": data}
    r = ck.mapping(data, "router", required=("kind",),
                   optional=("kind", "policy", "host", "port", "capacity_tokens",
                             "engine_profile", "tick"))  # fmt: skip
    if ck.choice(r["kind"], "router.kind", ROUTER_KINDS) == "frontend":
        if len(r) > 1:
            extra = sorted(k for k in r if k != "kind")
            raise ck.fail("router", f"{', '.join(extra)} apply to kind 'tsched' only")
        return None
    capacity = r.get("capacity_tokens")
    if capacity is not None:
        capacity = ck.integer(capacity, "router.capacity_tokens", minimum=1)
    elif engine == "mocker":
        capacity = mocker_capacity(engine_args)
    return RouterSpec(
        policy=ck.choice(r.get("policy", "tsched"), "router.policy", ROUTER_POLICIES),
        host=ck.string(r.get("host", "127.0.0.1"), "router.host"),
        port=ck.integer(r.get("port", 8300), "router.port", minimum=1),
        capacity_tokens=capacity,
        engine_profile=ck.string(r["engine_profile"], "router.engine_profile")
        if "engine_profile" in r
        else None,
        tick_seconds=ck.number(r.get("tick", 1.0), "router.tick", positive=True),
    )


def mocker_capacity(engine_args: Sequence[str]) -> int:
    """KV tokens per mocker worker from its flags: ``--num-gpu-blocks-override`` (default
    16,384) × ``--block-size`` (default 64, the mocker's vLLM default)."""

    def flag(name: str, default: int) -> int:
        for k, arg in enumerate(engine_args):
            if arg == name and k + 1 < len(engine_args):
                return int(engine_args[k + 1])
            if arg.startswith(name + "="):
                return int(arg.split("=", 1)[1])
        return default

    try:
        return flag("--num-gpu-blocks-override", 16384) * flag("--block-size", 64)
    except ValueError as exc:
        raise InputError(f"engine_args: a KV size flag is not an integer ({exc})") from None


#: The packaged tiny model's name in ``tsched/data``.
TINY_MODEL = "tiny-model"
#: Words of the tiny model's vocabulary (``w0 … w255``), besides ``<unk>``, ``<s>``, ``</s>``.
TINY_VOCAB_WORDS = 256
#: Context length the tiny model declares (config and tokenizer), long enough for agent contexts.
TINY_CONTEXT_TOKENS = 131072


def tiny_model_path() -> Path:
    """The folder of the tiny model shipped with tsched: what the mocker engine needs to serve
    (``config.json``, ``tokenizer.json``, ``tokenizer_config.json``) and no weights. A spec for
    the mocker without ``model.path`` uses it; :func:`write_tiny_model` makes it."""
    from importlib.resources import files

    return Path(str(files("tsched.data") / TINY_MODEL))


def tiny_model_files() -> dict[str, str]:
    """The tiny model's files (name → JSON text): a llama-like ``config.json`` of 2 layers and
    hidden size 64, a whitespace-split WordLevel ``tokenizer.json`` whose vocabulary is
    ``<unk> <s> </s> w0 … w255`` (a prompt of N words "w1 w2 …" is N tokens), and a
    ``tokenizer_config.json`` with a chat template that joins the messages' contents. The
    tokenizer JSON is written in the ``tokenizers`` library's own format; the test suite checks
    it against that library's output."""
    import json

    specials = ["<unk>", "<s>", "</s>"]
    vocab = {w: i for i, w in enumerate(specials + [f"w{i}" for i in range(TINY_VOCAB_WORDS)])}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }  # fmt: skip
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 2, "vocab_size": len(vocab),
        "max_position_embeddings": TINY_CONTEXT_TOKENS, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float16",
    }  # fmt: skip
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "model_max_length": TINY_CONTEXT_TOKENS,
        "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}",
    }  # fmt: skip
    return {
        "config.json": json.dumps(config, indent=1) + "\n",
        "tokenizer.json": json.dumps(tokenizer, separators=(",", ":")) + "\n",
        "tokenizer_config.json": json.dumps(tokenizer_config, indent=1) + "\n",
    }


def write_tiny_model(path: str | os.PathLike[str]) -> Path:
    """Write the tiny model (:func:`tiny_model_files`) into folder ``path``; returns it.

    Examples
    --------
    >>> import tempfile
    >>> folder = write_tiny_model(tempfile.mkdtemp())
    >>> sorted(p.name for p in folder.iterdir())
    ['config.json', 'tokenizer.json', 'tokenizer_config.json']
    """
    from tsched._io import atomic_write_text

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in tiny_model_files().items():
        atomic_write_text(folder / name, text)
    return folder


def read_spec(path: str | os.PathLike[str]) -> DynamoSpec:
    from tsched._io import load_yaml_text, read_text

    spec = spec_from_dict(load_yaml_text(read_text(path, "dynamo spec"), str(path)), str(path))
    model_path = Path(spec.model_path)
    if not model_path.is_absolute():  # relative to the spec file
        from dataclasses import replace

        spec = replace(spec, model_path=str((Path(path).parent / model_path).resolve()))
    if spec.engine == "mocker" and not (Path(spec.model_path) / "config.json").is_file():
        raise InputError(
            f"{path}: model.path {spec.model_path!r} has no config.json (the mocker needs "
            f"config.json, tokenizer.json and tokenizer_config.json; leave model.path out to "
            f"use tsched's tiny model)"
        )
    return spec


def service_workload(spec: DynamoSpec) -> Any:
    """The planner's workload: TP inside replicas, KV transfer prefill → decode."""
    from tsched.workload import Workload

    return Workload.from_serving(spec.name, spec.serving, spec.model)


@dataclass(frozen=True)
class Replica:
    """One engine instance: its role (``prefill``, ``decode`` or ``agg``), its node and GPUs."""

    name: str
    role: str
    node: str
    gpus: tuple[int, ...]
    workers: tuple[int, ...]


def replicas_of(plan: Plan, spec: DynamoSpec) -> list[Replica]:
    """Group the plan's workers by replica (roles ``prefill0-tp1`` …), one node per replica."""
    workload = service_workload(spec)
    roles = plan.roles or workload.roles
    if roles is None or len(roles) != len(plan.assignment):
        raise InputError(
            f"plan has {len(plan.assignment)} workers; service {spec.name!r} needs "
            f"{workload.workers} (plan made for another service?)"
        )
    groups: dict[str, list[Any]] = {}
    for e in plan.assignment:
        groups.setdefault(roles[e.worker].split("-", 1)[0], []).append(e)
    out = []
    for name, entries in groups.items():
        nodes = {e.node for e in entries}
        if len(nodes) != 1:
            raise InputError(
                f"replica {name!r} spans nodes {sorted(nodes)}: a TP group must stay on one node"
            )
        kind = name.rstrip("0123456789")
        role = "agg" if not spec.disaggregated else kind
        out.append(Replica(name, role, entries[0].node, tuple(e.gpu for e in entries),
                           tuple(e.worker for e in entries)))  # fmt: skip
    return out


def loopback_env(namespace: str, file_kv: Path | None) -> dict[str, str]:
    """Dynamo's environment for processes on this host: ``namespace``, the TCP request plane
    and ZMQ events on 127.0.0.1, no hub downloads, and file discovery in ``file_kv`` (when
    given)."""
    env = {
        "DYN_NAMESPACE": namespace,
        "DYN_REQUEST_PLANE": "tcp",
        "DYN_EVENT_PLANE": "zmq",
        "DYN_TCP_RPC_HOST": "127.0.0.1",
        "DYN_TCP_RESPONSE_STREAM_HOST": "127.0.0.1",
        "DYN_EVENT_PLANE_HOST": "127.0.0.1",
        "DYN_SYSTEM_HOST": "127.0.0.1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if file_kv is not None:
        env["DYN_DISCOVERY_BACKEND"] = "file"
        env["DYN_FILE_KV"] = str(file_kv)
    return env


def _base_env(spec: DynamoSpec, workdir: Path) -> dict[str, str]:
    kv = workdir / "kv" if spec.discovery == "file" else None
    return {**loopback_env(spec.namespace, kv), **spec.env}


def free_port(low: int = 20000, high: int = 32767) -> int:
    """A free TCP port in [low, high]. Dynamo 1.6 reads ``DYN_SYSTEM_PORT`` as a signed 16-bit
    integer, so ports above 32767 (the kernel's usual ephemeral range) make workers exit."""
    import random

    rng = random.Random()
    for _ in range(200):
        port = rng.randint(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ExecutorError(f"no free port in {low}-{high}")


def dynamo_processes(
    plan: Plan,
    spec: DynamoSpec,
    workdir: str | os.PathLike[str],
    ports: Sequence[int] | None = None,
) -> tuple[list[tuple[Replica, Any]], Any]:
    """Pure translation: ``([(replica, GuardSpec)], frontend GuardSpec)``.

    ``ports`` are the replicas' system (health) ports, in replica order; free ones are picked when
    omitted. Each engine gets ``CUDA_VISIBLE_DEVICES`` = its planned GPU indices.
    """
    work = Path(workdir)
    base = _base_env(spec, work)
    replicas = replicas_of(plan, spec)
    ports = list(ports) if ports is not None else [free_port() for _ in replicas]
    out = []
    for replica, port in zip(replicas, ports, strict=True):
        argv = [sys.executable, "-m", f"dynamo.{spec.engine}", "--model-path", spec.model_path,
                "--model-name", spec.model_name]  # fmt: skip
        if spec.disaggregated:
            argv += ["--disaggregation-mode", replica.role]
        if spec.engine in _TP_FLAG:
            argv += [_TP_FLAG[spec.engine], str(len(replica.gpus))]
        argv += list(spec.engine_args)
        env = {
            **base,
            "DYN_SYSTEM_PORT": str(port),
            # /health answers 200 once the generate endpoint serves (else it stays 503)
            "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS": '["generate"]',
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in replica.gpus),
        }
        ready = {"url": f"http://127.0.0.1:{port}/health", "contains": '"status":"ready"'}
        out.append((replica, _guarded(spec, replica.name, argv, env, (ready,), work)))
    url = f"http://{spec.frontend_host}:{spec.frontend_port}"
    completion = {"model": spec.model_name, "prompt": "hello", "max_tokens": 4}
    argv = (sys.executable, "-m", "dynamo.frontend", "--http-host", spec.frontend_host,
            "--http-port", str(spec.frontend_port))  # fmt: skip
    checks = (
        {"url": f"{url}/health", "contains": '"instances"'},
        {"url": f"{url}/v1/models", "contains": f'"{spec.model_name}"'},
        {"url": f"{url}/v1/completions", "body": completion, "contains": '"choices"'},
    )
    frontend = _guarded(spec, "frontend", argv, base, checks, work)
    return out, frontend


def router_process(spec: DynamoSpec, workdir: str | os.PathLike[str], replicas: int) -> Any:
    """The guarded ``tsched agents serve`` of a ``router: tsched`` service (None without one):
    one replica per serving worker the frontend lists (``--dynamo-frontend``, this service's
    namespace, waiting for ``replicas``); healthy once its ``/health`` says ok."""

    router = spec.router
    if router is None:
        return None
    work = Path(workdir)
    front = _reachable(spec.frontend_host)
    argv = [sys.executable, "-m", "tsched", "agents", "serve",
            "--dynamo-frontend", f"http://{front}:{spec.frontend_port}",
            "--dynamo-namespace", spec.namespace, "--replicas", str(replicas),
            "--policy", router.policy, "--host", router.host, "--port", str(router.port),
            "--tick", f"{router.tick_seconds:g}", "--quiet"]  # fmt: skip
    if router.capacity_tokens is not None:
        argv += ["--capacity-tokens", str(router.capacity_tokens)]
    if router.engine_profile is not None:
        argv += ["--engine", router.engine_profile]
    ok = {"url": f"http://{_reachable(router.host)}:{router.port}/health",
          "contains": '"status": "ok"'}  # fmt: skip
    return _guarded(spec, "router", argv, {"PYTHONUNBUFFERED": "1"}, (ok,), work)


def _reachable(host: str) -> str:
    """Where this host reaches a server bound to ``host`` (a wildcard bind: loopback)."""
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def _guarded(
    spec: DynamoSpec,
    part: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    checks: tuple[Mapping[str, Any], ...],
    work: Path,
) -> Any:
    """A part of the service under a guardian with the spec's restart and lease settings; its
    receipt and log are ``PART.receipt.json`` and ``PART.log`` in ``work``."""
    from tsched.backends.guardian import GuardSpec

    return GuardSpec(
        name=f"{spec.name}-{part}",
        argv=tuple(argv),
        env=env,
        checks=checks,
        health_timeout=spec.health_timeout,
        restart=spec.restart,
        max_restarts=spec.max_restarts,
        lease_timeout=spec.lease_timeout,
        receipt=str(work / f"{part}.receipt.json"),
        log_file=str(work / f"{part}.log"),
    )


# ---------------------------------------------------------------------------- Ray ownership
class _Owner:
    """A detached Ray actor owning one engine: it runs the engine's guardian and beats its
    lease. Killing the actor (its process) stops the engine through the guardian."""

    def __init__(self, spec_json: str, workdir: str) -> None:
        from dataclasses import replace

        from tsched.backends.guardian import GuardSpec, Lease, launch

        spec = GuardSpec.from_json(spec_json)
        self.lease = Lease(Path(workdir) / f"{spec.name}.lease")
        self.spec = replace(spec, lease_file=str(self.lease.path), owner_pid=os.getpid())
        self.proc = launch(self.spec, Path(workdir) / f"{spec.name}.guardian.json")
        self._stop = threading.Event()
        period = max(self.spec.lease_timeout / 4.0, 0.2)

        def beat() -> None:
            while not self._stop.wait(period):
                self.lease.beat()

        threading.Thread(target=beat, daemon=True).start()

    def receipt(self) -> dict[str, Any]:
        try:
            data = json.loads(Path(self.spec.receipt or "").read_text())
        except (OSError, ValueError):
            data = {}
        data["guardian_running"] = self.proc.poll() is None
        return data

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        self._stop.set()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        return self.receipt()


def _actor_name(service: str, part: str) -> str:
    return f"tsched-dynamo-{service}-{part}"


def _connect(address: str | None) -> Any:
    from tsched.discovery.ray import connect

    return connect(address, ExecutorError)


def up(
    spec: DynamoSpec,
    plan: Plan,
    *,
    workdir: str | os.PathLike[str],
    address: str | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Reserve, start and health-gate the service; returns its status. On any failure,
    everything started is stopped and released before :class:`ExecutorError` is raised."""
    from tsched.backends.ray import NODE_LABEL, gpu_resource, live_problems

    ray = _connect(address)
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if _find(ray, spec.name):
        raise ExecutorError(f"service {spec.name!r} is already up (tsched dynamo down {spec.name})")
    problems = live_problems(plan)
    if problems:
        raise ExecutorError("plan refused, nothing reserved: " + "; ".join(problems[:3]))
    engines, frontend = dynamo_processes(plan, spec, work)
    bundles = [{**{gpu_resource(r.node, g): 1.0 for g in r.gpus}, "CPU": 0.01} for r, _ in engines]
    selectors = [{NODE_LABEL: r.node} for r, _ in engines]
    pg = placement_group(bundles, strategy="PACK", bundle_label_selector=selectors,
                         name=_actor_name(spec.name, "pg"), lifetime="detached")  # fmt: skip
    actors: list[Any] = []
    limit = timeout or spec.health_timeout + 60
    try:
        if not pg.wait(60):
            raise ExecutorError(f"reservation of {len(bundles)} replica bundles timed out")
        owner = ray.remote(num_cpus=0, max_restarts=0)(_Owner)
        for k, (replica, gspec) in enumerate(engines):
            actors.append(
                owner.options(
                    name=_actor_name(spec.name, replica.name),
                    namespace=RAY_NAMESPACE,
                    lifetime="detached",
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        pg, placement_group_bundle_index=k
                    ),
                    resources={gpu_resource(replica.node, g): 1.0 for g in replica.gpus},
                ).remote(gspec.to_json(), str(work))
            )
        _wait_healthy(ray, actors, [g.name for _, g in engines], limit)

        def start_part(part: str, gspec: Any) -> None:  # a CPU part: frontend, router
            actors.append(
                owner.options(
                    name=_actor_name(spec.name, part), namespace=RAY_NAMESPACE,
                    lifetime="detached",
                ).remote(gspec.to_json(), str(work))
            )  # fmt: skip
            _wait_healthy(ray, actors[-1:], [gspec.name], limit)

        start_part("frontend", frontend)
        serving = sum(1 for r, _ in engines if r.role != "prefill")
        front = f"http://{_reachable(spec.frontend_host)}:{spec.frontend_port}"
        listed, _ = wait_listed(front, serving, limit)
        if len(listed) < serving:
            raise ExecutorError(
                f"the frontend lists {len(listed)} of {serving} replicas after {limit:g} s"
            )
        router = router_process(spec, work, serving)
        if router is not None:
            start_part("router", router)
    except BaseException:
        _teardown(ray, actors, pg)
        raise
    return status(spec.name, address=address)


def _wait_healthy(ray: Any, actors: list[Any], names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = dict(zip(names, actors, strict=True))
    while pending:
        for name, actor in list(pending.items()):
            r = ray.get(actor.receipt.remote(), timeout=30)
            if r.get("healthy_at"):
                del pending[name]
            elif r.get("end_reason") or not r.get("guardian_running", True):
                raise ExecutorError(
                    f"{name} did not come up: {r.get('end_reason') or 'guardian exited'} "
                    "(its log and receipt are in the work directory)"
                )
        if pending and time.monotonic() > deadline:
            raise ExecutorError(f"not healthy after {timeout:g} s: {', '.join(pending)}")
        time.sleep(0.2)


def serving_instances(
    health: bytes | str, *, namespace: str | None = None, component: str | None = None
) -> set[int]:
    """Instance ids of the serving workers a Dynamo frontend's ``/health`` body lists (endpoint
    ``generate``, prefill workers left out), optionally of one namespace and component; an
    unreadable body lists none."""
    try:
        doc = json.loads(health)
    except (ValueError, UnicodeDecodeError):
        return set()
    out = set()
    for inst in (doc.get("instances") or []) if isinstance(doc, dict) else []:
        if not isinstance(inst, dict) or inst.get("endpoint") != "generate":
            continue
        if inst.get("component") == "prefill" or not isinstance(inst.get("instance_id"), int):
            continue
        if namespace is not None and inst.get("namespace") != namespace:
            continue
        if component is not None and inst.get("component") != component:
            continue
        out.add(inst["instance_id"])
    return out


def wait_listed(
    frontend: str,
    want: int | None,
    timeout: float,
    *,
    namespace: str | None = None,
    component: str | None = None,
) -> tuple[set[int], str]:
    """Poll the frontend at base URL ``frontend`` until its ``/health`` lists ``want`` serving
    workers (any, when None) or ``timeout`` seconds pass; returns the ids last listed and what
    the last poll said (for the caller's error)."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    found: set[int] = set()
    last = "no answer"
    while True:
        try:
            with urllib.request.urlopen(frontend + "/health", timeout=10) as resp:
                found = serving_instances(resp.read(), namespace=namespace, component=component)
            last = f"{len(found)} serving workers listed"
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        if found and (want is None or len(found) >= want):
            return found, last
        if time.monotonic() >= deadline:
            return found, last
        time.sleep(0.2)


def _teardown(ray: Any, actors: list[Any], pg: Any) -> list[dict[str, Any]]:
    from ray.util.placement_group import remove_placement_group

    receipts = []
    for actor in reversed(actors):
        try:
            receipts.append(ray.get(actor.stop.remote(), timeout=60))
        except Exception as exc:  # the actor may be dead already; its guardian stops itself
            log.warning("stopping %s: %s", actor, exc)
        try:
            ray.kill(actor)
        except Exception:
            pass
    if pg is not None:
        from ray.util.placement_group import placement_group_table

        from tsched.backends.ray import wait_released

        try:
            bundles = (placement_group_table(pg).get("bundles") or {}).values()
            held = [k for b in bundles for k in b if k.startswith("tsched_gpu_")]
            remove_placement_group(pg)
            wait_released(pg, held)  # the GPUs are free again when down returns
        except Exception as exc:
            log.warning("releasing placement group: %s", exc)
    return receipts


def _find_group(name: str) -> Any:
    """The live placement group called ``name``, whichever namespace created it (a named group
    is looked up in the caller's namespace only, and ``tsched dynamo down`` runs in a new
    process, so in another anonymous namespace than the ``up`` that created it)."""
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup, placement_group_table

    for hex_id, entry in placement_group_table().items():
        if entry.get("name") == name and entry.get("state") != "REMOVED":
            return PlacementGroup(PlacementGroupID(bytes.fromhex(hex_id)))
    return None


def _find(ray: Any, service: str) -> dict[str, Any]:
    prefix = _actor_name(service, "")
    out = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry.get("namespace") == RAY_NAMESPACE and entry["name"].startswith(prefix):
            try:
                out[entry["name"][len(prefix) :]] = ray.get_actor(
                    entry["name"], namespace=RAY_NAMESPACE
                )
            except ValueError:
                continue
    return out


def status(service: str, *, address: str | None = None) -> dict[str, Any]:
    """Each part of a running service: health, pid, restarts, how it ended (if it did)."""
    ray = _connect(address)
    parts = _find(ray, service)
    if not parts:
        raise ExecutorError(f"no service {service!r} is up")
    out: dict[str, Any] = {"service": service, "parts": {}}
    for name, actor in sorted(parts.items()):
        if name == "pg":
            continue
        try:
            r = ray.get(actor.receipt.remote(), timeout=30)
        except Exception as exc:
            out["parts"][name] = {"state": "owner-lost", "error": str(exc)}
            continue
        runs = r.get("runs") or [{}]
        state = "up" if r.get("healthy_at") and not r.get("end_reason") else (
            r.get("end_reason") or "starting"
        )  # fmt: skip
        out["parts"][name] = {"state": state, "pid": runs[-1].get("pid"),
                              "restarts": r.get("restarts", 0)}  # fmt: skip
    out["healthy"] = all(p.get("state") == "up" for p in out["parts"].values())
    return out


def down(service: str, *, address: str | None = None) -> list[dict[str, Any]]:
    """Stop every part of ``service`` (router, then frontend, first), kill its actors, release
    its GPUs; returns the guardians' receipts."""
    ray = _connect(address)
    parts = _find(ray, service)
    pg = _find_group(_actor_name(service, "pg"))
    if not parts and pg is None:
        raise ExecutorError(f"no service {service!r} is up")
    first = {"router": 0, "frontend": 1}
    order = sorted(parts, key=lambda n: (first.get(n, 2), n))
    return _teardown(ray, [parts[n] for n in reversed(order)], pg)
