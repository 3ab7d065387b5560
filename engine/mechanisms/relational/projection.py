"""Exact Euclidean projections used by the relaxed link optimisation (Thm 2 of the paper).

``project_box_sum``: onto Ω = {b : lo ≤ b ≤ hi, Σb = m}. The solution is clip(b + y*, lo, hi) for the
scalar shift y* solving Σ clip(b_i + y, lo_i, hi_i) = m (piecewise linear, non-decreasing in y),
found by bisection and finished exactly on the active set of the final bracket.

``project_rows_simplex``: every row onto the probability simplex (one-to-many links, App. C).
"""
from __future__ import annotations

import numpy as np

from privcube.errors import DataError


def project_box_sum(b: np.ndarray, m: float, lo: np.ndarray | float = 0.0, hi: np.ndarray | float = 1.0,
                    *, max_iter: int = 200) -> np.ndarray:
    """Euclidean projection of ``b`` onto {lo ≤ x ≤ hi, Σx = m}; ``hi`` may be an array (0 masks an entry)."""
    b = np.asarray(b, dtype=float)
    shape = b.shape
    b = b.ravel()
    lo_a = np.broadcast_to(np.asarray(lo, dtype=float), shape).ravel()
    hi_a = np.broadcast_to(np.asarray(hi, dtype=float), shape).ravel()
    if np.any(lo_a > hi_a):
        raise DataError("project_box_sum: lower bound exceeds upper bound for some entry")
    lo_sum, hi_sum = float(lo_a.sum()), float(hi_a.sum())
    tol = 1e-12 * max(1.0, abs(m))
    if not (lo_sum - tol <= m <= hi_sum + tol):
        raise DataError(f"project_box_sum: m={m!r} is infeasible; it must lie in [{lo_sum}, {hi_sum}]")
    if b.size == 0:
        return b.reshape(shape)
    # bracket: at y_lo every entry is at its lower bound, at y_hi at its upper bound
    y_lo = float(np.min(lo_a - b))
    y_hi = float(np.max(hi_a - b))
    # bisection on the shift, safeguarding a Newton step: at each point solve the linear equation on the
    # current free set; accept it when it stays inside the bracket (finite termination on the active set)
    y = min(max((m - float(b.sum())) / b.size, y_lo), y_hi)
    x = np.clip(b + y, lo_a, hi_a)
    for _ in range(max_iter):
        z = b + y
        x = np.clip(z, lo_a, hi_a)
        s = float(x.sum())
        if abs(s - m) <= tol:
            break
        if s < m:
            y_lo = y
        else:
            y_hi = y
        free = (z > lo_a) & (z < hi_a)
        nf = int(free.sum())
        y_new = y + (m - s) / nf if nf else 0.5 * (y_lo + y_hi)
        if not (y_lo < y_new < y_hi):
            y_new = 0.5 * (y_lo + y_hi)
        if y_hi - y_lo <= 1e-15 * max(1.0, abs(y_lo), abs(y_hi)):
            break
        y = y_new
    # distribute any float residual over entries with room, keeping the box
    r = m - x.sum()
    if r != 0.0:
        room = (hi_a - x) if r > 0 else (x - lo_a)
        ok = room > 0
        if ok.any():
            x[ok] += np.sign(r) * np.minimum(room[ok], abs(r) / ok.sum())
    return x.reshape(shape)


def project_rows_simplex(B: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Project each row of ``B`` onto {x ≥ 0, Σx = 1} (entries where ``mask`` is False fixed at 0)."""
    B = np.asarray(B, dtype=float)
    if B.ndim != 2:
        raise DataError(f"project_rows_simplex: B must be 2-D, got shape {B.shape}")
    n, k = B.shape
    if k == 0:
        if n:
            raise DataError("project_rows_simplex: rows have no admissible column")
        return B.copy()
    big = -1e300
    V = B.copy() if mask is None else np.where(mask, B, big)
    if mask is not None and np.any(~mask.any(axis=1)):
        raise DataError(f"project_rows_simplex: row {int(np.argmax(~mask.any(axis=1)))} has no admissible column")
    U = -np.sort(-V, axis=1)  # descending
    css = np.cumsum(np.where(U > big / 2, U, 0.0), axis=1) - 1.0
    j = np.arange(1, k + 1)
    cond = (U - css / j > 0) & (U > big / 2)
    rho = k - 1 - np.argmax(cond[:, ::-1], axis=1)  # last index where cond holds
    theta = css[np.arange(n), rho] / (rho + 1)
    out = np.maximum(V - theta[:, None], 0.0)
    return out


__all__ = ["project_box_sum", "project_rows_simplex"]
