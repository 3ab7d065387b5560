"""SVD lower bound (HDMM Def. 11, Thms 5 and 12) and baseline errors, in the unit ‖A‖_K²‖WA⁺‖_F².

RMSE conversion (Tables 4–7): Laplace sqrt(2·L/m)/ε, Gaussian σ·sqrt(L/m).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from privcube.linalg.error import svdb_explicit
from privcube.linalg.marginals import SPECTRAL_MAX_DIMS, marginal_approximation, marginal_svdb

Terms = Sequence[tuple[float, Sequence[np.ndarray]]]
DENSE_SVDB_LIMIT = 4096


def _is_marginal_factor(f: np.ndarray) -> bool:
    f = np.atleast_2d(f)
    n = f.shape[1]
    return (f.shape == (n, n) and np.array_equal(f, np.eye(n))) or (f.shape[0] == 1 and np.all(f == 1))


def svd_bound(terms: Terms, shape: Sequence[int]) -> float | None:
    """SVDB(W) = (Σ singular values)²/n when computable: one product, a marginal workload, or n ≤ 4096."""
    if len(terms) == 1:
        c, f = terms[0]
        return c**2 * math.prod(svdb_explicit(np.atleast_2d(x).T @ np.atleast_2d(x)) for x in f)
    if len(shape) <= SPECTRAL_MAX_DIMS and all(_is_marginal_factor(x) for _, f in terms for x in f):
        return marginal_svdb(marginal_approximation(terms, shape), shape)
    if math.prod(shape) <= DENSE_SVDB_LIMIT:
        from functools import reduce
        v = sum(c**2 * reduce(np.kron, [np.atleast_2d(x).T @ np.atleast_2d(x) for x in f]) for c, f in terms)
        return svdb_explicit(v)
    return None


def identity_loss(terms: Terms) -> float:
    """‖W‖_F² (the Identity strategy, sensitivity 1)."""
    return sum(c**2 * math.prod(float((np.atleast_2d(x) ** 2).sum()) for x in f) for c, f in terms)


def workload_loss(terms: Terms, noise: str) -> tuple[float, int]:
    """The workload answered directly (Tables 6/7 "Laplace" column): (sens² · m, m).

    Sensitivity is the sum over products of per-product sensitivities (errata E4: what the tables use;
    an upper bound on the exact max column norm). Gaussian combines them as sqrt(Σ sens_j²).
    """
    p = 1 if noise == "laplace" else 2
    sens = []
    for c, f in terms:
        s = abs(c)
        for x in f:
            x = np.atleast_2d(x)
            s *= np.abs(x).sum(axis=0).max() if p == 1 else math.sqrt((x**2).sum(axis=0).max())
        sens.append(s)
    total = sum(sens) if p == 1 else math.sqrt(sum(s**2 for s in sens))
    m = sum(math.prod(np.atleast_2d(x).shape[0] for x in f) for _, f in terms)
    return total**2 * m, m


def rmse_from_loss(loss: float, m: int, noise: str, *, epsilon: float = 1.0, sigma: float = 1.0) -> float:
    """Convert a unit loss to RMSE: Laplace sqrt(2L/m)/ε; Gaussian σ·sqrt(L/m)."""
    if noise == "laplace":
        return math.sqrt(2.0 * loss / m) / epsilon
    return sigma * math.sqrt(loss / m)
