"""Dynamo service specs (``tsched: dynamo/v1``): reading and checking them, and the traffic a
service's replicas make for the planner (:func:`service_workload`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tsched.backends.dynamo.model import tiny_model_path
from tsched.errors import InputError

__all__ = [
    "ENGINES",
    "ROUTER_KINDS",
    "ROUTER_POLICIES",
    "mocker_capacity",
    "RouterSpec",
    "DynamoSpec",
    "spec_from_dict",
    "read_spec",
    "service_workload",
]


ENGINES = ("vllm", "sglang", "trtllm", "mocker")


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
    #: re-place a replica whose node (or owning actor) is lost on the GPUs still free
    replace_lost: bool = True

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
    restart_keys = ("policy", "max_restarts", "health_timeout", "lease_timeout", "replace_lost")
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
        replace_lost=ck.boolean(restart.get("replace_lost", True), "restart.replace_lost"),
    )


ROUTER_KINDS = ("frontend", "tsched")


#: The agentic proxy's policies, named here, in the lowest layer that needs them, so that a spec
#: is checked when it is read; :data:`tsched.agentic.core.POLICIES` is this list.
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
