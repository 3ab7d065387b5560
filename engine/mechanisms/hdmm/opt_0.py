"""OPT_0: strategy for one explicit Gram V = WᵀW (HDMM Sec. 4).

Laplace: the p-Identity family A(Θ) = [I; Θ] diag(1 + 1ᵀΘ)⁻¹ (unit L1 columns), f(Θ) = tr[(AᵀA)⁻¹V]
evaluated in O(pn²) through Woodbury, with the analytic gradient, a projected L-BFGS and random restarts.
Gaussian: the convex problem min tr[X⁻¹V] s.t. diag X = 1, X ≻ 0, A = chol(X)ᵀ.
Both return the best of {Identity, Total (when it supports V), the optimised strategy}.
Losses are in the unit ‖A‖_K² · tr[(AᵀA)⁺ V] with ‖A‖_K = 1.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize, minimize_scalar

from privcube.core.errors import ConfigError, WorkloadError
from privcube.mechanisms.hdmm.lbfgs import projected_lbfgs


@dataclass
class Opt0Result:
    """A unit-sensitivity explicit strategy for one Gram and its loss tr[(AᵀA)⁺V]."""

    matrix: np.ndarray
    loss: float
    template: str


def check_gram(v: np.ndarray) -> np.ndarray:
    """A workload Gram V = WᵀW as a float square matrix, symmetrised (WorkloadError if it is not square)."""
    v = np.asarray(v, dtype=float)
    if v.ndim != 2 or v.shape[0] != v.shape[1]:
        raise WorkloadError(f"Gram matrix V must be square, got shape {v.shape}")
    return (v + v.T) / 2


def pidentity_matrix(theta: np.ndarray) -> np.ndarray:
    """A(Θ) = [I; Θ] D with D = diag(1 + 1ᵀΘ)⁻¹: every column has L1 norm 1."""
    p, n = theta.shape
    return np.vstack([np.eye(n), theta]) / (1.0 + theta.sum(axis=0))[None, :]


def pidentity_loss(theta: np.ndarray, v: np.ndarray, diag_v: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """f(Θ) = tr[(A(Θ)ᵀA(Θ))⁻¹ V] and ∂f/∂Θ, in O(pn²): one p×n by n×n product, the rest O(p²n).

    With B = Θ, s = 1 + 1ᵀB, S = diag(s), C = SVS and R = (I + BBᵀ)⁻¹ (Woodbury),
    (AᵀA)⁻¹ = S K S with K = (I + BᵀB)⁻¹ = I − BᵀRB, so f = tr C − ⟨B, M⟩ with M = RBC.
    Gradient 2 diag(KC)/s − 2 BKCK, where BK = RB gives BKC = M and BKCK = M − (MBᵀ)(RB).
    ``diag_v`` (the diagonal of V) may be passed to avoid re-extracting it.
    """
    p, n = theta.shape
    s = 1.0 + theta.sum(axis=0)
    bc = (theta * s) @ v                        # B S V  (the only O(pn²) step)
    bc *= s                                     # B C
    try:
        r = cho_factor(np.eye(p) + theta @ theta.T)
    except np.linalg.LinAlgError:
        return math.inf, np.zeros_like(theta)
    rinv = cho_solve(r, np.eye(p))              # R (p×p); products with it are faster than p×n triangular solves
    m, rb = rinv @ bc, rinv @ theta             # R B C, R B
    dv = np.diagonal(v) if diag_v is None else diag_v
    diag_kc = dv * s * s - (theta * m).sum(axis=0)
    f = float(diag_kc.sum())
    if not np.isfinite(f) or f < 0:
        return math.inf, np.zeros_like(theta)
    grad = (m @ theta.T) @ rb
    grad -= m
    grad *= 2.0
    grad += (2.0 * diag_kc / s)[None, :]
    return f, grad


def on_support(v: np.ndarray, solve: Callable[[np.ndarray], Opt0Result]) -> Opt0Result:
    """Run ``solve`` on V restricted to the cells the workload touches (diag V > 0) and embed the result.

    Cells with a zero column in W need not be measured: the strategy gets zero columns there (sensitivity
    and loss tr[(AᵀA)⁺V] unchanged, W A⁺A = W still holds). E.g. the SF1 factor "adult" (ages ≥ 18) becomes
    an all-ones Gram on 97 cells, answered exactly by the Total template (loss 1) instead of a p-Identity
    strategy over all 115 ages.
    """
    v = check_gram(v)
    d = np.diagonal(v)
    keep = d > 1e-12 * max(float(d.max(initial=0.0)), 1e-300)
    if keep.all() or not keep.any():
        return solve(v)
    res = solve(v[np.ix_(keep, keep)])
    a = np.zeros((res.matrix.shape[0], v.shape[0]))
    a[:, keep] = res.matrix
    return Opt0Result(a, res.loss, res.template)


def _templates(v: np.ndarray) -> list[Opt0Result]:
    """Identity, and Total when V is a multiple of the all-ones matrix."""
    n = v.shape[0]
    out = [Opt0Result(np.eye(n), float(np.trace(v)), "identity")]
    if _is_total(v):
        out.append(Opt0Result(np.ones((1, n)), float(v.sum()) / n**2, "total"))
    return out


def _is_total(v: np.ndarray) -> bool:
    n, tot = v.shape[0], float(v.sum())
    return n > 1 and bool(np.allclose(v, tot / n**2, rtol=1e-9, atol=1e-12 * max(abs(tot), 1.0)))


def template_is_optimal(v: np.ndarray) -> bool:
    """V ∝ I or V ∝ 11ᵀ: Identity / Total attain the SVD bound, so no strategy (L1 or L2) does better."""
    d = float(v[0, 0])
    return _is_total(v) or bool(np.allclose(v, d * np.eye(v.shape[0]), rtol=1e-12, atol=1e-12 * max(abs(d), 1.0)))


def idtotal(v: np.ndarray) -> Opt0Result:
    """The one-parameter template [I; θ·1ᵀ] / (1 + θ), θ chosen by a bounded scalar search."""
    n = v.shape[0]
    dv = np.diagonal(v).copy()

    def f(logt: float) -> float:
        return pidentity_loss(np.full((1, n), math.exp(logt)), v, dv)[0]

    grid = np.linspace(-9.0, 5.0, 57)
    k = int(np.argmin([f(t) for t in grid]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    res = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-7})
    theta = np.full((1, n), math.exp(res.x))
    return Opt0Result(pidentity_matrix(theta), pidentity_exact_loss(theta, v), "identity-total")


def opt0_laplace(v: np.ndarray, *, p: int | None = None, restarts: int = 1, seed: int | None = 0,
                 ftol: float = 1e-4, maxiter: int = 15000) -> Opt0Result:
    """Laplace OPT_0 on the support of V (see :func:`on_support`); best of Identity/Total, Identity-Total and
    ``restarts`` p-Identity optimisations (L1 sensitivity 1)."""
    return on_support(v, lambda vs: _opt0_laplace(vs, p=p, restarts=restarts, seed=seed, ftol=ftol,
                                                  maxiter=maxiter))


def _opt0_laplace(v: np.ndarray, *, p: int | None = None, restarts: int = 1, seed: int | None = 0,
                  ftol: float = 1e-4, maxiter: int = 15000) -> Opt0Result:
    """Best of Identity/Total, Identity-Total and ``restarts`` p-Identity optimisations (L1 sensitivity 1).

    Each restart starts from Θ ~ U[0,1)^{p×n} and runs the projected L-BFGS (``lbfgs.py``) with the
    reference implementation's stopping tolerance ftol = 1e-4 (relative reduction per iteration).
    """
    v = check_gram(v)
    n = v.shape[0]
    if restarts < 0:
        raise ConfigError(f"restarts must be >= 0, got {restarts!r}")
    best = min(_templates(v), key=lambda r: r.loss)
    if n == 1 or restarts == 0 or template_is_optimal(v):
        return best
    it = idtotal(v)
    if it.loss < best.loss:
        best = it
    p = max(n // 16, 1) if p is None else int(p)
    if p < 1:
        raise ConfigError(f"p must be >= 1, got {p!r}")
    scale = float(np.trace(v)) / n or 1.0
    vs = v / scale
    dvs = np.diagonal(vs).copy()
    rng = np.random.default_rng(seed)

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        f, g = pidentity_loss(z.reshape(p, n), vs, dvs)
        return f, g.ravel()

    for _ in range(restarts):
        z0 = rng.random(p * n)
        res = projected_lbfgs(fun, z0, lower=0.0, ftol=ftol, gtol=1e-10, maxiter=maxiter)
        theta = np.maximum(res.x.reshape(p, n), 0)
        f = pidentity_exact_loss(theta, v)
        if f < best.loss:
            best = Opt0Result(pidentity_matrix(theta), f, "p-identity")
    return best


def pidentity_exact_loss(theta: np.ndarray, v: np.ndarray) -> float:
    """tr[(A(Θ)ᵀA(Θ))⁻¹ V] by Woodbury, or by an n×n Cholesky solve where Woodbury cancels (f ≪ tr C)."""
    f, _ = pidentity_loss(theta, v)
    s = 1.0 + theta.sum(axis=0)
    tr_c = float(np.diagonal(v) @ (s * s))
    if math.isfinite(f) and f > 1e-6 * tr_c:
        return f
    gram = np.eye(theta.shape[1]) + theta.T @ theta          # S (AᵀA) S
    try:
        k = cho_solve(cho_factor(gram), v * np.outer(s, s))
    except np.linalg.LinAlgError:
        return exact_loss(pidentity_matrix(theta), v)
    return float(np.trace(k))


def exact_loss(a: np.ndarray, v: np.ndarray) -> float:
    """tr[(AᵀA)⁺ V] through an eigendecomposition (robust where the Woodbury form cancels)."""
    return float(np.sum(np.linalg.pinv(a.T @ a, hermitian=True) * v))


def _gaussian_loss(z: np.ndarray, v: np.ndarray, idx: tuple[np.ndarray, np.ndarray],
                   state: dict) -> tuple[float, np.ndarray]:
    n = v.shape[0]
    x = np.eye(n)
    x[idx] = z
    x[idx[1], idx[0]] = z
    try:
        cf = cho_factor(x)
    except np.linalg.LinAlgError:
        return 100.0 * state["last"], np.zeros_like(z)
    xiv = cho_solve(cf, v)
    f = float(np.trace(xiv))
    g = -cho_solve(cf, xiv.T)  # −X⁻¹ V X⁻¹ (symmetric)
    state["last"] = f
    return f, 2.0 * g[idx]


def opt0_gaussian(v: np.ndarray, *, restarts: int = 1, seed: int | None = 0, ftol: float = 1e-10,
                  maxiter: int = 5000) -> Opt0Result:
    """Gaussian OPT_0 on the support of V (see :func:`on_support`)."""
    return on_support(v, lambda vs: _opt0_gaussian(vs, restarts=restarts, seed=seed, ftol=ftol, maxiter=maxiter))


def _opt0_gaussian(v: np.ndarray, *, restarts: int = 1, seed: int | None = 0, ftol: float = 1e-10,
                   maxiter: int = 5000) -> Opt0Result:
    """Best of Identity/Total and the convex Cholesky strategy (L2 sensitivity 1)."""
    v = check_gram(v)
    n = v.shape[0]
    best = min(_templates(v), key=lambda r: r.loss)
    if n == 1 or restarts == 0 or template_is_optimal(v):
        return best
    lam, vecs = np.linalg.eigh(v)
    x0 = (vecs * np.sqrt(np.clip(lam, 0, None))) @ vecs.T
    x0 = x0 / max(float(np.max(np.diag(x0))), 1e-300)
    x0 = 0.98 * x0 + 0.02 * np.eye(n)  # keep the start positive definite when V is singular
    dg = np.sqrt(np.diag(x0))
    x0 = x0 / np.outer(dg, dg)
    idx = np.tril_indices(n, -1)
    scale = float(np.trace(v)) / n or 1.0
    vs = v / scale
    state = {"last": float(np.trace(vs)) * 1e6}
    res = minimize(_gaussian_loss, x0[idx], args=(vs, idx, state), jac=True, method="L-BFGS-B",
                   options={"ftol": ftol, "gtol": 1e-10, "maxiter": maxiter})
    x = np.eye(n)
    x[idx] = res.x
    x[idx[1], idx[0]] = res.x
    try:
        a = np.linalg.cholesky(x).T
    except np.linalg.LinAlgError:
        return best
    loss = float(np.sum(np.linalg.pinv(a.T @ a, hermitian=True) * v))
    if loss < best.loss:
        best = Opt0Result(a, loss, "cholesky")
    return best


def opt0(v: np.ndarray, noise: str, *, restarts: int = 1, seed: int | None = 0, p: int | None = None) -> Opt0Result:
    """OPT_0 for ``noise`` in {"laplace", "gaussian"}."""
    if noise == "laplace":
        return opt0_laplace(v, p=p, restarts=restarts, seed=seed)
    if noise == "gaussian":
        return opt0_gaussian(v, restarts=restarts, seed=seed)
    raise ConfigError(f"noise must be 'laplace' or 'gaussian', got {noise!r}")
