"""The multi-dimensional workloads of HDMM Tables 6/7 as unions of Kronecker products (digest §1.5, §5.3).

Each builder returns ``(shape, terms)`` with terms ``[(weight, [factor query matrices])]``. Census SF1 uses
(Sex 2, Hispanic 2, Race 64, Age 115) with Relationship dropped (errata E6); SF1+ appends State as [I;T](51).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

Terms = list[tuple[float, list[np.ndarray]]]


def identity_total(n: int) -> np.ndarray:
    """[I; T]: the n cells and their total."""
    return np.vstack([np.eye(n), np.ones((1, n))])


def prefix(n: int) -> np.ndarray:
    """Prefix sums: row k = [t ≤ k]."""
    return np.tril(np.ones((n, n)))


def sf1() -> tuple[tuple[int, ...], Terms]:
    """The 33 SF1 products (duplicates kept: they act as weights), m = 4151."""
    codes = np.arange(64)
    pop = np.array([bin(c).count("1") for c in codes])
    single = np.array([[1.0 if c == 2**i else 0.0 for c in codes] for i in range(6)])
    race1 = np.vstack([single, 1 - single.sum(axis=0)])
    race2 = np.vstack([np.eye(64)[1:], [(pop == k).astype(float) for k in range(1, 7)], (pop >= 2).astype(float)])
    white = np.eye(64)[[1]]
    is_h, not_h = np.array([[1.0, 0]]), np.array([[0.0, 1]])
    adult = (np.arange(115) >= 18).astype(float)[None, :]
    edges = [0, 5, 10, 15, 18, 20, 21, 22, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70, 75, 80, 85, 115]
    age1 = np.array([[1.0 if lo <= a < hi else 0.0 for a in range(115)] for lo, hi in zip(edges, edges[1:])])
    e3 = list(range(101)) + [105, 110, 115]
    age3 = np.array([[1.0 if lo <= a < hi else 0.0 for a in range(115)] for lo, hi in zip(e3, e3[1:])])
    t = [np.ones((1, n)) for n in (2, 2, 64, 115)]
    i2, it2 = np.eye(2), identity_total(2)
    prods = [[t[0], t[1], t[2], t[3]]] * 5
    prods += [[t[0], t[1], race1, t[3]], [t[0], i2, t[2], t[3]], [t[0], i2, t[2], t[3]], [t[0], i2, race1, t[3]],
              [t[0], it2, t[2], t[3]], [t[0], t[1], race2, t[3]], [t[0], not_h, race2, t[3]],
              [t[0], t[1], race2, adult], [t[0], t[1], t[2], adult], [t[0], t[1], t[2], adult],
              [t[0], i2, t[2], adult], [t[0], not_h, race2, adult], [i2, t[1], t[2], age1],
              [it2, t[1], t[2], t[3]], [it2, t[1], t[2], t[3]], [i2, t[1], t[2], age3]]
    for age, last in ((age1, white), (age3, race1)):
        prods += [[i2, t[1], race1, age], [it2, t[1], race1, t[3]], [i2, is_h, t[2], age], [it2, is_h, t[2], t[3]],
                  [i2, not_h, last, age], [it2, not_h, last, t[3]]]
    return (2, 2, 64, 115), [(1.0, list(p)) for p in prods]


def sf1_plus() -> tuple[tuple[int, ...], Terms]:
    """SF1 national and per-State: each product × [I;T](51), m = 215,852."""
    shape, terms = sf1()
    return shape + (51,), [(c, f + [identity_total(51)]) for c, f in terms]


CPS_SHAPE = (50, 100, 7, 4, 2)
ADULT_SHAPE = (100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2)
ADULT_NUMERIC = 5
LOANS_SHAPE = (101, 101, 101, 101, 3, 8, 36, 6, 51, 4, 5, 15)
LOANS_NUMERIC = 4


def cps_all_marginals() -> tuple[tuple[int, ...], Terms]:
    """All 32 marginals of CPS as the single product ⊗[I;T]."""
    return CPS_SHAPE, [(1.0, [identity_total(n) for n in CPS_SHAPE])]


def cps_prefix_marginals() -> tuple[tuple[int, ...], Terms]:
    """P(50) ⊗ P(100) ⊗ [I;T](7) ⊗ [I;T](4) ⊗ [I;T](2)."""
    return CPS_SHAPE, [(1.0, [prefix(50), prefix(100)] + [identity_total(n) for n in CPS_SHAPE[2:]])]


def _marginal_terms(shape: tuple[int, ...], subsets, numeric: int, use_prefix: bool) -> Terms:
    out = []
    for s in subsets:
        f = [(prefix(n) if (use_prefix and i < numeric) else np.eye(n)) if i in s else np.ones((1, n))
             for i, n in enumerate(shape)]
        out.append((1.0, f))
    return out


def adult_3way_marginals() -> tuple[tuple[int, ...], Terms]:
    """All 0-, 1-, 2- and 3-way marginals of Adult (470 products)."""
    d = len(ADULT_SHAPE)
    subsets = [c for k in range(4) for c in itertools.combinations(range(d), k)]
    return ADULT_SHAPE, _marginal_terms(ADULT_SHAPE, subsets, ADULT_NUMERIC, False)


def adult_2d_prefix_marginals() -> tuple[tuple[int, ...], Terms]:
    """All 91 pairs, P on the 5 numeric attributes and I on the rest."""
    subsets = list(itertools.combinations(range(len(ADULT_SHAPE)), 2))
    return ADULT_SHAPE, _marginal_terms(ADULT_SHAPE, subsets, ADULT_NUMERIC, True)


def _small_subsets(shape: tuple[int, ...], limit: int = 5000) -> list[tuple[int, ...]]:
    d = len(shape)
    return [c for k in range(d + 1) for c in itertools.combinations(range(d), k)
            if math.prod(shape[i] for i in c) <= limit]


def loans_small_marginals() -> tuple[tuple[int, ...], Terms]:
    """Every marginal of Loans with at most 5000 cells (188 products)."""
    return LOANS_SHAPE, _marginal_terms(LOANS_SHAPE, _small_subsets(LOANS_SHAPE), LOANS_NUMERIC, False)


def loans_small_prefix_marginals() -> tuple[tuple[int, ...], Terms]:
    """The same 188 subsets with P(101) on the 4 numeric attributes."""
    return LOANS_SHAPE, _marginal_terms(LOANS_SHAPE, _small_subsets(LOANS_SHAPE), LOANS_NUMERIC, True)


def rows(terms: Terms) -> int:
    """m, the number of workload queries."""
    return sum(math.prod(np.atleast_2d(x).shape[0] for x in f) for _, f in terms)
