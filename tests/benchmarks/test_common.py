"""The results folder as a record: reports stamped with commit and command, variants written
as sections of their benchmark's one report."""

from __future__ import annotations

import doctest
import re

import benchmarks._common as common


def test_the_helpers_examples_hold() -> None:
    assert doctest.testmod(common).failed == 0


def test_a_variant_replaces_its_own_section_and_leaves_the_rest(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    common.write_result("bench", "# Bench\n\nmain figures\n")
    common.write_result("bench", "# Bench, seed 5\n\nfirst run\n", section="seed5")
    common.write_result("bench", "# Bench, tables\n\ntables run\n", section="tables")
    common.write_result("bench", "# Bench, seed 5\n\nsecond run\n", section="seed5")
    text = (tmp_path / "bench.md").read_text()
    assert text.startswith("# Bench\n\nMeasured at commit `") and "main figures" in text
    assert "first run" not in text and "second run" in text and "tables run" in text
    assert text.index("second run") < text.index("tables run")  # the section kept its place
    assert len(re.findall(r"^Measured at commit `\w+(\+changes)?` with `python -m ", text,
                          re.MULTILINE)) == 3  # fmt: skip


def test_the_main_report_anew_keeps_the_sections(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    common.write_result("bench", "# Bench\n\nfirst main\n")
    common.write_result("bench", "# Bench, seed 5\n\nseed five\n", section="seed5")
    common.write_result("bench", "# Bench\n\nsecond main\n")
    text = (tmp_path / "bench.md").read_text()
    assert "first main" not in text and "second main" in text and "seed five" in text
    assert text.index("second main") < text.index("<!-- section: seed5 -->")
    assert text.count("<!-- section: seed5 -->") == 1
