"""Robust tabu search (``method="tabu"``, Taillard 1991) with an O(1)-update delta matrix.

The search runs on a *sub-problem* of k locations: for a raw QAP all of them; for a cluster the
greedy plan's GPUs plus free GPUs of the domain it chose (up to ``max_locations``), entered as
dummy facilities so that a swap with one is a move. Each move scans the k×k delta matrix, takes
the best non-tabu exchange (aspiration: a tabu move that beats the best is allowed; a move back
to a location left long ago is forced), and updates the matrix in O(1) per untouched pair. Under
a time limit it runs in chunks, each from the best plan with a fresh tenure; after a chunk
without gain the best plan is first perturbed by random exchanges (iterated tabu), and it stops
early when it reaches the best known lower bound. Two such searches run side by side by
default, in threads (the kernel releases the GIL), an algorithm portfolio (:data:`TENURES`,
:data:`RESTARTS`): one with Taillard's tenure range, long chunks and small jumps, one with a
short range, short chunks and jumps that grow with each chunk without gain, or, for half of the
chunks without gain, a crossover of two of its best plans (:data:`CROSS`, a memetic layer). The
better plan is kept, and the one that reaches the bound stops the other.

Compiled with numba when installed; ``_local_kernel`` runs as plain Python otherwise. On integer
data whose deltas fit, the kernel's tables are int32 (:func:`kernel_dtype`): the same moves,
exactly, at a faster pace. Not exact: ``optimal`` only when the bound meets the result.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from tsched.errors import InputError
from tsched.problem import PlacementProblem
from tsched.solvers.base import Assignment, Count, SolverOutput, register
from tsched.solvers.bounds import best_bound
from tsched.solvers.faq import faq_best
from tsched.solvers.greedy import SubProblem, construct_cluster, construct_dense, subproblem

__all__ = ["tabu", "SubProblem", "subproblem", "run_chunks"]


def _kernel() -> Any:
    """The compiled kernels, imported on first use (numba is slow to import)."""
    from tsched.solvers import _local_kernel

    return _local_kernel


#: Largest sub-problem (locations) searched by default.
MAX_LOCATIONS = 1024
#: Longest chunk (moves per location) before a restart from the best plan, by default (annealing,
#: and tabu's robust thread).
CHUNK_CAP = 500
#: Perturbation strength after a chunk without gain, as fractions (low, high) of the real
#: facilities exchanged at random; by default a fixed eighth.
PERTURB = (0.125, 0.125)
#: Growth of the strength per chunk without gain (fraction of the real facilities).
PERTURB_STEP = 0.03


#: Independent searches run side by side (threads; the kernel releases the GIL). Fixed rather
#: than the machine's core count, so that a seed and an iteration budget give the same plan
#: everywhere; on one core the searches share it.
THREADS = 2

#: Largest raw QAP (locations) that gets FAQ starts.
FAQ_MAX_LOCATIONS = 512
#: Most FAQ starts tried (as many as fit in a tenth of the time limit, at least one).
FAQ_STARTS = 100


def start_and_pool(
    problem: PlacementProblem,
    options: dict[str, Any],
    seed: int = 0,
    time_limit: float | None = None,
) -> tuple[list[np.ndarray], np.ndarray]:
    """The start plans and the free locations the search may move to.

    The start is ``hint`` when given; on a cluster, the greedy plan. A raw QAP gets two: the
    greedy construction and scipy's FAQ (best of as many randomised starts as fit in a tenth of
    the time limit, one at least and :data:`FAQ_STARTS` at most; ten without a limit). Neither
    wins everywhere: FAQ's plans lie in better basins on tai*b, chr and esc instances, greedy's
    on tai*a.
    """
    hint = options.get("hint")
    cap = int(options.get("max_locations", MAX_LOCATIONS))
    if hint is not None:
        starts = [np.asarray(hint, dtype=np.int64)]
        pool = _nearest_first(problem, starts[0])
    elif problem.cluster is not None:
        start, pool, _ = construct_cluster(problem)
        starts = [start]
    else:
        starts = [construct_dense(problem)]
        pool = np.arange(problem.n_locations)
        if problem.n_locations <= FAQ_MAX_LOCATIONS and problem.linear is None:
            if time_limit is None:  # a fixed count, so an iteration budget repeats
                found, _ = faq_best(problem, 10, seed)
            else:
                deadline = time.perf_counter() + 0.1 * time_limit
                found, _ = faq_best(problem, FAQ_STARTS, seed, deadline)
            if not np.array_equal(found, starts[0]):
                starts.append(found)
    extra = pool[~np.isin(pool, starts[0])][: max(0, cap - problem.n_workers)]
    return starts, extra


def start_permutation(sub: SubProblem, start: np.ndarray) -> np.ndarray:
    """``start`` (problem locations, all inside ``sub.pos``) as a permutation of the
    sub-problem's positions; dummies take the positions left over."""
    where = {int(p): i for i, p in enumerate(sub.pos)}
    head = np.array([where[int(p)] for p in start], dtype=np.int64)
    rest = np.setdiff1d(np.arange(len(sub.pos)), head)
    return np.concatenate([head, rest]).astype(np.int64)


