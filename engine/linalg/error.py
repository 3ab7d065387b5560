"""Expected error of the matrix mechanism and the SVD lower bound, on implicit matrices.

Total squared error of answering W from y = A x + noise via x̂ = A⁺ y:
  Laplace (scale ‖A‖₁/ε):   2/ε² · ‖A‖₁² · ‖W A⁺‖_F²
  Gaussian (σ per unit L2): σ²   · ‖A‖₂² · ‖W A⁺‖_F²
‖W A⁺‖_F² = tr[(AᵀA)⁺ WᵀW] is evaluated by structure (Kronecker factors, marginal algebra) when possible.
"""
from __future__ import annotations

import math

import numpy as np

from privcube.core.errors import WorkloadError
from privcube.linalg.marginals import MarginalsStrategy, marginal_approximation, marginal_objective
from privcube.linalg.matrices import Explicit, Kronecker, Matrix, Weighted, kron_terms


def factor_trace(a: np.ndarray, v: np.ndarray) -> float:
    """tr[(AᵀA)⁺ V] for a small explicit A and Gram V = WᵀW."""
    g = a.T @ a
    return float(np.sum(np.linalg.pinv(g, hermitian=True) * v))


def frobenius_error(w: Matrix, a: Matrix) -> float:
    """‖W A⁺‖_F² (assumes A supports W), using Kronecker / marginal structure when present."""
    scale = 1.0
    while isinstance(a, Weighted):
        scale /= a.weight**2
        a = a.base
    if isinstance(a, MarginalsStrategy):
        w_vec = marginal_approximation(kron_terms(w), a.domain_shape)
        val, _ = marginal_objective(a.theta**2, w_vec, a.domain_shape)
        return scale * val
    if isinstance(a, Kronecker):
        try:
            terms = kron_terms(w)
        except WorkloadError:
            terms = None
        if terms is not None and all(len(f) == len(a.factors) and
                                     all(fi.shape[1] == ai.shape[1] for fi, ai in zip(f, a.factors))
                                     for _, f in terms):
            pinvs = [np.linalg.pinv(ai) for ai in a.factors]
            return scale * sum(c**2 * math.prod(float(np.sum((fi @ pi) ** 2)) for fi, pi in zip(f, pinvs))
                               for c, f in terms)
    wd = w.dense() if not isinstance(w, Explicit) else w.a
    return scale * float(np.sum((wd @ np.linalg.pinv(a.dense())) ** 2))


def supports(w: Matrix, a: Matrix, tol: float = 1e-8) -> bool:
    """Whether rowspace(W) ⊆ rowspace(A) (W A⁺ A = W), checked on a few random vectors."""
    rng = np.random.default_rng(0)
    ap = a.pinv()
    for _ in range(3):
        x = rng.standard_normal(a.shape[1])
        proj = ap.matvec(a.matvec(x))
        lhs, rhs = w.matvec(proj), w.matvec(x)
        if np.linalg.norm(lhs - rhs) > tol * max(np.linalg.norm(rhs), 1.0):
            return False
    return True


def expected_total_squared_error(w: Matrix, a: Matrix, noise: str, *, epsilon: float | None = None,
                                 sigma: float | None = None) -> float:
    """E‖W x̂ − W x‖²: Laplace needs ``epsilon``; Gaussian needs ``sigma`` (noise std per unit L2 sensitivity)."""
    if noise == "laplace":
        if epsilon is None or epsilon <= 0:
            raise WorkloadError(f"laplace error needs a positive epsilon, got {epsilon!r}")
        return 2.0 / epsilon**2 * a.sensitivity(1) ** 2 * frobenius_error(w, a)
    if noise == "gaussian":
        if sigma is None or sigma <= 0:
            raise WorkloadError(f"gaussian error needs a positive sigma, got {sigma!r}")
        return sigma**2 * a.sensitivity(2) ** 2 * frobenius_error(w, a)
    raise WorkloadError(f"noise must be 'laplace' or 'gaussian', got {noise!r}")


def rmse(w: Matrix, a: Matrix, noise: str, **kw: float) -> float:
    """sqrt(expected total squared error / number of workload rows)."""
    return math.sqrt(expected_total_squared_error(w, a, noise, **kw) / w.shape[0])


def svdb_explicit(v: np.ndarray) -> float:
    """SVD bound (Σ_i sqrt λ_i(V))² / n for a Gram V = WᵀW."""
    lam = np.clip(np.linalg.eigvalsh(v), 0, None)
    return float(np.sqrt(lam).sum() ** 2 / v.shape[0])


def svd_bound(w: Matrix) -> float:
    """SVDB(W): factorised for one Kronecker product (Thm 5), dense otherwise."""
    terms = kron_terms(w) if isinstance(w, (Kronecker, Weighted, Explicit)) else None
    if terms is not None and len(terms) == 1:
        c, f = terms[0]
        return c**2 * math.prod(svdb_explicit(fi.T @ fi) for fi in f)
    g = w.gram()
    return svdb_explicit(g.dense())
