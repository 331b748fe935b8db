"""Every input format, fuzzed with a fixed seed (a sample of ``python -m benchmarks.fuzz_readers``):
no traceback, a refusal is one line naming the file, and nothing is written on refusal."""

from __future__ import annotations

from collections import Counter

from benchmarks.fuzz_readers import fuzz, readers


def test_every_reader_refuses_mutated_files_cleanly() -> None:
    formats = [r.name for r in readers()]
    assert {"cluster/v1", "workload/v1", "plan/v1", "agentic-workload/v1", "engine-profile/v1",
            "trace", "topograph", "slurm", "slurm-yaml", "nvidia-smi", "nccl-tests",
            "qaplib", "running-jobs", "defrag/v1"} <= set(formats)  # fmt: skip
    outcomes = fuzz(40 * len(formats), seed=0)
    assert [o for o in outcomes if o.problem] == []
    refused = Counter(o.fmt for o in outcomes if o.code == 2)
    read = Counter(o.fmt for o in outcomes if o.code in (0, 1))
    assert all(refused[f] > 0 for f in formats), refused  # every format saw bad files…
    assert sum(read.values()) > 0  # …and some mutations leave a valid file
