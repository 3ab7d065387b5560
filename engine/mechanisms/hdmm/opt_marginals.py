"""OPT_M: a weighted marginal strategy 𝕄(θ) for any union-of-Kronecker workload (HDMM Sec. 8).

Objective (Thm 11 with the errata: factor n, restricted inverse): F(θ) = ‖θ‖_K² · n · 1ᵀφ with
X(θ²) φ = w, w the marginal approximation of the workload (Thm 10). Laplace optimises θ ≥ 0; Gaussian
optimises u = θ² ≥ 0 and also tries the closed form θ² = Y⁻¹ sqrt(Y w) (Thm 13).
The objective is evaluated spectrally (``marginal_objective``: Σ_a mult(a) κ_w(a)/κ_u(a) with subset-sum
transforms), O(d·2^d) per evaluation, so all 2^d weights are optimised up to 22 attributes (Adult: 14).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from privcube.core.errors import ConfigError
from privcube.linalg.marginals import eigenvalues, from_eigenvalues, marginal_approximation, marginal_objective
from privcube.mechanisms.hdmm.opt_kron import Terms


@dataclass
class MarginalsResult:
    """Unit-sensitivity marginal weights θ (length 2^d) and the loss ‖θ‖_K²‖W𝕄(θ)⁺‖_F²."""

    theta: np.ndarray
    loss: float


def marginals_loss(theta: np.ndarray, w: np.ndarray, shape: Sequence[int], noise: str) -> float:
    """‖θ‖_K² · ‖W 𝕄(θ)⁺‖_F² (+inf when 𝕄(θ) does not support the workload)."""
    val, _ = marginal_objective(theta**2, w, shape)
    sens2 = theta.sum() ** 2 if noise == "laplace" else float((theta**2).sum())
    return float(sens2 * val)


def closed_form(w: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Thm 13: u = Y⁻¹ sqrt(Y w), negative entries clipped to 0."""
    return np.clip(from_eigenvalues(np.sqrt(np.clip(eigenvalues(w, shape), 0, None)), shape), 0, None)


def _normalised_w(terms: Terms, shape: Sequence[int]) -> tuple[np.ndarray, float]:
    """The marginal approximation w of the workload scaled to max |w| = 1, and that scale."""
    w = marginal_approximation(terms, tuple(int(s) for s in shape))
    scale = float(np.max(np.abs(w))) or 1.0
    return w / scale, scale


def marginal_starts(terms: Terms, shape: Sequence[int], noise: str, restarts: int = 1, seed: int = 0) -> list[np.ndarray]:
    """Start points of the OPT_M runs: ``restarts`` uniform draws (seeded), preceded by Thm 13's closed form
    for Gaussian noise."""
    if noise not in ("laplace", "gaussian"):
        raise ConfigError(f"noise must be 'laplace' or 'gaussian', got {noise!r}")
    shape = tuple(int(s) for s in shape)
    rng = np.random.default_rng(seed)
    starts = [rng.random(2 ** len(shape)) for _ in range(max(restarts, 1))]
    if noise == "gaussian":
        starts.insert(0, closed_form(_normalised_w(terms, shape)[0], shape) + 1e-9)
    return starts


def opt_marginals(terms: Terms, shape: Sequence[int], noise: str, *, restarts: int = 1, seed: int = 0,
                  ftol: float = 1e-10) -> MarginalsResult:
    """Best of ``restarts`` L-BFGS-B runs (plus the closed form for Gaussian)."""
    return opt_marginals_from(terms, shape, noise, marginal_starts(terms, shape, noise, restarts, seed), ftol=ftol)


def opt_marginals_from(terms: Terms | np.ndarray, shape: Sequence[int], noise: str, starts: Sequence[np.ndarray], *,
                       ftol: float = 1e-10) -> MarginalsResult:
    """Best OPT_M run over the given start points (θ for Laplace, u = θ² for Gaussian); ``terms`` may also be
    the workload's marginal approximation w (Thm 10) itself. No valid run: the Identity strategy θ = e_full."""
    if noise not in ("laplace", "gaussian"):
        raise ConfigError(f"noise must be 'laplace' or 'gaussian', got {noise!r}")
    shape = tuple(int(s) for s in shape)
    if isinstance(terms, np.ndarray):
        scale_back = float(np.max(np.abs(terms))) or 1.0
        w = terms / scale_back
    else:
        w, scale_back = _normalised_w(terms, shape)
    size = 2 ** len(shape)
    big = [1e300]

    def lap(theta: np.ndarray) -> tuple[float, np.ndarray]:
        s = theta.sum()
        val, g = marginal_objective(theta**2, w, shape, gradient=True)
        if not math.isfinite(val):
            return big[0], np.zeros_like(theta)
        f = s**2 * val
        big[0] = min(big[0], 100 * f) if big[0] < 1e300 else 100 * f
        return f, 2 * s * val + s**2 * 2 * theta * g

    def gau(u: np.ndarray) -> tuple[float, np.ndarray]:
        s = u.sum()
        val, g = marginal_objective(u, w, shape, gradient=True)
        if not math.isfinite(val):
            return big[0], np.zeros_like(u)
        f = s * val
        big[0] = min(big[0], 100 * f) if big[0] < 1e300 else 100 * f
        return f, val + s * g

    best: MarginalsResult | None = None
    for z0 in starts:
        fun = lap if noise == "laplace" else gau
        res = minimize(fun, np.asarray(z0, dtype=float), jac=True, method="L-BFGS-B", bounds=[(0, None)] * size,
                       options={"ftol": ftol, "gtol": 1e-12, "maxiter": 5000})
        z = np.maximum(res.x, 0)
        theta = z if noise == "laplace" else np.sqrt(z)
        norm = theta.sum() if noise == "laplace" else math.sqrt(float((theta**2).sum()))
        if norm <= 0:
            continue
        theta = theta / norm
        theta[theta < 1e-12] = 0.0
        loss = marginals_loss(theta, w, shape, noise) * scale_back
        if math.isfinite(loss) and (best is None or loss < best.loss):
            best = MarginalsResult(theta, loss)
    if best is None:
        full = np.zeros(size)
        full[-1] = 1.0
        best = MarginalsResult(full, marginals_loss(full, w, shape, noise) * scale_back)
    return best
