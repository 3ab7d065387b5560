"""Unbiased sampling (UBS, Algorithm 3 of Alimohammadi et al.): round x ∈ [0,1]^N with Σx = m to a set
of exactly m distinct indices such that P(i selected) = x_i.

The merge step groups consecutive indices greedily: index i joins the current group while the group
sum stays ≤ 1, otherwise it *starts* the next group (Figure 1; the printed pseudocode drops it). A
recursive call on the complements 1 − p_j chooses the L − m groups to exclude; each kept group then
contributes one index drawn with probability x_i / p_j. The output size is exactly m by construction,
whatever the float round-off in x.
"""
from __future__ import annotations

import numpy as np

from privcube.core.errors import DataError

#: Slack for the merge test "group sum ≤ 1" and for validating Σx = m.
TOL = 1e-9


def merge_groups(x: np.ndarray, tol: float = TOL) -> np.ndarray:
    """Start indices of the greedy consecutive groups (each group sum ≤ 1 + tol); Figure 1's merge."""
    x = np.asarray(x, dtype=float)
    n = x.size
    c = np.concatenate([[0.0], np.cumsum(x)])
    starts = []
    s = 0
    while s < n:
        starts.append(s)
        e = int(np.searchsorted(c, c[s] + 1.0 + tol, side="right")) - 1  # last prefix end within 1
        s = max(e, s + 1)
    return np.asarray(starts, dtype=np.int64)


def _pick_within(x: np.ndarray, starts: np.ndarray, ends: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per group [starts[j], ends[j]) drawn with probability x_i / Σ_group x."""
    if starts.size == 0:
        return np.empty(0, dtype=np.int64)
    c = np.concatenate([[0.0], np.cumsum(x)])
    lo, hi = c[starts], c[ends]
    target = lo + rng.random(starts.size) * (hi - lo)
    idx = np.searchsorted(c, target, side="right") - 1
    idx = np.clip(idx, starts, ends - 1)
    bad = np.flatnonzero(x[idx] <= 0.0)
    for k in bad:  # float edge cases (or an all-zero group): redraw exactly within the group
        seg = x[starts[k]:ends[k]]
        tot = seg.sum()
        if tot <= 0.0:
            idx[k] = starts[k] + int(rng.integers(seg.size))
        else:
            idx[k] = starts[k] + int(rng.choice(seg.size, p=seg / tot))
    return idx.astype(np.int64)


def _ubs(x: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """Recursive core on a clean vector (entries in [0,1], Σx ≈ m); returns sorted-free indices."""
    n = x.size
    if m <= 0:
        return np.empty(0, dtype=np.int64)
    if m >= n:
        return np.arange(n, dtype=np.int64)
    if m == 1:
        return _pick_within(x, np.zeros(1, dtype=np.int64), np.array([n], dtype=np.int64), rng)
    starts = merge_groups(x)
    ends = np.append(starts[1:], n)
    p = np.clip(np.add.reduceat(x, starts), 0.0, 1.0)
    n_groups = starts.size
    if n_groups < m:  # only possible if x violated its contract beyond the tolerance
        raise DataError(f"UBS: merged {n_groups} groups for m={m}; x must lie in [0,1] and sum to m")
    excluded = _ubs(1.0 - p, n_groups - m, rng)
    keep = np.ones(n_groups, dtype=bool)
    keep[excluded] = False
    return _pick_within(x, starts[keep], ends[keep], rng)


def ubs(x: np.ndarray, m: int | None = None, rng: np.random.Generator | None = None, *,
        shuffle: bool = True, tol: float = 1e-6) -> np.ndarray:
    """Exactly m distinct indices with P(i selected) = x_i (sorted ascending).

    ``x`` must lie in [0, 1] and sum to the integer m (within ``tol``·max(1, m)); m defaults to
    round(Σx). ``shuffle`` permutes x before merging (marginals unchanged; the joint is then not
    tied to the index order); set it False to reproduce Figure 1's exact joint distribution.
    """
    x = np.asarray(x, dtype=float).ravel()
    if rng is None:
        rng = np.random.default_rng()
    if x.size and (not np.all(np.isfinite(x)) or x.min() < -tol or x.max() > 1.0 + tol):
        raise DataError(f"UBS: x must lie in [0, 1]; got min {x.min()!r}, max {x.max()!r}")
    total = float(x.sum())
    if m is None:
        m = int(round(total))
    if isinstance(m, bool) or int(m) != m or m < 0 or m > x.size:
        raise DataError(f"UBS: m must be an integer in [0, {x.size}], got {m!r}")
    m = int(m)
    if abs(total - m) > tol * max(1.0, m):
        raise DataError(f"UBS: x sums to {total!r} but m={m}; the relaxed solution must sum to m exactly")
    x = np.clip(x, 0.0, 1.0)
    if shuffle and x.size > 1:
        perm = rng.permutation(x.size)
        out = perm[_ubs(x[perm], m, rng)]
    else:
        out = _ubs(x, m, rng)
    return np.sort(out)


def ubs_indicator(x: np.ndarray, m: int | None = None, rng: np.random.Generator | None = None, **kw: object) -> np.ndarray:
    """UBS as a 0/1 vector of x's shape (exactly m ones)."""
    x = np.asarray(x, dtype=float)
    out = np.zeros(x.size, dtype=np.int8)
    out[ubs(x.ravel(), m, rng, **kw)] = 1  # type: ignore[arg-type]
    return out.reshape(x.shape)


def categorical_rows(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Algorithm 7: one column per row, drawn with the row's probabilities (rows sum to 1)."""
    probs = np.asarray(probs, dtype=float)
    if probs.ndim != 2:
        raise DataError(f"categorical_rows: probs must be 2-D, got shape {probs.shape}")
    if probs.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    c = np.cumsum(np.clip(probs, 0.0, None), axis=1)
    tot = c[:, -1]
    if np.any(tot <= 0):
        raise DataError(f"categorical_rows: row {int(np.argmax(tot <= 0))} has no probability mass")
    u = rng.random(probs.shape[0]) * tot
    idx = (c <= u[:, None]).sum(axis=1)
    idx = np.minimum(idx, probs.shape[1] - 1)
    # never return a zero-probability column (float edge): fall back to the row's argmax
    zero = probs[np.arange(probs.shape[0]), idx] <= 0
    idx[zero] = np.argmax(probs[zero], axis=1)
    return idx.astype(np.int64)


def sample_and_reject(x: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """The biased naive method of Example 1 (draw from x/m, redraw duplicates); kept for tests only."""
    x = np.asarray(x, dtype=float)
    chosen: list[int] = []
    while len(chosen) < m:
        i = int(rng.choice(x.size, p=x / x.sum()))
        if i not in chosen:
            chosen.append(i)
    return np.sort(np.asarray(chosen, dtype=np.int64))


__all__ = ["merge_groups", "ubs", "ubs_indicator", "categorical_rows", "sample_and_reject"]
