"""Confidence intervals of answers: exact quantiles per noise kind, coverage by Monte Carlo, outputs, plan.

Coverage is measured over 2,000 seeded runs of real mechanisms on a tiny table (the true marginals are
known): the fraction of intervals holding the true count must be within ±1.5 points of the level.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import privcube
from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
from privcube.mechanisms import get_mechanism
from privcube.mechanisms.base import GroupAnswer
from privcube.core.oracle import ArrayOracle
from privcube.privacy import intervals as iv
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.core.workload import parse_workload

DOM = Domain.from_mapping({"a": 3, "b": 2})
RECORDS = np.array([[i % 3, (i // 3) % 2] for i in range(60)] + [[0, 0]] * 9)
DRAWS = 2000


def _truth(attrs: tuple[str, ...]) -> np.ndarray:
    return ArrayOracle(DOM, RECORDS).marginals([attrs])[attrs].ravel()


def _coverage(mech_name: str, params: dict, budget: PrivacyBudget, level: float = 0.95) -> tuple[float, str]:
    """Share of (draw, cell) intervals that hold the true value, over DRAWS seeded runs of the mechanism."""
    wl = parse_workload([{"kway": 2}, {"kway": 1}], DOM)
    mech = get_mechanism(mech_name)(params)
    oracle = ArrayOracle(DOM, RECORDS)
    halves, methods, truths = None, set(), [_truth(DOM.canonical(g.attributes)) for g in wl]
    hits = total = 0
    for seed in range(DRAWS):
        res = mech.run(oracle, wl, budget, PrivacyLedger(budget), NoiseSource(seed))
        if halves is None:  # the widths are data- and noise-independent: computed once
            pairs = [iv.half_widths(a, level) for a in res.answers]
            halves, methods = [h for h, _ in pairs], {m for _, m in pairs}
        for a, h, t in zip(res.answers, halves, truths):
            hits += int(np.sum(np.abs(np.asarray(a.estimate) - t) <= h))
            total += t.size
    return hits / total, ",".join(sorted(methods))


@pytest.mark.parametrize("level", [0.95, 0.8])
def test_gaussian_coverage_residual_planner(level: float) -> None:
    cov, method = _coverage("residual-planner", {}, PrivacyBudget.from_rho(0.05), level)
    assert method == "exact"
    assert abs(cov - level) <= 0.015, f"coverage {cov:.4f} at level {level}"


def test_laplace_coverage_hdmm_combinations() -> None:
    """HDMM with pure epsilon: each answer is a weighted sum of Laplace draws (exact numerical quantiles)."""
    cov, method = _coverage("hdmm", {"restarts": 1, "seed": 0}, PrivacyBudget.pure_epsilon(0.5))
    assert method == "exact"
    assert abs(cov - 0.95) <= 0.015, f"coverage {cov:.4f}"


def test_laplace_coverage_eigen_design() -> None:
    cov, method = _coverage("eigen-design", {}, PrivacyBudget.pure_epsilon(0.5), 0.9)
    assert method == "exact"
    assert abs(cov - 0.9) <= 0.015, f"coverage {cov:.4f}"


def test_laplace_sum_quantile_against_independent_computation() -> None:
    """Two equal Laplace(1) draws: the sum's density is (1 + |x|) e^{-|x|} / 4, so P(|S| > h) = (1 + h/2) e^{-h}
    (integrated by hand); the numerical quantile must solve it."""
    h = iv.laplace_sum_half_width(np.array([1.0, 1.0]), 0.95)
    assert (1 + h / 2) * math.exp(-h) == pytest.approx(0.05, rel=1e-7)
    # a single draw: closed form b·ln(1/α)
    assert iv.laplace_sum_half_width(np.array([2.0]), 0.9) == pytest.approx(2.0 * math.log(10.0))


def test_discrete_quantiles_are_the_smallest_lattice_points() -> None:
    for s2 in (0.5, 3.0, 40.0):
        h = iv.discrete_gaussian_half_width(s2, 0.95)
        k = np.arange(-400, 401)
        p = np.exp(-k**2 / (2 * s2))
        p /= p.sum()
        assert p[np.abs(k) <= h].sum() >= 0.95 > p[np.abs(k) <= h - 1].sum()
    for t in (0.7, 5.0):
        h = iv.discrete_laplace_half_width(t, 0.9)
        k = np.arange(-600, 601)
        p = np.exp(-np.abs(k) / t)
        p /= p.sum()
        assert p[np.abs(k) <= h].sum() >= 0.9 > p[np.abs(k) <= h - 1].sum()


def test_bounds_are_valid_and_labelled() -> None:
    g = parse_workload([{"kway": 1}], DOM).groups[0]
    var = np.full(3, 4.0)
    for kind in ("laplace", "discrete-gaussian", None):
        h, method = iv.half_widths(GroupAnswer(g, np.zeros(3), var, noise=kind), 0.95)
        assert method == "bound" and np.all(h >= stats.norm.ppf(0.975) * 2.0)
        assert np.all(h <= 2.0 / math.sqrt(0.05) + 1e-12)  # never worse than Chebyshev
    # the worst Laplace combination of variance 4 is one draw (b = √2): its exact width is below the bound
    h, _ = iv.half_widths(GroupAnswer(g, np.zeros(3), var, noise="laplace"), 0.95)
    assert np.all(h >= math.sqrt(2.0) * math.log(20.0))
    assert iv.half_widths(GroupAnswer(g, np.zeros(3), None), 0.95) == (None, "none")


def test_answer_files_carry_intervals_at_the_configured_level(tmp_path) -> None:  # noqa: ANN001
    df = pd.DataFrame(RECORDS, columns=["a", "b"])
    job = {"domain": {"a": 3, "b": 2}, "mechanism": "residual-planner", "workload": [{"kway": 2}],
           "privacy": {"rho": 0.5}, "cluster": "threads"}
    r95 = privcube.run(job, out=tmp_path / "r95", data=df, seed=4, quiet=True)
    r80 = privcube.run({**job, "output": {"ci_level": 0.8}}, out=tmp_path / "r80", data=df, seed=4, quiet=True)
    m95, m80 = r95.marginal("a", "b"), r80.marginal("a", "b")
    sd = np.sqrt(m95["variance"].to_numpy())
    assert np.allclose(m95["ci_high"] - m95["estimate"], stats.norm.ppf(0.975) * sd, rtol=1e-12)
    assert np.allclose(m95["estimate"] - m95["ci_low"], stats.norm.ppf(0.975) * sd, rtol=1e-12)
    assert np.allclose(m80["ci_high"] - m80["estimate"], stats.norm.ppf(0.9) * sd, rtol=1e-12)
    assert r80.groups[0]["ci"] == {"level": 0.8, "method": "exact"}
    with pytest.raises(ConfigError, match="output.ci_level"):
        privcube.plan({**job, "output": {"ci_level": 95}})


def test_plan_reports_half_width_per_group(capsys: pytest.CaptureFixture, tmp_path) -> None:  # noqa: ANN001
    import json

    import yaml

    from privcube import cli

    job = {"domain": {"a": 3, "b": 2}, "mechanism": "hdmm", "workload": [{"kway": 1}],
           "privacy": {"epsilon": 1.0}, "output": {"ci_level": 0.9}}
    p = privcube.plan(job)
    for g in p.groups:
        assert g["ci_level"] == 0.9 and g["ci_method"] == "exact" and g["ci_half_width"] > 0
    job = {"domain": {"a": 3, "b": 2}, "mechanism": "residual-planner", "workload": [{"kway": 1}],
           "privacy": {"rho": 0.5}}
    p = privcube.plan(job)
    for g in p.groups:
        assert g["ci_half_width"] == pytest.approx(stats.norm.ppf(0.975) * g["rmse"])
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert cli.main(["plan", str(path)]) == 0
    assert "95% interval ±" in capsys.readouterr().out
    assert cli.main(["plan", str(path), "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]
    assert all("ci_half_width" in g for g in groups)


def test_discrete_noise_coverage_exact_total_and_valid_bounds() -> None:
    """Discrete-Gaussian ResidualPlanner: the total is one lattice draw (exact: coverage equals the lattice
    mass P(|Z| <= h), at least the level); the 2-way cells are sums of draws (sub-Gaussian bound: at least
    the level). 1,000 draws (the exact samplers are slower); ±2 points is three binomial sd."""
    from privcube.privacy.discrete import make_noise_source

    wl = parse_workload([{"kway": 2}, {"kway": 0}], DOM)
    mech = get_mechanism("residual-planner")({})
    mech.use_noise_sampler("discrete")
    budget, oracle = PrivacyBudget.from_rho(0.05), ArrayOracle(DOM, RECORDS)
    truths = [_truth(DOM.canonical(g.attributes)) for g in wl]
    halves = None
    hits, totals = np.zeros(2), np.zeros(2)
    for seed in range(DRAWS // 2):
        res = mech.run(oracle, wl, budget, PrivacyLedger(budget), make_noise_source(seed, "discrete"))
        if halves is None:
            halves = [iv.half_widths(a, 0.95) for a in res.answers]
            total_sigma2 = res.answers[1].noise_scale
        for i, (a, (h, _), t) in enumerate(zip(res.answers, halves, truths)):
            hits[i] += np.sum(np.abs(np.asarray(a.estimate) - t) <= h)
            totals[i] += t.size
    assert [m for _, m in halves] == ["bound", "exact"]
    h = halves[1][0][0]
    k = np.arange(-2000, 2001)
    p = np.exp(-k**2 / (2 * total_sigma2))
    lattice_mass = p[np.abs(k) <= h].sum() / p.sum()
    assert 0.95 <= lattice_mass and abs(hits[1] / totals[1] - lattice_mass) <= 0.02
    assert hits[0] / totals[0] >= 0.95