def _nearest_first(problem: PlacementProblem, start: np.ndarray) -> np.ndarray:
    """All locations, those whose node meets the start plan's nodes lowest in the hierarchy
    first (same node, then same leaf, …), in location order within a level."""
    if problem.cluster is None:
        return np.arange(problem.n_locations)
    nodes = problem.location_node()
    used = np.unique(nodes[start])
    level = problem.cluster.meet_between(nodes, used).min(axis=1)
    return np.argsort(level, kind="stable")


@dataclass(frozen=True)
class Search:
    """What tabu and anneal both start from: the start plans, the dense sub-problem built on
    the first, the time left after building them, and the bound that stops a search early."""

    starts: list[np.ndarray]
    sub: SubProblem
    time_limit: float | None
    target: float
    trivial: bool  # fewer than two workers or locations: nothing to exchange


def prepare_search(
    problem: PlacementProblem, options: dict[str, Any], seed: int, time_limit: float | None
) -> Search:
    """Start plans, sub-problem, time left and target of a tabu or annealing run."""
    begin = time.perf_counter()
    starts, extra = start_and_pool(problem, options, seed, time_limit)
    sub = subproblem(problem, starts[0], extra)
    if len(sub.pos) < 2 or problem.n_workers < 2:
        return Search(starts, sub, time_limit, -np.inf, True)
    if time_limit is not None:
        time_limit = max(0.0, time_limit - (time.perf_counter() - begin))
    known, _ = best_bound(problem)
    target = -np.inf if known is None else known + 1e-9 * max(1.0, abs(known))
    return Search(starts, sub, time_limit, target, False)


