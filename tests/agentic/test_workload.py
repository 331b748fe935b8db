"""Agentic workloads: presets, sampling, errors by field."""

from __future__ import annotations

import numpy as np
import pytest

from tsched.agentic.workload import PRESETS as WORKLOADS
from tsched.agentic.workload import parse_agentic_workload, program_specs
from tsched.errors import InputError


# ---------------------------------------------------------------- formats
def test_workload_presets_and_sampling():
    assert set(WORKLOADS) == {"swe", "openhands", "heavy-tail"}
    w = WORKLOADS["heavy-tail"].with_load(programs=2000)
    tools = np.concatenate([s.tool_seconds for s in program_specs(w, 1)])
    assert np.median(tools) == pytest.approx(w.tool_seconds.median(), rel=0.1)
    assert program_specs(w, 1)[5] == program_specs(w.with_load(programs=10), 1)[5]


def base_workload(**over):
    data = {
        "tsched": "agentic-workload/v1", "name": "t", "programs": 4, "concurrency": 2,
        "turns": 3, "system_tokens": 10, "initial_tokens": 5, "growth_tokens": 5,
        "output_tokens": 2, "tool_seconds": {"dist": "lognormal", "median": 1, "sigma": 0.5},
    }  # fmt: skip
    data.update(over)
    return {k: v for k, v in data.items() if v is not None}


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"tool_seconds": {"dist": "gamma", "k": 1}}, r"w.yaml: tool_seconds.dist: unknown value"),
        ({"tool_seconds": {"dist": "uniform", "low": 3, "high": 1}},
         r"tool_seconds.high: must be >= low \(3\), got 1"),
        ({"arrival_rate": 2.0}, "give exactly one of 'concurrency'"),
        ({"concurrency": None}, "give exactly one of 'concurrency'"),
        ({"growth_tokens": 1.5}, r"growth_tokens: expected a whole number of tokens, got 1.5"),
        ({"tsched": "agentic-workload/v2"}, r"tsched: expected 'agentic-workload/v1'"),
        ({"programs": 0}, r"programs: must be >= 1, got 0"),
        ({"turnz": 3}, r"turnz: unknown key 'turnz'"),
    ],
)  # fmt: skip
def test_workload_errors_name_the_field(over, message):
    with pytest.raises(InputError, match=message):
        parse_agentic_workload(base_workload(**over), "w.yaml")
