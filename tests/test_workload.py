from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import tsched
from tests.conftest import MODELS
from tsched.errors import InputError
from tsched.formats.workload_yaml import parse_workload_text, read_workload, write_workload
from tsched.workload import Layout, ModelSpec, PoolSpec, ServingSpec, Workload

TINY = ModelSpec(
    params_b=1.0,
    hidden=1000,
    layers=2,
    seq_len=100,
    micro_batch=1,
    micro_batches=1,
    bytes_per_element=2,
)


def test_rank_order_and_groups() -> None:
    lay = Layout(tp=2, dp=2)
    assert lay.groups("tp").tolist() == [[0, 1], [2, 3]]
    assert lay.groups("dp").tolist() == [[0, 2], [1, 3]]
    other = Layout(tp=2, pp=2, order="pp-tp-cp-ep-dp")
    assert other.groups("tp").tolist() == [[0, 2], [1, 3]]
    assert other.groups("pp").tolist() == [[0, 1], [2, 3]]
    big = Layout(tp=4, pp=2, dp=3)
    assert big.coordinates(13) == {"tp": 1, "cp": 0, "ep": 0, "dp": 0, "pp": 1}


def test_tp_and_dp_traffic_by_hand() -> None:
    w = Workload.from_layout("t", Layout(tp=2, dp=2), TINY)
    f = w.traffic_matrix()
    # TP: 4 all-reduces of b*s*h*beta = 2e5 B per layer, 2 layers -> S = 1.6e6 B; ring of 2: S each
    assert f[0, 1] == pytest.approx(1.6e-3) and f[1, 0] == pytest.approx(1.6e-3)
    # DP: 1e9 params * 2 B / tp 2 = 1e9 B per rank; ring of 2 sends all of it
    assert f[0, 2] == pytest.approx(1.0) and f[3, 1] == pytest.approx(1.0)
    assert f[0, 3] == 0 and f[1, 2] == 0
    assert w.roles == ("tp0-dp0", "tp1-dp0", "tp0-dp1", "tp1-dp1")


def test_pp_traffic_by_hand() -> None:
    w = Workload.from_layout("t", Layout(tp=2, pp=2), TINY)
    f = w.traffic_matrix()
    # b*s*h*beta / tp = 1e5 B = 1e-4 GB between matching TP ranks of adjacent stages, both ways
    for a, b in ((0, 2), (2, 0), (1, 3), (3, 1)):
        assert f[a, b] == pytest.approx(1e-4)
    # TP inside each stage: 4 * (L/pp = 1) * 2e5 B = 8e5 B
    assert f[0, 1] == pytest.approx(8e-4)
    assert f[0, 3] == 0


def test_ep_all_to_all_by_hand() -> None:
    moe = ModelSpec(
        params_b=1.0, expert_params_b=0.5, hidden=1000, layers=2, seq_len=100, experts=2, top_k=1
    )
    w = Workload.from_layout("t", Layout(ep=2), moe)
    f = w.traffic_matrix()
    all_to_all = 4 * 2 * 100 * 1 * 1000 * 2 / 2 / 1e9  # 4 a2a * layers * tokens * k * h * beta / ep
    dense_dp = 0.5e9 * 2 / 1e9  # dense grads ring over the ep group of 2
    assert f[0, 1] == pytest.approx(all_to_all + dense_dp)


def test_ring_all_reduce_volume() -> None:
    w = Workload.from_layout("t", Layout(dp=4), TINY)
    f = w.traffic_matrix()
    assert f[0, 1] == pytest.approx(2 * 3 / 4 * 2.0)  # 2(n-1)/n * S, S = 2 GB of grads
    assert f[3, 0] == pytest.approx(3.0) and f[0, 2] == 0


def test_serving_traffic() -> None:
    spec = ServingSpec(
        decode=PoolSpec(1, 4),
        prefill=PoolSpec(1, 2),
        requests_per_s=1,
        prompt_tokens=1000,
        output_tokens=10,
        kv_bytes_per_token=1e6,
    )
    w = Workload.from_serving("s", spec, TINY)
    assert w.workers == 6 and w.roles[0] == "prefill0-tp0" and w.roles[2] == "decode0-tp0"
    f = w.traffic_matrix()
    # KV: 1 req/s * 1000 tokens * 1e6 B = 1 GB/s, split over prefill TP2: 0.5 GB to ranks 0 and 2
    assert f[0, 2] == pytest.approx(0.5) and f[1, 4] == pytest.approx(0.5)
    assert f[0, 3] == 0
    # prefill TP ring: 2 all-reduces * L * tokens/s * h * beta = 2*2*1000*1000*2 = 8e6 B
    assert f[0, 1] == pytest.approx(8e-3)


