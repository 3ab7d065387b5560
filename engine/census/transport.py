"""Exact finish of 2-D transportation problems (rows within a unit, columns summed over a parent's children).

Raking (:mod:`.raking`) converges only sublinearly when the fitted table has cells near the boundary (small
counts under large noise), so after a bounded number of sweeps the remaining residual is removed by one finite,
non-negative step, for every block at once: an array ``x`` (children, K, J) >= 0 must have row sums
``rows`` (children, K) — a sum over its last axis — and, per parent p and k, column sums ``cols[p, k]`` over
p's children (the children are contiguous, :mod:`.hierarchy`). Block (p, k) is one transportation problem.
The step: (1) rows over their target are scaled down to it, (2) columns still over theirs are scaled down to
it — now every row and column is at or below its target —, (3) the row deficits d >= 0 and column deficits
e >= 0 of a block, which have equal totals when the targets do (sum of rows = sum of columns), are filled by
the rank-one table d e^T / sum(e). Rows and columns then hold exactly (to rounding), nothing goes negative,
and a cell gains mass only in a column that has a deficit, i.e. a column with a positive target; when every
row of a block may use every such column (true for the level problems: the structural-zero pattern is the
same for all children), zeros stay zero. The change is at most about twice the residual mass.
Post-processing of released noisy answers: spends no privacy budget.
"""
from __future__ import annotations

import numpy as np


def finish_transport(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, starts: np.ndarray,
                     parent: np.ndarray) -> np.ndarray:
    """``x`` (n, K, J) >= 0 changed to have ``x.sum(2) == rows`` (n, K) and, per parent, the sum over its
    children (``starts`` of each parent's block, ``parent`` of each child) equal to ``cols`` (P, K, J),
    exactly when ``rows`` and ``cols`` have equal totals per (parent, k); non-negative; a new array."""
    x = np.array(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        cur = x.sum(axis=2)
        x *= np.where(cur > rows, rows / np.where(cur > 0, cur, 1.0), 1.0)[..., None]
        col = np.add.reduceat(x, starts, axis=0)
        x *= np.where(col > cols, cols / np.where(col > 0, col, 1.0), 1.0)[parent]
    d = np.maximum(rows - x.sum(axis=2), 0.0)
    e = np.maximum(cols - np.add.reduceat(x, starts, axis=0), 0.0)
    total = e.sum(axis=2, keepdims=True)
    share = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    x += d[..., None] * share[parent]
    return x


def finish_matrix(x: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """One (A, B) matrix finished to row sums ``rows`` and column sums ``cols`` (see :func:`finish_transport`)."""
    a = x.shape[0]
    out = finish_transport(x[:, None, :], np.asarray(rows, dtype=np.float64)[:, None],
                           np.asarray(cols, dtype=np.float64)[None, None, :], np.zeros(1, dtype=np.int64),
                           np.zeros(a, dtype=np.int64))
    return out[:, 0, :]
