"""zCDP, the internal privacy currency, and its tight conversions to and from (ε, δ)-DP.

ρ-zCDP implies (ε, δ)-DP with (Canonne, Kamath & Steinke 2020, Prop. 12 applied to the
Rényi curve α ↦ αρ; the same bound AIM's ``cdp_delta`` uses)

    δ(ρ, ε) = min_{α>1}  exp((α−1)(αρ − ε)) / (α−1) · (1 − 1/α)^α .

With L(α) = (α−1)(αρ−ε) + α·log(1−1/α) − log(α−1) the log of the bracket,
L'(α) = (2α−1)ρ − ε + log(1−1/α) and L''(α) = 2ρ + 1/(α(α−1)) > 0, so L is strictly convex and
the minimiser is the unique root of L', found here by bisection. Any α gives a valid bound, so a
slightly imprecise root only ever errs towards a larger (safe) δ.
"""
from __future__ import annotations

import math

from privcube.core.errors import BudgetError

_BISECT_STEPS = 200


def is_number(x: object) -> bool:
    """True for real, non-bool numbers (numpy scalars included)."""
    if isinstance(x, bool):
        return False
    try:
        float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return not isinstance(x, (str, bytes))


def check_rho(rho: float, *, allow_zero: bool = False) -> float:
    """Validate ρ (positive, finite; zero allowed where it is a degenerate but valid cost)."""
    if not is_number(rho) or not math.isfinite(float(rho)) or float(rho) < 0 or (float(rho) == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise BudgetError(f"privacy parameter rho must be a {kind} finite number, got {rho!r}")
    return float(rho)


def check_epsilon(epsilon: float, *, allow_zero: bool = False) -> float:
    """Validate ε (positive, finite; zero allowed where the caller asks)."""
    if (
        not is_number(epsilon)
        or not math.isfinite(float(epsilon))
        or float(epsilon) < 0
        or (float(epsilon) == 0 and not allow_zero)
    ):
        kind = "non-negative" if allow_zero else "positive"
        raise BudgetError(f"privacy parameter epsilon must be a {kind} finite number, got {epsilon!r}")
    return float(epsilon)


def check_delta(delta: float) -> float:
    """Validate δ in the open interval (0, 1)."""
    if not is_number(delta) or not (0.0 < float(delta) < 1.0):
        raise BudgetError(f"privacy parameter delta must lie strictly between 0 and 1, got {delta!r}")
    return float(delta)


def _log_delta(rho: float, epsilon: float) -> float:
    """log δ(ρ, ε) minimised over α > 1 by bisection on the derivative in t = log(α − 1)."""
    # L'(α) < 0 as α → 1⁺ (log(1−1/α) → −∞); at α_hi below L'(α_hi) ≥ 1 + 3ρ − log 2 > 0.
    alpha_hi = (epsilon + 1.0) / (2.0 * rho) + 2.0
    lo, hi = math.log(1e-12), math.log(alpha_hi - 1.0)
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        alpha = 1.0 + math.exp(mid)
        deriv = (2.0 * alpha - 1.0) * rho - epsilon + math.log1p(-1.0 / alpha)
        if deriv < 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    alpha = 1.0 + math.exp(0.5 * (lo + hi))
    am1 = alpha - 1.0
    return am1 * (alpha * rho - epsilon) + alpha * math.log1p(-1.0 / alpha) - math.log(am1)


def cdp_delta(rho: float, epsilon: float) -> float:
    """Smallest δ such that ρ-zCDP implies (ε, δ)-DP (Canonne–Kamath–Steinke 2020), capped at 1."""
    rho = check_rho(rho, allow_zero=True)
    epsilon = check_epsilon(epsilon, allow_zero=True)
    if rho == 0.0:
        return 0.0
    log_d = _log_delta(rho, epsilon)
    return 1.0 if log_d >= 0.0 else math.exp(log_d)


def cdp_epsilon(rho: float, delta: float) -> float:
    """Smallest ε such that ρ-zCDP implies (ε, δ)-DP, by bisection on ε (rounded up, i.e. safe)."""
    rho = check_rho(rho, allow_zero=True)
    delta = check_delta(delta)
    if rho == 0.0:
        return 0.0
    lo = 0.0
    # Bun & Steinke 2016, Prop. 1.3: ρ-zCDP ⇒ (ρ + 2√(ρ log(1/δ)), δ)-DP, so this is feasible.
    hi = rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))
    if cdp_delta(rho, lo) <= delta:
        return 0.0
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        if cdp_delta(rho, mid) <= delta:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-13 * hi:
            break
    return hi


def cdp_rho(epsilon: float, delta: float) -> float:
    """Largest ρ such that ρ-zCDP implies (ε, δ)-DP, by bisection on ρ (rounded down, i.e. safe)."""
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    lo = 0.0
    # cdp_epsilon(ρ) ≥ ρ, so any feasible ρ is below ε; start the bracket at ε + 1 as AIM does.
    hi = epsilon + 1.0
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        if cdp_delta(mid, epsilon) <= delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return lo


def pure_to_zcdp(epsilon: float) -> float:
    """ρ = ε²/2: an ε-DP mechanism is ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
    epsilon = check_epsilon(epsilon, allow_zero=True)
    return epsilon * epsilon / 2.0


def zcdp_to_approx(rho: float, delta: float) -> float:
    """Alias of :func:`cdp_epsilon`: the ε of the (ε, δ)-DP guarantee implied by ρ-zCDP."""
    return cdp_epsilon(rho, delta)


__all__ = ["cdp_delta", "cdp_epsilon", "cdp_rho", "check_delta", "check_epsilon", "check_rho", "is_number", "pure_to_zcdp",
           "zcdp_to_approx"]