def run_chunks(
    sub: SubProblem,
    step: Any,
    limit: float | None,
    iterations: int,
    seed: int,
    target: float,
    begin_perm: np.ndarray | None = None,
    halt: np.ndarray | None = None,
    chunk_cap: int = CHUNK_CAP,
    perturb: tuple[float, float] = PERTURB,
    cross: float = 0.0,
) -> tuple[np.ndarray, float, int]:
    """Run ``step(perm, budget, seed) -> (perm, value, moves)`` until the iteration budget or
    the time limit. Each chunk starts from the best permutation; after a chunk that did not
    improve it, from the best with random exchanges (iterated local search), so a search stuck
    in one basin moves on: ``perturb`` (fractions of the real facilities) is the range their
    count grows through over consecutive chunks without gain (:func:`perturb_count`). Under a
    time limit chunks last at most ``chunk_cap`` moves per location. Seeds derive from
    ``seed``, so a fixed budget repeats. A set ``halt`` flag (a search in another thread
    reached the target) ends it. With ``cross`` > 0 the chunks' results also feed a pool of
    :data:`ELITE` distinct plans, and that share of the chunks without gain starts instead from a
    :func:`crossover` of two of them (a memetic layer)."""
    rng = np.random.default_rng(seed)
    pool = Elite(ELITE, sub.n_real) if cross > 0 else None
    k = len(sub.pos)
    perm = np.arange(k, dtype=np.int64) if begin_perm is None else begin_perm
    best_perm, best = perm, _kernel().cost(sub.flow, sub.dist, sub.linear, perm)
    start = time.perf_counter()
    moves = 0
    # under a time limit chunks grow from 64 moves; the kernel numbers moves in int32
    chunk = 64 if limit is not None else min(iterations, 2**30)
    round_ = 0
    fails = 0  # chunks since the last gain
    first = 0.0
    begin = best_perm
    while moves < iterations and best > target and (halt is None or not halt[0]):
        tick = time.perf_counter()
        budget = min(chunk, iterations - moves)
        perm, value, made = step(begin, budget, seed * 1_000_003 + round_)
        moves += max(int(made), 1)
        round_ += 1
        if pool is not None:
            pool.offer(perm, value)
        if value < best - 1e-12:
            best, best_perm = value, perm
            begin = best_perm
            fails = 0
        else:
            fails += 1
            parents = pool.parents(rng) if pool is not None and rng.random() < cross else None
            if parents is not None:
                begin = crossover(*parents, sub.n_real, rng)
            else:
                count = perturb_count(sub.n_real, fails, perturb)
                begin = _perturb(best_perm, sub.n_real, rng, count)
        if limit is not None:
            now = time.perf_counter()
            left = limit - (now - start)
            first = first or now - tick  # a chunk's fixed cost: building the delta matrix
            if left <= 0 or (round_ > 1 and left < first):
                break
            per_move = (now - tick) / max(int(made), 1)
            chunk = int(min(max(64, 0.5 * left / max(per_move, 1e-9)), chunk_cap * k + 64))
    return best_perm, best, moves


#: Plans kept for crossover by a search with a memetic layer (``cross`` > 0).
ELITE = 10


class Elite:
    """The best distinct plans a search has reached, at most ``size`` (a chunk's result enters
    when the pool has room or it beats the worst; plans are compared on the real facilities)."""

    def __init__(self, size: int, n_real: int) -> None:
        self.size, self.n_real = size, n_real
        self.plans: list[tuple[float, np.ndarray]] = []

    def offer(self, perm: np.ndarray, value: float) -> None:
        head = perm[: self.n_real]
        if any(np.array_equal(p[: self.n_real], head) for _, p in self.plans):
            return
        if len(self.plans) < self.size:
            self.plans.append((value, perm.copy()))
            return
        worst = max(range(len(self.plans)), key=lambda i: self.plans[i][0])
        if value < self.plans[worst][0]:
            self.plans[worst] = (value, perm.copy())

    def parents(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray] | None:
        """Two different plans drawn at random, or None while fewer than two are kept."""
        if len(self.plans) < 2:
            return None
        i, j = rng.choice(len(self.plans), size=2, replace=False)
        return self.plans[int(i)][1], self.plans[int(j)][1]


def crossover(a: np.ndarray, b: np.ndarray, n_real: int, rng: np.random.Generator) -> np.ndarray:
    """A child of two plans (uniform crossover that keeps what they share, as in Benlic and
    Hao's memetic search for the QAP, 2015): a real facility placed alike in both keeps its
    location; the others, in random order, take the location of one parent drawn at random, or
    of the other when that one is taken, or else a location left over, at random (as do the
    dummy facilities)."""
    k = len(a)
    child = np.full(k, -1, dtype=np.int64)
    used = np.zeros(k, dtype=bool)
    same = np.flatnonzero(a[:n_real] == b[:n_real])
    child[same] = a[same]
    used[a[same]] = True
    differ = np.flatnonzero(a[:n_real] != b[:n_real])
    coins = rng.random(len(differ)) < 0.5
    for r, coin in zip(rng.permutation(differ).tolist(), coins.tolist(), strict=True):
        for loc in (a[r], b[r]) if coin else (b[r], a[r]):
            if not used[loc]:
                child[r] = loc
                used[loc] = True
                break
    empty = np.flatnonzero(child < 0)
    child[empty] = rng.permutation(np.flatnonzero(~used))
    return child


