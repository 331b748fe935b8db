"""Field checks shared by the model-file readers.

Every failure raises :class:`~tsched.errors.InputError` with the file, the field's path
(``nodes[3].type``), the rule and the bad value, so a user can fix the file without reading code.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from tsched.errors import InputError


def join(where: str, key: str | int) -> str:
    """Extend a field path: ``join("nodes", 3)`` → ``nodes[3]``, ``join("nodes[3]", "type")``."""
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


class Checker:
    """Validates plain YAML/JSON data read from ``source`` (a file name or a preset name)."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> InputError:
        prefix = f"{self.source}: {where}: " if where else f"{self.source}: "
        return InputError(prefix + message)

    def mapping(
        self,
        value: Any,
        where: str,
        *,
        required: Iterable[str] = (),
        optional: Iterable[str] = (),
        example: str = "",
        free_keys: bool = False,
    ) -> Mapping[str, Any]:
        """``value`` as a mapping with string keys: those in ``required`` present, no others
        than ``required`` and ``optional`` unless ``free_keys`` (names the file chooses, such as
        link classes or node types)."""
        required = tuple(required)
        allowed = set(required) | set(optional)
        if not isinstance(value, Mapping):
            hint = f" (e.g. {example})" if example else ""
            raise self.fail(where, f"expected a mapping{hint}, got {_describe(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.fail(where, f"keys must be strings, got {key!r}")
            if not free_keys and key not in allowed:
                valid = ", ".join(sorted(allowed))
                raise self.fail(join(where, key), f"unknown key {key!r} (valid keys: {valid})")
        for key in required:
            if key not in value:
                raise self.fail(where, f"missing required key {key!r}")
        return value

    def sequence(self, value: Any, where: str, *, example: str = "") -> list[Any]:
        if not isinstance(value, list):
            hint = f" (e.g. {example})" if example else ""
            raise self.fail(where, f"expected a list{hint}, got {_describe(value)}")
        return value

    def string(self, value: Any, where: str) -> str:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise self.fail(where, f"expected a name (string), got {_describe(value)}")
        text = str(value)
        if not text.strip():
            raise self.fail(where, "expected a non-empty name")
        return text

    def number(
        self, value: Any, where: str, *, minimum: float | None = None, positive: bool = False
    ) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(where, f"expected a number, got {_describe(value)}")
        number = float(value)
        if not math.isfinite(number):
            raise self.fail(where, f"expected a finite number, got {value!r}")
        if positive and number <= 0:
            raise self.fail(where, f"must be > 0, got {value!r}")
        if minimum is not None and number < minimum:
            raise self.fail(where, f"must be >= {minimum:g}, got {value!r}")
        return number

    def integer(self, value: Any, where: str, *, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected an integer, got {_describe(value)}")
        if minimum is not None and value < minimum:
            raise self.fail(where, f"must be >= {minimum}, got {value!r}")
        return int(value)

    def boolean(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"expected true or false, got {_describe(value)}")
        return value

    def choice(self, value: Any, where: str, allowed: Iterable[str]) -> str:
        allowed = tuple(allowed)
        text = self.string(value, where)
        if text not in allowed:
            raise self.fail(
                where, f"unknown value {text!r} (expected one of: {', '.join(allowed)})"
            )
        return text


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"
