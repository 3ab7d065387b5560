"""OPT_0: strategy for one explicit Gram V = WᵀW (HDMM Sec. 4).

Laplace: the p-Identity family A(Θ) = [I; Θ] diag(1 + 1ᵀΘ)⁻¹ (unit L1 columns), f(Θ) = tr[(AᵀA)⁻¹V]
evaluated in O(pn²) through Woodbury, with the analytic gradient, L-BFGS-B and random restarts.
Gaussian: the convex problem min tr[X⁻¹V] s.t. diag X = 1, X ≻ 0, A = chol(X)ᵀ.
Both return the best of {Identity, Total (when it supports V), the optimised strategy}.
Losses are in the unit ‖A‖_K² · tr[(AᵀA)⁺ V] with ‖A‖_K = 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.optimize import minimize, minimize_scalar

from privcube.errors import ConfigError, WorkloadError


@dataclass
class Opt0Result:
    """A unit-sensitivity explicit strategy for one Gram and its loss tr[(AᵀA)⁺V]."""

    matrix: np.ndarray
    loss: float
    template: str


def _check_gram(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    if v.ndim != 2 or v.shape[0] != v.shape[1]:
        raise WorkloadError(f"Gram matrix V must be square, got shape {v.shape}")
    return (v + v.T) / 2


def pidentity_matrix(theta: np.ndarray) -> np.ndarray:
    """A(Θ) = [I; Θ] D with D = diag(1 + 1ᵀΘ)⁻¹: every column has L1 norm 1."""
    p, n = theta.shape
    return np.vstack([np.eye(n), theta]) / (1.0 + theta.sum(axis=0))[None, :]


def pidentity_loss(theta: np.ndarray, v: np.ndarray) -> tuple[float, np.ndarray]:
    """f(Θ) = tr[(A(Θ)ᵀA(Θ))⁻¹ V] and ∂f/∂Θ, in O(pn²)."""
    p, n = theta.shape
    s = 1.0 + theta.sum(axis=0)
    c = v * np.outer(s, s)                      # C = S V S
    try:
        r = cho_factor(np.eye(p) + theta @ theta.T)
    except np.linalg.LinAlgError:
        return math.inf, np.zeros_like(theta)
    bc = theta @ c                              # B C        (p×n)
    rbc = cho_solve(r, bc)                      # R B C
    kc = c - theta.T @ rbc                      # K C, K = I − BᵀRB = (I + BᵀB)⁻¹
    f = float(np.trace(kc))
    rb = cho_solve(r, theta)                    # R B
    p1 = theta @ kc                             # B K C
    bm = p1 - (p1 @ theta.T) @ rb               # B K C K
    grad = 2.0 * (np.diag(kc) / s)[None, :] - 2.0 * bm
    if not np.isfinite(f) or f < 0:
        return math.inf, np.zeros_like(theta)
    return f, grad


def _templates(v: np.ndarray) -> list[Opt0Result]:
    """Identity, and Total when V is a multiple of the all-ones matrix."""
    n = v.shape[0]
    out = [Opt0Result(np.eye(n), float(np.trace(v)), "identity")]
    tot = float(v.sum())
    if n > 1 and np.allclose(v, tot / n**2, rtol=1e-9, atol=1e-12 * max(abs(tot), 1.0)):
        out.append(Opt0Result(np.ones((1, n)), tot / n**2, "total"))
    return out


def idtotal(v: np.ndarray) -> Opt0Result:
    """The one-parameter template [I; θ·1ᵀ] / (1 + θ), θ chosen by a bounded scalar search."""
    n = v.shape[0]

    def f(logt: float) -> float:
        return pidentity_loss(np.full((1, n), math.exp(logt)), v)[0]

    grid = np.linspace(-9.0, 5.0, 57)
    k = int(np.argmin([f(t) for t in grid]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    res = minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-7})
    a = pidentity_matrix(np.full((1, n), math.exp(res.x)))
    return Opt0Result(a, exact_loss(a, v), "identity-total")


def opt0_laplace(v: np.ndarray, *, p: int | None = None, restarts: int = 1, seed: int | None = 0,
                 ftol: float = 1e-6, maxiter: int = 15000) -> Opt0Result:
    """Best of Identity/Total and ``restarts`` p-Identity optimisations (L1 sensitivity 1)."""
    v = _check_gram(v)
    n = v.shape[0]
    if restarts < 0:
        raise ConfigError(f"restarts must be >= 0, got {restarts!r}")
    best = min(_templates(v), key=lambda r: r.loss)
    if n == 1 or restarts == 0:
        return best
    it = idtotal(v)
    if it.loss < best.loss:
        best = it
    p = max(n // 16, 1) if p is None else int(p)
    if p < 1:
        raise ConfigError(f"p must be >= 1, got {p!r}")
    scale = float(np.trace(v)) / n or 1.0
    vs = v / scale
    rng = np.random.default_rng(seed)

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        f, g = pidentity_loss(z.reshape(p, n), vs)
        return f, g.ravel()

    for _ in range(restarts):
        z0 = rng.random(p * n)
        res = minimize(fun, z0, jac=True, method="L-BFGS-B", bounds=[(0, None)] * (p * n),
                       options={"ftol": ftol, "gtol": 1e-10, "maxiter": maxiter, "maxfun": 2 * maxiter})
        theta = np.maximum(res.x.reshape(p, n), 0)
        a = pidentity_matrix(theta)
        f = exact_loss(a, v)
        if f < best.loss:
            best = Opt0Result(a, f, "p-identity")
    return best


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
    """Best of Identity/Total and the convex Cholesky strategy (L2 sensitivity 1)."""
    v = _check_gram(v)
    n = v.shape[0]
    best = min(_templates(v), key=lambda r: r.loss)
    if n == 1 or restarts == 0:
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
