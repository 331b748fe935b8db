"""Defragmentation: which running jobs move, and where, so that a waiting job gets a placement its
admission rule accepts, losing the fewest GPU-seconds to restarts.

One module per stage: :mod:`~tsched.defrag.model` (the state by GPUs per node, admission,
placing, GPU indices), :mod:`~tsched.defrag.heuristic` (evict and re-place, with a lower bound),
:mod:`~tsched.defrag.exact` (the CP-SAT model), :mod:`~tsched.defrag.plan` (``defrag/v1`` and
:func:`defrag`, the solve) and :mod:`~tsched.defrag.picture` (before and after).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from tsched.defrag.model import ADMISSIONS
from tsched.defrag.plan import DEFRAG_VERSION, METHODS, DefragPlan, Move, defrag, read_defrag

__all__ = ["ADMISSIONS", "DEFRAG_VERSION", "METHODS", "DefragPlan", "Move", "defrag", "read_defrag"]


class _CallableModule(types.ModuleType):
    """``tsched.defrag(...)`` calls :func:`defrag`; the package's names stay reachable."""

    def __call__(self, *args: Any, **kwargs: Any) -> DefragPlan:
        return defrag(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
