"""Confidence intervals of released answers from the exact distribution of the noise added.

An answer is ``estimate = true value + noise`` where the noise is a known, data-independent linear
combination of the mechanism's noise draws; an interval ``estimate ± h`` covers the true value with
probability at least ``level`` when ``P(|noise| <= h) >= level``. Per noise kind:

* ``gaussian``: any linear combination of Gaussians is Gaussian: ``h = z_{(1+level)/2} · sd`` (exact).
* ``laplace``, one draw per answer (scale ``b = sd/√2``): ``h = b · ln(1/α)``, α = 1 − level (exact).
* ``laplace``, a combination ``Σ_j a_j L_j`` with known coefficients ``a_j`` (``L_j`` standard Laplace):
  the exact quantile, by inverting the characteristic function ``Π_j 1/(1 + a_j² t²)`` numerically
  (Gil-Pelaez). Without coefficients only the variance v is known: a valid but conservative bound, the
  smaller of Chebyshev's ``sd/√α`` and the sub-exponential (Bernstein-type) bound
  ``sd·(ln(2/α) + 1)`` (from ``-ln(1-u) <= 2u``, worst case over coefficient vectors of variance v).
* ``discrete-gaussian``, one draw (parameter σ²): the smallest integer ``h`` with ``P(|Z| <= h) >= level``
  on the lattice (exact); a combination: the sub-Gaussian bound ``sd·√(2 ln(2/α))`` (valid: a discrete
  Gaussian with parameter σ² is σ-sub-Gaussian, Canonne-Kamath-Steinke 2020, and ``variance`` of such
  answers is reported as ``Σ a_j² σ_j²``).
* ``discrete-laplace``, one draw (parameter t): exact, closed form; otherwise Chebyshev.
* unknown noise: Chebyshev ``sd/√α`` (valid for any distribution with that variance).

Intervals are post-processing of released values and public noise parameters: they spend no budget.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from privcube.core.errors import ConfigError

#: the default confidence level of every answer's interval (``output: {ci_level: ...}``)
DEFAULT_LEVEL = 0.95
#: Laplace combinations with more coefficient entries than this use the conservative bound
MAX_EXACT_ENTRIES = 4_000_000
#: ... or more distinct rows (|coefficient| multisets) than this (each costs ~0.1 s of quadrature)
MAX_EXACT_ROWS = 256


def check_level(level: Any) -> float:
    """``output.ci_level``: a number strictly between 0 and 1 (ConfigError otherwise)."""
    if isinstance(level, bool) or not isinstance(level, (int, float, np.integer, np.floating)) or \
            not 0.0 < float(level) < 1.0:
        raise ConfigError(f"output.ci_level must be a number strictly between 0 and 1 (e.g. 0.95), got {level!r}")
    return float(level)


def gaussian_z(level: float) -> float:
    """The two-sided standard normal quantile z with P(|N(0,1)| <= z) = level."""
    from scipy.special import ndtri

    return float(ndtri(0.5 + level / 2.0))


def laplace_half_width(b: float | np.ndarray, level: float) -> np.ndarray:
    """Exact half-width of one Laplace(b) draw: P(|L| <= h) = 1 - exp(-h/b)."""
    return np.asarray(b, dtype=float) * math.log(1.0 / (1.0 - level))


def discrete_laplace_half_width(t: float, level: float) -> int:
    """Smallest integer h with P(|Z| <= h) >= level, Z discrete Laplace with parameter t
    (P(Z = k) ∝ exp(-|k|/t), so P(|Z| > h) = 2 p^{h+1}/(1+p), p = exp(-1/t))."""
    p = math.exp(-1.0 / float(t))
    alpha = 1.0 - level
    if 2.0 * p / (1.0 + p) <= alpha:
        return 0
    h = math.ceil(math.log(alpha * (1.0 + p) / 2.0) / math.log(p)) - 1
    while h > 0 and 2.0 * p ** h / (1.0 + p) <= alpha:  # guard the rounding of the logarithms
        h -= 1
    while 2.0 * p ** (h + 1) / (1.0 + p) > alpha:
        h += 1
    return max(h, 0)


def discrete_gaussian_half_width(sigma2: float, level: float) -> float:
    """Smallest integer h with P(|Z| <= h) >= level, Z discrete Gaussian with parameter σ² (exact sums
    over the lattice; the normaliser by the Poisson summation formula). Above σ = 10^6 the sub-Gaussian
    bound (valid, within a few per cent of exact there)."""
    sigma = math.sqrt(float(sigma2))
    if sigma > 1e6:
        return sigma * math.sqrt(2.0 * math.log(2.0 / (1.0 - level)))
    # Σ_k exp(-k²/2σ²) = σ√(2π) Σ_m exp(-2π²σ²m²); a direct sum is used for small σ (few terms)
    if sigma < 2.0:
        ks = np.arange(-int(40 * sigma + 40), int(40 * sigma + 41))
        norm = float(np.sum(np.exp(-ks.astype(float) ** 2 / (2.0 * sigma2))))
    else:
        norm = sigma * math.sqrt(2.0 * math.pi) * (1.0 + 2.0 * sum(
            math.exp(-2.0 * math.pi**2 * sigma2 * m * m) for m in range(1, 4)))
    ks = np.arange(1, int(sigma * gaussian_z(level) * 1.5 + 10))
    mass = (1.0 + 2.0 * np.cumsum(np.exp(-ks.astype(float) ** 2 / (2.0 * sigma2)))) / norm
    idx = int(np.searchsorted(mass, level))  # first k with mass >= level (mass[0] is h = 1)
    if 1.0 / norm >= level:
        return 0.0
    return float(ks[idx]) if idx < ks.size else sigma * math.sqrt(2.0 * math.log(2.0 / (1.0 - level)))


def laplace_sum_cdf(x: float, coefs: np.ndarray) -> float:
    """P(Σ_j a_j L_j <= x) for independent standard Laplace L_j (Gil-Pelaez inversion of the real,
    symmetric characteristic function φ(t) = Π_j 1/(1 + a_j² t²):
    F(x) = 1/2 + (1/π)∫_0^∞ sin(tx) φ(t)/t dt)."""
    from scipy import integrate

    a2 = np.asarray(coefs, dtype=float) ** 2
    a2 = a2[a2 > 0]

    def phi(t: float) -> float:
        return float(np.exp(-np.sum(np.log1p(a2 * t * t))))

    cut = 50.0 / math.sqrt(float(a2.max()))  # past this φ(t) <= 1/(1 + 2500): the tail is done by QAWF
    head, _ = integrate.quad(lambda t: x * np.sinc(t * x / math.pi) * phi(t), 0.0, cut, limit=400)
    tail, _ = integrate.quad(lambda t: phi(t) / t, cut, np.inf, weight="sin", wvar=x, limlst=200)
    return 0.5 + (head + tail) / math.pi


def laplace_sum_half_width(coefs: np.ndarray, level: float) -> float:
    """Exact h with P(|Σ_j a_j L_j| <= h) = level, standard Laplace L_j (numerical, ~1e-9 relative)."""
    from scipy.optimize import brentq

    a = np.abs(np.asarray(coefs, dtype=float))
    a = a[a > 0]
    if a.size == 0:
        return 0.0
    if a.size == 1:
        return float(laplace_half_width(a[0], level))
    target = 0.5 + level / 2.0
    sd = math.sqrt(2.0 * float(np.sum(a * a)))
    hi = sd / math.sqrt(1.0 - level)  # Chebyshev: the quantile is below it
    return float(brentq(lambda x: laplace_sum_cdf(x, a) - target, 0.0, hi, xtol=1e-10 * hi, rtol=1e-12))


def conservative_half_width(variance: np.ndarray, level: float, kind: str | None) -> np.ndarray:
    """Valid bounds when only the variance is known (see the module docstring)."""
    sd = np.sqrt(np.maximum(np.asarray(variance, dtype=float), 0.0))
    alpha = 1.0 - level
    chebyshev = sd / math.sqrt(alpha)
    if kind == "laplace":
        return np.minimum(chebyshev, sd * (math.log(2.0 / alpha) + 1.0))
    if kind == "discrete-gaussian":
        return np.minimum(chebyshev, sd * math.sqrt(2.0 * math.log(2.0 / alpha)))
    return chebyshev


def interval_method(ans: Any) -> str:
    """How :func:`half_widths` treats a GroupAnswer: ``exact``, ``bound`` (conservative) or ``none``."""
    if ans.variance is None:
        return "none"
    kind = getattr(ans, "noise", None)
    single = bool(getattr(ans, "single_measurement", False))
    scale = getattr(ans, "noise_scale", None)
    if kind == "gaussian":
        return "exact"
    if kind == "laplace":
        coefs = getattr(ans, "noise_coefficients", None)
        if coefs is not None and np.asarray(coefs).size <= MAX_EXACT_ENTRIES and \
                len(_distinct_rows(np.asarray(coefs, dtype=float))[0]) <= MAX_EXACT_ROWS:
            return "exact"
        return "exact" if single else "bound"
    if kind in ("discrete-gaussian", "discrete-laplace") and single and scale is not None:
        return "exact"
    return "bound"


def half_widths(ans: Any, level: float = DEFAULT_LEVEL) -> tuple[np.ndarray | None, str]:
    """``(h, method)`` for a GroupAnswer: per-answer half-widths of the interval ``estimate ± h`` at
    ``level`` and how they were obtained (``exact`` or ``bound``); ``(None, "none")`` without variance."""
    method = interval_method(ans)
    if method == "none":
        return None, method
    est = np.asarray(ans.estimate, dtype=float).ravel()
    var = np.broadcast_to(np.asarray(ans.variance, dtype=float).ravel(), est.shape)
    kind, scale = getattr(ans, "noise", None), getattr(ans, "noise_scale", None)
    if method == "bound":
        return conservative_half_width(var, level, kind), method
    if kind == "gaussian":
        return gaussian_z(level) * np.sqrt(var), method
    if kind == "laplace":
        coefs = getattr(ans, "noise_coefficients", None)
        if coefs is None:  # one draw per answer
            return laplace_half_width(np.sqrt(var / 2.0), level), method
        uniq, inv = _distinct_rows(np.asarray(coefs, dtype=float))
        return np.array([laplace_sum_half_width(row, level) for row in uniq], dtype=float)[inv], method
    if kind == "discrete-gaussian":
        return _per_scale(scale, est.shape, lambda s: discrete_gaussian_half_width(s, level)), method
    return _per_scale(scale, est.shape, lambda s: discrete_laplace_half_width(s, level)), method


def _per_scale(scale: Any, shape: tuple[int, ...], fn: Any) -> np.ndarray:
    """``fn`` of each distinct noise parameter, broadcast to the answers."""
    s = np.broadcast_to(np.asarray(scale, dtype=float).ravel(), shape)
    uniq, inv = np.unique(s, return_inverse=True)
    return np.array([fn(float(u)) for u in uniq], dtype=float)[inv.ravel()].reshape(shape)


def _distinct_rows(coefs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct multisets of |coefficients| of an (answers × draws) matrix and each row's index into them
    (rows sharing a multiset share one quadrature)."""
    coefs = np.atleast_2d(coefs)
    scale = float(np.max(np.abs(coefs))) if coefs.size else 1.0
    scale = scale or 1.0
    keys = np.sort(np.round(np.abs(coefs) / scale, 12), axis=1) * scale
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    return uniq, np.asarray(inv).ravel()


__all__ = ["DEFAULT_LEVEL", "check_level", "conservative_half_width", "discrete_gaussian_half_width",
           "discrete_laplace_half_width", "gaussian_z", "half_widths", "interval_method", "laplace_half_width",
           "laplace_sum_cdf", "laplace_sum_half_width"]
