"""Small file helpers shared by the readers and writers: atomic writes and YAML loading."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tsched.errors import InputError

T = TypeVar("T")

try:  # PyYAML's C loader is ~10x faster on big model files; fall back to pure Python.
    _Base: type = yaml.CSafeLoader
    _Dumper: type = yaml.CSafeDumper
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Base = yaml.SafeLoader
    _Dumper = yaml.SafeDumper


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader, reading numbers with an exponent as YAML 1.2 does: PyYAML follows
    YAML 1.1, where ``1e3``, ``1.0e3`` and ``+5E-2`` are strings (only ``1.0e+3`` is a float),
    so ``bandwidth: 1e3`` would be refused as "not a number"."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` so that the file is either the old one or the whole new one.

    The text goes to a temporary file in the same folder, is flushed to disk, then renamed over
    the target; on any error the temporary file is removed and the target is untouched.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{target}: cannot write: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _mode_for(target: Path) -> int:
    """The existing file's permissions, or what a plain ``open`` would give (0666 less umask);
    ``mkstemp`` alone would leave 0600."""
    try:
        return target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def save_figure(fig: Any, path: str | os.PathLike[str], dpi: int = 110) -> Path:
    """Save a matplotlib figure atomically (temporary file, then rename) and close it; the
    format follows the suffix (``.png``, ``.svg`` …)."""
    import matplotlib.pyplot as plt

    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp{target.suffix}")
    try:
        fig.savefig(tmp, dpi=dpi)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    return target


def read_text(path: str | os.PathLike[str], what: str) -> str:
    """Read a text file, turning a missing or unreadable file into an :class:`InputError`."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{p}: {what} file not found") from None
    except IsADirectoryError:
        raise InputError(f"{p}: expected a {what} file, found a folder") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{p}: cannot read {what} file: {exc}") from exc


def load_yaml_text(text: str, source: str) -> Any:
    """Parse YAML, reporting syntax errors with ``source:line:column`` (1-based)."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - SafeLoader/CSafeLoader only
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(f"{where}: YAML syntax error: {problem}") from exc
    except yaml.YAMLError as exc:  # one line: PyYAML's message spans several
        raise InputError(f"{source}: YAML error: {' '.join(str(exc).split())}") from exc


def load_preset_or_file(
    spec: str | os.PathLike[str],
    presets: Mapping[str, T],
    what: str,
    parse: Callable[[Any, str], T],
) -> T:
    """A preset by name, else the YAML file ``spec`` parsed by ``parse(data, source)``. A bare
    name that is neither says so and lists the presets."""
    if isinstance(spec, str) and spec in presets:
        return presets[spec]
    path = Path(spec)
    if not path.suffix and not path.exists():
        raise InputError(f"{spec}: not an {what} preset ({', '.join(presets)}) and no such file")
    text = read_text(path, what)
    return parse(load_yaml_text(text, str(path)), str(path))


def dump_yaml(data: Any) -> str:
    """Dump plain data as block-style YAML with keys in insertion order."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=100)
