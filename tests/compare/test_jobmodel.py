"""The placement-aware job time model: collectives, iteration times, bad model files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tsched
from tests.compare.sim_helpers import G4DN
from tsched.compare.calibrate import load_jobmodel
from tsched.compare.jobmodel import (
    AppModel,
    CollectiveModel,
    allreduce_seconds,
    alltoall_seconds,
    iteration_seconds,
    p2p_seconds,
    packed_gpus,
    placement_gpus,
)
from tsched.errors import InputError


# ---------------------------------------------------------------------------- job model
def test_allreduce_prices_the_slowest_link_and_shared_nics() -> None:
    c = tsched.load_cluster(G4DN)
    gb = 1.0
    single = allreduce_seconds(c, placement_gpus(c, "4"), gb)
    assert single == pytest.approx(2 * 3 * 5e-6 + 1.5 * gb / 10)
    flat = CollectiveModel()
    assert allreduce_seconds(c, placement_gpus(c, "22"), gb, flat) > single
    shared = CollectiveModel(nic_sharing=1.0)
    packed = allreduce_seconds(c, placement_gpus(c, "44"), gb, shared)
    spread = allreduce_seconds(c, placement_gpus(c, "2222"), gb, shared)
    assert spread < packed  # a busy NIC costs more than a longer ring
    costly = CollectiveModel(overhead_factor=3.0)
    g11 = placement_gpus(c, "11")
    assert allreduce_seconds(c, g11, gb, costly, overhead_s=0.01) == pytest.approx(
        allreduce_seconds(c, g11, gb, flat) + 0.03
    )
    assert allreduce_seconds(c, placement_gpus(c, "4"), gb, costly, 0.01) == pytest.approx(
        single + 0.01
    )
    two = CollectiveModel(two_node_factor=2.0)
    assert allreduce_seconds(c, placement_gpus(c, "11"), gb, two) == pytest.approx(
        2 * allreduce_seconds(c, placement_gpus(c, "11"), gb, flat)
    )
    assert alltoall_seconds(c, placement_gpus(c, "22"), gb) > alltoall_seconds(
        c, placement_gpus(c, "4"), gb
    )
    assert p2p_seconds(c, 0, 4, 1.0) == pytest.approx(50e-6 + 1 / 0.656)


def test_iteration_time_combines_compute_and_communication() -> None:
    c = tsched.load_cluster(G4DN)
    app = AppModel("a", 0.1, 0.01, 0.2, local_bsz=10)
    gpus = placement_gpus(c, "11")
    comm = allreduce_seconds(c, gpus, 0.2)
    serial = iteration_seconds(app, c, gpus, model=CollectiveModel(overlap=1.0))
    assert serial == pytest.approx(0.2 + comm)
    overlapped = iteration_seconds(app, c, gpus, model=CollectiveModel(overlap=4.0))
    assert max(0.2, comm) < overlapped < serial
    assert iteration_seconds(app, c, placement_gpus(c, "1")) == pytest.approx(0.2)
    assert list(packed_gpus(c, 6)) == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("placement", "match"),
    [("0", "digits 1-9"), ("5", "4 GPUs on node|has 4"), ("1" * 17, "spans 17 nodes")],
)
def test_bad_placement_strings_are_refused(placement, match) -> None:
    with pytest.raises(InputError, match=match):
        placement_gpus(tsched.load_cluster(G4DN), placement)


JOBMODEL = Path(__file__).parents[2] / "tsched" / "data" / "jobmodel" / "pollux-testbed.json"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(collective=0), r"collective: expected a mapping of"),
        (lambda d: d.update(applications=1.5), r"applications: expected a list"),
        (lambda d: d["applications"].append(3), r"applications\[4\]: expected a mapping"),
        (lambda d: d["applications"][0].update(compute_s=-1.0),
         r"applications\[0\]: application '\w+': compute_s must be a finite number >= 0"),
        (lambda d: d["applications"][1].update(local_bsz=0),
         r"applications\[1\]: application '\w+': local_bsz must be >= 1"),
        (lambda d: d["applications"][2].update(gradient_gb=float("nan")),
         r"gradient_gb must be a finite number >= 0, got nan"),
    ],
)  # fmt: skip
def test_a_bad_job_model_is_refused_by_field(tmp_path, edit, message) -> None:
    doc = json.loads(JOBMODEL.read_text())
    assert len(doc["applications"]) == 4
    load_jobmodel(JOBMODEL)  # the shipped one reads
    edit(doc)
    path = tmp_path / "jm.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=message):
        load_jobmodel(path)
