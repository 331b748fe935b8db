"""Process guardian: runs one engine process for its whole life and never leaves it orphaned.

A guardian is a small process (``python -m tsched.backends.guardian SPEC.json``) that its owner
(a Ray actor, a CLI call) starts next to one engine (a Dynamo worker or frontend, or any
command). It:

* starts the engine in its **own process group**, with the kernel told to kill it if the
  guardian dies (``PR_SET_PDEATHSIG``), and makes itself a child subreaper so the engine's own
  children stay within reach;
* **health-gates** the start: every check (an HTTP GET, or a POST with a JSON body, expecting
  200 and optionally a substring) must pass within ``health_timeout`` seconds;
* **restarts** the engine per a policy (``never``, ``on-failure``, ``always``) with exponential
  backoff, up to ``max_restarts`` times;
* **stops** it with SIGTERM to the whole group, then SIGKILL after ``stop_timeout``;
* stops it by itself when its **owner goes away**: the owner process exits or is SIGKILLed (the
  guardian's parent changes, or the owner pid it watches disappears), or the owner's **lease**
  (a file the owner touches, :class:`Lease`) is older than ``lease_timeout``;
* writes a **receipt** (JSON, atomically, at every change): what ran, each run's pid and exit,
  restarts, when it became healthy, how it ended.

Limits, said plainly: a process that leaves the engine's process group (``setsid``) and outlives
the engine is outside the group kill; the subreaper still reaps it but cannot tell it apart
from work it should keep. Dynamo's engines do not do that.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tsched._io import atomic_write_text
from tsched.errors import ExecutorError, InputError

__all__ = [
    "RESTART_POLICIES",
    "GuardSpec",
    "Guardian",
    "Lease",
    "launch",
    "group_alive",
    "pid_alive",
]

log = logging.getLogger(__name__)

RESTART_POLICIES = ("never", "on-failure", "always")
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class GuardSpec:
    """What a guardian runs and how (seconds throughout).

    ``checks`` are ``{"url": …, "body": {…}?, "contains": "…"?}``: a GET, or a POST of ``body``
    as JSON, that must answer 200 (and contain ``contains``) before the engine counts as up.
    """

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    checks: tuple[Mapping[str, Any], ...] = ()
    health_timeout: float = 60.0
    restart: str = "on-failure"
    max_restarts: int = 3
    backoff: float = 1.0
    backoff_max: float = 30.0
    stop_timeout: float = 10.0
    owner_pid: int | None = None
    lease_file: str | None = None
    lease_timeout: float = 10.0
    receipt: str | None = None
    log_file: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))
        object.__setattr__(self, "checks", tuple(dict(c) for c in self.checks))
        if not self.argv:
            raise InputError(f"guardian {self.name!r}: argv is empty")
        if self.restart not in RESTART_POLICIES:
            raise InputError(
                f"guardian {self.name!r}: restart {self.restart!r}; valid: "
                f"{', '.join(RESTART_POLICIES)}"
            )
        for key in ("health_timeout", "backoff", "backoff_max", "stop_timeout", "lease_timeout"):
            if not getattr(self, key) > 0:
                raise InputError(f"guardian {self.name!r}: {key} must be > 0")
        if self.max_restarts < 0:
            raise InputError(f"guardian {self.name!r}: max_restarts must be >= 0")
        for k, c in enumerate(self.checks):
            if "url" not in c:
                raise InputError(f"guardian {self.name!r}: checks[{k}] needs a url")

    def to_json(self) -> str:
        data = asdict(self)
        data["env"] = dict(self.env)
        data["checks"] = [dict(c) for c in self.checks]
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "guardian spec") -> GuardSpec:
        try:
            data = json.loads(text)
            data["argv"] = tuple(data["argv"])
            data["checks"] = tuple(data.get("checks") or ())
            return cls(**data)
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{source}: not a guardian spec: {exc}") from None


class Lease:
    """The owner's side of a lease: :meth:`beat` at least every ``lease_timeout`` seconds."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.beat()

    def beat(self) -> None:
        self.path.touch()
        os.utime(self.path)


def _prctl(option: int, arg: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)


def _engine_preexec() -> None:  # runs in the child between fork and exec
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _stat(pid: int | str) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state first, pgrp third)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a zombie is gone for our purposes)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat(pid)
    return fields is None or fields[0] != "Z"


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        fields = _stat(entry.name) if entry.name.isdigit() else None
        if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


