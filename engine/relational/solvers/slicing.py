"""Random slicing (Sec. 6 / App. B): optimise a τn1 × τn2 sub-block of the synthetic links at a time.

Slices drawn in one iteration have pairwise disjoint rows and columns, so they are independent tasks
(run through the run context's ``map``). Inside a slice the edge count is preserved (many-to-many) or
each child keeps exactly one parent inside the slice (one-to-many), so the global count never changes.
Only the slice's dense block (|rows| × |cols|) is ever materialised.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from privcube.core.errors import ConfigError, DataError
from privcube.relational.solvers.pgd import SliceOperator, box_sum_projector, pgd, row_simplex_projector
from privcube.relational.solvers.projection import project_rows_box_sum
from privcube.relational.solvers.ubs import categorical_rows, ubs


@dataclass
class Slice:
    """Global row ids (table 1) and column ids (table 2) of one sub-block."""

    rows: np.ndarray
    cols: np.ndarray


def slice_shape(n1: int, n2: int, *, fraction: float | None = None, cells: float = 1e6) -> tuple[int, int]:
    """Slice size: τ·n (``fraction``) per table, else τ = √(cells/(n1·n2)) capped at 1 (the code's rule)."""
    if fraction is None:
        fraction = min(1.0, math.sqrt(cells / max(n1 * n2, 1)))
    if not (0 < fraction <= 1):
        raise ConfigError(f"mechanism 'relational': parameter 'slice_fraction' must lie in (0, 1], got {fraction!r}")
    return max(1, min(n1, math.ceil(fraction * n1))), max(1, min(n2, math.ceil(fraction * n2)))


def choose_slices_m2m(n1: int, n2: int, ei: np.ndarray, ej: np.ndarray, rng: np.random.Generator, s1: int, s2: int,
                      n_slices: int = 1, guaranteed: float = 0.2) -> list[Slice]:
    """Disjoint slices; a ``guaranteed`` share of each is seeded with endpoints of existing edges."""
    n_slices = max(1, min(n_slices, n1 // s1, n2 // s2)) if s1 < n1 and s2 < n2 else 1
    free_r = np.ones(n1, dtype=bool)
    free_c = np.ones(n2, dtype=bool)
    out = []
    order = rng.permutation(len(ei))
    pos = 0
    for _ in range(n_slices):
        g = int(guaranteed * min(s1, s2))
        rows: list[int] = []
        cols: list[int] = []
        while len(rows) < g and len(cols) < g and pos < order.size:
            e = order[pos]
            pos += 1
            r, c = int(ei[e]), int(ej[e])
            if free_r[r] and free_c[c]:
                free_r[r] = free_c[c] = False
                rows.append(r)
                cols.append(c)
        fr = np.flatnonzero(free_r)
        fc = np.flatnonzero(free_c)
        rows_a = np.concatenate([np.asarray(rows, dtype=np.int64),
                                 rng.choice(fr, size=min(s1 - len(rows), fr.size), replace=False)])
        cols_a = np.concatenate([np.asarray(cols, dtype=np.int64),
                                 rng.choice(fc, size=min(s2 - len(cols), fc.size), replace=False)])
        free_r[rows_a] = False
        free_c[cols_a] = False
        out.append(Slice(np.sort(rows_a).astype(np.int64), np.sort(cols_a).astype(np.int64)))
    return out


def choose_slices_o2m(parent_of: np.ndarray, n_parent: int, rng: np.random.Generator, s2: int, max_rows: int,
                      n_slices: int = 1) -> list[Slice]:
    """Disjoint parent sets; rows = (up to ``max_rows``) children whose current parent is in the set."""
    n_slices = max(1, min(n_slices, n_parent // max(s2, 1)))
    perm = rng.permutation(n_parent)
    out = []
    for k in range(n_slices):
        cols = np.sort(perm[k * s2:(k + 1) * s2]).astype(np.int64)
        inside = np.isin(parent_of, cols)
        rows = np.flatnonzero(inside)
        if rows.size > max_rows:
            rows = np.sort(rng.choice(rows, size=max_rows, replace=False))
        out.append(Slice(rows.astype(np.int64), cols))
    return out


def edges_in(sl: Slice, ei: np.ndarray, ej: np.ndarray, n1: int, n2: int) -> np.ndarray:
    """Boolean mask of the edges (ei, ej) lying inside the slice."""
    rmask = np.zeros(n1, dtype=bool)
    cmask = np.zeros(n2, dtype=bool)
    rmask[sl.rows] = True
    cmask[sl.cols] = True
    return rmask[ei] & cmask[ej]


def dense_block(sl: Slice, ei: np.ndarray, ej: np.ndarray) -> np.ndarray:
    """The slice's 0/1 block from edges already known to lie inside it."""
    B = np.zeros((sl.rows.size, sl.cols.size))
    B[np.searchsorted(sl.rows, ei), np.searchsorted(sl.cols, ej)] = 1.0
    return B


def sparse_block(sl: Slice, ei: np.ndarray, ej: np.ndarray) -> sp.coo_matrix:
    """The slice's 0/1 block as a sparse matrix (what is shipped to a worker: O(edges), not O(cells))."""
    r = np.searchsorted(sl.rows, ei).astype(np.int32)
    c = np.searchsorted(sl.cols, ej).astype(np.int32)
    return sp.coo_matrix((np.ones(r.size), (r, c)), shape=(sl.rows.size, sl.cols.size))


def block_cells(B0: object) -> int:
    """Number of cells of a slice block (dense or sparse)."""
    shape = getattr(B0, "shape", (0, 0))
    return int(shape[0]) * int(shape[1])


@dataclass
class SliceTask:
    """Everything one slice solve needs (picklable; shipped to a worker by ``map_tasks``)."""

    rows: list[np.ndarray]  # per workload, the slice rows' cell indices
    cols: list[np.ndarray]
    sizes: list[tuple[int, int]]
    targets: list[np.ndarray]  # target count tables
    scale: float
    B0: np.ndarray | sp.spmatrix  # the current 0/1 block (dense, or sparse: densified on the worker)
    kind: str  # "many_to_many" | "one_to_many"
    iters: int
    noise: object  # NoiseSource
    key: tuple = field(default_factory=tuple)
    forbidden: tuple[np.ndarray, np.ndarray] | None = None  # local (row, col) cells fixed at 0 (self-loops)
    keep_row_degrees: bool = False  # many-to-many: every row keeps its number of links inside the slice


def solve_slice(task: SliceTask) -> tuple[np.ndarray, np.ndarray]:
    """PGD on the slice, then UBS (or per-row categorical) rounding; local (row, col) of the new edges."""
    rng = task.noise.generator(*task.key)  # type: ignore[attr-defined]
    B0 = task.B0.toarray() if sp.issparse(task.B0) else np.asarray(task.B0, dtype=float)
    if not task.rows or B0.size == 0:
        r, c = np.nonzero(B0)
        return r.astype(np.int64), c.astype(np.int64)
    op = SliceOperator(task.rows, task.cols, task.sizes)
    if task.kind == "one_to_many":
        relaxed = pgd(op, task.targets, task.scale, B0, row_simplex_projector(), iters=task.iters, rng=rng)
        cols = categorical_rows(relaxed, rng)
        return np.arange(B0.shape[0], dtype=np.int64), cols
    m_slice = int(round(B0.sum()))
    if m_slice == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    hi: np.ndarray | float = 1.0
    if task.forbidden is not None and task.forbidden[0].size:
        hi = np.ones(B0.shape)
        hi[task.forbidden] = 0.0
    if task.keep_row_degrees:
        r, c = _solve_rows(task, op, B0, hi, rng)
    else:
        relaxed = pgd(op, task.targets, task.scale, B0, box_sum_projector(m_slice, hi), iters=task.iters, rng=rng)
        flat = ubs(relaxed.ravel(), m_slice, rng)
        r, c = np.divmod(flat, B0.shape[1])
    if not np.isscalar(hi) and np.any(np.asarray(hi)[r, c] == 0.0):
        # UBS keeps P(i) = x_i = 0 for the fixed cells; only a float edge case could pick one
        raise DataError("internal: UBS drew a cell fixed at 0 (self-loop) in a slice")
    return r.astype(np.int64), c.astype(np.int64)


def _solve_rows(task: SliceTask, op: SliceOperator, B0: np.ndarray, hi: np.ndarray | float,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Many-to-many with row degrees kept: PGD on {0 ≤ B ≤ hi, row sums fixed}, then UBS per row."""
    deg = np.rint(B0.sum(axis=1)).astype(np.int64)
    relaxed = pgd(op, task.targets, task.scale, B0, lambda B: project_rows_box_sum(B, deg, hi), iters=task.iters,
                  rng=rng)
    rows, cols = [], []
    for i in np.flatnonzero(deg):
        cols.append(ubs(relaxed[i], int(deg[i]), rng))
        rows.append(np.full(int(deg[i]), i, dtype=np.int64))
    if not rows:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    return np.concatenate(rows), np.concatenate(cols)


def reinsert(ei: np.ndarray, ej: np.ndarray, inside: np.ndarray, sl: Slice, new_r: np.ndarray,
             new_c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Replace the edges inside the slice by the new local edges (mapped to global ids)."""
    keep = ~inside
    return (np.concatenate([ei[keep], sl.rows[new_r]]), np.concatenate([ej[keep], sl.cols[new_c]]))


def map_slices(tasks: Sequence[SliceTask], run_map: Callable[..., list[Any]] | None = None,
               label: str = "relational-slice") -> list[tuple[np.ndarray, np.ndarray]]:
    """Solve the slice tasks through the run context's ``map`` (independent tasks, results in input order;
    on the cluster when there is one), or in this process without one. Same results either way."""
    if run_map is None or len(tasks) <= 1:
        return [solve_slice(t) for t in tasks]
    return run_map(solve_slice, list(tasks), cost=lambda t: float(block_cells(t.B0)), label=label)


__all__ = ["Slice", "slice_shape", "choose_slices_m2m", "choose_slices_o2m", "edges_in", "dense_block", "sparse_block",
           "block_cells",
           "SliceTask", "solve_slice", "reinsert", "map_slices"]