def test_kv_transfer_reaches_the_matching_rank_of_every_decode_replica() -> None:
    spec = ServingSpec(
        decode=PoolSpec(2, 4),
        prefill=PoolSpec(3, 2),
        requests_per_s=3,
        prompt_tokens=1000,
        output_tokens=10,
        kv_bytes_per_token=1e6,
    )
    no_kv = Workload.from_serving("s", replace(spec, kv_bytes_per_token=1e-30), TINY)
    kv = Workload.from_serving("s", spec, TINY).traffic_matrix() - no_kv.traffic_matrix()
    # 3 req/s * 1000 tokens * 1 MB = 3 GB/s over 3 prefill replicas, 2 decode replicas, TP2
    share = 3.0 / 3 / 2 / 2
    expected = np.zeros_like(kv)
    for p in range(3):
        for r in range(2):
            for d in range(2):
                expected[p * 2 + r, 6 + d * 4 + (r * 4) // 2] = share
    assert np.allclose(kv, expected)


def test_explicit_edges_sum_and_drop_self_traffic() -> None:
    w = Workload.from_edges("e", 3, [(0, 1, 1.0), (0, 1, 2.0), (2, 2, 5.0), (1, 2, 0.0)])
    assert w.n_edges == 1 and w.traffic_matrix()[0, 1] == 3.0


def test_model_files_load_and_round_trip(tmp_path) -> None:
    for path in sorted((MODELS / "workloads").glob("*.yaml")):
        w = read_workload(path)
        assert w.workers >= 1 and (w.total_gb > 0 or w.gpu_costs is not None), path
        out = tmp_path / path.name
        write_workload(w, out)
        back = read_workload(out)
        assert back.workers == w.workers
        if w.gpu_costs is not None:
            cluster = tsched.presets.cluster("dgx-h100-4node")
            gpus = np.arange(cluster.n_gpus)
            table = w.gpu_costs.table(cluster, w.workers, gpus)
            assert np.array_equal(back.gpu_costs.table(cluster, w.workers, gpus), table)
        assert (
            np.allclose(back.traffic_matrix(), w.traffic_matrix())
            if w.workers <= 512
            else np.allclose(back.gb, w.gb)
        )


def test_traffic_file_forms(tmp_path) -> None:
    m = np.array([[0, 1.5, 0], [0, 0, 2.0], [0.5, 0, 0]])
    np.save(tmp_path / "m.npy", m)
    np.savetxt(tmp_path / "m.csv", m, delimiter=",")
    (tmp_path / "e.csv").write_text("src,dst,gb\n0,1,1.5\n1,2,2.0\n2,0,0.5\n")
    for name, extra in (("m.npy", ""), ("m.csv", ""), ("e.csv", "workers: 3\n")):
        doc = f"tsched: workload/v1\nname: f\n{extra}traffic_file: {name}\n"
        (tmp_path / "w.yaml").write_text(doc)
        assert np.allclose(read_workload(tmp_path / "w.yaml").traffic_matrix(), m), name


HEAD = "tsched: workload/v1\nname: bad\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("traffic_matrix: [[0, 1], [1, 0, 2]]", r"traffic_matrix: matrix is not square"),
        ("traffic_matrix: [[0, .nan], [1, 0]]", r"traffic_matrix\[0\]\[1\]: must be a finite"),
        ("traffic_matrix: [[0, -1], [1, 0]]", r"traffic_matrix\[0\]\[1\]: must be 0\.\.1e\+15 GB"),
        ("traffic_matrix: [[0, 1e300], [1, 0]]", r"traffic_matrix\[0\]\[1\]: must be 0\.\.1e\+15"),
        (
            "workers: 2\ntraffic: [{src: 0, dst: 5, gb: 1}]",
            r"traffic\[0\]\.dst: worker id 5 out of range \(workers: 2",
        ),
        (
            "workers: 2\ntraffic: [{src: 0, dst: 1, gb: -2}]",
            r"traffic\[0\]\.gb: must be 0\.\.1e\+15 GB",
        ),
        ("workers: 2\ntraffic: [{src: 0, dts: 1, gb: 1}]", r"traffic\[0\]\.dts: unknown key"),
        ("traffic: [{src: 0, dst: 1, gb: 1}]", r"explicit 'traffic' needs 'workers'"),
        ("layout: {tp: 2}", r"'layout' needs a 'model'"),
        (
            "layout: {tp: 2, pp: 3}\nmodel: {params_b: 1, hidden: 8, layers: 4}",
            r"model\.layers: 4 layers do not split evenly over pp=3",
        ),
        (
            "layout: {ep: 2}\nmodel: {params_b: 1, hidden: 8, layers: 4}",
            r"layout\.ep: ep=2 needs an MoE model",
        ),
        (
            "layout: {tp: 2, order: tp-dp}\nmodel: {params_b: 1, hidden: 8, layers: 4}",
            r"layout\.order: must name each of tp, cp, ep, dp, pp once",
        ),
        (
            "layout: {tp: 0}\nmodel: {params_b: 1, hidden: 8, layers: 4}",
            r"layout\.tp: must be >= 1",
        ),
        (
            "traffic_matrix: [[0]]\nlayout: {tp: 2}",
            r"give exactly one of .*found: layout, "
            r"traffic_matrix",
        ),
        (
            "workers: 2\ntraffic: []\nconstraints: {gpu_model: [H100]}",
            r"constraints\.gpu_model: unknown key",
        ),
        (
            "workers: 2\ntraffic: [{src: 0, dst: .inf, gb: 1}]",
            r"traffic\[0\]\.dst: expected an integer",
        ),
        (
            "workers: 2\ntraffic: [{src: 0, dst: 1, gb: 1},\n"
            "  {src: 100000000000000000000, dst: 1, gb: 1}]",
            r"traffic\[1\]\.src: worker id 100000000000000000000 is out of range",
        ),
        (
            "layout: {tp: 8, dp: 1000000000000}\nmodel: {params_b: 1, hidden: 8, layers: 4}",
            r"layout: tp8 × dp1000000000000 is 8,000,000,000,000 workers; at most 2,097,152",
        ),
        (
            "serving: {decode: {replicas: 1000000000000, tp: 8}, requests_per_s: 1}\n"
            "model: {params_b: 1, hidden: 8, layers: 4}",
            r"serving: 8,000,000,000,000 workers .* at most 2,097,152",
        ),
    ],
)
def test_bad_workload_input(body: str, message: str) -> None:
    with pytest.raises(InputError, match=r"^w\.yaml: .*" + message):
        parse_workload_text(HEAD + body + "\n", "w.yaml")


