"""QAPLIB ``.dat`` instances and ``.sln`` solutions.

``.dat``: whitespace-separated integers ``n``, then A (n·n, row-major), then B (n·n); line breaks
carry no meaning. The objective is Σ_ij A[i, j]·B[p(i), p(j)] with A the *first* matrix.

``.sln``: ``n value`` then a permutation ``p(1..n)``. Known quirks (see the data's README): some
files list the inverse permutation, ``tai40a.sln`` is 0-based, and ``kra32.sln``'s header value is
a typo. :func:`read_sln` with the instance's matrices recomputes the value under each convention
and reports the one that reproduces the stated value (or, failing that, the best).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from tsched._io import read_text
from tsched.errors import InputError

__all__ = ["QAPInstance", "QAPSolution", "read_dat", "read_sln", "qap_cost"]


@dataclass(frozen=True, slots=True)
class QAPInstance:
    name: str
    n: int
    flow: np.ndarray  # A, the first matrix
    distance: np.ndarray  # B, the second matrix


@dataclass(frozen=True, slots=True)
class QAPSolution:
    name: str
    n: int
    stated_value: int
    permutation: np.ndarray  # 0-based, p[i] = location of facility i
    convention: str  # "direct" or "inverse"
    base: int  # 0 or 1, as written in the file
    verified_value: int | None  # recomputed from the instance, when given


def qap_cost(flow: np.ndarray, distance: np.ndarray, perm: np.ndarray) -> int | float:
    """Σ_ij flow[i, j]·distance[perm[i], perm[j]] (QAPLIB's definition)."""
    p = np.asarray(perm)
    return (np.asarray(flow) * np.asarray(distance)[np.ix_(p, p)]).sum().item()


def _numbers(path: str | os.PathLike[str], what: str) -> list[str]:
    return read_text(path, what).split()


def read_dat(path: str | os.PathLike[str]) -> QAPInstance:
    """Read a QAPLIB ``.dat`` file. Raises :class:`InputError` on a short or malformed file."""
    tokens = _numbers(path, "QAPLIB instance")
    name = os.path.splitext(os.path.basename(str(path)))[0]
    if not tokens:
        raise InputError(f"{path}: empty file (expected n, then two n x n matrices)")
    try:
        n = int(tokens[0])
    except ValueError:
        raise InputError(
            f"{path}: first number (n) must be an integer, got {tokens[0]!r}"
        ) from None
    if n < 1:
        raise InputError(f"{path}: n must be >= 1, got {n}")
    need = 1 + 2 * n * n
    if len(tokens) < need:
        raise InputError(
            f"{path}: too few numbers: n={n} needs {2 * n * n} matrix entries "
            f"after n, found {len(tokens) - 1}"
        )
    if len(tokens) > need:
        raise InputError(
            f"{path}: too many numbers: n={n} needs {2 * n * n} matrix entries "
            f"after n, found {len(tokens) - 1}"
        )
    try:
        values = np.array(tokens[1:], dtype=np.int64)
    except OverflowError:
        bad = next(t for t in tokens[1:] if abs(int(t)) >= 2**63)
        raise InputError(f"{path}: matrix entry {bad} does not fit a 64-bit integer") from None
    except ValueError:
        bad = next(t for t in tokens[1:] if not t.lstrip("-").isdigit())
        raise InputError(f"{path}: matrix entries must be integers, got {bad!r}") from None
    return QAPInstance(name, n, values[: n * n].reshape(n, n), values[n * n :].reshape(n, n))


def read_sln(path: str | os.PathLike[str], instance: QAPInstance | None = None) -> QAPSolution:
    """Read a QAPLIB ``.sln`` file, normalising the permutation to 0-based ``p[facility]``.

    With ``instance``, the direct and inverse readings are both evaluated; the one reproducing the
    stated value wins (else the lower one), and ``verified_value`` is its recomputed cost.
    """
    tokens = _numbers(path, "QAPLIB solution")
    name = os.path.splitext(os.path.basename(str(path)))[0]
    try:
        n, value = int(tokens[0]), int(tokens[1])
        perm = np.array(tokens[2:], dtype=np.int64)
    except (IndexError, ValueError):
        raise InputError(f"{path}: expected 'n value' then n integers") from None
    if len(perm) != n:
        raise InputError(f"{path}: header says n={n} but {len(perm)} permutation entries follow")
    base = 0 if perm.min() == 0 else 1
    p = perm - base
    if sorted(p.tolist()) != list(range(n)):
        raise InputError(f"{path}: not a permutation of 1..{n} (or 0..{n - 1})")
    if instance is None:
        return QAPSolution(name, n, value, p, "direct", base, None)
    if instance.n != n:
        raise InputError(f"{path}: n={n} but instance {instance.name} has n={instance.n}")
    direct = qap_cost(instance.flow, instance.distance, p)
    inverse_p = np.argsort(p)
    inverse = qap_cost(instance.flow, instance.distance, inverse_p)
    if direct == value or (inverse != value and direct <= inverse):
        return QAPSolution(name, n, value, p, "direct", base, int(direct))
    return QAPSolution(name, n, value, inverse_p, "inverse", base, int(inverse))
