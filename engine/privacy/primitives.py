"""Noise calibration for the Gaussian, analytic Gaussian and Laplace mechanisms, and the exponential
mechanism with its zCDP cost."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy.special import log_ndtr, ndtr

from privcube.core.errors import BudgetError
from privcube.privacy.zcdp import check_delta, check_epsilon, check_rho, is_number


def _check_sensitivity(value: float, name: str) -> float:
    """Validate a sensitivity (positive, finite) and name it in the error."""
    if not is_number(value) or not math.isfinite(float(value)) or float(value) <= 0:
        raise BudgetError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def gaussian_sigma(rho: float, l2_sensitivity: float = 1.0) -> float:
    """σ = Δ₂/√(2ρ): the Gaussian mechanism with this σ is ρ-zCDP (Bun & Steinke 2016, Prop. 1.6)."""
    rho = check_rho(rho)
    sens = _check_sensitivity(l2_sensitivity, "l2_sensitivity")
    return sens / math.sqrt(2.0 * rho)


def gaussian_rho(sigma: float, l2_sensitivity: float = 1.0) -> float:
    """ρ = Δ₂²/(2σ²): the zCDP cost of Gaussian noise of standard deviation σ."""
    sigma = _check_sensitivity(sigma, "sigma")
    sens = _check_sensitivity(l2_sensitivity, "l2_sensitivity")
    return sens * sens / (2.0 * sigma * sigma)


def laplace_scale(epsilon: float, l1_sensitivity: float = 1.0) -> float:
    """b = Δ₁/ε: the Laplace mechanism with this scale is ε-DP."""
    epsilon = check_epsilon(epsilon)
    sens = _check_sensitivity(l1_sensitivity, "l1_sensitivity")
    return sens / epsilon


def exponential_rho(epsilon: float) -> float:
    """ρ = ε²/8: the exponential mechanism is ε²/8-zCDP (Cesar & Rogers 2021, bounded range)."""
    epsilon = check_epsilon(epsilon)
    return epsilon * epsilon / 8.0


def exponential_mechanism(
    scores: Sequence[float] | np.ndarray,
    epsilon: float,
    sensitivity: float,
    rng: np.random.Generator | Callable[[int], np.ndarray],
) -> int:
    """Index i drawn with probability ∝ exp(ε·score_i/(2Δ)), via the Gumbel-max trick (no overflow).

    ``rng`` is a numpy Generator or a function n -> n standard Gumbel draws (e.g. a keyed
    ``NoiseSource.gumbel``, cryptographically secure when unseeded). The cost is ε-DP, or
    ``exponential_rho(epsilon)`` = ε²/8 in zCDP. Scores of −inf are never chosen.
    """
    epsilon = check_epsilon(epsilon)
    sens = _check_sensitivity(sensitivity, "sensitivity")
    if isinstance(rng, np.random.Generator):
        draw = lambda n: rng.gumbel(size=n)  # noqa: E731
    elif callable(rng):
        draw = rng
    else:
        raise BudgetError(f"rng must be a numpy.random.Generator or a Gumbel sampler, got {type(rng).__name__}")
    s = np.asarray(scores, dtype=float).ravel()
    if s.size == 0:
        raise BudgetError("scores must hold at least one candidate, got an empty sequence")
    if np.any(np.isnan(s)) or np.any(s == np.inf):
        raise BudgetError("scores must be finite (or -inf to exclude a candidate); found NaN or +inf")
    if not np.any(np.isfinite(s)):
        raise BudgetError("scores: every candidate is -inf, nothing can be selected")
    logits = (epsilon / (2.0 * sens)) * s
    g = np.asarray(draw(s.size), dtype=float).ravel()
    if g.shape != s.shape:
        raise BudgetError(f"the Gumbel sampler returned {g.size} draws for {s.size} candidates")
    return int(np.argmax(logits + g))


def exponential_probabilities(scores: Sequence[float] | np.ndarray, epsilon: float, sensitivity: float) -> np.ndarray:
    """The exponential mechanism's selection probabilities, softmax(ε·score/(2Δ)), computed stably."""
    epsilon = check_epsilon(epsilon)
    sens = _check_sensitivity(sensitivity, "sensitivity")
    logits = (epsilon / (2.0 * sens)) * np.asarray(scores, dtype=float).ravel()
    logits = logits - np.max(logits)
    w = np.exp(logits)
    return w / w.sum()


def _analytic_gaussian_delta(sigma: float, epsilon: float, sens: float) -> float:
    """Exact δ of the Gaussian mechanism at ε (Balle & Wang 2018, Thm 8)."""
    a = sens / (2.0 * sigma)
    b = epsilon * sigma / sens
    return float(ndtr(a - b) - math.exp(epsilon + log_ndtr(-a - b)))


def analytic_gaussian_sigma(epsilon: float, delta: float, l2_sensitivity: float = 1.0) -> float:
    """Smallest σ with Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ) ≤ δ (analytic Gaussian, Balle & Wang 2018).

    The left side decreases in σ, so bisection on σ finds the calibration (rounded up, i.e. safe).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    sens = _check_sensitivity(l2_sensitivity, "l2_sensitivity")
    lo, hi = 1e-6 * sens, sens
    while _analytic_gaussian_delta(hi, epsilon, sens) > delta:
        lo, hi = hi, 2.0 * hi
    while _analytic_gaussian_delta(lo, epsilon, sens) <= delta and lo > 1e-300:
        hi, lo = lo, lo / 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _analytic_gaussian_delta(mid, epsilon, sens) <= delta:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-14 * hi:
            break
    return hi


__all__ = [
    "analytic_gaussian_sigma",
    "exponential_mechanism",
    "exponential_probabilities",
    "exponential_rho",
    "gaussian_rho",
    "gaussian_sigma",
    "laplace_scale",
]