def dense_delta_matrix(
    f: np.ndarray, d: np.ndarray, lin: np.ndarray, perm: np.ndarray, n_real: int
) -> np.ndarray:
    """Every exchange's objective change at once (:func:`dense_tables` without the Gram tables)."""
    return dense_tables(f, d, lin, perm, n_real)[0]


def dense_tables(
    f: np.ndarray,
    d: np.ndarray,
    lin: np.ndarray,
    perm: np.ndarray,
    n_real: int,
    sym: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Every exchange's objective change at once, with matrix products (BLAS): the same upper
    triangle as ``_local_kernel.delta_matrix`` (rows from ``n_real`` on left at 0) in O(k³)
    flops but at BLAS speed instead of k² strided O(k) loops (k = 1024: 0.1 s against 8 s).

    With P = d[perm][:, perm] (distance between the facilities' locations), A = fᵀP and
    B = f Pᵀ, the sums over every q of Taillard's terms are A[r,s] − A[r,r] − A[s,s] + A[s,r]
    and the same with B; the q = r and q = s terms are taken back out, the direct (r, s) term
    and the linear costs added. Returns the deltas and the Gram tables B = f·Pᵀ and A = fᵀP,
    stacked (2, k, k), from which the kernel's update takes the pairs of the exchanged
    facilities (``_local_kernel._update_sym_gram``, ``_update_rows_gram``); with ``sym`` (the
    caller has checked that f and d are symmetric, where the two are one) B alone, (1, k, k),
    from one product instead of two.
    """
    p = d[np.ix_(perm, perm)]
    b = f @ p.T
    a = b if sym else f.T @ p  # symmetric f and p: fᵀp = f·pᵀ, one product
    da, db = np.diag(a), np.diag(b)
    full = a + a.T - da[:, None] - da[None, :] + b + b.T - db[:, None] - db[None, :]
    fd, pd = np.diag(f), np.diag(p)
    fr = fd[:, None]  # f[r, r]
    fs = fd[None, :]  # f[s, s]
    pr, ps = pd[:, None], pd[None, :]
    # q = r and q = s terms of both sums, as the full sums counted them
    out1 = (fr - f) * (p - pr) + (f.T - fs) * (ps - p.T)
    out2 = (fr - f.T) * (p.T - pr) + (f - fs) * (ps - p)
    direct = (f - f.T) * (p.T - p)
    lp = lin[:, perm]  # lp[r, x]: cost of facility r on x's location
    ld = np.diag(lp)
    linear = lp + lp.T - ld[:, None] - ld[None, :]
    delta = np.triu(full - out1 - out2 + direct + linear, 1)
    delta[n_real:] = 0.0
    return np.ascontiguousarray(delta), np.stack([b] if sym else [b, a])


#: Whether the kernel takes the exchanged facilities' pairs from Gram tables kept current
#: (``_local_kernel._update_sym_gram``, ``_update_rows_gram``) rather than summing them afresh
#: each move: the same moves (exactly, on integer tables), at a faster pace
#: (``tabu_threads.md § gram``); off only for that ablation.
GRAM = True

#: Largest bound on a delta (and on every partial sum the kernel keeps) for the int32 kernel:
#: half of int32's range, so that its "none yet" (``_local_kernel.INT_HUGE``) stays above every
#: delta.
INT_DELTA_MAX = 2**30


def kernel_dtype(f: np.ndarray, d: np.ndarray, lin: np.ndarray) -> type:
    """The type of the tabu kernel's tables for this sub-problem: ``np.int32`` when flows,
    distances and linear costs are all integers small enough that every value the kernel keeps
    fits (faster, and exact, so the very moves of float64), else ``np.float64``; always float64
    without numba.

    With F, D and L the largest magnitudes in ``f``, ``d`` and ``lin`` and k locations, an
    exchange's delta is a sum over k facilities of two terms of at most 2F·2D each, plus the
    direct term (4FD) and four linear costs; the kernel's partial sums, the vectors of its
    update and each update's step (at most 2·4F·4D) stay below the same 8(k + 6)FD + 4L, as
    do the Gram tables' entries (at most kFD) and the pair sums taken from them (8kFD). Sums
    are promoted to int64 before they are stored, so no intermediate wraps either (only the
    scratch below the delta matrix's diagonal may, which nothing reads).
    """
    if not _kernel().HAVE_NUMBA:
        return np.float64
    parts = (f, d, lin)
    if not all(np.array_equal(x, np.rint(x)) for x in parts):
        return np.float64
    big_f, big_d, big_l = (float(np.abs(x).max(initial=0.0)) for x in parts)
    k = len(f)
    bound = 8.0 * (k + 6) * big_f * big_d + 4.0 * big_l
    return np.int32 if bound < INT_DELTA_MAX else np.float64


def symmetric(f: np.ndarray, d: np.ndarray) -> bool:
    """Whether flow and distance are both symmetric with zero diagonals, so the kernel may
    use the halved exchange formulas (every cluster problem, most QAPLIB instances)."""
    return bool(
        not np.diagonal(f).any()
        and not np.diagonal(d).any()
        and np.array_equal(f, f.T)
        and np.array_equal(d, d.T)
    )


def _positive(name: str, value: Any, example: str) -> int:
    """A given option that must be a positive integer, or an error naming it and ``example``."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or str(value).strip() != str(number):
        raise InputError(
            f"method 'tabu': option {name}={value!r} must be a positive integer ({example})"
        )
    return number


def _threads(value: Any) -> int:
    """The thread count: default :data:`THREADS`, else the given one (the registry's
    ``Count(1, 64)`` has checked it)."""
    return THREADS if value is None else int(value)


def _in_threads(jobs: list[tuple[Any, ...]], threads: int) -> list[tuple[np.ndarray, float, int]]:
    """``run_chunks(*job)`` for every job, ``threads`` at a time (the kernel releases the GIL);
    results in job order, so a fixed iteration budget repeats whatever the scheduling."""
    if threads == 1 or len(jobs) == 1:
        return [run_chunks(*job) for job in jobs]
    with one_blas_thread(), ThreadPoolExecutor(max_workers=min(threads, len(jobs))) as pool:
        return list(pool.map(lambda job: run_chunks(*job), jobs))


def one_blas_thread() -> Any:
    """A context in which BLAS runs one thread, its own count restored on exit. The searches
    side by side run in it: each chunk's delta matrix is a few small matrix products, after
    which OpenBLAS's workers spin on the cores the other searches need
    (``benchmarks/results/tabu_threads.md`` measures the moves this gives back)."""
    from threadpoolctl import threadpool_limits  # 30 ms to import: only when searches share

    return threadpool_limits(limits=1, user_api="blas")


#: Tenure ranges, as fractions of the location count k, of the searches side by side (thread j
#: takes entry j mod 2): an algorithm portfolio. Neither range wins everywhere: Taillard's
#: robust one does better on most sko, wil and lipa instances and on tai40a and tai50a, the
#: short one on tai80a and tai100a; over the 21 instances a single-threaded search had missed,
#: one thread of each did better on average than two of either, with long runs in both (one
#: seed each: ``qaplib.md § robust`` and ``qaplib.md § short`` each range in
#: both threads).
TENURES = ((0.9, 1.1), (0.05, 0.15))
#: Each thread's restarts, in the order of :data:`TENURES`: the longest chunk (moves per
#: location) and the jump range (:func:`perturb_count`). Taillard's thread runs long chunks
#: with small jumps, as before; the short-tenure thread is an iterated tabu search: chunks of
#: at most 20·k moves, and jumps that grow from an eighth to a half of the facilities with each
#: chunk without gain and fall back after a gain (after Benlic and Hao's breakout local search:
#: short jumps search near the best plan, long ones leave its basin). The real-life-like tai*b
#: instances need the long jumps; the lipa*a instances need the long runs: with both threads
#: iterated, lipa70a/80a/90a are 0.366/0.321/0.438 % above their best known at 10 s (mean of
#: seeds 1-3, ``qaplib.md § restarts-iterated``), with this portfolio
#: 0.000/0.158/0.144 % (``qaplib.md § restarts``). On the 23 hardest QAPLIB instances, three
#: seeds each at 10 s, the mean gap is 0.185 % (``qaplib.md § restarts``) against 0.243 % with
#: long runs and small jumps in both threads (``qaplib.md § restarts-fixed``): the gain is tai*b's;
#: over the 23 the difference is not significant (12 better, 10 worse).
RESTARTS = ((CHUNK_CAP, PERTURB), (20, (0.125, 0.5)))
#: Each thread's share of the chunks without gain that start from a :func:`crossover` of two of
#: the thread's best plans (:class:`Elite`) instead of a jump from the best: a memetic layer on
#: the iterated thread, after Benlic and Hao's memetic search (2015). A child of two distant
#: good plans starts a chunk in a new basin that keeps what they share. Kept for tai100a,
#: where the search stalls in one basin longest: at 30 s it is 0.528 % above its best known
#: value with crossovers and 0.615 % without (mean of seeds 0-5, one run each, no interval:
#: ``qaplib.md § taia-30`` and ``qaplib.md § taia-30-nocross``). It is no
#: general gain: the means of tai50a and tai80a are higher with it (0.496 against 0.433 %, 0.695
#: against 0.683 %; no interval either), and over the 18 runs they are equal (0.573 and
#: 0.577 %). Taillard's thread keeps its jumps: its long chunks give few plans to breed from,
#: and no in-tree result shows crossovers there to help.
CROSS = (0.0, 0.5)


def _cross(value: Any, threads: int) -> list[float]:
    """Each thread's crossover share: ``x`` for all, ``x,y,…`` in turn, default :data:`CROSS`."""
    shares = CROSS if value is None else value
    if isinstance(shares, str):
        shares = shares.split(",")
    try:
        shares = [float(x) for x in (shares if isinstance(shares, list | tuple) else [shares])]
    except (TypeError, ValueError):
        shares = []
    if not shares or not all(0 <= x <= 1 for x in shares):
        raise InputError(
            f"method 'tabu': option cross={value!r} must be fractions 0..1, one for every "
            "thread or one per thread in turn (e.g. cross=0,0.5)"
        )
    return [shares[j % len(shares)] for j in range(threads)]


def tenure_range(lo: float, hi: float, k: int) -> tuple[int, int]:
    """The tenure range (lo·k, hi·k) in moves: at least 1, and hi above lo."""
    low = max(1, int(lo * k))
    return low, max(low + 1, int(hi * k) + 1)


def _tenures(value: Any, k: int, threads: int) -> list[tuple[int, int]]:
    """Each thread's tenure range: a given one for all; by default :data:`TENURES` in turn."""
    if value is not None:
        return [_tenure(value)] * threads
    return [tenure_range(*TENURES[j % len(TENURES)], k) for j in range(threads)]


def _tenure(value: Any) -> tuple[int, int]:
    """A given tenure range: two integers lo ≤ hi."""
    return _pair(
        "tenure", value, int, lambda lo, hi: 0 <= lo <= hi,
        "two integers 0 <= lo <= hi (e.g. tenure=10,14)",
    )  # fmt: skip


def _pair(name: str, value: Any, kind: type, ok: Any, expected: str) -> tuple[Any, Any]:
    """An option given as ``lo,hi`` (or as a pair) of ``kind`` for which ``ok(lo, hi)`` holds,
    or an error naming the option, the value and what was ``expected``."""
    try:
        lo, hi = (kind(v) for v in (value.split(",") if isinstance(value, str) else value))
    except (TypeError, ValueError):
        lo = hi = None
    if lo is None or not ok(lo, hi):
        raise InputError(f"method 'tabu': option {name}={value!r} must be {expected}")
    return lo, hi


def _restarts(options: dict[str, Any], threads: int) -> list[tuple[int, tuple[float, float]]]:
    """Each thread's chunk cap and jump range: :data:`RESTARTS` in turn, where the options
    ``chunk`` and ``jumps`` do not set one for all."""
    chunk, jumps = options.get("chunk"), options.get("jumps")
    if chunk is not None:
        chunk = _positive("chunk", chunk, "moves per location between jumps, e.g. chunk=20")
    if jumps is not None:
        jumps = _jumps(jumps)
    return [
        (cap if chunk is None else chunk, share if jumps is None else jumps)
        for cap, share in (RESTARTS[j % len(RESTARTS)] for j in range(threads))
    ]


def _jumps(value: Any) -> tuple[float, float]:
    """A given jump range: two fractions 0 < lo ≤ hi ≤ 1."""
    return _pair(
        "jumps", value, float, lambda lo, hi: 0 < lo <= hi <= 1,
        "two fractions 0 < lo <= hi <= 1 of the facilities exchanged at random after a chunk "
        "without gain (e.g. jumps=0.125,0.5)",
    )  # fmt: skip


def perturb_count(n_real: int, fails: int, perturb: tuple[float, float] = PERTURB) -> int:
    """Random exchanges after the ``fails``-th chunk in a row without gain: from
    max(2, low·n_real) up by :data:`PERTURB_STEP`·n_real a chunk to high·n_real, then from the
    low end again."""
    low = max(2, int(perturb[0] * n_real))
    span = max(low, int(perturb[1] * n_real)) - low + 1
    step = max(1, int(PERTURB_STEP * n_real))
    return low + ((max(fails, 1) - 1) * step) % span


def _perturb(perm: np.ndarray, n_real: int, rng: np.random.Generator, count: int) -> np.ndarray:
    """``perm`` with ``count`` random exchanges of a real facility with any other."""
    out = perm.copy()
    k = len(perm)
    for _ in range(count):
        r = int(rng.integers(0, n_real))
        s = int(rng.integers(0, k - 1))
        s += s >= r
        out[r], out[s] = out[s], out[r]
    return out


@register(
    "tabu",
    supports_hint=True,
    description="robust tabu search (Taillard), O(1) delta-matrix updates, numba kernel",
    options={
        "iterations": "moves per thread without a time limit (default 200·k)",
        "hint": "a starting assignment (default: greedy; raw QAPs: the better of greedy and FAQ)",
        "max_locations": f"sub-problem size (default {MAX_LOCATIONS})",
        "tenure": "one tenure range lo,hi for every thread (default: 0.9–1.1·k and 0.05–0.15·k "
        "in turn)",
        "threads": f"independent searches side by side, best kept (default {THREADS})",
        "chunk": "longest run between jumps under a time limit, in moves per location, for "
        "every thread (default: {} and {} in turn)".format(*(r[0] for r in RESTARTS)),
        "jumps": "range lo,hi of the share of facilities exchanged at random after a chunk "
        "without gain, growing through it, for every thread (default: {} and {} in "
        "turn)".format(*(",".join(f"{x:g}" for x in r[1]) for r in RESTARTS)),
        "cross": "share of the chunks without gain that start from a crossover of two of the "
        "search's best plans instead of a jump: one for every thread, or one per thread in turn "
        "(default {})".format(",".join(f"{x:g}" for x in CROSS)),
    },
    kinds={
        "iterations": Count(1),
        "hint": Assignment(),
        "max_locations": Count(1),
        "threads": Count(1, 64),
    },
)
def tabu(
    problem: PlacementProblem, *, time_limit: float | None, seed: int, options: dict[str, Any]
) -> SolverOutput:
    search = prepare_search(problem, options, seed, time_limit)
    if search.trivial:
        return SolverOutput(search.starts[0], message="tabu: nothing to exchange")
    starts, sub, time_limit, target = search.starts, search.sub, search.time_limit, search.target
    k = len(sub.pos)
    begin = time.perf_counter()
    threads = _threads(options.get("threads"))
    tenures = _tenures(options.get("tenure"), k, threads)
    restarts = _restarts(options, threads)
    cross = _cross(options.get("cross"), threads)
    iterations = int(options.get("iterations", 200 * k if time_limit is None else 10**12))
    sym = symmetric(sub.flow, sub.dist)
    halt = np.zeros(1, dtype=np.int64)  # set by the search that reaches the target
    dtype = kernel_dtype(sub.flow, sub.dist, sub.linear)
    f, d, lin = (np.ascontiguousarray(x, dtype=dtype) for x in (sub.flow, sub.dist, sub.linear))
    huge = _kernel().INT_HUGE if dtype is np.int32 else _kernel().HUGE

    def tables(perm: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The delta matrix of ``perm`` and its Gram tables (one when symmetric), in the
        kernel's type (integers from float64 BLAS: exact, every sum staying below 2**53)."""
        delta, gram = dense_tables(sub.flow, sub.dist, sub.linear, perm, sub.n_real, sym)
        if dtype is not np.float64:
            delta, gram = np.rint(delta).astype(dtype), np.rint(gram).astype(dtype)
        return delta, gram if GRAM else None

    def step(lo: int, hi: int, perm: np.ndarray, budget: int, chunk_seed: int) -> Any:
        delta, gram = tables(perm)
        return _kernel().tabu_search(
            f,
            d,
            lin,
            perm,
            sub.n_real,
            budget,
            lo,
            hi,
            5 * k * k,
            chunk_seed % (2**31),
            target,
            delta,
            sym,
            halt,
            huge,
            gram,
        )

    def stepper(lo: int, hi: int) -> Any:
        return lambda perm, budget, chunk_seed: step(lo, hi, perm, budget, chunk_seed)

    # the search jobs: each start in its own thread(s), then every thread from the better
    jobs = [starts[j % len(starts)] for j in range(max(threads, len(starts)))]
    if len(starts) == 1:
        share, first_moves = time_limit, iterations
    else:  # two fifths of each thread's time and moves on the starts, the rest from the better
        rounds = -(-len(jobs) // threads)  # jobs run one after another in a thread
        share = None if time_limit is None else 0.4 * time_limit / rounds
        first_moves = int(0.4 * iterations / rounds)
    trials = _in_threads(
        [
            (
                sub,
                stepper(*tenures[j % threads]),
                share,
                first_moves,
                seed + j,
                target,
                start_permutation(sub, start),
                halt,
                *restarts[j % threads],
                cross[j % threads],
            )
            for j, start in enumerate(jobs)
        ],
        threads,
    )
    moves = sum(t[2] for t in trials)
    won = min(range(len(trials)), key=lambda t: trials[t][1])
    note = ""
    if len(starts) > 1:
        left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - begin))
        note = f"; continued from the {('greedy', 'FAQ')[won % len(starts)]} start"
        trials = _in_threads(
            [
                (
                    sub,
                    stepper(*tenures[j]),
                    left,
                    iterations - rounds * first_moves,
                    seed + j,
                    target,
                    trials[won][0],
                    halt,
                    *restarts[j],
                    cross[j],
                )
                for j in range(threads)
            ],
            threads,
        )
        moves += sum(t[2] for t in trials)
        won = min(range(len(trials)), key=lambda t: trials[t][1])
    perm = trials[won][0]
    if threads > 1:
        note += f"; {threads} threads"
    return SolverOutput(
        sub.assignment(perm),
        iterations=moves,
        message=f"tabu: {moves} moves over {k} locations{note}",
        stats={
            "locations": k,
            "kernel": "numba" if _kernel().HAVE_NUMBA else "python",
            "tables": np.dtype(dtype).name,
        },
    )
