"""Pictures of plans: what is drawn (groups, busy GPUs, traffic and cost by link class), and the
files' content — SVG text that names the nodes, HTML that holds the plan and per-GPU tooltips."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import tsched
from tests.conftest import MODELS
from tsched.cli import main
from tsched.errors import InputError
from tsched.plan import Plan, PlanEntry, write_plan

pytest.importorskip("matplotlib")
from tsched.show import AGGREGATE_GPUS, picture, write_picture  # noqa: E402


@pytest.fixture(scope="module")
def default():
    cluster = tsched.load_cluster("dgx-h100-4node")
    workload = tsched.load_workload("llama3-8b-tp4-pp2-dp2")
    plan = tsched.solve(tsched.PlacementProblem.build(cluster, workload), method="greedy").plan()
    return plan, cluster, workload


def test_the_default_plan_coloured_by_tp_group_with_busy_gpus_and_traffic(default) -> None:
    plan, cluster, workload = default
    pic = picture(plan, cluster, workload)
    assert pic.color_by == "tp" and not pic.aggregated
    assert pic.group_names == ("TP group dp0-pp0", "TP group dp1-pp0", "TP group dp0-pp1",
                               "TP group dp1-pp1")  # fmt: skip
    busy = [cluster.gpu_id("node002", 0), cluster.gpu_id("node002", 1)]
    assert (pic.gpu_group[busy] == -2).all() and (pic.gpu_group >= 0).sum() == 16
    for e in plan.assignment:  # every worker of a TP group has that group's colour
        group = pic.gpu_group[cluster.gpu_id(e.node, e.gpu)]
        assert pic.group_names[group].endswith("-".join(plan.roles[e.worker].split("-")[1:]))
    assert sum(pic.traffic_by_link.values()) == pytest.approx(float(workload.gb.sum()))
    assert pic.cost_by_link == pytest.approx(dict(plan.cost_by_link))
    # the pipeline crosses the leaf between node003 and node004: one arc, over the leaf
    leaf_gb = round(pic.traffic_by_link["leaf"], 6)
    assert [(a[5], round(a[4], 6)) for a in pic.arcs] == [("leaf", leaf_gb)]
    assert [c[0] for c in pic.columns] == ["l0", "l1"]


def test_groupings_by_choice_and_their_errors(default) -> None:
    plan, cluster, workload = default
    assert picture(plan, cluster, workload, color_by="pp").group_names == ("stage pp0", "stage pp1")
    assert len(picture(plan, cluster, workload, color_by="dp").group_names) == 2
    assert len(picture(plan, cluster, workload, color_by="worker").group_names) == 16
    with pytest.raises(InputError, match="role 'tp0-dp0-pp0' has no ep rank"):
        picture(plan, cluster, workload, color_by="ep")
    with pytest.raises(InputError, match="--color-by 'rainbow': expected one of auto, tp"):
        picture(plan, cluster, workload, color_by="rainbow")
    with pytest.raises(InputError, match="has 64 workers; the plan places 16"):
        picture(plan, cluster, tsched.load_workload("llama3-70b-tp8-pp4-dp2"))


def test_a_serving_plan_is_coloured_by_replica() -> None:
    cluster = tsched.load_cluster("dgx-h100-4node")
    workload = tsched.load_workload("llama3-70b-serving-disagg")
    plan = tsched.solve(tsched.PlacementProblem.build(cluster, workload), method="greedy").plan()
    pic = picture(plan, cluster, workload)
    assert pic.color_by == "replica"
    assert pic.group_names == ("prefill0", "prefill1", "decode0")


def test_explicit_traffic_without_roles_is_coloured_by_component() -> None:
    cluster = tsched.load_cluster("dgx-h100-4node")
    linked = tsched.load_workload(MODELS / "workloads/two-tp-groups.yaml")  # a little between
    block = np.ones((4, 4)) - np.eye(4)
    apart = tsched.Workload.from_matrix("apart", np.block([[block, 0 * block], [0 * block, block]]))
    for workload, groups in ((linked, 1), (apart, 2)):
        problem = tsched.PlacementProblem.build(cluster, workload)
        plan = tsched.solve(problem, method="greedy").plan()
        pic = picture(plan, cluster, workload)
        assert pic.color_by == "component" and len(pic.group_names) == groups
    worker0, worker4 = (
        cluster.gpu_id(e.node, e.gpu) for e in plan.assignment if e.worker in (0, 4)
    )
    assert pic.gpu_group[worker0] != pic.gpu_group[worker4]  # the two blocks differ in colour
    assert picture(plan, cluster, None).color_by == "worker"  # no workload: no traffic either
    assert picture(plan, cluster, None).traffic_by_link == {}


def test_svg_text_names_the_nodes_and_png_is_an_image(default, tmp_path) -> None:
    plan, cluster, workload = default
    svg = write_picture(plan, cluster, tmp_path / "plan.svg", workload).read_text()
    texts = set(re.findall(r"<text[^>]*>([^<]+)<", svg))
    assert {"node001", "node002", "node003", "node004", "l0 (s0)", "l1 (s0)"} <= texts
    assert "TP group dp0-pp0" in texts and "llama3-8b-tp4-pp2-dp2 on dgx-h100-4node" in texts
    png = write_picture(plan, cluster, tmp_path / "plan.png", workload).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.png", "plan.svg"]  # no temp left


def test_html_is_self_contained_holds_the_plan_and_tooltips(default, tmp_path) -> None:
    plan, cluster, workload = default
    text = write_picture(plan, cluster, tmp_path / "plan.html", workload).read_text()
    data = re.search(r'<script type="application/json" id="tsched-plan">(.*?)</script>', text, re.S)
    assert data and json.loads(data.group(1)) == json.loads(plan.to_json())
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script src" not in text and "<link" not in text
    titles = re.findall(r"<title>([^<]*)</title>", text)
    worker0 = next(e for e in plan.assignment if e.worker == 0)
    assert any(t.startswith(f"worker 0 (tp0-dp0-pp0) on {worker0.node} GPU {worker0.gpu}, "
                            "TP group dp0-pp0; sends nvlink") for t in titles)  # fmt: skip
    assert "node002 GPU 0: busy" in titles and "node001 GPU 0: free" in titles
    gpu_titles = [t for t in titles if re.match(r"worker |node\d+ GPU ", t)]
    assert len(gpu_titles) == cluster.n_gpus
    assert "node002: 8 GPUs" in titles  # the nodes' own tooltips


def test_sixteen_thousand_gpus_are_a_heat_map_of_leaves_that_stays_legible(tmp_path) -> None:
    cluster = tsched.load_cluster(MODELS / "clusters/fabric-16384.yaml")
    workload = tsched.load_workload(MODELS / "workloads/gpt3-175b-tp8-pp8-dp64.yaml")
    n = workload.workers
    plan = Plan("fabric-16384", workload.name, "feasible", None, None, None, "by-hand", 0.0, 0,
                tuple(PlanEntry(w, cluster.nodes[w // 8].name, w % 8) for w in range(n)), {},
                roles=workload.roles)  # fmt: skip
    pic = picture(plan, cluster, workload)
    assert cluster.n_gpus > AGGREGATE_GPUS and pic.aggregated
    assert pic.color_by == "pp" and len(pic.group_names) == 8  # 512 TP groups: too many colours
    assert len(pic.nodes) == cluster.n_nodes and len(pic.columns) == 128
    # one cell per leaf: the first 32 leaves hold the job whole, four a pipeline stage
    assert pic.domains[:32] == tuple((128, 0, 128, k // 4) for k in range(32))
    assert pic.domains[32:] == ((0, 0, 128, -1),) * 96
    from tsched.show import AGGREGATE_ARCS, _column_labels

    labels = _column_labels(pic)
    assert len(labels) <= 40 and labels[0][2] == "spine0: leaf0 … leaf7"
    assert len(pic.arcs) <= AGGREGATE_ARCS
    assert pic.width / pic.height > 1.2  # landscape
    import time

    start = time.perf_counter()
    path = write_picture(plan, cluster, tmp_path / "big.png", workload)
    assert path.stat().st_size > 50_000 and time.perf_counter() - start < 60
    svg = write_picture(plan, cluster, tmp_path / "big.svg", workload).read_text()
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    assert len(titles) == 128 and titles[0] == (
        "leaf0 (spine0): 128 GPUs, 128 used by the plan (stage pp0 most), 0 busy, 0 free"
    )


def test_cli_show_and_solve_picture(default, tmp_path, capsys) -> None:
    plan, cluster, workload = default
    write_plan(plan, tmp_path / "plan.json")
    assert main(["show", str(tmp_path / "plan.json"), "-o", str(tmp_path / "p.svg")]) == 0
    assert "node003" in (tmp_path / "p.svg").read_text()
    code = main(["show", str(tmp_path / "plan.json"), "-o", str(tmp_path / "p.pdf")])
    err = capsys.readouterr().err
    assert code == 2 and "p.pdf: expected a file ending in .png, .svg, .html" in err
    assert not (tmp_path / "p.pdf").exists()
    custom = Plan("my-cluster", "w", plan.status, plan.objective, plan.bound, plan.gap,
                  plan.method, 0.0, 0, plan.assignment, plan.cost_by_link)  # fmt: skip
    write_plan(custom, tmp_path / "custom.json")
    code = main(["show", str(tmp_path / "custom.json"), "-o", str(tmp_path / "c.png")])
    err = capsys.readouterr().err
    assert code == 2 and "cluster 'my-cluster' is not a preset" in err
    assert "give its model with --cluster" in err
    assert main(["show", str(tmp_path / "custom.json"), "--cluster", "dgx-h100-4node",
                 "-o", str(tmp_path / "c.html")]) == 0  # fmt: skip
    assert "traffic not drawn" in capsys.readouterr().err
    code = main(["solve", "--method", "greedy", "--quiet", "--picture", str(tmp_path / "s.html")])
    assert code == 0 and "tsched-plan" in (tmp_path / "s.html").read_text()


def test_html_needs_no_plotting_library_and_png_says_what_to_install(
    default, tmp_path, monkeypatch
) -> None:
    import sys

    plan, cluster, workload = default
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    text = write_picture(plan, cluster, tmp_path / "p.html", workload).read_text()
    assert "tsched-plan" in text and 'fill="#1f77b4"' in text
    with pytest.raises(
        InputError, match=r"p\.png: PNG and SVG pictures need matplotlib .*tsched\[plot\]"
    ):
        write_picture(plan, cluster, tmp_path / "p.png", workload)
    assert not (tmp_path / "p.png").exists()


def test_groups_never_look_alike_nor_like_busy() -> None:
    """Every group gets a colour and pattern no other group has; no group is grey (busy is a
    hatched grey of its own), however many groups there are."""
    from tsched.show import _BUSY, _colors, _hatches

    for count in (3, 16, 18, 19, 64, 126, 127, 512):
        colours, hatches = _colors(count), _hatches(count)
        assert len(colours) == len(hatches) == count
        assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in colours)
        assert len(set(zip(colours, hatches))) == count
        greys = [c for c in colours if c[1:3] == c[3:5] == c[5:7]]
        assert greys == [] and _BUSY not in colours
    assert _hatches(18) == [""] * 18  # up to 18 groups: colour alone tells them apart


def test_a_128_node_plan_names_its_nodes_and_every_gpu_says_what_runs_there(tmp_path) -> None:
    cluster = tsched.load_cluster(MODELS / "clusters" / "fabric-1024.yaml")
    workload = tsched.load_workload(MODELS / "workloads" / "llama3-70b-tp8-pp4-dp4.yaml")
    plan = tsched.solve(tsched.PlacementProblem.build(cluster, workload), method="greedy").plan()
    svg = write_picture(plan, cluster, tmp_path / "plan.svg", workload).read_text()
    texts = set(re.findall(r"<text[^>]*>([^<]+)<", svg))
    assert {e.node for e in plan.assignment} <= texts  # every planned node named, as text
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    gpus = [t for t in titles if re.match(r"worker |node\d+ GPU ", t)]
    assert len(gpus) == cluster.n_gpus and len(titles) == cluster.n_gpus + cluster.n_nodes
    e = next(e for e in plan.assignment if e.worker == 17)
    assert f"worker 17 ({plan.roles[17]}) on {e.node} GPU {e.gpu}, TP group" in "\n".join(gpus)
    # 16 TP groups: each GPU square of the plan is drawn in its group's colour, 16 colours in
    # all, none of them the busy grey
    from tsched.show import _BUSY

    pic = picture(plan, cluster, workload)
    fills = re.findall(r'<g id="tsched-gpu-\d+"><title>worker [^<]*</title>\s*<path [^>]*?'
                       r"fill: (#[0-9a-f]{6})", svg)  # fmt: skip
    assert len(pic.group_names) == 16 and len(fills) == len(plan.assignment)
    assert len(set(fills)) == 16 and _BUSY not in fills


def test_a_plan_finds_the_models_it_was_solved_with_and_draws_no_empty_panel(
    tmp_path, capsys
) -> None:
    cluster = str(MODELS / "clusters" / "hgx-h200-16node.yaml")
    workload = str(MODELS / "workloads" / "mixtral-8x22b-tp2-ep8-dp2.yaml")
    out = tmp_path / "plan.json"
    assert main(["solve", "--cluster", cluster, "--workload", workload, "--method", "greedy",
                 "--quiet", "-o", str(out)]) == 0  # fmt: skip
    plan = tsched.read_plan(out)
    assert plan.sources == {"cluster": cluster, "workload": workload}
    capsys.readouterr()
    assert main(["show", str(out), "-o", str(tmp_path / "p.svg")]) == 0
    captured = capsys.readouterr()
    assert "traffic not drawn" not in captured.err
    svg = (tmp_path / "p.svg").read_text()
    assert "traffic, GB per iteration" in svg and "cost, s per iteration" in svg
    # without its workload the traffic panel is left out, not drawn empty with zeros
    bare = Plan(plan.cluster, "elsewhere", plan.status, plan.objective, plan.bound, plan.gap,
                plan.method, 0.0, 0, plan.assignment, plan.cost_by_link,
                sources={"cluster": cluster})  # fmt: skip
    write_plan(bare, tmp_path / "bare.json")
    assert main(["show", str(tmp_path / "bare.json"), "-o", str(tmp_path / "bare.svg")]) == 0
    assert "traffic not drawn" in capsys.readouterr().err
    svg = (tmp_path / "bare.svg").read_text()
    assert "traffic, GB per iteration" not in svg and "cost, s per iteration" in svg
    # a plan file moved beside its models finds them from its own folder
    (tmp_path / "models").mkdir()
    from dataclasses import replace

    moved = replace(plan, sources={"cluster": "models/c.yaml", "workload": "models/w.yaml"})
    (tmp_path / "models" / "c.yaml").write_text(open(cluster).read())
    (tmp_path / "models" / "w.yaml").write_text(open(workload).read())
    write_plan(moved, tmp_path / "moved.json")
    assert main(["show", str(tmp_path / "moved.json"), "-o", str(tmp_path / "m.html")]) == 0
    assert "traffic not drawn" not in capsys.readouterr().err
