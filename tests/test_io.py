"""Atomic writes: whole file or untouched, with ordinary permissions."""

from __future__ import annotations

import os
import stat

import pytest

from tsched._io import atomic_write_text
from tsched.errors import InputError


def test_new_file_gets_umask_permissions_and_existing_keeps_its_own(tmp_path) -> None:
    old = os.umask(0o022)
    try:
        new = tmp_path / "new.txt"
        atomic_write_text(new, "a")
        assert stat.S_IMODE(new.stat().st_mode) == 0o644
        kept = tmp_path / "kept.txt"
        kept.write_text("old")
        kept.chmod(0o640)
        atomic_write_text(kept, "new")
        assert kept.read_text() == "new" and stat.S_IMODE(kept.stat().st_mode) == 0o640
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt", "new.txt"]


def test_failed_write_leaves_the_target_and_no_temporary_file(tmp_path) -> None:
    target = tmp_path / "t.txt"
    target.write_text("old")
    with pytest.raises(TypeError):
        atomic_write_text(target, None)  # type: ignore[arg-type]
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["t.txt"]
    with pytest.raises(InputError, match="does not exist"):
        atomic_write_text(tmp_path / "nope" / "x.txt", "a")
