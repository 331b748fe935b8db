"""What every command module of the CLI shares: exit codes, the one-line-error parser, the
stderr console and ``--option KEY=VALUE`` parsing."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
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
]

EXIT_OK, EXIT_INFEASIBLE, EXIT_INPUT, EXIT_BACKEND = 0, 1, 2, 3


class Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line on stderr with exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(EXIT_INPUT)


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
