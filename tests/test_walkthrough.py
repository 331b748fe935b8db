"""The "Try it on one machine" block of the docs (docs/getting-started.md), run as written:
every `$` line in order, on a sandbox of its own, each step checked for its exit code and one
fact of its output; at the end nothing may be left running, reserved or listening.

Install steps (`pip install …`) run in the clone's root, where they must be run; every other step
runs in a fresh folder holding a link to the clone's `models/` and `scripts/`, so the files the
walkthrough writes (plan.json, the service's work folder) land there."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, listening
from tsched.backends.guardian import pid_alive

HAS_TOOLS = all(
    __import__("importlib").util.find_spec(m) is not None
    for m in ("ray", "psutil", "dynamo")
)  # fmt: skip

#: One fact per step, found by the command's first words: a regular expression its standard
#: output must match. A walkthrough step with no entry here fails the test (say what it should
#: show).
FACTS = {
    "pip install": r"install-dynamo: ai-dynamo [\d.]+ installed into ",
    "tsched solve": r"status optimal  objective [\d.]+ s/iteration  bound [\d.]+ s  gap 0\.00%",
    "tsched show": r"picture of llama3-8b-tp4-pp2-dp2 on dgx-h100-4node written to plan\.html",
    "tsched sandbox up": r"sandbox of dgx-h100-4node up at \S+: 4 nodes, 30 free GPUs",
    "tsched run ray": r"plan\.json: 16 workers ran where planned",
    "tsched dynamo up": r"tiny-agg: healthy at http://127\.0\.0\.1:8000",
    "curl": r'"completion_tokens":8',
    "tsched dynamo down": r"tiny-agg-frontend: stopped after 1 run",
    "tsched sandbox down": r"sandbox of dgx-h100-4node at \S+ is down \(\d+ processes stopped\)",
}
MARKER = "<!-- walkthrough:"


def walkthrough_commands(readme: str) -> list[str]:
    """The `$` lines of the console block that follows the walkthrough marker."""
    start = readme.index(MARKER)
    block_start = readme.index("```console\n", start) + len("```console\n")
    block = readme[block_start : readme.index("\n```", block_start)]
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


def fact_for(command: str) -> str:
    key = next((k for k in FACTS if command.startswith(k)), None)
    assert key is not None, f"walkthrough step {command!r} has no fact in FACTS"
    return FACTS[key]


def test_the_walkthrough_block_is_where_the_test_looks() -> None:
    commands = walkthrough_commands((ROOT / "docs" / "getting-started.md").read_text())
    assert commands[0].startswith("pip install") and commands[-1] == "tsched sandbox down"
    assert "tsched sandbox up" in commands and "tsched dynamo down tiny-agg" in commands
    for command in commands:
        fact_for(command)


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.skipif(
    not HAS_TOOLS, reason="needs ray, psutil and Dynamo (the README's test command)"
)
def test_the_readme_walkthrough_runs_verbatim(tmp_path) -> None:
    from tsched.backends.sandbox import sandbox_processes

    commands = walkthrough_commands((ROOT / "docs" / "getting-started.md").read_text())
    if listening(8000):
        pytest.fail("port 8000 is taken; the walkthrough's service listens there")
    work = tmp_path / "work"
    work.mkdir()
    for name in ("models", "scripts"):
        (work / name).symlink_to(ROOT / name)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "TSCHED_SANDBOX_DIR": str(tmp_path / "sandbox"), "COLUMNS": "100"}  # fmt: skip
    env.pop("RAY_ADDRESS", None)

    def step(command: str, timeout: float = 300) -> str:
        cwd = ROOT if command.startswith("pip install") else work
        done = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
        assert done.returncode == 0, f"{command!r} exited {done.returncode}: {done.stderr[-2000:]}"
        assert re.search(fact_for(command), done.stdout), f"{command!r} printed:\n{done.stdout}"
        return done.stdout

    sandbox: dict = {}
    engine_pids: list[int] = []
    started = time.monotonic()
    finished = False
    try:
        for command in commands:
            out = step(command)
            if command.startswith("tsched show"):
                assert '"tsched": "plan/v1"' in (work / "plan.html").read_text()
            if command.startswith("tsched sandbox up"):
                sandbox = json.loads((tmp_path / "sandbox" / "sandbox.json").read_text())
            if command.startswith("tsched dynamo up"):
                engine_pids = [int(p) for p in re.findall(r": up pid (\d+)", out)]
                assert len(engine_pids) == 4  # two replicas, the frontend, the supervisor
            if command.startswith("tsched dynamo down"):  # nothing of the service is held
                status = subprocess.run(["tsched", "sandbox", "status", "--json"], env=env,
                                        capture_output=True, text=True, timeout=120)  # fmt: skip
                doc = json.loads(status.stdout)
                assert (doc["placement_groups"], doc["named_actors"]) == (0, 0), doc
                assert all(n["free_gpus"] == n["gpus"] for n in doc["nodes"]), doc["nodes"]
        finished = True
    finally:
        if not finished:  # a step failed: leave nothing running either
            subprocess.run("tsched dynamo down tiny-agg; tsched sandbox down", shell=True,
                           cwd=work, env=env, capture_output=True, timeout=180)  # fmt: skip
    elapsed = time.monotonic() - started
    print(f"walkthrough: {len(commands)} steps in {elapsed:.0f} s")
    assert sandbox, "the walkthrough started no sandbox"
    groups = [n["pgid"] for n in sandbox["nodes"]]
    assert not sandbox_processes(sandbox["temp_dir"], groups), "sandbox processes left behind"
    host, _, port = sandbox["address"].rpartition(":")
    assert not listening(int(port), host) and not listening(8000)
    assert not any(pid_alive(pid) for pid in engine_pids), "engines or frontend left behind"
    assert not (tmp_path / "sandbox" / "sandbox.json").exists()
