"""Fitting targets of relational link learning (issue 17, quality side): shrinkage of each release by its
orthogonal ANOVA components (``shrink_by: components``), post-processing that keeps a strong low-order
signal while dropping the noise of the many high-order cells."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privcube.core.errors import ConfigError
from privcube.relational.stages.shrinkage import components, shrink
from privcube.relational.stages.parameters import check_params
from relational_files import _identity


def test_components_are_orthogonal_and_sum_to_the_centred_table() -> None:
    x = np.random.default_rng(0).normal(size=(7, 2, 3))
    parts = components(x)
    assert [d for _, d in parts] == [6, 1, 6, 2, 12, 2, 12]  # Π (n_i − 1) over each non-empty subset
    assert np.allclose(sum(c for c, _ in parts), x - x.mean())
    for (a, _), (b, _) in itertools.combinations(parts, 2):
        assert abs(float(np.sum(a * b))) < 1e-12
    # i.i.d. noise has power dim·σ² in each component (averaged over draws)
    rng = np.random.default_rng(1)
    power = np.zeros(len(parts))
    for _ in range(400):
        power += [float(np.sum(c * c)) for c, _ in components(rng.normal(0, 0.5, (7, 2, 3)))]
    assert np.allclose(power / 400, [0.25 * d for _, d in parts], rtol=0.15)


def test_component_shrinkage_limits() -> None:
    prior = np.full(12, 1 / 12)
    y = np.random.default_rng(2).dirichlet(np.ones(12))
    assert np.allclose(shrink(y, prior, 0.0, 1.0, (3, 2, 2)), y)  # no noise: the answer is kept
    assert np.allclose(shrink(y + 3.0, prior, np.inf, 1.0, (3, 2, 2)), prior)  # no information: the prior
    out = shrink(y + np.random.default_rng(3).normal(0, 0.2, 12), prior, 0.2, 1.0, (3, 2, 2))
    assert abs(out.sum() - 1) < 1e-9 and out.min() >= 0  # a distribution


def test_component_shrinkage_beats_whole_shrinkage_on_a_low_order_signal() -> None:
    """A strong 2-way signal (age × genre) under noise on a 7 × 2 × 2 table: shrinking each component on
    its own keeps the signal and drops the 3-way noise; shrinking the whole difference at once is worse."""
    rng = np.random.default_rng(4)
    p_age = np.array([0.05, 0.2, 0.3, 0.2, 0.1, 0.08, 0.07])
    p_g0 = np.linspace(0.15, 0.85, 7)  # genre 0 depends on age; genre 1 independent
    truth = (p_age[:, None, None] * np.stack([1 - p_g0, p_g0], 1)[:, :, None] * np.array([0.7, 0.3])).ravel()
    prior = (p_age[:, None, None] * np.full((7, 2, 2), 0.25)).ravel()
    sigma, err_c, err_w = 0.02, 0.0, 0.0
    for _ in range(200):
        y = truth + rng.normal(0, sigma, truth.size)
        err_c += np.abs(shrink(y, prior, sigma, 1.0, (7, 2, 2)) - truth).sum()
        err_w += np.abs(shrink(y, prior, sigma, 1.0) - truth).sum()
    assert err_c < 0.95 * err_w  # measured: 0.90 (seeded)


def test_shrink_by_is_validated() -> None:
    from privcube.relational.stages.link_learning import by_components

    assert check_params({})["shrink_by"] == "pooled"
    assert by_components("auto", 0.02, 16) and not by_components("auto", 0.05, 16)  # σ·√cells 0.08 / 0.2
    assert by_components("components", 0.05, 16) and not by_components("whole", 0.0, 4)
    with pytest.raises(ConfigError, match="'shrink_by'"):
        check_params({"shrink_by": "parts"})


def _schedule(strategy: str, dom1, dom2, rho: float, m: int, **extra):
    from privcube.relational.stages.selection import links_schedule

    return links_schedule(check_params({"strategy": strategy, **extra}), "many_to_many", False, dom1, dom2, rho, m)[1]


def test_measure_all_test_is_data_independent() -> None:
    """The measure-all decision reads public sizes only: two data sets with equal domains, m and budget get
    the same plan; it measures every lowest-order (2-way) candidate when they would cost ≤ half the budget even at
    noise norm MEASURE_ALL_NOISE (16× what max_noise asks), and then measures each at max_noise."""
    from privcube.relational.stages.selection import MEASURE_ALL_SHARE
    from privcube.relational.example_data import movielens_like

    a, b = movielens_like(120, 80, 4, d_max=10, seed=1), movielens_like(120, 80, 4, d_max=10, seed=7)
    dom1, dom2 = a["tables"]["users"][1], a["tables"]["movies"][1]
    assert dom1 == b["tables"]["users"][1] and dom2 == b["tables"]["movies"][1]
    for rho in (0.01, 500.0):
        sa, sb = _schedule("auto", dom1, dom2, rho, 600), _schedule("auto", dom1, dom2, rho, 600)
        assert [w.label() for w in sa.first] == [w.label() for w in sb.first] and sa.first_rho == sb.first_rho
    low, high = _schedule("auto", dom1, dom2, 0.01, 600), _schedule("auto", dom1, dom2, 500.0, 600)
    assert low.first == []  # not affordable: adaptive selection only
    assert len(high.first) == 3 * 4 and all(len(w.left) + len(w.right) == 2 for w in high.first)
    assert 16 * sum(high.first_rho) <= MEASURE_ALL_SHARE * 500.0  # cheap even at noise norm 0.05 = τ / 4
    # affordable at max_noise but not at 0.05: no sweep (measuring everything at τ is no cheap sweep)
    mid = next(r for r in (5.0, 10.0, 20.0, 50.0) if sum(_schedule("measure-all", dom1, dom2, r, 600).first_rho)
               <= MEASURE_ALL_SHARE * r * 0.5)
    assert _schedule("auto", dom1, dom2, mid, 600).first == []
    tau = check_params({})["max_noise"]  # each meets max_noise: σ·√cells ≤ τ
    assert all(high.sigma_of(r) * math.sqrt(np.prod(w.sizes(dom1, dom2))) <= tau * (1 + 1e-9)
               for w, r in zip(high.first, high.first_rho))
    forced = _schedule("measure-all", dom1, dom2, 0.01, 600)  # forced: scaled down to the whole budget
    assert len(forced.first) == 12 and math.isclose(sum(forced.first_rho), 0.01, rel_tol=1e-9)
    assert forced.n_sel == 0 and _schedule("adaptive", dom1, dom2, 50.0, 600).first == []


@pytest.mark.parametrize("strategy,eps", [("auto", 150.0), ("measure-all", 1.0)])
def test_measure_all_ledger_adds_up(ml: dict, strategy: str, eps: float) -> None:
    """Measure-all releases are charged before reading (no selection charge for them), and selection +
    measurement charges add up to the links budget, never above; seeded runs repeat exactly."""
    from privcube.relational.stages.composition import compose_budgets
    from privcube.relational.stages.run import run_relational
    from privcube.privacy.ledger import PrivacyLedger
    from privcube.privacy.noise import NoiseSource

    b = {"links": {"epsilon": eps, "delta": 1e-6}}
    outs = []
    for _ in range(2):
        noise = NoiseSource(3)
        ledger = PrivacyLedger(compose_budgets(b, []), noise=noise)
        res = run_relational(ml["tables"], ml["links"], {"iterations": 2, "pgd_iters": 20, "d_max": 10,
                                                         "strategy": strategy}, b, ledger, noise,
                             synthetic_tables=_identity(ml))
        charges = ledger.to_dict()["charges"]
        first = [c for c in charges if c.get("measure_all")]
        assert len(first) == res.report["privacy"]["measure_all"] == 3 * 4
        assert ledger.spent_rho <= compose_budgets(b, []).rho * (1 + 1e-9)
        assert math.isclose(ledger.spent_rho, compose_budgets(b, []).rho, rel_tol=1e-9)
        assert math.isclose(res.report["privacy"]["rho_links_spent"] + res.report["privacy"]["rho_degrees"],
                            ledger.spent_rho, rel_tol=1e-9)
        outs.append(res.links)
    assert outs[0].equals(outs[1])


@pytest.mark.parametrize("k,iterations", [(2, 2), (3, 20)])
def test_budget_is_spent_when_candidates_run_out(ml: dict, k: int, iterations: int) -> None:
    """Measure-all first, then fewer candidates left than draws planned (k 3: 30 three-way candidates, T·K 60),
    or none at all (k 2: measure-all covers them): the links budget is still spent in full, never above, and
    the schedule a plan previews has as many releases as the run makes."""
    from privcube.relational.stages.composition import compose_budgets
    from privcube.relational.stages.run import run_relational
    from privcube.relational.stages.selection import links_schedule
    from privcube.privacy.ledger import PrivacyLedger
    from privcube.privacy.noise import NoiseSource

    b = {"links": {"epsilon": 150.0, "delta": 1e-6}}
    params = {"iterations": iterations, "pgd_iters": 5, "d_max": 10, "k": k, "degrees": "free"}
    noise = NoiseSource(3)
    ledger = PrivacyLedger(compose_budgets(b, []), noise=noise)
    res = run_relational(ml["tables"], ml["links"], params, b, ledger, noise, synthetic_tables=_identity(ml))
    charges = ledger.to_dict()["charges"]
    measured = [c for c in charges if c["label"] == "links:measure"]
    first = [c for c in measured if c.get("measure_all")]
    assert len(first) == 3 * 4  # every 2-way candidate up front
    assert math.isclose(ledger.spent_rho, compose_budgets(b, []).rho, rel_tol=1e-9)
    assert ledger.spent_rho <= compose_budgets(b, []).rho  # exactly, whatever the rounding of the sum
    d1, d2 = ml["tables"]["users"][1], ml["tables"]["movies"][1]
    cand, sched, _ = links_schedule(check_params(params), "many_to_many", False, d1, d2,
                                    compose_budgets(b, []).rho, res.report["m"])
    assert len(sched.first) == 12 and sched.n_sel == (0 if k == 2 else len(cand) - 12)  # draws planned on what is left
    # max_noise raises the ρ of the large (294-cell) tables, so fewer draws than planned may fit: a plan's count is a bound
    assert len(measured) == 12 if k == 2 else len(measured) <= len(sched.first) + sched.n_sel


def test_strategy_is_validated() -> None:
    with pytest.raises(ConfigError, match="'strategy'"):
        check_params({"strategy": "all"})


def _two_overlapping(seed: int):
    from privcube.core.domain import Domain
    from privcube.relational.stages.cross_workloads import CrossTables, CrossWorkload

    rng = np.random.default_rng(seed)
    d1, d2 = Domain(("a", "b"), (3, 2)), Domain(("g", "h"), (2, 2))
    syn = CrossTables(rng.integers(0, 2, (50, 2)), d1, rng.integers(0, 2, (40, 2)), d2)
    ws = [CrossWorkload(("a",), ("g", "h")), CrossWorkload(("a", "b"), ("g",))]  # share a × g
    joint = (0.5 * rng.dirichlet(np.ones(24)) + 0.5 / 24).reshape(3, 2, 2, 2)  # a, b, g, h
    return syn, ws, [joint.sum(1).ravel(), joint.sum(3).ravel()], rng


def test_pooled_targets_are_exact_without_noise_and_consistent() -> None:
    from privcube.relational.stages.link_learning import pooled_targets

    syn, ws, truth, rng = _two_overlapping(5)
    prior = [np.full(12, 1 / 12)] * 2
    out = pooled_targets(syn, ws, truth, [0.0, 0.0], prior, 1.0)
    assert all(np.abs(o - t).max() < 1e-12 for o, t in zip(out, truth))
    noisy = [t + rng.normal(0, 0.004, 12) for t in truth]
    out = pooled_targets(syn, ws, noisy, [0.004, 0.004], prior, 1.0)
    shared0 = out[0].reshape(3, 2, 2).sum(2)  # a × g of release 0 (a | g, h)
    shared1 = out[1].reshape(3, 2, 2).sum(1)  # a × g of release 1 (a, b | g)
    assert np.abs(shared0 - shared1).max() < 1e-9  # overlapping releases agree (no clipping here)
    assert np.abs(noisy[0].reshape(3, 2, 2).sum(2) - noisy[1].reshape(3, 2, 2).sum(1)).max() > 1e-3


def test_pooled_targets_beat_per_release_shrinkage_on_overlapping_releases() -> None:
    from privcube.relational.stages.link_learning import pooled_targets

    syn, ws, truth, rng = _two_overlapping(6)
    prior = [np.full(12, 1 / 12)] * 2
    err_p = err_c = 0.0
    for _ in range(200):
        noisy = [t + rng.normal(0, 0.03, 12) for t in truth]
        pooled = pooled_targets(syn, ws, noisy, [0.03, 0.03], prior, 1.0)
        err_p += sum(np.abs(o - t).sum() for o, t in zip(pooled, truth))
        err_c += sum(np.abs(shrink(y, pr, 0.03, 1.0, (3, 2, 2)) - t).sum() for y, pr, t in zip(noisy, prior, truth))
    assert err_p < err_c  # measured 0.954 of it (seeded)
