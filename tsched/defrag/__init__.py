"""Defragmentation: which running jobs move, and where, so that a waiting job gets a placement its
admission rule accepts, losing the fewest GPU-seconds to restarts.

One module per stage: :mod:`~tsched.defrag.model` (the state by GPUs per node, admission,
placing, GPU indices), :mod:`~tsched.defrag.heuristic` (evict and re-place, with a lower bound),
:mod:`~tsched.defrag.exact` (the CP-SAT model), :mod:`~tsched.defrag.plan` (``defrag/v1`` and
:func:`defrag`, the solve) and :mod:`~tsched.defrag.picture` (before and after).
"""

from __future__ import annotations

from tsched.defrag.model import ADMISSIONS
from tsched.defrag.plan import DEFRAG_VERSION, METHODS, DefragPlan, Move, defrag, read_defrag

__all__ = ["ADMISSIONS", "DEFRAG_VERSION", "METHODS", "DefragPlan", "Move", "defrag", "read_defrag"]
