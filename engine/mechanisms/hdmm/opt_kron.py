"""OPT_⊗: one Kronecker-product strategy for a union of Kronecker products (HDMM Sec. 6, Thms 4 and 6).

Block coordinate descent: factor i is re-optimised by OPT_0 on the surrogate Gram
V̂_i = Σ_j w_j² ∏_{i'≠i} C[i',j] · V_i^{(j)}, with C[i,j] = tr[(A_iᵀA_i)⁺ V_i^{(j)}] for unit-sensitivity A_i.
The loss of ⊗A_i is Σ_j w_j² ∏_i C[i,j] (unit ‖·‖_K²·‖W A⁺‖_F²).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privcube.core.errors import WorkloadError
from privcube.linalg.error import factor_trace
from privcube.mechanisms.hdmm.opt_0 import opt0

Terms = Sequence[tuple[float, Sequence[np.ndarray]]]


@dataclass
class KronResult:
    """Unit-sensitivity factors of a Kronecker strategy and its loss on the workload."""

    factors: list[np.ndarray]
    loss: float


def factor_grams(terms: Terms, d: int) -> list[list[np.ndarray]]:
    """V_i^{(j)} = W_ij ᵀ W_ij, indexed [i][j]."""
    for _, f in terms:
        if len(f) != d:
            raise WorkloadError(f"workload term has {len(f)} factors, expected {d}")
    return [[np.atleast_2d(f[i]).T @ np.atleast_2d(f[i]) for _, f in terms] for i in range(d)]


def kron_loss(factors: Sequence[np.ndarray], terms: Terms) -> float:
    """Σ_j w_j² ∏_i tr[(A_iᵀA_i)⁺ V_i^{(j)}] for unit-sensitivity factors (Thm 6)."""
    d = len(factors)
    grams = factor_grams(terms, d)
    return sum(c**2 * math.prod(factor_trace(factors[i], grams[i][j]) for i in range(d))
               for j, (c, _) in enumerate(terms))


def opt_kron(terms: Terms, noise: str, *, restarts: int = 1, seed: int = 0, sweeps: int = 10,
             tol: float = 1e-4) -> KronResult:
    """Best Kronecker strategy over ``restarts`` block-coordinate runs."""
    d = len(terms[0][1])
    grams = factor_grams(terms, d)
    weights = np.array([c**2 for c, _ in terms])
    rng = np.random.default_rng(seed)
    best: KronResult | None = None
    for _ in range(max(restarts, 1)):
        factors = [np.eye(g[0].shape[0]) for g in grams]
        cmat = np.array([[float(np.trace(g)) for g in grams[i]] for i in range(d)])
        loss = float(weights @ np.prod(cmat, axis=0))
        for _sweep in range(sweeps if len(terms) > 1 else 1):
            before = loss
            for i in range(d):
                others = np.prod(np.delete(cmat, i, axis=0), axis=0) if d > 1 else np.ones(len(terms))
                coef = weights * others
                vhat = sum(c * g for c, g in zip(coef, grams[i]))
                mean = float(np.mean(np.abs(vhat))) or 1.0
                res = opt0(vhat / mean, noise, restarts=1, seed=int(rng.integers(2**31)))
                pg = np.linalg.pinv(res.matrix.T @ res.matrix, hermitian=True)   # once per factor, not per term
                row = np.array([float(np.sum(pg * g)) for g in grams[i]])
                new = float(coef @ row)
                if new < float(coef @ cmat[i]) or not np.isfinite(loss):
                    factors[i], cmat[i] = res.matrix, row
                loss = float(weights @ np.prod(cmat, axis=0))
            if before - loss <= tol * loss:
                break
        if best is None or loss < best.loss:
            best = KronResult(factors, loss)
    return best
