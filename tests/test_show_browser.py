"""The HTML picture in a real browser (Debian's Chromium, driven headless by Playwright): the
page loads without console errors, names every planned node, shows a hovered GPU's tooltip
(node, GPU index, worker, group) and toggles the traffic between nodes."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

import tsched
from tests.conftest import MODELS
from tsched.show import write_picture

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no Chromium installed (Debian: apt-get install chromium; .ci/run installs it)",
    ),  # fmt: skip
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None,
        reason="playwright not installed (pip install 'tsched[test]')",
    ),  # fmt: skip
]


@pytest.fixture(scope="module")
def page_of_128_nodes(tmp_path_factory):
    cluster = tsched.load_cluster(str(MODELS / "clusters" / "fabric-1024.yaml"))
    workload = tsched.load_workload(str(MODELS / "workloads" / "llama3-70b-tp8-pp4-dp4.yaml"))
    plan = tsched.solve(tsched.PlacementProblem.build(cluster, workload), method="greedy").plan()
    path = write_picture(plan, cluster, tmp_path_factory.mktemp("show") / "plan.html", workload)
    return path, plan


def test_the_html_picture_in_a_real_browser(page_of_128_nodes) -> None:
    from playwright.sync_api import sync_playwright

    path, plan = page_of_128_nodes
    problems: list[str] = []
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(path.as_uri())
            page.wait_for_selector("rect.gpu")
            named = set(page.locator("text.node").all_text_contents())
            assert {e.node for e in plan.assignment} <= named
            # hover worker 9: its tooltip names its node, GPU index, worker, role and group
            entry = next(e for e in plan.assignment if e.worker == 9)
            page.hover('rect.gpu[data-worker="9"]')
            tip = page.locator("#tsched-tip")
            tip.wait_for(state="visible")
            text = tip.text_content()
            assert f"worker 9 ({plan.roles[9]}) on {entry.node} GPU {entry.gpu}" in text
            assert "TP group" in text
            # the traffic between nodes can be hidden and shown again
            arcs = page.locator("#tsched-arcs")
            assert arcs.is_visible()
            page.uncheck("#tsched-show-arcs")
            assert not arcs.is_visible()
            page.check("#tsched-show-arcs")
            assert arcs.is_visible()
        finally:
            browser.close()
    assert problems == []
