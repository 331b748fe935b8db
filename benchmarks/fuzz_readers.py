"""Every input format tsched reads, fuzzed: valid files mutated with a fixed seed, each read the
way a user would (through the command line where a command reads it, else the library reader).

A read may succeed (the mutation left a valid file) or refuse the file. A refusal must be an
:class:`~tsched.errors.InputError`: on the command line, exit 2 with one line on stderr that
names the file, and no file written; in the library, the error's message names the file. Any
other exception, a traceback, a multi-line message or a file written on refusal is a failure.

Formats: cluster/v1, workload/v1, plan/v1, agentic-workload/v1, engine-profile/v1, job traces
(Philly, Pollux workload, Pollux placements, Alibaba), Topograph node lists and models, Slurm
topology.conf (tree and block), topology.yaml and Slinky ConfigMaps, ``nvidia-smi topo -m``,
nccl-tests output, QAPLIB ``.dat``, running-jobs CSV (``tsched defrag``) and defrag/v1 plans.

    python -m benchmarks.fuzz_readers [--cases N] [--seed S]

writes ``benchmarks/results/fuzz_readers.md``: cases tried per format, refused, read, failures.
The test suite runs a smaller sample of the same cases (``tests/benchmarks/test_fuzz_readers.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from benchmarks._common import ROOT, machine, markdown_table, write_result

DATA = ROOT / "tests" / "data"
MODELS = ROOT / "models"


@dataclass(frozen=True)
class Reader:
    """How one format is read: its seed files (name → bytes) and a run on a file path that
    returns ``(exit code, stderr, files written)``; the library readers give code 2 for an
    InputError and raise anything else."""

    name: str
    suffix: str
    seeds: dict[str, bytes]
    run: Callable[[Path, Path], tuple[int, str, list[Path]]]


def _cli(argv: Callable[[Path, Path], list[str]]) -> Callable[[Path, Path], tuple]:
    """A reader through ``tsched`` in this process: exit code, stderr, files under ``out``."""
    from tsched.cli import main

    def run(path: Path, out: Path) -> tuple[int, str, list[Path]]:
        err, sink = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(sink):
            try:
                code = main(argv(path, out))
            except SystemExit as exc:  # argparse's usage errors
                code = int(exc.code or 0)
        return code, err.getvalue(), sorted(p for p in out.rglob("*") if p.is_file())

    return run


def _library(read: Callable[[Path], object]) -> Callable[[Path, Path], tuple]:
    """A library reader: 0 when it reads, 2 with the message when it refuses (InputError)."""
    from tsched.errors import InputError

    def run(path: Path, out: Path) -> tuple[int, str, list[Path]]:
        try:
            read(path)
        except InputError as exc:
            return 2, f"{exc}\n", []
        return 0, "", []

    return run


def _head(path: Path, lines: int) -> bytes:
    with open(path, "rb") as fh:
        return b"".join(fh.readline() for _ in range(lines))


def _plan_seed() -> bytes:
    import tsched

    cluster = tsched.load_cluster("dgx-h100-4node")
    problem = tsched.PlacementProblem.build(cluster, tsched.load_workload("llama3-8b-tp4-pp2-dp2"))
    return tsched.solve(problem, method="greedy").plan().to_json().encode()


def _nccl_seed() -> bytes:
    template = (DATA / "nccl-tests" / "all_reduce_perf.template.txt").read_text()
    ranks = "\n".join(f"#  Rank {r} Group  0 Pid  {10 + r} on node00{1 + r // 8} device {r % 8} "
                      "[0x18] NVIDIA H100" for r in range(16))  # fmt: skip
    return template.format(ranks=ranks).encode()


def readers() -> list[Reader]:
    """Every format, its seed files and how it is read."""
    from tsched.agentic.engine import PRESETS as ENGINES
    from tsched.agentic.engine import load_engine_profile
    from tsched.agentic.workload import PRESETS as AGENTIC
    from tsched.agentic.workload import load_agentic_workload
    from tsched.compare.traces import load_trace
    from tsched.defrag import read_defrag
    from tsched.formats.nccl_tests import read_nccl_tests

    def files(*paths: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in paths}

    clusters = MODELS / "clusters"
    workloads = MODELS / "workloads"
    topograph = DATA / "topograph"
    traces = DATA / "traces"
    agentic = {f"{k}.yaml": yaml.safe_dump({"tsched": "agentic-workload/v1", "name": k,
                                            **v.to_data()}).encode()
               for k, v in AGENTIC.items()}  # fmt: skip
    engines = {f"{k}.yaml": yaml.safe_dump({"tsched": "engine-profile/v1", **v.to_data()}).encode()
               for k, v in ENGINES.items()}  # fmt: skip
    return [
        Reader("cluster/v1", ".yaml",
               files(clusters / "dgx-h100-4node.yaml", clusters / "gb200-nvl72-4rack.yaml",
                     clusters / "pcie-8gpu-server.yaml", clusters / "g4dn-12xlarge-16node.yaml"),
               _cli(lambda p, o: ["topology", "convert", str(p), "--to", "tsched",
                                  "-o", str(o / "c.yaml")])),
        Reader("workload/v1", ".yaml",
               files(workloads / "llama3-8b-tp4-pp2-dp2.yaml", workloads / "two-tp-groups.yaml",
                     workloads / "mixtral-8x22b-tp2-ep8-dp2.yaml",
                     workloads / "llama3-70b-serving-disagg.yaml"),
               _cli(lambda p, o: ["solve", "--cluster", "leaf-spine-64", "--workload", str(p),
                                  "--method", "greedy", "--quiet", "-o", str(o / "plan.json")])),
        Reader("plan/v1", ".json", {"plan.json": _plan_seed()},
               _cli(lambda p, o: ["show", str(p), "-o", str(o / "p.html")])),
        Reader("agentic-workload/v1", ".yaml", agentic, _library(load_agentic_workload)),
        Reader("engine-profile/v1", ".yaml", engines, _library(load_engine_profile)),
        Reader("trace", ".csv",
               {f"{p.stem}.csv": _head(p, 25) for p in sorted(traces.glob("*.csv"))},
               _library(lambda p: load_trace(p))),
        Reader("topograph", ".json",
               files(*sorted(topograph.glob("nodes-*.json"))),
               _cli(lambda p, o: ["inventory", "topograph", str(p), "-o", str(o / "c.yaml")])),
        Reader("topograph-model", ".yaml", files(topograph / "small-tree.yaml",
                                                 topograph / "nvl72.yaml"),
               _cli(lambda p, o: ["inventory", "topograph", str(p), "-o", str(o / "c.yaml")])),
        Reader("slurm", ".conf",
               {**files(topograph / "expected.slinky-oci-sim-tree.conf"),
                "block.conf": b"BlockName=b1 Nodes=n[01-04]\nBlockName=b2 Nodes=n[05-08]\n"
                              b"BlockSizes=4,8\n"},
               _cli(lambda p, o: ["inventory", "slurm", str(p), "-o", str(o / "c.yaml")])),
        Reader("slurm-yaml", ".yaml", files(DATA / "slurm" / "topology.yaml",
                                            DATA / "slurm" / "slinky-configmap-tree.yaml"),
               _cli(lambda p, o: ["inventory", "slurm", str(p), "-o", str(o / "c.yaml")])),
        Reader("nvidia-smi", ".txt", files(*sorted((DATA / "nvidia-smi-topo").glob("*.txt"))),
               _cli(lambda p, o: ["inventory", "nvidia-smi", str(p), "-o", str(o / "c.yaml")])),
        Reader("nccl-tests", ".txt", {"all_reduce_perf.txt": _nccl_seed()},
               _library(read_nccl_tests)),
        Reader("qaplib", ".dat",
               files(*(DATA / "qaplib" / "instances" / f"{n}.dat" for n in ("nug12", "chr12a"))),
               _cli(lambda p, o: ["qap", str(p), "--method", "greedy", "--json"])),
        Reader("running-jobs", ".csv", _running_seeds(),
               _cli(lambda p, o: ["defrag", "--cluster", "leaf-spine-64", "--running", str(p),
                                  "--gpus", "3", "--method", "heuristic", "--quiet",
                                  "-o", str(o / "d.json")])),
        Reader("defrag/v1", ".json", {"defrag.json": _defrag_seed()}, _library(read_defrag)),
    ]  # fmt: skip


def _running_seeds() -> dict[str, bytes]:
    """Running jobs on leaf-spine-64: one GPU free per node (every column), and a sparse file
    of the required columns only."""
    rows = ["job,node,gpu,restart_seconds,movable"]
    for i in range(1, 9):
        rows += [f"big{i},node0{i},{g},600,1" for g in range(5)]
        rows += [f"small{i},node0{i},5,60,{i % 2}", f"mid{i},node0{i},6,120,1"]
    sparse = ["job,node,gpu", "a,node01,0", "a,node01,1", "b,node02,7", "c,node03,3"]
    return {"full.csv": ("\n".join(rows) + "\n").encode(),
            "sparse.csv": ("\n".join(sparse) + "\n").encode()}  # fmt: skip


def _defrag_seed() -> bytes:
    """A defrag/v1 plan as ``tsched defrag -o`` writes it."""
    import json

    import tsched
    from tsched.formats.running_csv import parse_running

    cluster = tsched.load_cluster("leaf-spine-64")
    state = parse_running(_running_seeds()["full.csv"].decode(), cluster)
    return json.dumps(tsched.defrag(cluster, state, 3).to_dict(), indent=1).encode()


_NUMBERS = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WORDS = re.compile(rb"[A-Za-z_][A-Za-z0-9_\-]*")
_ODD = [b"-1", b"0", b"1e309", b"nan", b"-inf", b"abc", b"99999999999999999999", b"", b"[]",
        b"{}", b"null", b"true", b"0x1f", b"\xff\xfe", b"\x00", b"'", b'"', b"- -", b":",
        b"#"]  # fmt: skip


def mutate(text: bytes, rng: np.random.Generator) -> tuple[bytes, str]:
    """One mutation of ``text`` and its name."""
    lines = text.splitlines(keepends=True) or [b""]
    kind = rng.integers(10)
    if kind == 0 and len(lines) > 1:
        k = int(rng.integers(len(lines)))
        return b"".join(lines[:k] + lines[k + 1 :]), "drop a line"
    if kind == 1:
        k = int(rng.integers(len(lines)))
        return b"".join(lines[: k + 1] + lines[k:]), "repeat a line"
    if kind == 2 and len(lines) > 1:
        a, b = sorted(int(x) for x in rng.choice(len(lines), 2, replace=False))
        lines[a], lines[b] = lines[b], lines[a]
        return b"".join(lines), "swap two lines"
    if kind == 3:
        return text[: int(rng.integers(len(text) + 1))], "truncate"
    if kind in (4, 5):
        pattern = _NUMBERS if kind == 4 else _WORDS
        spans = [m.span() for m in pattern.finditer(text)]
        if spans:
            a, b = spans[int(rng.integers(len(spans)))]
            odd = _ODD[int(rng.integers(len(_ODD)))]
            return text[:a] + odd + text[b:], f"replace a {'number' if kind == 4 else 'word'}"
    if kind == 6:
        at = int(rng.integers(len(text) + 1))
        noise = bytes(rng.integers(0, 256, int(rng.integers(1, 8)), dtype=np.uint8))
        return text[:at] + noise + text[at:], "insert bytes"
    if kind == 7 and text:
        data = bytearray(text)
        for _ in range(int(rng.integers(1, 4))):
            data[int(rng.integers(len(data)))] = int(rng.integers(32, 127))
        return bytes(data), "change characters"
    if kind == 8:
        marks = [i for i, c in enumerate(text) if c in b":=,[]{}"]
        if marks:
            at = marks[int(rng.integers(len(marks)))]
            return text[:at] + text[at + 1 :], "drop punctuation"
    if kind == 9:
        return b"", "empty file"
    return text + b"\n" + _ODD[int(rng.integers(len(_ODD)))], "append junk"


@dataclass
class Outcome:
    fmt: str
    seed_file: str
    mutation: str
    code: int
    problem: str  # "" when the read behaved


def check(reader: Reader, seed_file: str, data: bytes, mutation: str, folder: Path) -> Outcome:
    """Run one mutated file; ``problem`` says what went wrong, if anything."""
    path = folder / f"input{reader.suffix}"
    out = folder / "out"
    out.mkdir(exist_ok=True)
    for old in out.rglob("*"):
        if old.is_file():
            old.unlink()
    path.write_bytes(data)
    try:
        code, err, written = reader.run(path, out)
    except Exception as exc:  # a traceback: the reader let something through
        return Outcome(reader.name, seed_file, mutation, -1,
                       f"{type(exc).__name__}: {str(exc)[:200]}")  # fmt: skip
    problem = ""
    if code == 2:
        lines = err.strip("\n").splitlines()
        if len(lines) != 1:
            problem = f"{len(lines)} lines on stderr: {err[:200]!r}"
        elif path.name not in lines[0] and str(path) not in lines[0]:
            problem = f"message does not name the file: {lines[0][:200]!r}"
        elif written:
            problem = f"wrote {[p.name for p in written]} on refusal"
    elif code not in (0, 1):
        problem = f"exit {code}: {err[:200]!r}"
    return Outcome(reader.name, seed_file, mutation, code, problem)


def fuzz(cases: int, seed: int, progress: Callable[[int], None] | None = None) -> list[Outcome]:
    """``cases`` mutated files spread evenly over the formats and their seed files."""
    rng = np.random.default_rng(seed)
    table = readers()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for k in range(cases):
            reader = table[k % len(table)]
            names = sorted(reader.seeds)
            name = names[int(rng.integers(len(names)))]
            data, mutation = mutate(reader.seeds[name], rng)
            out.append(check(reader, name, data, mutation, folder))
            if progress:
                progress(k + 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2600, help="mutated files (default 2600)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    outcomes = fuzz(args.cases, args.seed)
    minutes = (time.perf_counter() - start) / 60
    rows = []
    for reader in readers():
        mine = [o for o in outcomes if o.fmt == reader.name]
        rows.append([reader.name, len(mine), sum(o.code == 2 for o in mine),
                     sum(o.code in (0, 1) for o in mine),
                     sum(bool(o.problem) for o in mine)])  # fmt: skip
    failures = [o for o in outcomes if o.problem]
    text = "\n".join([
        "# Every reader fuzzed: mutated files of every input format",
        "",
        f"{machine()}; {len(outcomes)} cases in {minutes:.1f} min, seed {args.seed}.",
        "",
        "Each case is a valid file of the format with one mutation (a line dropped, repeated or "
        "swapped, the file cut short or emptied, a number or word replaced by an odd value, "
        "bytes inserted, characters changed, punctuation dropped, junk appended), read as a "
        "user would (the command line where a command reads the format). `refused`: exit 2 "
        "with one line naming the file and nothing written (or, for library readers, an "
        "InputError naming the file); `read`: the mutated file was still valid; `failures`: "
        "anything else (a traceback, a message that does not name the file, a file written on "
        "refusal).",
        "",
        markdown_table(["format", "cases", "refused", "read", "failures"], rows),
        "",
        f"Tracebacks and other failures: {len(failures)}.",
        *(f"- {o.fmt} ({o.seed_file}, {o.mutation}): {o.problem}" for o in failures[:40]),
        "",
    ])  # fmt: skip
    write_result("fuzz_readers", text)
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
