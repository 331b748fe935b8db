"""The house rules read from the imports (DESIGN.md §2, STYLE.md 16 and 19): the layer table,
no private name reached across packages, no part importing its front door, no import circle,
no module too long to read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "tsched"
#: DESIGN.md's layer table, top to bottom: a module imports only from its own part or from a
#: part of a lower rank. Peers on one line (backends / show / explain) do not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("cli",),
    ("agentic",),
    ("compare",),
    ("defrag",),
    ("backends", "show", "explain"),
    ("discovery", "solvers"),
    ("plan", "presets"),
    ("formats",),
    ("problem",),
    ("cluster", "workload"),
    ("_io", "_clock", "stats", "data"),
    ("errors",),
]
RANK = {part: len(LAYERS) - k for k, parts in enumerate(LAYERS) for part in parts}
#: Front doors of packages: their parts never import them (the front door imports the parts).
FRONT_DOORS = {
    "tsched.solvers.registry": "tsched.solvers",
    "tsched.solvers.bounds": "tsched.solvers.bounds",
    "tsched.backends.kai": "tsched.backends.kai",
    "tsched.backends.dynamo": "tsched.backends.dynamo",
    "tsched.agentic.proxy": "tsched.agentic.proxy",
    "tsched.defrag": "tsched.defrag",
}
#: The root package's own private helpers serve every part.
ROOT_HELPERS = ("tsched._io", "tsched._clock")
LONGEST = 900


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = modules()


def imports(name: str) -> list[tuple[str, str | None, int]]:
    """(module imported, name taken from it or None, line) for every import in ``name``,
    function-level ones included; ``from tsched import presets`` is an import of the module."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.append((full, None, node.lineno) if full in MODULES
                           else (base, alias.name, node.lineno))  # fmt: skip
    return [item for item in out if item[0] == "tsched" or item[0].startswith("tsched.")]


def part_of(name: str) -> str:
    return name.split(".")[1] if name.count(".") else ""


def test_every_part_is_in_the_layer_table() -> None:
    parts = {part_of(m) for m in MODULES} - {"", "__main__"}
    assert parts <= set(RANK), sorted(parts - set(RANK))


@pytest.mark.parametrize("name", [m for m in MODULES if part_of(m) not in ("", "__main__")])
def test_imports_point_down_the_layer_table(name: str) -> None:
    mine = part_of(name)
    wrong = []
    for target, _, line in imports(name):
        theirs = part_of(target)
        if not theirs:
            wrong.append(f"line {line}: imports the package's front door `tsched`")
        elif theirs != mine and RANK[theirs] >= RANK[mine]:
            wrong.append(f"line {line}: {mine} (rank {RANK[mine]}) imports {target} "
                         f"(rank {RANK[theirs]})")  # fmt: skip
    assert wrong == []


def test_no_private_name_is_reached_across_packages() -> None:
    wrong = []
    for name in MODULES:
        for target, taken, line in imports(name):
            if part_of(target) == part_of(name) or target in ROOT_HELPERS:
                continue
            private_module = any(p.startswith("_") and not p.startswith("__")
                                 for p in target.split(".")[1:])  # fmt: skip
            private_name = taken is not None and taken.startswith("_")
            if private_module or private_name:
                wrong.append(f"{name}:{line} imports {target}{'.' + taken if taken else ''}")
    assert wrong == []


def test_parts_never_import_their_front_door() -> None:
    wrong = []
    for name in MODULES:
        for door, package in FRONT_DOORS.items():
            inside = name.startswith(package + ".") and name != door
            if inside and any(t == door for t, _, _ in imports(name)):
                wrong.append(f"{name} imports its front door {door}")
    assert wrong == []


def test_no_import_circle() -> None:
    graph = {m: {t for t, _, _ in imports(m) if t in MODULES and t != m} for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert circles == []


def test_no_module_is_too_long_to_read() -> None:
    long = {n: len(p.read_text().splitlines()) for n, p in MODULES.items()}
    assert {n: k for n, k in long.items() if k > LONGEST} == {}


def test_only_the_entry_points_import_the_command_line() -> None:
    users = [n for n in MODULES if part_of(n) not in ("cli", "__main__")
             and any(t.startswith("tsched.cli") for t, _, _ in imports(n))]  # fmt: skip
    assert users == []
