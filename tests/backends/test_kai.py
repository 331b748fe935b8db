"""KAI adapter: manifests against the real CRD schemas and client models; the client against a
loopback double of the Kubernetes API (tests/backends/k8s_double.py) through the real `kubernetes`
client. Contract tests: they show the adapter speaks the API correctly, not how KAI schedules."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
import yaml

pytest.importorskip("kubernetes")
pytest.importorskip("jsonschema")

import tsched  # noqa: E402
from tests.backends.k8s_double import TOKEN, ApiDouble  # noqa: E402
from tsched.backends.kai import (  # noqa: E402
    JOB_LABEL,
    PLAN_LABEL,
    SUBGROUP_LABEL,
    KaiClient,
    kai_manifests,
    queue_object,
    topology_constraint,
    validate_objects,
)
from tsched.backends.kai.client import _pod_node  # noqa: E402
from tsched.cli import main  # noqa: E402
from tsched.errors import ExecutorError, InputError  # noqa: E402
from tsched.formats.topograph import labels_from_cluster  # noqa: E402
from tsched.plan import Plan, PlanEntry, read_plan  # noqa: E402

DATA = Path(__file__).parents[1] / "data" / "kai"
ROOT = Path(__file__).parents[2]
H200 = ROOT / "models" / "clusters" / "hgx-h200-16node.yaml"
GOLDEN = {
    "golden-llama3-8b-dgx.yaml": (
        "plan-llama3-8b-dgx.json",
        ["--cluster", "dgx-h100-4node", "--queue", "research", "--namespace", "ml"],
    ),
    "golden-serving-h200.yaml": (
        "plan-serving-h200.json",
        [
            "--cluster",
            str(H200),
            "--image",
            "vllm/vllm-openai:v0.9.0",
            "--",
            "python3",
            "-m",
            "serve",
        ],
    ),  # fmt: skip
}


def dgx_plan() -> Plan:
    return read_plan(DATA / "plan-llama3-8b-dgx.json")


# ---------------------------------------------------------------------------- manifests
@pytest.mark.parametrize("golden", sorted(GOLDEN))
def test_manifest_matches_its_golden_file_and_validates(golden, capsys) -> None:
    plan_file, args = GOLDEN[golden]
    argv = ["kai", "manifest", str(DATA / plan_file), *args]
    if "--" in argv:
        cut = argv.index("--")
        argv = argv[:cut] + ["--"] + argv[cut + 1 :]
    assert main(argv) == 0
    text = capsys.readouterr().out
    if os.environ.get("TSCHED_REGEN_GOLDEN"):
        (DATA / golden).write_text(text)
    objects = list(yaml.safe_load_all(text))
    assert objects == list(yaml.safe_load_all((DATA / golden).read_text()))
    validate_objects(objects)


def test_podgroup_gangs_the_plan_and_pods_follow_it() -> None:
    cluster = tsched.load_cluster("dgx-h100-4node")
    plan = dgx_plan()
    objs = kai_manifests(plan, cluster, queue="research", namespace="ml")
    service, podgroup, *pods = objs
    assert service["spec"]["clusterIP"] == "None"
    assert podgroup["spec"]["minMember"] == len(plan.assignment) == len(pods)
    assert podgroup["spec"]["queue"] == "research"
    for pod, entry in zip(pods, plan.assignment, strict=True):
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["RANK"] == str(entry.worker) and env["WORLD_SIZE"] == "16"
        assert env["TSCHED_PLANNED_GPU"] == str(entry.gpu)
        assert (
            env["MASTER_ADDR"]
            == f"{podgroup['metadata']['name']}-0.{service['metadata']['name']}.ml.svc"
        )
        term = pod["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [entry.node]
        assert pod["spec"]["schedulerName"] == "kai-scheduler"
        assert pod["metadata"]["annotations"]["pod-group-name"] == podgroup["metadata"]["name"]
    local = {}
    for pod, entry in zip(pods, plan.assignment, strict=True):
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        local.setdefault(entry.node, []).append(int(env["LOCAL_RANK"]))
    assert all(sorted(v) == list(range(len(v))) for v in local.values())
    no_cluster = kai_manifests(plan)[1]
    assert "topologyConstraint" not in no_cluster["spec"]


def test_topology_constraint_follows_the_plans_span() -> None:
    cluster = tsched.load_cluster("dgx-h100-4node")  # node < leaf < spine

    def plan_on(*nodes: str) -> Plan:
        entries = tuple(PlanEntry(i, n, 0) for i, n in enumerate(nodes))
        return Plan("c", "w", "feasible", 1.0, None, None, "greedy", 0.0, 0, entries, {})

    leaf_of = {n.name: n.at["leaf"] for n in cluster.nodes}
    first = cluster.nodes[0].name
    same_leaf = [n for n in leaf_of if leaf_of[n] == leaf_of[first]]
    other_leaf = next(n for n in leaf_of if leaf_of[n] != leaf_of[first])
    one = topology_constraint(plan_on(first, first), cluster, "t")
    assert one == {"topology": "t", "requiredTopologyLevel": "kubernetes.io/hostname"}
    leaf = topology_constraint(plan_on(*same_leaf[:2]), cluster, "t")
    assert leaf["requiredTopologyLevel"] == "fabric.topograph.run/tier-0"
    assert leaf["preferredTopologyLevel"] == "kubernetes.io/hostname"
    spine = topology_constraint(plan_on(first, other_leaf), cluster, "t")
    assert spine["requiredTopologyLevel"] == "fabric.topograph.run/tier-1"
    assert spine["preferredTopologyLevel"] == "fabric.topograph.run/tier-0"
    with pytest.raises(InputError, match="plan node 'nope' is not in cluster"):
        topology_constraint(plan_on("nope"), cluster, "t")


def test_serving_plans_get_one_subgroup_per_replica() -> None:
    plan = read_plan(DATA / "plan-serving-h200.json")
    objs = kai_manifests(plan, tsched.load_cluster(H200))
    groups = objs[1]["spec"]["subGroups"]
    assert [g["name"] for g in groups] == ["prefill0", "prefill1", "decode0"]
    assert sum(g["minMember"] for g in groups) == objs[1]["spec"]["minMember"]
    for pod in objs[2:]:
        role = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}[
            "TSCHED_ROLE"
        ]
        assert pod["metadata"]["labels"][SUBGROUP_LABEL] == role.split("-")[0]
    assert all(g["topologyConstraint"]["requiredTopologyLevel"] == "kubernetes.io/hostname"
               for g in groups)  # fmt: skip


def test_contracts_catch_bad_objects() -> None:
    objs = kai_manifests(dgx_plan(), tsched.load_cluster("dgx-h100-4node"))
    bad_pg = copy.deepcopy(objs[1])
    bad_pg["spec"]["minMember"] = 0
    with pytest.raises(
        InputError, match=r"PodGroup .*: spec.minMember: 0 is less than the minimum"
    ):
        validate_objects([bad_pg])
    bad_pg = copy.deepcopy(objs[1])
    bad_pg["spec"]["subGroups"] = [{"name": "a"}, {"name": "a"}]
    with pytest.raises(InputError, match="names must be unique"):
        validate_objects([bad_pg])
    bad_pod = copy.deepcopy(objs[2])
    bad_pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1  # not a quantity
    with pytest.raises(InputError, match="does not deserialise as V1Pod"):
        validate_objects([bad_pod])
    bad_queue = queue_object("q")
    bad_queue["spec"]["resources"]["gpu"]["quota"] = "lots"
    with pytest.raises(InputError, match=r"Queue q: spec.resources.gpu.quota"):
        validate_objects([bad_queue])
    with pytest.raises(InputError, match="--queue 'Bad_Queue'"):
        kai_manifests(dgx_plan(), queue="Bad_Queue")


def test_manifest_cli_errors_are_one_line(tmp_path, capsys) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text('{"tsched": "plan/v1"}')
    assert main(["kai", "manifest", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tsched: error:") and err.count("\n") == 1


# ---------------------------------------------------------------------------- client
@pytest.fixture
def api():
    double = ApiDouble(run_seconds=0.3)
    url = double.start()
    cluster = tsched.load_cluster("dgx-h100-4node")
    for node, labels in labels_from_cluster(cluster).items():
        double.add_node(node, 8, labels)
    double.add_queue("default")
    from kubernetes import client

    cfg = client.Configuration(host=url)
    cfg.api_key = {"authorization": TOKEN}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    kai = KaiClient(client.ApiClient(cfg))
    try:
        yield double, kai, cluster, url
    finally:
        double.stop()


def left_behind(double: ApiDouble) -> list[str]:
    return double.names("pods") + double.names("services") + double.names("podgroups")


def test_submit_watch_to_completion_then_cancel(api) -> None:
    double, kai, cluster, _url = api
    objs = kai_manifests(dgx_plan(), cluster)
    assert kai.preflight(objs, cluster) == []
    res = kai.submit(objs)
    assert len(res.created) == len(objs) and res.adopted == []
    assert [r for r in double.requests if r[0] == "POST" and "selfsubject" not in r[1]][0][
        1
    ].endswith("/services")  # Service, then PodGroup, then pods
    seen = []
    final = kai.watch(res.namespace, res.name, timeout=30, on_change=lambda s: seen.append(s.phase))
    assert final.phase == "succeeded" and len(final.pods) == 16
    assert "running" in seen or "pending" in seen
    assert kai.status(res.namespace, res.name).phase == "succeeded"
    deleted = kai.cancel(res.namespace, res.name)
    assert len(deleted) == 18 and left_behind(double) == []
    assert kai.status(res.namespace, res.name).phase == "missing"


def test_failure_mid_submit_leaves_nothing_behind(api) -> None:
    double, kai, cluster, _url = api
    double.fail_create["pods"] = (5, 500)
    with pytest.raises(ExecutorError, match=r"creating Pod .*-4: 500"):
        kai.submit(kai_manifests(dgx_plan(), cluster))
    assert left_behind(double) == []
    deletes = [p for m, p in double.requests if m == "DELETE"]
    assert len(deletes) == 6 and deletes[-1].endswith("/services/" + deletes[-1].split("/")[-1])


def test_ctrl_c_during_submit_rolls_back(api) -> None:
    double, kai, cluster, _url = api
    calls = []

    def interrupt(label: str) -> None:
        calls.append(label)
        if len(calls) == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        kai.submit(kai_manifests(dgx_plan(), cluster), progress=interrupt)
    assert left_behind(double) == []


def test_resubmit_adopts_and_a_different_plan_conflicts(api) -> None:
    double, kai, cluster, _url = api
    objs = kai_manifests(dgx_plan(), cluster)
    first = kai.submit(objs)
    again = kai.submit(objs)
    assert again.created == [] and len(again.adopted) == len(objs)
    other = copy.deepcopy(objs)
    for o in other:
        o["metadata"]["labels"][PLAN_LABEL] = "different"
    other.append(copy.deepcopy(other[-1]))
    other[-1]["metadata"]["name"] = first.name + "-extra"
    with pytest.raises(ExecutorError, match="belongs to another plan"):
        kai.submit(other[:1] + other[-1:] + other[1:-1])
    names = double.names("pods")
    assert first.name + "-extra" not in names and len(names) == 16  # the first job is intact


def test_watch_resumes_after_timeouts_and_relists_after_410(api) -> None:
    double, kai, cluster, _url = api
    double.run_seconds = 2.5
    res = kai.submit(kai_manifests(dgx_plan(), cluster))
    compacted = []

    def on_change(status) -> None:
        if not compacted:  # history vanishes right after the first list
            double.compact()
            compacted.append(True)

    lists_before = sum(1 for m, p in double.requests if m == "GET" and "watch" not in p
                       and p.split("?")[0].endswith("/pods"))  # fmt: skip
    final = kai.watch(res.namespace, res.name, timeout=30, window=1, on_change=on_change)
    assert final.phase == "succeeded"
    lists = sum(1 for m, p in double.requests if m == "GET" and "watch" not in p
                and p.split("?")[0].endswith("/pods"))  # fmt: skip
    assert lists - lists_before >= 2  # the first list and a relist after 410
    assert double.gone_sent >= 1  # the client saw 410 Gone …
    assert double.watch_streams >= double.gone_sent + 2  # … and resumed after 1 s timeouts


def test_a_failed_pod_fails_the_job_with_its_reason(api) -> None:
    double, kai, cluster, _url = api
    objs = kai_manifests(dgx_plan(), cluster)
    double.fail_pods.add(objs[5]["metadata"]["name"])
    res = kai.submit(objs)
    final = kai.watch(res.namespace, res.name, timeout=30)
    assert final.phase == "failed"
    assert any("exit code 1" in r for r in final.reasons)


def test_preflight_names_every_problem(api) -> None:
    double, kai, cluster, _url = api
    objs = kai_manifests(dgx_plan(), cluster, queue="missing")
    nodes = sorted({_pod_node(p) for p in objs[2:]})
    double.deny.add(("create", "podgroups"))
    double.remove("nodes", "", nodes[0])
    node = double.objects[("nodes", "", nodes[1])]
    node["metadata"]["labels"]["fabric.topograph.run/tier-0"] = "elsewhere"
    busy = copy.deepcopy(objs[2])
    busy["metadata"] = {"name": "other", "namespace": "x", "labels": {}}
    busy["spec"]["nodeName"] = nodes[1]
    double.put("pods", busy)
    problems = kai.preflight(objs, cluster)
    text = "\n".join(problems)
    assert "queue 'missing' does not exist" in text
    assert "not allowed to create podgroups.scheduling.run.ai" in text
    assert f"node {nodes[0]!r} does not exist" in text
    assert f"node {nodes[1]!r}: label fabric.topograph.run/tier-0='elsewhere'" in text
    assert f"node {nodes[1]!r}: 8 GPU(s) planned, 7 of 8 allocatable are free" in text


def kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "double",
        "clusters": [{"name": "double", "cluster": {"server": url}}],
        "users": [{"name": "me", "user": {"token": TOKEN}}],
        "contexts": [{"name": "double", "context": {"cluster": "double", "user": "me"}}],
    }))  # fmt: skip
    return path


def test_cli_submit_wait_status_cancel(api, tmp_path, capsys) -> None:
    double, _kai, _cluster, url = api
    cfg = str(kubeconfig(tmp_path, url))
    plan = str(DATA / "plan-llama3-8b-dgx.json")
    code = main(["kai", "submit", plan, "--cluster", "dgx-h100-4node", "--kubeconfig", cfg,
                 "--wait", "--timeout", "30", "--json"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["status"]["phase"] == "succeeded" and len(out["created"]) == 18
    assert main(["kai", "status", out["name"], "--kubeconfig", cfg, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["phase"] == "succeeded"
    assert main(["kai", "cancel", out["name"], "--kubeconfig", cfg]) == 0
    assert left_behind(double) == []
    capsys.readouterr()
    code = main(["kai", "submit", plan, "--queue", "nope", "--kubeconfig", cfg])
    err = capsys.readouterr().err
    assert code == 3 and "preflight: queue 'nope' does not exist" in err
    assert err.count("\n") == 1 and left_behind(double) == []
    double.stop()
    code = main(["kai", "status", "x", "--kubeconfig", cfg])
    err = capsys.readouterr().err
    assert code == 3 and "cannot reach the Kubernetes API" in err and err.count("\n") == 1


def test_job_labels_select_only_this_job(api) -> None:
    double, kai, cluster, _url = api
    objs = kai_manifests(dgx_plan(), cluster)
    assert all(o["metadata"]["labels"][JOB_LABEL] == objs[1]["metadata"]["name"] for o in objs)


def test_deploy_files_validate_and_rbac_covers_what_the_client_does() -> None:
    deploy = ROOT / "deploy" / "kai"
    queue = yaml.safe_load((deploy / "queue.yaml").read_text())
    topology = yaml.safe_load((deploy / "topology-dgx-h100-4node.yaml").read_text())
    validate_objects([queue, topology])
    from tsched.formats.k8s_topology import topology_object

    assert topology == topology_object(tsched.load_cluster("dgx-h100-4node"), "kai")  # no drift
    assert queue["metadata"]["name"] == "default"  # the CLI's default queue
    docs = list(yaml.safe_load_all((deploy / "rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "Role")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip
    cluster_role = next(d for d in docs if d["kind"] == "ClusterRole")
    cluster_wide = {(g, r, v) for rule in cluster_role["rules"] for g in rule["apiGroups"]
                    for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip
    for verb, group, resource in KaiClient.PERMISSIONS + KaiClient.DRA_PERMISSIONS:
        assert (group, resource, verb) in granted | cluster_wide, (verb, group, resource)
    assert ("resource.k8s.io", "resourceslices", "list") in cluster_wide  # cluster-scoped
    cluster_role = next(d for d in docs if d["kind"] == "ClusterRole")
    reads = {(g, r, v) for rule in cluster_role["rules"] for g in rule["apiGroups"]
             for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip
    assert {
        ("", "nodes", "get"),
        ("", "pods", "list"),
        ("scheduling.run.ai", "queues", "get"),
    } <= reads


def test_status_reports_why_the_gang_waits(api) -> None:
    double, kai, cluster, _url = api
    objs = kai_manifests(dgx_plan(), cluster)
    double.remove("nodes", "", _pod_node(objs[2]))  # gone after planning, preflight skipped
    res = kai.submit(objs)
    status = kai.status(res.namespace, res.name)
    assert status.phase == "pending"
    assert any("Unschedulable" in r and "not found" in r for r in status.reasons)
    assert any(r.startswith("PodGroup: Unschedulable") for r in status.reasons)
    kai.cancel(res.namespace, res.name)
    assert left_behind(double) == []


# ---------------------------------------------------------------------------- DRA pinning
def uuid_cluster() -> tsched.Cluster:
    """The default preset with every GPU's UUID recorded (as NVML inventory records them)."""
    from dataclasses import replace

    base = tsched.load_cluster("dgx-h100-4node")
    nodes = tuple(replace(n, gpu_uuids=tuple(f"GPU-{k}{i:02d}-aaaa" for i in range(8)))
                  for k, n in enumerate(base.nodes))  # fmt: skip
    return replace(base, nodes=nodes)


