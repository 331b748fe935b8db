"""Layers point down (STYLE.md 16): a module never imports from a layer above it."""

from __future__ import annotations

import ast

from conftest import ROOT

PACKAGE = ROOT / "tsched"
#: package or module → what it must never import
FORBIDDEN = {
    "backends": ("tsched.compare", "tsched.cli", "tsched.agentic", "tsched.show"),
    "solvers": ("tsched.backends", "tsched.compare", "tsched.cli", "tsched.discovery"),
    "formats": ("tsched.solvers", "tsched.backends", "tsched.compare", "tsched.cli"),
    "compare": ("tsched.cli",),
    "show.py": ("tsched.cli", "tsched.backends", "tsched.compare"),
    "explain.py": ("tsched.cli", "tsched.backends", "tsched.compare", "tsched.discovery"),
}


def imports_of(path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return out


def test_no_module_imports_from_a_layer_above_it() -> None:
    wrong = []
    for part, banned in FORBIDDEN.items():
        target = PACKAGE / part
        files = [target] if target.suffix == ".py" else sorted(target.glob("*.py"))
        assert files, part
        for path in files:
            wrong += [f"{path.relative_to(ROOT)} imports {m}"
                      for m in sorted(imports_of(path)) if m.startswith(banned)]  # fmt: skip
    assert wrong == []


def test_only_the_entry_points_import_the_command_line() -> None:
    users = [p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py")
             if "cli" not in p.relative_to(PACKAGE).parts
             and any(m.startswith("tsched.cli") for m in imports_of(p))]  # fmt: skip
    assert users == ["tsched/__main__.py"]
