"""The docs site: every public function has a runnable example and a place in the API reference,
the examples in the pages run as written, and the site builds with every warning an error."""

from __future__ import annotations

import doctest
import importlib.util
import inspect
import os
import subprocess
import sys

import pytest

import tsched
from tests.conftest import ROOT

DOCS = ROOT / "docs"
PUBLIC_FUNCTIONS = [n for n in tsched.__all__ if inspect.isfunction(getattr(tsched, n))]


@pytest.mark.parametrize("name", PUBLIC_FUNCTIONS)
def test_every_public_function_has_an_example_and_a_place_in_the_reference(name: str) -> None:
    doc = inspect.getdoc(getattr(tsched, name)) or ""
    assert ">>>" in doc, f"tsched.{name} has no example in its docstring"
    assert f"        - {name}\n" in (DOCS / "api" / "index.md").read_text()


def test_dir_of_the_package_lists_its_api_only() -> None:
    assert set(dir(tsched)) == {*tsched.__all__, "STARTED", "__version__"}


@pytest.mark.parametrize("page", sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")
                                        if ">>> " in p.read_text()))  # fmt: skip
def test_the_examples_in_the_pages_run_as_written(page: str, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)  # examples name model files from the repository's root
    # a code fence ends an example's expected output, as a blank line would
    text = "\n".join("" if line.startswith("```") else line
                     for line in (DOCS / page).read_text().splitlines())  # fmt: skip
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, page, str(DOCS / page), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, out=sys.stdout.write)
    assert runner.failures == 0 and runner.tries > 0


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs not installed")
def test_the_site_builds_strictly(tmp_path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir",
         str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "site" / "api" / "index.html").exists()
