"""What every command module of the CLI shares: exit codes, the one-line-error parser, the
stderr console and ``--option KEY=VALUE`` parsing."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from tsched.errors import InputError

__all__ = [
    "EXIT_OK",
    "EXIT_INFEASIBLE",
    "EXIT_INPUT",
    "EXIT_BACKEND",
    "Parser",
    "stderr_console",
    "parse_options",
    "format_number",
    "format_seconds",
    "result_line",
    "add_cluster_argument",
    "integer",
    "number",
    "MAX_SEEDS",
    "progress",
    "load_plan_models",
]

#: Most seeds (replicas) a comparison may ask for in one command.
MAX_SEEDS = 1000

EXIT_OK, EXIT_INFEASIBLE, EXIT_INPUT, EXIT_BACKEND = 0, 1, 2, 3


class Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line on stderr with exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(EXIT_INPUT)


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer in [``minimum``, ``maximum``] (either end open when
    ``None``), or a one-line usage error that names the flag, the range and the value."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            if minimum is not None and maximum is not None:
                rule = f"in {minimum}..{maximum}"
            else:
                rule = f">= {minimum}" if minimum is not None else f"<= {maximum}"
            raise argparse.ArgumentTypeError(f"expected an integer {rule}, got {text!r}")
        return value

    return parse


def number(minimum: float | None = None, positive: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite number, > 0 when ``positive``, else >= ``minimum`` when
    given; or a one-line usage error that names the flag, the rule and the value."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if (positive and value <= 0) or (minimum is not None and value < minimum):
            rule = "> 0" if positive else f">= {minimum:g}"
            raise argparse.ArgumentTypeError(f"expected a number {rule}, got {text!r}")
        return value

    return parse


def stderr_console(quiet: bool) -> Any:
    from rich.console import Console

    return Console(stderr=True, quiet=quiet, highlight=False)


def parse_options(items: Sequence[str] | None) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise InputError(
                f"--option {item!r}: expected KEY=VALUE (e.g. --option required_level=leaf)"
            )
        key, raw = item.split("=", 1)
        value: Any = raw
        for convert in (int, float):
            try:
                value = convert(raw)
                break
            except ValueError:
                continue
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        options[key.strip()] = value
    return options


def format_number(value: float) -> str:
    """An objective or bound for people: integers as integers (QAPLIB costs), else 6
    significant digits. JSON output keeps full precision; this is for the human lines only."""
    value = float(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def format_seconds(seconds: float) -> str:
    """A wall time: ``0.011 s``, ``2.00 s``, ``123 s``."""
    if seconds < 1.0:
        return f"{seconds:.3f} s"
    return f"{seconds:.2f} s" if seconds < 100.0 else f"{seconds:.0f} s"


def result_line(result: Any, unit: str = "", bound_unit: str = "") -> str:
    """The one line every command that solves prints about a result: status, objective,
    bound, gap as a percentage, method and wall time (``tsched solve``, ``tsched qap``)."""
    bound = "unknown" if result.bound is None else format_number(result.bound) + bound_unit
    gap = "unknown" if result.gap is None else f"{100 * result.gap:.2f}%"
    objective = "none" if result.objective is None else format_number(result.objective) + unit
    return (
        f"status {result.status}  objective {objective}  bound {bound}  gap {gap}  "
        f"method {result.method}  {format_seconds(result.wall_time)}"
    )


def add_cluster_argument(parser: argparse.ArgumentParser) -> None:
    """``--cluster PATH|PRESET``, the built-in default cluster when not given."""
    from tsched import presets

    parser.add_argument(
        "--cluster",
        default=presets.DEFAULT_CLUSTER,
        help=f"cluster/v1 file or preset (default: {presets.DEFAULT_CLUSTER})",
    )


def progress(quiet: bool) -> Any:
    """A rich progress bar on stderr (bar, done of total, time), silent with ``quiet``, gone
    when it ends."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True, quiet=quiet),
        transient=True,
    )


def load_plan_models(
    plan: Any, cluster: str | None, workload: str | None, plan_path: str | None = None
) -> tuple[Any, Any]:
    """The cluster and workload to draw a plan with: the given files or presets, else where the
    plan says they came from (its ``sources``, as given when it was solved: a path from the
    current folder or from the plan's, or a preset), else the presets the plan names. A
    workload that cannot be found is left out (no traffic drawn)."""
    from tsched import presets
    from tsched.presets import load_cluster, load_workload

    sources = dict(plan.sources or {})
    cluster = cluster or _found(sources.get("cluster"), plan_path, presets.CLUSTERS)
    workload = workload or _found(sources.get("workload"), plan_path, presets.WORKLOADS)
    if cluster is None:
        if plan.cluster not in presets.CLUSTERS:
            where = f"{plan_path}: " if plan_path else ""
            recorded = sources.get("cluster")
            found = f" and its recorded source {recorded!r} is not found" if recorded else ""
            raise InputError(
                f"{where}cluster: the plan's cluster {plan.cluster!r} is not a preset{found}; "
                "give its model with --cluster FILE"
            )
        cluster = plan.cluster
    if workload is None and plan.workload in presets.WORKLOADS:
        workload = plan.workload
    return load_cluster(cluster), (load_workload(workload) if workload else None)


def _found(source: str | None, plan_path: str | None, names: dict[str, str]) -> str | None:
    """A recorded source that can be read: a file from here or from the plan's folder, or a
    preset name; None otherwise."""
    from pathlib import Path

    if not source:
        return None
    if Path(source).exists() or (source in names and not Path(source).suffix):
        return source
    if plan_path is not None:
        beside = Path(plan_path).parent / source
        if beside.exists():
            return str(beside)
    return None