class Guardian:
    """Runs :class:`GuardSpec`; :meth:`serve` is the whole life (start, watch, stop)."""

    def __init__(self, spec: GuardSpec) -> None:
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None
        self.parent = os.getppid()
        self.stop_reason: str | None = None
        self.receipt: dict[str, Any] = {
            "name": spec.name,
            "argv": list(spec.argv),
            "guardian_pid": os.getpid(),
            "started_at": time.time(),
            "healthy_at": None,
            "runs": [],
            "restarts": 0,
            "stop": {"sigterm": False, "sigkill": False},
            "ended_at": None,
            "end_reason": None,
        }

    # -------------------------------------------------------------- receipt
    def _write(self) -> None:
        if self.spec.receipt:
            atomic_write_text(self.spec.receipt, json.dumps(self.receipt, indent=2) + "\n")

    # -------------------------------------------------------------- engine
    def _spawn(self) -> None:
        env = {**os.environ, **self.spec.env}
        out = open(self.spec.log_file, "ab") if self.spec.log_file else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                list(self.spec.argv),
                env=env,
                cwd=self.spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_engine_preexec,
            )
        except OSError as exc:
            raise ExecutorError(
                f"guardian {self.spec.name!r}: cannot start {self.spec.argv[0]!r}: {exc}"
            ) from None
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        self.receipt["runs"].append({"pid": self.proc.pid, "started": time.time(),
                                     "ended": None, "exit_code": None})  # fmt: skip
        self._write()

    def _reap(self) -> None:
        """Reap every exited child (the engine, and descendants reparented to us)."""
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.proc is not None and pid == self.proc.pid:
                self.proc.returncode = os.waitstatus_to_exitcode(_status)

    def _exited(self) -> int | None:
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            return None
        run = self.receipt["runs"][-1]
        if run["ended"] is None:
            run["ended"], run["exit_code"] = time.time(), code
            self._write()
        return code

    def _kill_group(self) -> None:
        """SIGTERM the engine's group, wait ``stop_timeout``, then SIGKILL what is left."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        if group_alive(pgid):
            self.receipt["stop"]["sigterm"] = True
            try:
                os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + self.spec.stop_timeout
            while time.monotonic() < deadline and group_alive(pgid):
                self._reap()
                time.sleep(0.05)
        if group_alive(pgid):
            self.receipt["stop"]["sigkill"] = True
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and group_alive(pgid):
                self._reap()
                time.sleep(0.02)
        try:
            self.proc.wait(timeout=5)
        except (subprocess.TimeoutExpired, ChildProcessError):
            pass
        self._reap()
        self._exited()

    # -------------------------------------------------------------- health
    def _check(self, check: Mapping[str, Any]) -> bool:
        body = check.get("body")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            check["url"], data=data, method="POST" if data else "GET",
            headers={"Content-Type": "application/json"} if data else {},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                text = resp.read().decode(errors="replace")
                return resp.status == 200 and str(check.get("contains", "")) in text
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _wait_healthy(self) -> bool:
        deadline = time.monotonic() + self.spec.health_timeout
        pending = list(self.spec.checks)
        while pending:
            if self._owner_gone() or self._exited() is not None:
                return False
            if time.monotonic() > deadline:
                return False
            if self._check(pending[0]):
                pending.pop(0)
                continue
            time.sleep(0.2)
        self.receipt["healthy_at"] = time.time()
        self._write()
        return True

    # -------------------------------------------------------------- owner
    def _owner_gone(self) -> bool:
        if self.stop_reason is not None:
            return True
        reason = None
        if os.getppid() != self.parent:
            reason = "owner-gone"
        elif self.spec.owner_pid is not None and not pid_alive(self.spec.owner_pid):
            reason = "owner-gone"
        elif self.spec.lease_file is not None:
            try:
                age = time.time() - os.stat(self.spec.lease_file).st_mtime
            except FileNotFoundError:
                age = float("inf")
            if age > self.spec.lease_timeout:
                reason = "lease-expired"
        if reason:
            self.stop_reason = reason
            return True
        return False

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.stop_reason = self.stop_reason or (
            "stopped" if signum != signal.SIGHUP else "owner-gone"
        )

    # -------------------------------------------------------------- life
    def serve(self) -> dict[str, Any]:
        """Start, health-gate, watch and restart, then stop; returns the receipt."""
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        restarts = 0
        delay = self.spec.backoff
        try:
            self._spawn()
            if not self._wait_healthy():
                self.stop_reason = self.stop_reason or (
                    "exited-before-healthy" if self._exited() is not None else "unhealthy"
                )
                return self.receipt
            while self.stop_reason is None:
                self._reap()
                code = self._exited()
                if code is None:
                    if self._owner_gone():
                        break
                    time.sleep(0.1)
                    continue
                again = self.spec.restart == "always" or (
                    self.spec.restart == "on-failure" and code != 0
                )
                if not again:
                    self.stop_reason = "exited" if code == 0 else "failed"
                    break
                if restarts >= self.spec.max_restarts:
                    self.stop_reason = "gave-up"
                    break
                self._kill_group()  # anything the dead engine left in its group
                wake = time.monotonic() + delay
                while time.monotonic() < wake and not self._owner_gone():
                    time.sleep(0.05)
                if self.stop_reason is not None:
                    break
                restarts += 1
                self.receipt["restarts"] = restarts
                delay = min(delay * 2, self.spec.backoff_max)
                self._spawn()
                if not self._wait_healthy():
                    self.stop_reason = self.stop_reason or "unhealthy"
            return self.receipt
        finally:
            self._kill_group()
            self.receipt["ended_at"] = time.time()
            self.receipt["end_reason"] = self.stop_reason or "stopped"
            self._write()


def launch(spec: GuardSpec, spec_path: str | os.PathLike[str]) -> subprocess.Popen[bytes]:
    """Write ``spec`` to ``spec_path`` and start its guardian as a child of this process (which
    becomes its owner: if this process dies, the guardian stops the engine)."""
    atomic_write_text(spec_path, spec.to_json())
    return subprocess.Popen(
        [sys.executable, "-m", "tsched.backends.guardian", str(spec_path)],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m tsched.backends.guardian SPEC.json\n")
        return 2
    try:
        spec = GuardSpec.from_json(Path(args[0]).read_text(), args[0])
    except (OSError, InputError) as exc:
        sys.stderr.write(f"guardian: {exc}\n")
        return 2
    _prctl(_PR_SET_PDEATHSIG, signal.SIGHUP)  # our owner's death reaches us as SIGHUP
    try:
        receipt = Guardian(spec).serve()
    except ExecutorError as exc:
        sys.stderr.write(f"guardian: {exc}\n")
        return 3
    return 0 if receipt["end_reason"] in ("stopped", "exited", "owner-gone", "lease-expired") else 1


if __name__ == "__main__":  # pragma: no cover - exercised through subprocesses in the tests
    raise SystemExit(main())
