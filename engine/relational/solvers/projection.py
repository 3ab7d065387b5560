"""Exact Euclidean projections used by the relaxed link optimisation (Thm 2 of the paper).

``project_box_sum``: onto Ω = {b : lo ≤ b ≤ hi, Σb = m}. The solution is clip(b + y*, lo, hi) for the
scalar shift y* solving Σ clip(b_i + y, lo_i, hi_i) = m (piecewise linear, non-decreasing in y),
found by bisection and finished exactly on the active set of the final bracket.

``project_rows_simplex``: every row onto the probability simplex (one-to-many links, App. C).
"""
from __future__ import annotations

import numpy as np

from privcube.core.errors import DataError


def project_box_sum(b: np.ndarray, m: float, lo: np.ndarray | float = 0.0, hi: np.ndarray | float = 1.0,
                    *, max_iter: int = 200) -> np.ndarray:
    """Euclidean projection of ``b`` onto {lo ≤ x ≤ hi, Σx = m}; ``hi`` may be an array (0 masks an entry)."""
    return BoxSumProjector(m, lo, hi, max_iter=max_iter)(b)


class BoxSumProjector:
    """Π onto {lo ≤ x ≤ hi, Σx = m} for repeated calls on same-shaped inputs (PGD): scratch buffers are
    allocated once and reused, and ``out=`` receives the result, so a step allocates nothing block-sized.

    The solution is clip(b + y*, lo, hi) for the scalar shift y* solving Σ clip(b_i + y, lo_i, hi_i) = m
    (piecewise linear, non-decreasing in y): bisection of the bracket, safeguarding a Newton step on the
    current free set (finite termination on the active set); a last float residual is spread over
    entries with room, keeping the box.
    """

    takes_out = True

    def __init__(self, m: float, lo: np.ndarray | float = 0.0, hi: np.ndarray | float = 1.0, *,
                 max_iter: int = 200) -> None:
        """Target sum ``m`` and bounds (scalars, or arrays of the input's shape)."""
        self.m, self.lo, self.hi, self.max_iter = float(m), lo, hi, int(max_iter)
        self._buf: dict[str, np.ndarray] = {}

    def _scratch(self, name: str, n: int, dtype: type = float) -> np.ndarray:
        a = self._buf.get(name)
        if a is None or a.size != n:
            a = self._buf[name] = np.empty(n, dtype=dtype)
        return a

    def __call__(self, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The projection of ``b`` (into ``out`` when given, which may not be ``b`` itself)."""
        m = self.m
        b = np.asarray(b, dtype=float)
        shape = b.shape
        b = b.ravel()
        n = b.size
        # scalar bounds stay scalars (array bounds of the input's shape otherwise): no per-entry copies
        lo_a: np.ndarray | float = (float(self.lo) if np.ndim(self.lo) == 0
                                    else np.broadcast_to(np.asarray(self.lo, dtype=float), shape).ravel())
        hi_a: np.ndarray | float = (float(self.hi) if np.ndim(self.hi) == 0
                                    else np.broadcast_to(np.asarray(self.hi, dtype=float), shape).ravel())
        if np.any(np.asarray(lo_a) > np.asarray(hi_a)):
            raise DataError("project_box_sum: lower bound exceeds upper bound for some entry")
        lo_sum = lo_a * n if isinstance(lo_a, float) else float(lo_a.sum())
        hi_sum = hi_a * n if isinstance(hi_a, float) else float(hi_a.sum())
        tol = 1e-12 * max(1.0, abs(m))
        if not (lo_sum - tol <= m <= hi_sum + tol):
            raise DataError(f"project_box_sum: m={m!r} is infeasible; it must lie in [{lo_sum}, {hi_sum}]")
        x = np.empty(n) if out is None else out.reshape(-1)
        if out is not None and (out.shape != shape or np.may_share_memory(out, b)):
            raise DataError("project_box_sum: out must have the input's shape and not overlap it")
        if n == 0:
            return x.reshape(shape)
        z = self._scratch("z", n)
        f1 = self._scratch("f1", n, bool)
        f2 = self._scratch("f2", n, bool)
        # bracket: at y_lo every entry is at its lower bound, at y_hi at its upper bound
        if isinstance(lo_a, float) and isinstance(hi_a, float):
            y_lo, y_hi = lo_a - float(b.max()), hi_a - float(b.min())
        else:
            np.subtract(lo_a, b, out=z)
            y_lo = float(z.min())
            np.subtract(hi_a, b, out=z)
            y_hi = float(z.max())
        y = min(max((m - float(b.sum())) / n, y_lo), y_hi)
        for _ in range(self.max_iter):
            np.add(b, y, out=z)
            np.clip(z, lo_a, hi_a, out=x)
            s = float(x.sum())
            if abs(s - m) <= tol:
                break
            if s < m:
                y_lo = y
            else:
                y_hi = y
            np.greater(z, lo_a, out=f1)
            np.less(z, hi_a, out=f2)
            np.logical_and(f1, f2, out=f1)
            nf = int(np.count_nonzero(f1))
            y_new = y + (m - s) / nf if nf else 0.5 * (y_lo + y_hi)
            if not (y_lo < y_new < y_hi):
                y_new = 0.5 * (y_lo + y_hi)
            if y_hi - y_lo <= 1e-15 * max(1.0, abs(y_lo), abs(y_hi)):
                break
            y = y_new
        np.add(b, y, out=z)
        np.clip(z, lo_a, hi_a, out=x)
        # distribute any float residual over entries with room, keeping the box
        r = m - float(x.sum())
        if r != 0.0:
            room = z
            if r > 0:
                np.subtract(hi_a, x, out=room)
            else:
                np.subtract(x, lo_a, out=room)
            np.greater(room, 0.0, out=f1)
            k = int(np.count_nonzero(f1))
            if k:
                np.minimum(room, abs(r) / k, out=room)
                room *= np.sign(r)
                np.logical_not(f1, out=f2)
                room[f2] = 0.0
                x += room
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


def project_rows_box_sum(B: np.ndarray, r: np.ndarray, hi: np.ndarray | float = 1.0, *, iters: int = 40) -> np.ndarray:
    """Every row i of ``B`` onto {0 ≤ x ≤ hi, Σx = r_i} (many-to-many links with each row's degree kept).

    Row-wise shift y_i with Σ_j clip(B_ij + y_i, 0, hi_ij) = r_i: vectorised bisection on all rows, then
    one exact step on the final active set and a last spread of any float residual over entries with room.
    Rows with r_i = 0 become 0; ``r_i`` must not exceed the row's capacity Σ_j hi_ij.
    """
    B = np.asarray(B, dtype=float)
    r = np.asarray(r, dtype=float)
    H = np.broadcast_to(np.asarray(hi, dtype=float), B.shape)
    lo_y = -B.max(axis=1, initial=0.0) - 1.0
    hi_y = -B.min(axis=1, initial=0.0) + 1.0 + float(np.max(H, initial=1.0))
    for _ in range(iters):
        mid = 0.5 * (lo_y + hi_y)
        tot = np.clip(B + mid[:, None], 0.0, H).sum(axis=1)
        below = tot < r
        lo_y = np.where(below, mid, lo_y)
        hi_y = np.where(below, hi_y, mid)
    y = 0.5 * (lo_y + hi_y)
    Z = B + y[:, None]
    free = (Z > 0) & (Z < H)
    nf = free.sum(axis=1)
    at_hi = np.where(Z >= H, H, 0.0).sum(axis=1)
    fsum = np.where(free, B, 0.0).sum(axis=1)
    exact = np.where(nf > 0, (r - at_hi - fsum) / np.maximum(nf, 1), y)
    X = np.clip(B + exact[:, None], 0.0, H)
    res = r - X.sum(axis=1)
    room = np.where(res[:, None] > 0, H - X, X)
    tot_room = room.sum(axis=1)
    X += np.where(tot_room[:, None] > 0, room * (res / np.where(tot_room > 0, tot_room, 1.0))[:, None], 0.0)
    X[r <= 0] = 0.0
    return X


__all__ = ["project_rows_box_sum", "BoxSumProjector", "project_box_sum", "project_rows_simplex"]
