"""tsched.compare.releases: when GPUs come free, alone."""

from __future__ import annotations

import math

import numpy as np

from tests.compare.sim_helpers import one_node
from tsched.compare.releases import ReleaseTable


def test_the_table_keeps_each_nodes_ends_in_order_and_grows_past_four_jobs() -> None:
    t = ReleaseTable(one_node(gpus=8, nodes=2))
    for job, end in enumerate((50.0, 10.0, 40.0, 30.0, 20.0, 60.0)):
        t.add(job, end, [(0, 1)])
    t.add(9, 5.0, [(0, 1), (1, 3)])
    assert t.end[0, :7].tolist() == [5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    assert t.gpus[0, :7].tolist() == [1] * 7 and t.gpus[1, :2].tolist() == [3, 0]
    t.remove(9, [(0, 1), (1, 3)])
    assert t.end[0, 0] == 10.0 and math.isinf(t.end[1, 0])
    assert t.node_end().tolist() == [60.0, -math.inf]


def test_room_times_say_now_never_or_the_end_that_makes_room() -> None:
    t = ReleaseTable(one_node(gpus=4, nodes=3))
    t.add(0, 30.0, [(0, 2)])
    t.add(1, 70.0, [(0, 2)])
    t.add(2, 20.0, [(1, 1)])
    per_node = np.array([0, 1, 4])
    when = t.room_times(3, per_node)
    assert when.tolist() == [70.0, math.inf, -math.inf]  # node 1 never has 3: 1 free + 1 freed
    assert t.room_times(2, per_node).tolist() == [30.0, 20.0, -math.inf]
    t.clock = 5.0
    assert t.room_soonest(2, per_node, skip={2}) == (15.0, 1)
    assert t.room_soonest(4, np.array([0, 1, 0]), skip=set()) == (65.0, 0)
    assert t.room_soonest(4, np.array([0, 1, 0]), skip={0}) is None


def test_kept_answers_follow_the_clock_and_the_table() -> None:
    t = ReleaseTable(one_node(gpus=4, nodes=1))
    t.add(0, 30.0, [(0, 4)])
    assert t.hold().tolist() == [30.0]
    t.clock = 10.0
    assert t.hold().tolist() == [20.0]  # a new clock: a new answer
    t.add(1, 90.0, [(0, 0)])
    assert t.hold().tolist() == [80.0]  # a new table: a new answer
    assert t.releases()[0][0, :2].tolist() == [20.0, 80.0]
