"""Helpers shared by the benchmark scripts: machine facts, medians, markdown tables, and the
results folder as a record (every report stamped with the commit and command it was measured
with; plots stored compactly; one report per benchmark, variants as its sections)."""

from __future__ import annotations

import csv
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tsched.stats import ci95, paired_ci95

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    """One line: CPU count, Python and the versions that matter for the numbers."""
    libs = ", ".join(f"{name} {version(name)}" for name in ("numpy", "scipy", "tsched"))
    return (
        f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, {libs}"
    )


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any]:
    """Median seconds over ``repeats`` runs, all the times, and the last return value."""
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, value


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


#: The line that names a report's commit and command (one per report or section).
STAMP = re.compile(
    r"^(?:Measured at|Recorded in) commit `[0-9a-f]{7,40}[^`]*`(?: with `[^`]*`)?\.\n", re.MULTILINE
)
#: What marks a section of a report (a variant of the benchmark: another option, seed or setting).
SECTION = "<!-- section: {} -->"


def commit() -> str:
    """The checked-out commit, short, with ``+changes`` when the tree differs from it (so a
    report never claims a commit whose code it did not run)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()  # fmt: skip

    head = git("rev-parse", "--short=10", "HEAD") or "unknown"
    dirty = git(
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        "tsched",
        "benchmarks/*.py",
        "pyproject.toml",
    )
    return head + ("+changes" if dirty else "")


def command() -> str:
    """The command that is running, as a user would type it (``python -m benchmarks.NAME …``)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    module = spec.name if spec is not None else Path(sys.argv[0]).stem
    return " ".join(["python -m", module, *map(shlex.quote, sys.argv[1:])])


def stamp(text: str) -> str:
    """``text`` with the stamp line (commit and command) after its title, replacing an old one.

    >>> import re
    >>> once = stamp("# Title\\nbody\\n")
    >>> re.fullmatch(r"# Title\\n\\nMeasured at commit `\\w+(\\+changes)?` with `python -m .*`\\."
    ...              r"\\n\\nbody\\n", once) is not None, stamp(once) == once
    (True, True)
    """
    line = f"Measured at commit `{commit()}` with `{command()}`."
    text = STAMP.sub("", text)
    title, _, rest = text.partition("\n")
    return f"{title}\n\n{line}\n\n{rest.lstrip(chr(10))}"


def write_result(name: str, text: str, *, section: str | None = None) -> Path:
    """Write the report ``results/NAME.md``, stamped (:func:`stamp`).

    With ``section``, only that section of the report is replaced (or added): a variant of the
    benchmark (another option, seed or setting) lives in its benchmark's one report instead of a
    file of its own. Without it the main report is replaced and the sections after it stay.
    Plots in ``results/NAME/`` are stored compactly (:func:`compact_pngs`)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.md"
    body = stamp(text)
    if section is not None:
        old = path.read_text() if path.exists() else f"# {name}\n"
        block = (f"{SECTION.format(section)}\n## {section}\n\n"
                 + body.partition("\n")[2].strip("\n") + "\n")  # fmt: skip
        body = replace_section(old, section, block)
    elif path.exists():  # the main report anew: its sections (the variants) stay
        old = path.read_text()
        first = old.find(SECTION.split("{")[0])
        if first >= 0:
            body = body.rstrip("\n") + "\n\n" + old[first:]
    path.write_text(body)
    folder = RESULTS / name
    if folder.is_dir():
        compact_pngs(folder)
    return path


def write_rows(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Write ``rows`` (dicts with the same keys) as a CSV file at ``path``, its folder made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def mean_ci(rows: Sequence[dict[str, Any]], metric: str, digits: int = 2) -> str:
    """``metric``'s mean ± its Student-t 95 % half-width over ``rows`` (NaNs left out; "–"
    when none is left)."""
    values = [r[metric] for r in rows if r[metric] == r[metric]]
    if not values:
        return "–"
    m, _lo, hi = ci95(values)
    return f"{m:.{digits}f} ± {hi - m:.{digits}f}"


def paired_ratio(
    ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]], metric: str = "steps_per_min"
) -> tuple[float, float, float]:
    """The ratio of ``metric``'s means with its 95 % interval, paired by ``seed`` (1 + the
    paired relative difference, :func:`tsched.stats.paired_ci95`)."""
    m, lo, hi, _n = paired_ci95({r["seed"]: r[metric] for r in ours},
                                {r["seed"]: r[metric] for r in theirs})  # fmt: skip
    return 1 + m, 1 + lo, 1 + hi


def replace_section(report: str, section: str, block: str) -> str:
    """``report`` with section ``section`` (from its marker to the next marker or the end)
    replaced by ``block``, or ``block`` added at the end.

    >>> r = replace_section("# t\\n", "a", "<!-- section: a -->\\nA1\\n")
    >>> r = replace_section(r, "b", "<!-- section: b -->\\nB\\n")
    >>> replace_section(r, "a", "<!-- section: a -->\\nA2\\n")
    '# t\\n\\n<!-- section: a -->\\nA2\\n\\n<!-- section: b -->\\nB\\n'
    """
    marker = re.escape(SECTION.format(section))
    pattern = re.compile(marker + r".*?(?=<!-- section: |\Z)", re.DOTALL)
    if pattern.search(report):
        return (
            pattern.sub(lambda _: block.rstrip("\n") + "\n\n", report, count=1).rstrip("\n") + "\n"
        )
    return report.rstrip("\n") + "\n\n" + block.rstrip("\n") + "\n"


def compact_pngs(folder: Path) -> None:
    """Store every PNG under ``folder`` with a 256-colour palette (plots lose nothing visible
    and shrink about threefold; the results folder is a record kept in git)."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - matplotlib brings Pillow
        return
    for png in Path(folder).rglob("*.png"):
        with Image.open(png) as im:
            if im.mode == "P":
                continue
            small = im.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT,
                                               dither=Image.Dither.NONE)  # fmt: skip
        small.save(png, optimize=True)


def warm_tabu() -> None:
    """Compile tabu's kernel for int32 and for float64 tables (nug12, and nug12 with halved
    flows) so that no timed run pays the compilation (numba caches it on disk, but a fresh
    install or an edited kernel compiles again)."""
    import tsched
    from tsched.formats.qaplib import read_dat

    warm = read_dat(ROOT / "tests" / "data" / "qaplib" / "instances" / "nug12.dat")
    for flow in (warm.flow, 0.5 * warm.flow):
        tsched.solve_qap(flow, warm.distance, method="tabu", options={"iterations": 10})