def publish_gpus(double: ApiDouble, cluster: tsched.Cluster, with_index: bool = True) -> None:
    """What the NVIDIA DRA driver publishes: one ResourceSlice per node, devices gpu-<i> with
    their UUID (and, in drivers that have it, their index)."""
    for n in cluster.nodes:
        devices = []
        for i in range(8):
            uuid = n.gpu_uuids[i] if n.gpu_uuids else f"GPU-x-{n.name}-{i}"
            attrs = {"type": "gpu", "uuid": uuid, "productName": "NVIDIA H100 80GB HBM3"}
            if with_index:
                attrs["index"] = i
            devices.append((f"gpu-{i}", attrs))
        double.add_slice(n.name, devices)


def test_dra_claims_pin_the_planned_gpu_by_uuid_or_index() -> None:
    from tsched.backends.kai import gpu_selector

    plan = dgx_plan()
    with_uuid = uuid_cluster()
    objs = kai_manifests(plan, with_uuid, gpu_pinning="dra")
    validate_objects(objs)
    claims = [o for o in objs if o["kind"] == "ResourceClaim"]
    pods = [o for o in objs if o["kind"] == "Pod"]
    assert [o["kind"] for o in objs[:3]] == ["Service", "PodGroup", "ResourceClaim"]
    assert len(claims) == len(pods) == len(plan.assignment)
    for e, claim, pod in zip(plan.assignment, claims, pods):
        uuid = with_uuid.nodes[with_uuid.node_index(e.node)].gpu_uuids[e.gpu]
        request = claim["spec"]["devices"]["requests"][0]["exactly"]
        assert request["deviceClassName"] == "gpu.nvidia.com" and request["count"] == 1
        assert request["selectors"] == [{"cel": {"expression": gpu_selector(uuid, e.gpu)}}]
        assert f"uuid == '{uuid}'" in request["selectors"][0]["cel"]["expression"]
        assert pod["spec"]["resourceClaims"] == [
            {"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}]  # fmt: skip
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources == {"claims": [{"name": "gpu"}]}  # no device-plugin count
        assert _pod_node_of(pod) == e.node  # still pinned to the planned node
    # no UUIDs in the model: the index, on the node the pod is pinned to
    plain = kai_manifests(plan, tsched.load_cluster("dgx-h100-4node"), gpu_pinning="dra")
    expr = [o for o in plain if o["kind"] == "ResourceClaim"][0]["spec"]["devices"]["requests"][0]
    assert expr["exactly"]["selectors"][0]["cel"]["expression"].endswith(
        f"index == {plan.assignment[0].gpu}")  # fmt: skip
    with pytest.raises(InputError, match="--gpu-pinning 'mig': expected one of device-plugin, dra"):
        kai_manifests(plan, gpu_pinning="mig")
    broken = json.loads(json.dumps(claims[0]))
    del broken["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]
    with pytest.raises(InputError, match="ResourceClaim .*does not deserialise"):
        validate_objects([broken])


def _pod_node_of(pod: dict) -> str:
    affinity = pod["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    return terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0]


def test_dra_manifest_from_the_cli(tmp_path, capsys) -> None:
    from tsched.formats.cluster_yaml import write_cluster

    write_cluster(uuid_cluster(), tmp_path / "c.yaml")
    code = main(["kai", "manifest", str(DATA / "plan-llama3-8b-dgx.json"), "--cluster",
                 str(tmp_path / "c.yaml"), "--gpu-pinning", "dra"])  # fmt: skip
    objs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert code == 0 and sum(o["kind"] == "ResourceClaim" for o in objs) == 16
    assert all("GPU-" in o["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"][
        "expression"] for o in objs if o["kind"] == "ResourceClaim")  # fmt: skip


def test_dra_submit_preflight_rollback_adopt_and_cancel(api) -> None:
    double, kai, cluster, _url = api
    cluster = uuid_cluster()
    objs = kai_manifests(dgx_plan(), cluster, gpu_pinning="dra")
    # nothing published yet: preflight names the node before anything is created
    problems = kai.preflight(objs, cluster)
    assert any("publishes no gpu.nvidia.com devices" in p for p in problems), problems
    publish_gpus(double, cluster)
    assert kai.preflight(objs, cluster) == []
    # a pod fails to create: the claims made before it go too, newest first
    double.fail_create["pods"] = (3, 500)
    with pytest.raises(ExecutorError, match=r"creating Pod .*-2: 500"):
        kai.submit(objs)
    assert double.names("resourceclaims") == [] and left_behind(double) == []
    deletes = [p for m, p in double.requests if m == "DELETE"]
    assert sum("/resourceclaims/" in p for p in deletes) == 16
    double.fail_create.clear()
    res = kai.submit(objs)
    assert len(double.names("resourceclaims")) == 16 and res.adopted == []
    again = kai.submit(objs)  # the same plan again: everything adopted, claims included
    assert again.created == [] and sum(a.startswith("ResourceClaim") for a in again.adopted) == 16
    deleted = kai.cancel(res.namespace, res.name)
    assert sum(d.startswith("ResourceClaim") for d in deleted) == 16
    assert double.names("resourceclaims") == [] and left_behind(double) == []


def test_dra_preflight_names_missing_and_held_devices(api) -> None:
    double, kai, _, _url = api
    plain = tsched.load_cluster("dgx-h100-4node")
    objs = kai_manifests(dgx_plan(), plain, gpu_pinning="dra")
    publish_gpus(double, plain, with_index=False)  # today's driver: uuid, no index attribute
    problems = kai.preflight(objs, plain)
    assert problems and "no gpu.nvidia.com device with index '0'" in problems[0]
    assert "need the GPU UUIDs in the cluster model" in problems[0]
    cluster = uuid_cluster()
    double.objects = {k: v for k, v in double.objects.items() if k[0] != "resourceslices"}
    publish_gpus(double, cluster)
    first = next(e for e in dgx_plan().assignment if e.worker == 0)
    double.put("resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "someone-else", "namespace": "other"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": first.node,
             "device": f"gpu-{first.gpu}"}]}}},
    })  # fmt: skip
    problems = kai.preflight(kai_manifests(dgx_plan(), cluster, gpu_pinning="dra"), cluster)
    uuid = cluster.nodes[cluster.node_index(first.node)].gpu_uuids[first.gpu]
    assert problems == [f"node {first.node!r}: GPU {uuid} (device gpu-{first.gpu}) is allocated "
                        "to ResourceClaim someone-else"]  # fmt: skip
