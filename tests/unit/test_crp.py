"""Conditional ResidualPlanner: closed forms, water-filling vs the cvxpy/Clarabel oracle, dropping."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privcube.core.domain import Domain
from privcube.mechanisms.aim_grem import crp

DOM = Domain(("a", "b", "c"), (3, 4, 5))
GAMMA = ("a", "b", "c")


def _pv(taus, gamma, sizes):
    """Independent p_τ and v_τ from the digest's closed forms."""
    p = np.array([math.prod((sizes[i] - 1) / sizes[i] for i in t) for t in taus])
    v = np.array([math.prod((sizes[i] - 1) / sizes[i] for i in t) * math.prod(1 / sizes[j] ** 2 for j in gamma if j not in t)
                  for t in taus])
    return p, v


def test_no_priors_equals_iid_allocation():
    plan = crp.plan_crp(GAMMA, DOM, {}, sigma2=3.0)
    assert plan.taus == ((), ("a",), ("b",), ("c",), ("a", "b"), ("a", "c"), ("b", "c"), ("a", "b", "c"))
    expected = np.array([1 / 60, 1 / 20, 1 / 15, 1 / 12, 1 / 5, 1 / 4, 1 / 3, 1])
    np.testing.assert_allclose(plan.x, expected, rtol=1e-12)
    assert plan.method == "relaxed"
    # σ_τ² = σ_t² ∏_{γ\τ} n_j, the IID strategy
    iid = crp.plan_iid(GAMMA, DOM, 3.0)
    for t in plan.taus:
        assert plan.sigma2[t] == pytest.approx(iid.sigma2[t], rel=1e-12)
        assert plan.sigma2[t] == pytest.approx(3.0 * math.prod(DOM[a] for a in GAMMA if a not in t), rel=1e-12)


def test_coefficients_match_closed_forms():
    taus, p, v = crp.coefficients(GAMMA, DOM)
    sizes = dict(zip(DOM.attributes, DOM.shape))
    p2, v2 = _pv(taus, GAMMA, sizes)
    np.testing.assert_allclose(p, p2, rtol=1e-14)
    np.testing.assert_allclose(v, v2, rtol=1e-14)


def test_iid_plan_spends_exactly_round_budget():
    sigma2 = 0.7
    plan = crp.plan_iid(GAMMA, DOM, sigma2)
    _, p, _ = crp.coefficients(GAMMA, DOM)
    cost = sum(pi / plan.sigma2[t] for pi, t in zip(p, plan.taus)) / 2
    assert cost == pytest.approx(1 / (2 * sigma2), rel=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_waterfill_matches_cvxpy_oracle(seed):
    rng = np.random.default_rng(seed)
    taus, p, v = crp.coefficients(GAMMA, DOM)
    a = rng.exponential(2.0, p.size) * rng.integers(0, 2, p.size) * 10 ** rng.uniform(-1, 2)
    x = crp.waterfill(v, p, a)
    x_ref = crp.solve_cvxpy(v, p, a, warm_start=crp.relaxed_solution(v, p, a))
    f, f_ref = crp.objective(v, x, a), crp.objective(v, x_ref, a)
    assert f <= f_ref * (1 + 1e-7)
    assert f == pytest.approx(f_ref, rel=1e-6)
    np.testing.assert_allclose(x, x_ref, atol=1e-4 * max(1.0, x.max()))
    assert np.all(x >= 0) and float(np.sum(p * x)) <= 1.0
    assert float(np.sum(p * x)) == pytest.approx(1.0, abs=1e-12)
    # KKT: active x share the multiplier v/(x+a)² = λ p; inactive ones have v/a² ≤ λ p
    lam = v / (x + a) ** 2 / p
    act = x > 1e-12
    np.testing.assert_allclose(lam[act], lam[act][0], rtol=1e-9)
    if (~act).any():
        assert np.all(lam[~act] <= lam[act][0] * (1 + 1e-9))


def test_relaxed_formula_equals_waterfill_when_feasible():
    taus, p, v = crp.coefficients(GAMMA, DOM)
    a = np.full(p.size, 1e-3)
    x0 = crp.relaxed_solution(v, p, a)
    assert np.all(x0 >= 0)
    np.testing.assert_allclose(x0, crp.waterfill(v, p, a), rtol=1e-12)


def test_waterfill_brute_force_small():
    # two residuals: minimise v1/(x1+a1) + v2/(x2+a2) on the line p1 x1 + p2 x2 = 1 by a fine grid
    v, p, a = np.array([0.3, 0.05]), np.array([0.5, 0.8]), np.array([0.0, 0.9])
    x = crp.waterfill(v, p, a)
    grid = np.linspace(1e-9, 1 / p[0], 200001)
    x2 = (1 - p[0] * grid) / p[1]
    f = v[0] / (grid + a[0]) + v[1] / (x2 + a[1])
    i = int(np.argmin(f))
    assert x[0] == pytest.approx(grid[i], abs=1e-4)
    assert crp.objective(v, x, a) <= f[i] + 1e-12


def test_monotone_in_prior_and_better_than_iid():
    taus, p, v = crp.coefficients(GAMMA, DOM)
    rng = np.random.default_rng(3)
    a = rng.exponential(1.0, p.size)
    x = crp.waterfill(v, p, a)
    for i in range(p.size):
        a2 = a.copy()
        a2[i] *= 3.0
        assert crp.waterfill(v, p, a2)[i] <= x[i] + 1e-12
    x_iid = crp.plan_iid(GAMMA, DOM, 1.0).x
    assert crp.objective(v, x, a) <= crp.objective(v, x_iid, a) + 1e-12


def test_dropping_threshold_and_budget():
    lam = {t: 0.0 for t in crp.measurable_subsets(GAMMA, DOM)}
    lam[()] = 1e6  # the total is already very precise: CRP should not spend on it
    lam[("a",)] = 1e3
    sigma2 = 2.0
    plan = crp.plan_crp(GAMMA, DOM, lam, sigma2)
    assert () in plan.dropped
    for t, s2 in plan.sigma2.items():
        i = plan.taus.index(t)
        assert plan.p[i] * plan.x[i] >= crp.ETA
        assert s2 == pytest.approx(sigma2 / plan.x[i])
    cost = sum(plan.p[plan.taus.index(t)] / s2 for t, s2 in plan.sigma2.items())
    assert cost <= 1.0 / sigma2


def test_cvxpy_solver_option_and_bad_solver():
    lam = {(): 1e6, ("a",): 50.0}
    p1 = crp.plan_crp(GAMMA, DOM, lam, 1.0, solver="cvxpy")
    p2 = crp.plan_crp(GAMMA, DOM, lam, 1.0, solver="exact")
    assert p1.method == "cvxpy" and p2.method == "waterfill"
    assert set(p1.sigma2) == set(p2.sigma2)
    with pytest.raises(Exception, match="crp_solver"):
        crp.plan_crp(GAMMA, DOM, lam, 1.0, solver="nope")


def test_size_one_attribute_is_skipped():
    dom = Domain(("a", "u"), (3, 1))
    plan = crp.plan_crp(("a", "u"), dom, {}, 1.0)
    assert plan.taus == ((), ("a",))
    assert all(not set(t) & {"u"} for t in itertools.chain(plan.sigma2, plan.dropped))
