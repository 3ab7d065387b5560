"""Fixed 1-D reference strategies for comparisons: identity, workload, H2, HB and the ±1 Haar wavelet.

Each returns an explicit matrix over n cells (unnormalised; error formulas divide by sensitivity).
"""
from __future__ import annotations

import math

import numpy as np

from privcube.errors import ConfigError


def identity(n: int) -> np.ndarray:
    """I_n."""
    return np.eye(_check_n(n))


def workload(w: np.ndarray) -> np.ndarray:
    """The workload itself as the strategy."""
    return np.atleast_2d(np.asarray(w, dtype=float))


def hierarchical(n: int, branching: int = 2) -> np.ndarray:
    """Tree of intervals (root = total; each node split into ``branching`` near-equal children; leaves = cells)."""
    _check_n(n)
    if branching < 2:
        raise ConfigError(f"branching must be >= 2, got {branching!r}")
    rows: list[tuple[int, int]] = []
    level = [(0, n)]
    while level:
        nxt = []
        for s, e in level:
            rows.append((s, e))
            if e - s > 1:
                k = min(branching, e - s)
                cuts = [s + round(i * (e - s) / k) for i in range(k + 1)]
                nxt.extend((cuts[i], cuts[i + 1]) for i in range(k) if cuts[i + 1] > cuts[i])
        level = nxt
    m = np.zeros((len(rows), n))
    for r, (s, e) in enumerate(rows):
        m[r, s:e] = 1.0
    return m


def h2(n: int) -> np.ndarray:
    """Binary hierarchical strategy (Hay et al. 2010)."""
    return hierarchical(n, 2)


def hb(n: int) -> np.ndarray:
    """Hierarchical with the branching factor minimising the all-range variance proxy (Qardaji et al. 2013).

    Chooses b in 2..n minimising (b − 1) · h³ with h = ⌈log_b n⌉ (their average-variance heuristic);
    b = n (a flat tree of the total plus identity) is allowed for small n.
    """
    _check_n(n)
    best, best_b = math.inf, 2
    for b in range(2, max(n, 2) + 1):
        h = max(math.ceil(math.log(n, b) - 1e-12), 1)
        cost = (b - 1) * h**3
        if cost < best:
            best, best_b = cost, b
    return hierarchical(n, best_b)


def haar(n: int) -> np.ndarray:
    """Unnormalised ±1 Haar wavelet (Privelet): total, then ±1 differences of halves at every scale."""
    _check_n(n)
    if n & (n - 1):
        raise ConfigError(f"the Haar strategy needs a power-of-two domain, got n={n}")
    rows = [np.ones(n)]
    size = n
    while size > 1:
        half = size // 2
        for s in range(0, n, size):
            r = np.zeros(n)
            r[s:s + half] = 1.0
            r[s + half:s + size] = -1.0
            rows.append(r)
        size = half
    return np.array(rows)


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ConfigError(f"domain size n must be a positive integer, got {n!r}")
    return int(n)
