"""zCDP ⇄ (ε, δ) conversions and mechanism calibration against closed forms and published values."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from privcube.core.errors import BudgetError
from privcube.privacy import (
    PrivacyBudget,
    analytic_gaussian_sigma,
    cdp_delta,
    cdp_epsilon,
    cdp_rho,
    exponential_rho,
    gaussian_rho,
    gaussian_sigma,
    laplace_scale,
    pure_to_zcdp,
    zcdp_to_approx,
)

# AIM+GReM digest §8, δ = 1e-9 (values as printed, 4 significant digits or more).
DIGEST_TABLE = [
    (0.01, 2.095e-6), (0.03, 1.736e-5), (0.1, 1.771e-4), (0.3, 1.477e-3), (1.0, 1.4973e-2),
    (3.0, 0.12058), (10.0, 1.0908), (30.0, 6.985), (100.0, 42.38),
]


def _grid_delta(rho: float, eps: float) -> float:
    """Independent brute force: CKS bound evaluated on a dense α grid, straight from the formula."""
    alpha = 1.0 + np.logspace(-8, 8, 400_001)
    log_d = (alpha - 1) * (alpha * rho - eps) + alpha * np.log1p(-1 / alpha) - np.log(alpha - 1)
    return float(min(np.exp(log_d.min()), 1.0))


def test_known_value_eps1_delta1e9() -> None:
    assert cdp_rho(1.0, 1e-9) == pytest.approx(0.014973, rel=5e-5)


@pytest.mark.parametrize("eps,rho", DIGEST_TABLE)
def test_digest_table(eps: float, rho: float) -> None:
    digits = len(f"{rho:e}".split("e")[0].replace(".", "").rstrip("0"))
    assert cdp_rho(eps, 1e-9) == pytest.approx(rho, rel=0.6 * 10 ** (1 - digits))


@pytest.mark.parametrize("rho,eps", [(0.01, 0.5), (0.015, 1.0), (0.5, 3.0), (2.0, 5.0), (1e-4, 0.05)])
def test_cdp_delta_matches_grid_minimum(rho: float, eps: float) -> None:
    assert cdp_delta(rho, eps) == pytest.approx(_grid_delta(rho, eps), rel=1e-5)


@pytest.mark.parametrize("eps,delta", [(0.1, 1e-6), (1.0, 1e-9), (1.0, 1e-5), (8.0, 1e-3), (50.0, 1e-12)])
def test_round_trips(eps: float, delta: float) -> None:
    rho = cdp_rho(eps, delta)
    assert cdp_delta(rho, eps) <= delta
    assert cdp_delta(rho, eps) == pytest.approx(delta, rel=1e-6)
    assert cdp_epsilon(rho, delta) == pytest.approx(eps, rel=1e-9)
    assert zcdp_to_approx(rho, delta) == cdp_epsilon(rho, delta)
    # slightly more ρ must break δ: rho is the largest feasible
    assert cdp_delta(rho * (1 + 1e-6), eps) > delta


def test_monotonicity() -> None:
    eps_grid = [0.05, 0.2, 1.0, 4.0, 20.0]
    rhos = [cdp_rho(e, 1e-9) for e in eps_grid]
    assert all(a < b for a, b in zip(rhos, rhos[1:]))
    deltas = [cdp_delta(r, 1.0) for r in [0.001, 0.01, 0.05, 0.2]]
    assert all(a < b for a, b in zip(deltas, deltas[1:]))
    assert cdp_rho(1.0, 1e-6) > cdp_rho(1.0, 1e-9)
    epss = [cdp_epsilon(0.1, d) for d in [1e-3, 1e-6, 1e-9]]
    assert all(a < b for a, b in zip(epss, epss[1:]))


@pytest.mark.parametrize("rho,delta", [(1e-5, 1e-9), (0.01, 1e-6), (1.0, 1e-9), (10.0, 1e-3)])
def test_tighter_than_bun_steinke(rho: float, delta: float) -> None:
    # Bun & Steinke 2016 Prop 1.3: ε ≤ ρ + 2√(ρ log 1/δ); CKS is strictly tighter.
    assert cdp_epsilon(rho, delta) < rho + 2 * math.sqrt(rho * math.log(1 / delta))


@pytest.mark.parametrize("sigma,eps", [(1.0, 1.0), (4.0, 0.5), (10.0, 0.3)])
def test_cdp_delta_upper_bounds_exact_gaussian_profile(sigma: float, eps: float) -> None:
    # Exact δ(ε) of N(0, σ²) with sensitivity 1 (Balle & Wang 2018 Thm 8) never exceeds the zCDP bound.
    a, b = 1 / (2 * sigma), eps * sigma
    exact = norm.cdf(a - b) - math.exp(eps) * norm.cdf(-a - b)
    bound = cdp_delta(1 / (2 * sigma**2), eps)
    assert exact <= bound <= 5 * exact


def test_degenerate_and_pure() -> None:
    assert cdp_delta(0.0, 1.0) == 0.0
    assert cdp_epsilon(0.0, 1e-9) == 0.0
    assert cdp_delta(5.0, 0.01) == pytest.approx(_grid_delta(5.0, 0.01), rel=1e-6)
    assert cdp_delta(1e4, 0.0) <= 1.0
    assert pure_to_zcdp(2.0) == 2.0
    assert exponential_rho(2.0) == 0.5


def test_gaussian_and_laplace_calibration() -> None:
    assert gaussian_sigma(0.5) == pytest.approx(1.0)
    assert gaussian_sigma(0.125, l2_sensitivity=2.0) == pytest.approx(4.0)
    assert gaussian_rho(gaussian_sigma(0.37, 3.0), 3.0) == pytest.approx(0.37)
    assert laplace_scale(0.5, l1_sensitivity=2.0) == pytest.approx(4.0)


def test_analytic_gaussian_hdmm_constant() -> None:
    assert analytic_gaussian_sigma(1.0, 1e-6) == pytest.approx(4.224679, abs=1e-5)
    assert analytic_gaussian_sigma(1.0, 1e-6, l2_sensitivity=3.0) == pytest.approx(3 * 4.224679, abs=3e-5)
    # Analytic calibration beats the classical σ = √(2 ln(1.25/δ))/ε (valid for ε < 1).
    assert analytic_gaussian_sigma(0.5, 1e-5) < math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_bad_epsilon(bad: object) -> None:
    with pytest.raises(BudgetError, match="epsilon"):
        PrivacyBudget.from_config({"epsilon": bad})
    with pytest.raises(BudgetError, match="epsilon"):
        cdp_rho(bad, 1e-9)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, 1, -1e-9, 1.5, float("nan"), None])
def test_bad_delta(bad: object) -> None:
    with pytest.raises(BudgetError, match="delta"):
        PrivacyBudget.from_config({"epsilon": 1.0, "delta": bad})
    with pytest.raises(BudgetError, match="delta"):
        cdp_epsilon(0.1, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -0.5, float("inf"), "x"])
def test_bad_rho(bad: object) -> None:
    with pytest.raises(BudgetError, match="rho"):
        PrivacyBudget.from_config({"rho": bad})
    with pytest.raises(BudgetError, match="rho"):
        gaussian_sigma(bad)  # type: ignore[arg-type]


def test_bad_sensitivity_named() -> None:
    with pytest.raises(BudgetError, match="l2_sensitivity"):
        gaussian_sigma(0.1, l2_sensitivity=0.0)
    with pytest.raises(BudgetError, match="l1_sensitivity"):
        laplace_scale(1.0, l1_sensitivity=-1.0)


def test_budget_from_config_forms() -> None:
    b = PrivacyBudget.from_config({"epsilon": 1.0, "delta": 1e-9})
    assert b.rho == pytest.approx(0.014973, rel=5e-5) and not b.pure
    p = PrivacyBudget.from_config({"epsilon": 2.0})
    assert p.pure and p.rho == 2.0 and p.delta == 0.0
    r = PrivacyBudget.from_config({"rho": 0.014973, "delta": 1e-9})
    assert r.epsilon == pytest.approx(1.0, rel=1e-4)
