"""``tsched`` command line: parse → call the library → print. Errors are caught once here.

One module per command group: :mod:`~tsched.cli.solve` (solve, qap, methods, presets),
:mod:`~tsched.cli.show`, :mod:`~tsched.cli.discovery` (inventory, topology, validate),
:mod:`~tsched.cli.sandbox` (sandbox, ray start-flags), :mod:`~tsched.cli.run`,
:mod:`~tsched.cli.compare`, :mod:`~tsched.cli.defrag`, :mod:`~tsched.cli.kai`,
:mod:`~tsched.cli.dynamo`, :mod:`~tsched.cli.agents`. Each has an
``add_parsers(sub)`` that registers its commands on the main parser.

Exit codes (DESIGN.md §4): 0 a plan or result was produced, 1 no feasible placement, 2 bad input
or usage (one line on stderr), 3 a backend or solver failed. ``--json`` prints exactly one JSON
document on stdout; progress and messages go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from tsched.cli._common import EXIT_INPUT, EXIT_OK, Parser
from tsched.errors import TschedError

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tsched", description="Topology-aware GPU placement planner.")
    parser.add_argument("--version", action="version", version="tsched 0.1.0")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    from tsched.cli import (
        agents,
        compare,
        defrag,
        discovery,
        dynamo,
        kai,
        run,
        sandbox,
        show,
        solve,
    )

    for module in (solve, show, discovery, sandbox, run, compare, defrag, kai, dynamo, agents):
        module.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tsched`` console script; returns the exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:  # `tsched run ray PLAN -- CMD …`: everything after `--` is the command
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1 :]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already reported
        return int(exc.code or 0)
    if rest:
        if not hasattr(args, "cmd_argv"):
            sys.stderr.write(
                "tsched: error: `-- COMMAND` is only for `tsched run ray` and `tsched kai`\n"
            )
            return EXIT_INPUT
        args.cmd_argv = rest
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_INPUT
    try:
        return func(args)
    except TschedError as exc:
        message = " ".join(str(exc).split("\n"))
        sys.stderr.write(f"tsched: error: {message}\n")
        return exc.exit_code
    except BrokenPipeError:  # e.g. `tsched ... | head`: stop quietly
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write("tsched: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