def test_large_explicit_edge_list_loads(tmp_path) -> None:
    rng = np.random.default_rng(0)
    n, e = 4096, 100_000
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    lines = [HEAD, f"workers: {n}\n", "traffic:\n"]
    lines += [f"  - {{src: {a}, dst: {b}, gb: 0.5}}\n" for a, b in zip(src, dst)]
    path = tmp_path / "big.yaml"
    path.write_text("".join(lines))
    w = read_workload(path)
    keep = src != dst
    assert w.workers == n and np.isclose(w.total_gb, 0.5 * keep.sum())


@pytest.mark.parametrize("sort_keys", [False, True])
def test_long_block_style_traffic_reads_like_the_yaml_parser(sort_keys: bool) -> None:
    import yaml

    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 300, 1500), rng.integers(0, 300, 1500)
    keep = src != dst
    edges = [{"src": int(a), "dst": int(b), "gb": float(g)}
             for a, b, g in zip(src[keep], dst[keep], rng.uniform(0, 5, keep.sum()))]  # fmt: skip
    doc = {"tsched": "workload/v1", "name": "blk", "workers": 300, "traffic": edges}
    text = yaml.safe_dump(doc, sort_keys=sort_keys)
    assert "\n- src: " in text or "\n- dst: " in text  # block style, three lines an edge
    fast = parse_workload_text(text, "blk.yaml")
    slow = Workload.from_edges("blk", 300, [(e["src"], e["dst"], e["gb"]) for e in edges])
    assert np.allclose(fast.traffic_matrix(), slow.traffic_matrix())


def test_numbers_with_an_exponent_read_alike_in_short_and_long_lists() -> None:
    # YAML 1.1 (PyYAML) reads 2e3 and 1.5e3 as strings; long lists take the fast path, which
    # always read them as numbers: both now do, as YAML 1.2 does
    for count in (3, 1200):
        lines = "".join(f"  - {{src: {i}, dst: {i + 1}, gb: 1.5e3}}\n" for i in range(count))
        text = f"tsched: workload/v1\nname: e\nworkers: {count + 1}\ntraffic:\n{lines}"
        w = parse_workload_text(text, "e.yaml")
        assert w.n_edges == count and w.total_gb == pytest.approx(1500.0 * count)


def test_a_block_list_with_one_odd_line_falls_back_to_the_parser() -> None:
    lines = "".join(f"- src: {i}\n  dst: {i + 1}\n  gb: 1.0\n" for i in range(1200))
    text = f"tsched: workload/v1\nname: odd\nworkers: 1300\ntraffic:\n{lines}"
    assert parse_workload_text(text, "odd.yaml").n_edges == 1200
    bad = text.replace("  gb: 1.0\n", "  gb: lots\n", 1)
    with pytest.raises(InputError, match="odd.yaml: traffic"):
        parse_workload_text(bad, "odd.yaml")
    fractional = text.replace("- src: 5\n", "- src: 5.5\n", 1)
    with pytest.raises(InputError, match=r"odd.yaml: traffic\[5\]\.src"):
        parse_workload_text(fractional, "odd.yaml")
