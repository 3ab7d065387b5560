"""Fixed 1-D reference strategies for comparisons: identity, workload, H2, HB and the ±1 Haar wavelet.

Each returns an explicit matrix over n cells (unnormalised; error formulas divide by sensitivity).
"""
from __future__ import annotations

import math

import numpy as np

from privcube.core.errors import ConfigError


def identity(n: int) -> np.ndarray:
    """I_n."""
    return np.eye(_check_n(n))


def workload(w: np.ndarray) -> np.ndarray:
    """The workload itself as the strategy."""
    return np.atleast_2d(np.asarray(w, dtype=float))


def hierarchical(n: int, branching: int = 2) -> np.ndarray:
    """Tree of intervals (root = total; each node split into ``branching`` children whose sizes differ by at most
    one, larger first; leaves = cells)."""
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
                q, r = divmod(e - s, k)                       # the first r children get one extra cell
                cuts = [s + i * q + min(i, r) for i in range(k + 1)]
                nxt.extend((cuts[i], cuts[i + 1]) for i in range(k) if cuts[i + 1] > cuts[i])
        level = nxt
    m = np.zeros((len(rows), n))
    for r, (s, e) in enumerate(rows):
        m[r, s:e] = 1.0
    return m


def h2(n: int) -> np.ndarray:
    """Binary hierarchical strategy (Hay et al. 2010)."""
    return hierarchical(n, 2)


def hb_branching(n: int) -> int:
    """Qardaji et al. (PVLDB 2013) Eq. 3: the b in 2..n minimising (b − 1)h³ − 2(b + 1)h²/3, h = ⌈log_b n⌉."""
    _check_n(n)
    best, best_b = math.inf, 2
    for b in range(2, max(n, 2) + 1):
        h = _ceil_log(n, b)
        cost = (b - 1) * h**3 - 2 * (b + 1) * h**2 / 3
        if cost < best:
            best, best_b = cost, b
    return best_b


def hb(n: int) -> np.ndarray:
    """HB (Qardaji et al. 2013, as compared in HDMM Tables 4/5): the hierarchical tree with the branching
    factor of :func:`hb_branching`, without the root (the total), so every level below it has equal weight.

    For n ≤ 64 the optimal branching is b = n and HB is the identity (Table 4/5: HB = Identity at n = 64).
    """
    tree = hierarchical(n, hb_branching(n))
    return tree[1:] if tree.shape[0] > 1 else tree


def _ceil_log(n: int, b: int) -> int:
    """Smallest h ≥ 1 with b^h ≥ n (exact integer arithmetic)."""
    h, p = 1, b
    while p < n:
        h, p = h + 1, p * b
    return h


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
