"""Live mocker replicas for the agentic proxy and bench: Dynamo mocker workers and Dynamo
frontends, each under tsched's process guardian, on 127.0.0.1.

Two layouts:

- ``per-replica`` (default): one worker and one frontend per replica, each pair in its own
  discovery folder, so a frontend sees only its worker and the proxy in front decides.
- ``shared``: every worker in one discovery folder, one frontend per Dynamo router mode asked for
  (``round-robin``, ``kv``, …) over all of them, and optionally ``dynamo.thunderagent_router``
  wrapping the same workers under its own model name. The proxy reaches worker *k* through the
  first frontend with a pin (``URL#instance=ID``, see :mod:`tsched.agentic.proxy`), so Dynamo's
  routers, Dynamo's ThunderAgent port and the proxy's policies all drive the same processes.

The workers' KV pool and timing follow an :class:`~tsched.agentic.engine.EngineProfile` through
:func:`~tsched.agentic.engine.mocker_args`. :class:`MockerReplicas` is a context manager;
leaving it (or the owning process dying) stops every process it started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tsched.agentic.engine import EngineProfile, mocker_args
from tsched.errors import ExecutorError, InputError

__all__ = ["MockerReplicas"]


LAYOUTS = ("per-replica", "shared")
NAMESPACE = "tsched-agents"


class MockerReplicas:
    """Start ``count`` mocker replicas of ``capacity_tokens`` KV tokens each.

    ``layout="shared"`` puts every worker behind ``router_modes`` frontends (one each) and, with
    ``thunderagent`` (extra flags for it, a list, possibly empty), ``dynamo.thunderagent_router``
    serving model ``thunderagent_model`` over the same workers.

    Attributes after entering: ``urls`` (one per replica, for the proxy: a frontend base URL, or
    ``URL#instance=ID`` in the shared layout), ``frontends`` ({router mode: base URL}, shared
    layout), ``instance_ids`` (the workers' Dynamo instance ids), ``metrics_urls`` (the workers'
    ``/metrics``), ``guardians`` (their processes).
    """

    def __init__(
        self,
        count: int,
        capacity_tokens: int,
        profile: EngineProfile,
        workdir: str | os.PathLike[str],
        *,
        speedup_ratio: float = 1.0,
        model_name: str = "tiny",
        timeout: float = 120.0,
        layout: str = "per-replica",
        router_modes: tuple[str, ...] = ("round-robin",),
        thunderagent: list[str] | None = None,
    ) -> None:
        if layout not in LAYOUTS:
            raise InputError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
        if layout == "shared" and not router_modes:
            raise InputError("the shared layout needs at least one frontend router mode")
        if thunderagent is not None and layout != "shared":
            raise InputError("dynamo.thunderagent_router runs only in the shared layout")
        self.count = count
        self.capacity_tokens = capacity_tokens
        self.profile = profile
        self.workdir = Path(workdir)
        self.speedup_ratio = speedup_ratio
        self.model_name = model_name
        self.timeout = timeout
        self.layout = layout
        self.router_modes = tuple(router_modes)
        self.thunderagent = thunderagent
        self.thunderagent_model = f"{model_name}-ta"
        self.urls: list[str] = []
        self.frontends: dict[str, str] = {}
        self.instance_ids: list[int] = []
        self.metrics_urls: list[str] = []
        self.guardians: list[subprocess.Popen[bytes]] = []
        self._workers: list[subprocess.Popen[bytes]] = []
        self._replica_frontends: list[subprocess.Popen[bytes]] = []
        #: per replica, how its worker and (per-replica layout) frontend were launched
        self._launches: list[list[tuple[str, tuple[str, ...], dict[str, str], Path]]] = []

    def __enter__(self) -> MockerReplicas:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _launch(self, name: str, argv: tuple[str, ...], env: dict[str, str], work: Path) -> Any:
        from tsched.backends.guardian import GuardSpec, launch

        spec = GuardSpec(
            name=f"agents-{name}",
            argv=argv,
            env=env,
            restart="never",
            health_timeout=self.timeout,
            receipt=str(work / f"{name}.receipt.json"),
            log_file=str(work / f"{name}.log"),
        )
        proc = launch(spec, work / f"{name}.json")
        self.guardians.append(proc)
        return proc

    def _frontend_argv(self, port: int, mode: str | None = None) -> tuple[str, ...]:
        argv = (sys.executable, "-m", "dynamo.frontend", "--http-host", "127.0.0.1",
                "--http-port", str(port))  # fmt: skip
        return argv + (("--router-mode", mode) if mode else ())

    def start(self) -> None:
        from tsched.backends.dynamo import free_port, loopback_env, tiny_model_path

        self.workdir.mkdir(parents=True, exist_ok=True)
        flags = mocker_args(self.profile, self.capacity_tokens, speedup_ratio=self.speedup_ratio,
                            tables=self.workdir / "engine-tables.npz")  # fmt: skip
        model = str(tiny_model_path())
        shared = self.layout == "shared"
        if shared:
            work = self.workdir / "shared"
            work.mkdir(exist_ok=True)
            env = loopback_env(NAMESPACE, work / "kv")
        for k in range(self.count):
            if not shared:
                work = self.workdir / f"replica{k}"
                work.mkdir(exist_ok=True)
                env = loopback_env(f"{NAMESPACE}-{k}", work / "kv")
            system_port = free_port()
            worker = (f"worker{k}",
                      (sys.executable, "-m", "dynamo.mocker", "--model-path", model,
                       "--model-name", self.model_name, *flags),
                      {**env, "DYN_SYSTEM_PORT": str(system_port)}, work)  # fmt: skip
            self._workers.append(self._launch(*worker))
            self._launches.append([worker])
            self.metrics_urls.append(f"http://127.0.0.1:{system_port}/metrics")
            if not shared:
                port = free_port()
                frontend = (f"frontend{k}", self._frontend_argv(port), env, work)
                self._replica_frontends.append(self._launch(*frontend))
                self._launches[k].append(frontend)
                self.urls.append(f"http://127.0.0.1:{port}")
        if shared:
            for mode in self.router_modes:
                port = free_port()
                self._launch(f"frontend-{mode}", self._frontend_argv(port, mode), env, work)
                self.frontends[mode] = f"http://127.0.0.1:{port}"
            if self.thunderagent is not None:
                self._launch(
                    "thunderagent-router",
                    (sys.executable, "-m", "dynamo.thunderagent_router", "--endpoint",
                     f"{NAMESPACE}.backend.generate", "--model-name", self.thunderagent_model,
                     "--model-path", model, "--router-block-size",
                     str(self.profile.block_size), *self.thunderagent),
                    env, work,
                )  # fmt: skip
        deadline = time.monotonic() + self.timeout
        if not shared:
            for url in self.urls:
                self._wait_ready(url, self.model_name, deadline)
            self.instance_ids = [self._instance_id(k, deadline) for k in range(self.count)]
            return
        self.instance_ids = [self._instance_id(k, deadline) for k in range(self.count)]
        for url in self.frontends.values():
            self._wait_instances(url, deadline)
            self._wait_ready(url, self.model_name, deadline)
        if self.thunderagent is not None:
            self._wait_ready(next(iter(self.frontends.values())), self.thunderagent_model,
                             deadline)  # fmt: skip
        first = next(iter(self.frontends.values()))
        self.urls = [f"{first}#instance={i}" for i in self.instance_ids]

    def _poll(self, deadline: float, probe: Callable[[], Any], failure: Callable[[], str]) -> Any:
        """``probe()`` every 0.3 s until it returns something other than None; an
        :class:`ExecutorError` saying ``failure()`` at ``deadline``, or at once if a guardian
        exited."""
        while time.monotonic() < deadline:
            dead = [g for g in self.guardians if g.poll() is not None]
            if dead:
                raise ExecutorError(
                    f"a mocker replica's guardian exited ({dead[0].returncode}); logs in "
                    f"{self.workdir}"
                )
            found = probe()
            if found is not None:
                return found
            time.sleep(0.3)
        raise ExecutorError(f"{failure()} after {self.timeout:g} s; logs in {self.workdir}")

    def _instance_id(self, k: int, deadline: float) -> int:
        """Worker ``k``'s Dynamo instance id (the ``worker_id`` label of its metrics, hex)."""

        def probe() -> int | None:
            for line in _get(self.metrics_urls[k]).splitlines():
                if 'dynamo_endpoint="generate"' in line and 'worker_id="' in line:
                    return int(line.split('worker_id="', 1)[1].split('"', 1)[0], 16)
            return None

        return self._poll(deadline, probe, lambda: f"mocker worker {k} published no instance id")

    def _wait_instances(self, url: str, deadline: float) -> None:
        """Until the frontend at ``url`` lists every worker's generate endpoint."""
        from tsched.backends.dynamo import serving_instances

        want = set(self.instance_ids)
        seen: set[int] = set()

        def probe() -> bool | None:
            nonlocal seen
            seen = serving_instances(_get(url + "/health"), component="backend")
            return True if want <= seen else None

        self._poll(
            deadline,
            probe,
            lambda: f"frontend {url} sees {len(want & seen)} of {len(want)} workers",
        )

    def _wait_ready(self, url: str, model: str, deadline: float) -> None:
        body = json.dumps({"model": model, "prompt": "w1 w2", "max_tokens": 1}).encode()
        last = ""

        def probe() -> bool | None:
            nonlocal last
            req = urllib.request.Request(
                url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    return True if resp.status == 200 else None
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
                return None

        self._poll(
            deadline, probe, lambda: f"mocker service {url} (model {model}) not serving ({last})"
        )

    def kill_replica(self, k: int) -> None:
        """Stop replica ``k`` abruptly (its worker, and its frontend in the per-replica
        layout), as a crash would."""
        procs = [self._workers[k]]
        if self._replica_frontends:
            procs.append(self._replica_frontends[k])
        _terminate(procs)

    def restart_replica(self, k: int) -> None:
        """Start replica ``k`` again after :meth:`kill_replica`, on the same URL (per-replica
        layout), and return once it serves the model: a replica that comes back."""
        if self.layout != "per-replica":
            raise InputError("restart_replica: only the per-replica layout keeps a replica's URL")
        worker, frontend = self._launches[k]
        gone = {id(self._workers[k]), id(self._replica_frontends[k])}
        self.guardians = [g for g in self.guardians if id(g) not in gone]  # exited: not a fault
        self._workers[k] = self._launch(*worker)
        self._replica_frontends[k] = self._launch(*frontend)
        self._wait_ready(self.urls[k], self.model_name, time.monotonic() + self.timeout)

    def stop(self) -> None:
        _terminate(self.guardians)

    def worker_metric(self, k: int, name: str, where: str = "") -> float | None:
        """A gauge or counter from worker ``k``'s ``/metrics``, summed over the label sets whose
        line contains ``where`` (e.g. ``'dynamo_endpoint="generate"'``); None when unread."""
        text = _get(self.metrics_urls[k])
        if not text:
            return None
        total = None
        for line in text.splitlines():
            if (line.startswith(name + "{") or line.startswith(name + " ")) and where in line:
                try:
                    total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
                except ValueError:
                    continue
        return total


def _get(url: str) -> str:
    """The body of a GET, or "" when the server does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode()
    except (urllib.error.URLError, OSError):
        return ""


def _terminate(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each guardian still running (each stops its engine), then wait; SIGKILL any
    that has not gone after 30 s."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
