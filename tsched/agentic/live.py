"""Live mocker replicas for the agentic proxy and bench: one Dynamo mocker worker and one Dynamo
frontend per replica, each under tsched's process guardian, on 127.0.0.1.

Each replica has its own discovery folder, so its frontend sees only its worker: the proxy in
front decides which replica a call goes to. The worker's KV pool and timing follow an
:class:`~tsched.agentic.engine.EngineProfile` through :func:`~tsched.agentic.engine.mocker_args`.
:class:`MockerReplicas` is a context manager; leaving it (or the owning process dying) stops
every process it started.
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
from pathlib import Path
from typing import Any

from tsched.agentic.engine import EngineProfile, mocker_args
from tsched.errors import ExecutorError

__all__ = ["MockerReplicas"]


class MockerReplicas:
    """Start ``count`` mocker replicas of ``capacity_tokens`` KV tokens each.

    Attributes after entering: ``urls`` (frontend base URLs), ``metrics_urls`` (the workers'
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
    ) -> None:
        self.count = count
        self.capacity_tokens = capacity_tokens
        self.profile = profile
        self.workdir = Path(workdir)
        self.speedup_ratio = speedup_ratio
        self.model_name = model_name
        self.timeout = timeout
        self.urls: list[str] = []
        self.metrics_urls: list[str] = []
        self.guardians: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> MockerReplicas:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        from tsched.backends.dynamo import free_port, loopback_env, tiny_model_path
        from tsched.backends.guardian import GuardSpec, launch

        self.workdir.mkdir(parents=True, exist_ok=True)
        flags = mocker_args(self.profile, self.capacity_tokens, speedup_ratio=self.speedup_ratio,
                            tables=self.workdir / "engine-tables.npz")  # fmt: skip
        for k in range(self.count):
            work = self.workdir / f"replica{k}"
            work.mkdir(exist_ok=True)
            env = loopback_env(f"tsched-agents-{k}", work / "kv")
            system_port, http_port = free_port(), free_port()
            worker = GuardSpec(
                name=f"agents-worker{k}",
                argv=(sys.executable, "-m", "dynamo.mocker", "--model-path",
                      str(tiny_model_path()), "--model-name", self.model_name, *flags),
                env={**env, "DYN_SYSTEM_PORT": str(system_port)},
                restart="never",
                health_timeout=self.timeout,
                receipt=str(work / "worker.receipt.json"),
                log_file=str(work / "worker.log"),
            )  # fmt: skip
            frontend = GuardSpec(
                name=f"agents-frontend{k}",
                argv=(sys.executable, "-m", "dynamo.frontend", "--http-host", "127.0.0.1",
                      "--http-port", str(http_port)),
                env=env,
                restart="never",
                health_timeout=self.timeout,
                receipt=str(work / "frontend.receipt.json"),
                log_file=str(work / "frontend.log"),
            )  # fmt: skip
            self.guardians.append(launch(worker, work / "worker.json"))
            self.guardians.append(launch(frontend, work / "frontend.json"))
            self.urls.append(f"http://127.0.0.1:{http_port}")
            self.metrics_urls.append(f"http://127.0.0.1:{system_port}/metrics")
        deadline = time.monotonic() + self.timeout
        for url in self.urls:
            self._wait_ready(url, deadline)

    def _wait_ready(self, url: str, deadline: float) -> None:
        body = json.dumps({"model": self.model_name, "prompt": "w1 w2", "max_tokens": 1}).encode()
        last = ""
        while time.monotonic() < deadline:
            dead = [g for g in self.guardians if g.poll() is not None]
            if dead:
                raise ExecutorError(
                    f"a mocker replica's guardian exited ({dead[0].returncode}); logs in "
                    f"{self.workdir}"
                )
            req = urllib.request.Request(
                url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.3)
        raise ExecutorError(
            f"mocker replica {url} not serving after {self.timeout:g} s ({last}); logs in "
            f"{self.workdir}"
        )

    def kill_replica(self, k: int) -> None:
        """Stop replica ``k`` abruptly (worker and frontend), as a crash would."""
        for proc in self.guardians[2 * k : 2 * k + 2]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.guardians[2 * k : 2 * k + 2]:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def stop(self) -> None:
        for proc in self.guardians:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.guardians:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def worker_metric(self, k: int, name: str) -> float | None:
        """A gauge or counter from worker ``k``'s ``/metrics`` (summed over label sets)."""
        try:
            with urllib.request.urlopen(self.metrics_urls[k], timeout=5) as resp:
                text = resp.read().decode()
        except (urllib.error.URLError, OSError):
            return None
        total = None
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                try:
                    total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
                except ValueError:
                    continue
        return total
