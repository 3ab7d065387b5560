"""Relational link learning (issue 17): per-release budgets from the chosen workloads, the data-independent
informativeness check, degree preservation (row degrees kept, d_max respected, a noisy children-per-parent
histogram charged to the ledger), and the projections/repairs behind them."""
from __future__ import annotations

import math

import numpy as np
import pytest

from privcube.core.errors import ConfigError
from privcube.relational.stages.synthetic_degrees import (
    balanced_degrees,
    cap_degrees,
    degree_bins,
    links_with_degrees,
)
from privcube.relational.stages.composition import compose_budgets
from privcube.relational.stages.run import run_relational
from privcube.relational.stages.parameters import check_params
from privcube.relational.solvers.projection import project_box_sum, project_rows_box_sum
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.relational.example_data import movielens_like
from relational_files import _identity

FAST = {"iterations": 3, "pgd_iters": 30, "d_max": 10}


def _links_charges(ledger: PrivacyLedger) -> dict[str, float]:
    by: dict[str, float] = {}
    for c in ledger.to_dict()["charges"]:
        if c["label"].startswith("links:"):
            by[c["label"]] = by.get(c["label"], 0.0) + c["rho"]
    return by


def test_rows_box_sum_projection_is_the_exact_per_row_projection() -> None:
    rng = np.random.default_rng(0)
    B = rng.normal(0.3, 0.6, (30, 25))
    r = rng.integers(0, 12, 30).astype(float)
    hi = np.ones(B.shape)
    hi[np.arange(25), np.arange(25)] = 0.0  # a fixed diagonal, as for self-referential links
    X = project_rows_box_sum(B, r, hi)
    ref = np.array([project_box_sum(B[i], r[i], 0.0, hi[i]) if r[i] > 0 else np.zeros(25) for i in range(30)])
    assert np.abs(X - ref).max() < 1e-9
    assert np.abs(X.sum(axis=1) - r).max() < 1e-9 and X.min() >= 0 and np.all(X <= hi + 1e-12)


def test_links_with_degrees_and_cap_keep_degree_sequences() -> None:
    rng = np.random.default_rng(1)
    d1, d2 = balanced_degrees(50, 230, rng), balanced_degrees(40, 230, rng)
    assert d1.sum() == d2.sum() == 230 and d1.max() - d1.min() <= 1
    i, j = links_with_degrees(d1, d2, rng)
    assert len(set(zip(i.tolist(), j.tolist()))) == 230
    assert np.array_equal(np.bincount(i, minlength=50), d1) and np.array_equal(np.bincount(j, minlength=40), d2)
    # pile links on a few right records, then cap: left degrees kept, right ≤ cap, no repeated pair,
    # and a moved link lands on a record with the same code when one has room
    j2 = np.where(rng.random(230) < 0.5, j % 3, j)
    keep = np.unique(i * 40 + j2, return_index=True)[1]
    i2, j2 = i[keep], j2[keep]
    keys = np.arange(40) % 2
    si, sj = cap_degrees(i2, j2, 40, 7, keys, rng)
    assert np.array_equal(np.bincount(si, minlength=50), np.bincount(i2, minlength=50))
    assert np.bincount(sj, minlength=40).max() <= 7 and len(set(zip(si.tolist(), sj.tolist()))) == si.size
    assert np.array_equal(np.bincount(keys[sj], minlength=2), np.bincount(keys[j2], minlength=2))


def test_cap_degrees_never_moves_a_link_onto_its_own_record() -> None:
    """Self-referential links without self-loops: the only same-code record with room is the link's own
    left record, so a capped link must go to another record (it used to land on itself)."""
    # records 0..5 of one table; record 5 has 3 links in, from rows 0, 1, 2 (cap 2); record 0 is the only
    # one with record 5's code and room; records 1 and 2 are full; 3 and 4 have room under another code
    si = np.array([0, 1, 2, 0, 0])
    sj = np.array([5, 5, 5, 1, 2])
    keys = np.array([7, 1, 1, 3, 3, 7])
    cap = np.array([2, 1, 1, 2, 2, 2])
    for seed in range(20):
        ni, nj = cap_degrees(si, sj, 6, cap, keys, np.random.default_rng(seed), no_diagonal=True)
        assert not np.any(ni == nj)
        assert np.array_equal(ni, si) and np.all(np.bincount(nj, minlength=6) <= cap)
        assert len(set(zip(ni.tolist(), nj.tolist()))) == ni.size
    # without no_diagonal the same-code record is taken when the moved link is row 0's
    hits = sum(bool(np.any(np.equal(*cap_degrees(si, sj, 6, cap, keys, np.random.default_rng(s))))) for s in range(20))
    assert hits > 0


def test_childless_distribution_follows_the_noisy_share_within_public_bounds() -> None:
    """The two-value release gives the share of parents without children (clipped to [0, 1]) and,
    on 1..d_max, the maximum-entropy shape with the public mean: decreasing, and the whole mean is
    children / parents."""
    from privcube.relational.stages.degree_histograms import childless_distribution

    assert degree_bins(50) == [(0, 0), (1, 50)]
    p = childless_distribution(np.array([700.0, 300.0]), 1000, 4000, 50)
    assert p.sum() == pytest.approx(1.0) and p[0] == pytest.approx(0.7)
    assert (p * np.arange(51)).sum() == pytest.approx(4.0, rel=1e-6)  # 4000 children over 1000 parents
    assert np.all(np.diff(p[1:]) <= 1e-15)  # mean 13.3 of 1..50: a decreasing (geometric) shape
    p = childless_distribution(np.array([-300.0, 1200.0]), 1000, 3000, 50)  # an estimate above 1 is clipped
    assert p[0] == pytest.approx(0.0)


def test_childless_share_reads_both_counts_against_the_public_total() -> None:
    """The two noisy counts add up to the public number of parents: (N + with − without) / 2N has half the
    noise variance of either count, and a smaller error than the ratio with / (with + without) (seeded
    draws at Airbnb's size, σ 800: measured 0.046 against 0.052 mean absolute error of the share)."""
    from privcube.relational.stages.degree_histograms import childless_distribution

    rng = np.random.default_rng(0)
    n, with_children, sigma = 10_000, 2_424, 800.0
    new, ratio = [], []
    for _ in range(2000):
        noisy = np.array([n - with_children, with_children]) + rng.normal(0.0, sigma, 2)
        new.append(abs(1.0 - childless_distribution(noisy, n, 47_217, 50)[0] - with_children / n))
        c = np.clip(noisy, 0.0, None)
        ratio.append(abs(float(np.clip(c[1] / c.sum(), 945 / n, 1.0)) - with_children / n))
    assert np.mean(new) < 0.93 * np.mean(ratio)
    exact = childless_distribution(np.array([n - with_children, with_children], dtype=float), n, 47_217, 50)
    assert exact[0] == pytest.approx(1 - with_children / n)


def test_childless_share_with_sigma_is_the_posterior_mean_on_the_allowed_range() -> None:
    """With the release's σ the share is the mean of the reading's normal truncated to the range the public
    sizes allow: over true shares drawn uniformly from that range (the prior) its squared error is below the
    clipped reading's; a precise reading inside the range is kept; a reading far outside gives the nearer end;
    at Airbnb's size and ε_rel 0.5 (σ ≈ 1,500, real share 0.2424) a reading under the lower bound no longer
    puts the share on it."""
    from privcube.relational.stages.degree_histograms import childless_distribution

    n, m, d_max = 10_000, 47_217, 50
    lo, hi = -(-m // d_max), n
    rng = np.random.default_rng(5)
    # MSE ratio posterior / clipped, measured on seeds 5 / 6 / 7: σ 300 0.979 / 0.979 / 0.989, σ 1500 0.906 /
    # 0.898 / 0.900, σ 5000 0.587 / 0.581 / 0.602 (the more noise, the more the clipped reading piles on the ends)
    for sigma, bound in ((300.0, 1.0), (1500.0, 0.95), (5000.0, 0.7)):
        post, clip = [], []
        for _ in range(1500):
            k = rng.uniform(lo, hi)
            noisy = np.array([n - k, k]) + rng.normal(0.0, sigma, 2)
            post.append((n * (1 - childless_distribution(noisy, n, m, d_max, n, sigma)[0]) - k) ** 2)
            clip.append((n * (1 - childless_distribution(noisy, n, m, d_max, n)[0]) - k) ** 2)
        assert np.mean(post) < bound * np.mean(clip)
    exact = np.array([n - 2424.0, 2424.0])
    assert n * (1 - childless_distribution(exact, n, m, d_max, n, 1e-6)[0]) == pytest.approx(2424)
    far_low, far_high = np.array([n + 1e7, -1e7]), np.array([-1e7, n + 1e7])
    assert n * (1 - childless_distribution(far_low, n, m, d_max, n, 10.0)[0]) == pytest.approx(lo)
    assert n * (1 - childless_distribution(far_high, n, m, d_max, n, 10.0)[0]) == pytest.approx(hi)
    below = np.array([n - 500.0, 500.0])  # reads 0.05, under the bound 0.0945
    k_post = n * (1 - childless_distribution(below, n, m, d_max, n, 1500.0)[0])
    assert 1500 < k_post < 2000  # the truncated normal's mean: 0.05 + s·φ(α)/(1 − Φ(α)) ≈ 0.165 of 10,000


def test_truncated_normal_mean_against_scipy_and_in_the_far_tail() -> None:
    """Equal to scipy's truncnorm where that is accurate; far outside the interval (where scipy's returns a
    wrong finite value with a warning: 0.269 instead of about the bound 0.0945 for a reading of −1,000 with
    s ≈ 7·10⁻⁴, the first case below) it tends to the nearer end from inside, as the exact mean
    a + s²/(a − mu)·(1 + O(1/α²)) does."""
    from scipy.stats import truncnorm

    from privcube.relational.stages.degree_histograms import truncated_normal_mean

    rng = np.random.default_rng(2)
    for _ in range(500):
        a = rng.uniform(0.0, 0.5)
        b, s = a + rng.uniform(1e-3, 1.0), 10 ** rng.uniform(-3, 0)
        mu = rng.uniform(a - 5 * s, b + 5 * s)
        ref = truncnorm.mean((a - mu) / s, (b - mu) / s, loc=mu, scale=s)
        assert truncated_normal_mean(mu, s, a, b) == pytest.approx(ref, rel=1e-10, abs=1e-12)
    for mu, s in ((-1000.0, 7e-4), (-3.0, 0.05), (-0.5, 0.02)):
        m = truncated_normal_mean(mu, s, 0.0945, 1.0)
        gap = s * s / (0.0945 - mu)  # the leading term of the excess over the bound
        assert 0.0945 < m <= 0.0945 + gap * 1.01 and m >= 0.0945 + gap * 0.9
        assert truncated_normal_mean(1.0945 - mu, s, 0.0945, 1.0) == pytest.approx(1.0945 - m, abs=1e-12)


def test_childless_distribution_under_estimated_share_keeps_parents_childless() -> None:
    """A noisy count that says few parents have children (fewer than the public sizes allow) is clipped to
    ⌈children / d_max⌉ parents with children, not spread over every childless parent one link each."""
    from privcube.relational.stages.degree_histograms import childless_distribution

    p = childless_distribution(np.array([9900.0, 100.0]), 10_000, 47_217, 50)
    assert 10_000 * (1 - p[0]) == pytest.approx(-(-47_217 // 50))  # 945 parents, the fewest that can hold every child
    p = childless_distribution(np.array([7576.0, 2424.0]), 10_000, 47_217, 50)
    assert 10_000 * (1 - p[0]) == pytest.approx(2424) and p[50] > 0
    assert (p * np.arange(51)).sum() == pytest.approx(4.7217, rel=1e-6)


def test_one_to_degree_distributions_are_released_charged_and_respected(pc: dict) -> None:
    b = {"tables": {"children": {"epsilon": 1.0, "delta": 1e-6}, "parents": {"epsilon": 1.0, "delta": 1e-6}},
         "links": {"epsilon": 2.0, "delta": 1e-6}}
    noise = NoiseSource(3)
    total = compose_budgets(b, ["children", "parents"])
    ledger = PrivacyLedger(total, noise=noise)
    res = run_relational(pc["tables"], pc["links"], {**FAST, "d_max": 6, "truncate": True, "degree_share": 0.1},
                         b, ledger, noise)
    rho_links = compose_budgets({"links": b["links"]}, []).rho
    by = _links_charges(ledger)
    assert math.isclose(by["links:degrees"], 0.1 * rho_links, rel_tol=1e-9)
    assert sum(by.values()) <= rho_links * (1 + 1e-9) and ledger.spent_rho <= total.rho * (1 + 1e-9)
    fk = res.tables["children"]["parent_id"].to_numpy()
    assert np.bincount(fk).max() <= 6 and res.report["degrees"]["d_max_respected"]
    # no private value in what the run says about degrees (only public settings and DP figures)
    deg_charge = [c for c in ledger.to_dict()["charges"] if c["label"] == "links:degrees"][0]
    assert set(deg_charge) - {"label", "rho", "epsilon", "delta"} <= {"sigma", "bins"}


def test_many_to_many_keeps_row_degrees_and_d_max(ml: dict) -> None:
    b = {"links": {"epsilon": 2.0, "delta": 1e-6}}
    res = run_relational(ml["tables"], ml["links"], {**FAST, "d_max": 10, "left_degrees": "kept"}, b,
                         noise=NoiseSource(4), synthetic_tables=_identity(ml))
    u, m = res.links.iloc[:, 0].to_numpy(), res.links.iloc[:, 1].to_numpy()
    assert not res.links.duplicated().any()
    # left_degrees: kept — users keep the balanced start's degrees (⌊m/n⌋ or ⌈m/n⌉), movies are capped at d_max
    du = np.bincount(u, minlength=len(res.tables["users"]))
    assert du.max() - du.min() <= 1 and np.bincount(m).max() <= 10


def test_each_release_gets_the_budget_its_cells_need(ml: dict) -> None:
    """max_noise τ: every release's expected noise norm σ·√cells is within τ; the links budget is used up and
    never exceeded; the number of releases follows the chosen workloads."""
    b = {"links": {"epsilon": 2.0, "delta": 1e-6}}
    noise = NoiseSource(5)
    ledger = PrivacyLedger(compose_budgets(b, []), noise=noise)
    tau = 0.3
    res = run_relational(ml["tables"], ml["links"], {**FAST, "iterations": 6, "max_noise": tau}, b, ledger, noise,
                         synthetic_tables=_identity(ml))
    dom1, dom2 = ml["tables"]["users"][1], ml["tables"]["movies"][1]
    meas = [c for c in ledger.to_dict()["charges"] if c["label"] == "links:measure"]
    assert meas and len(meas) == res.report["privacy"]["selections"]
    for c in meas:
        (lab,) = c["workloads"]
        left, right = lab.split("|")
        cells = dom1.size(tuple(left.split(","))) * dom2.size(tuple(right.split(",")))
        assert c["sigma"] * math.sqrt(cells) <= tau * (1 + 1e-9)
    assert math.isclose(ledger.spent_rho, compose_budgets(b, []).rho, rel_tol=1e-9)


def test_uninformative_budget_releases_random_links_and_spends_nothing(ml: dict) -> None:
    b = {"links": {"epsilon": 0.01, "delta": 1e-6}}
    noise = NoiseSource(6)
    ledger = PrivacyLedger(compose_budgets(b, []), noise=noise)
    res = run_relational(ml["tables"], ml["links"], {**FAST, "max_noise": 0.05, "evaluate_nonprivate": True,
                                                     "uninformative": "random"}, b,
                         ledger, noise, synthetic_tables=_identity(ml))
    assert res.report["privacy"]["informative"] is False and "released" in res.report["warnings"][0]
    assert ledger.spent_rho == 0.0 and res.report["privacy"]["selections"] == 0
    ev = res.report["nonprivate_evaluation"]
    assert math.isclose(ev["before_degree_repair_pct"], ev["initial_random_links_error_pct"], rel_tol=1e-12)


def test_uninformative_budget_warns_and_learns_by_default(ml: dict) -> None:
    b = {"links": {"epsilon": 0.01, "delta": 1e-6}}
    noise = NoiseSource(6)
    ledger = PrivacyLedger(compose_budgets(b, []), noise=noise)
    res = run_relational(ml["tables"], ml["links"], {**FAST, "max_noise": 0.05}, b, ledger, noise,
                         synthetic_tables=_identity(ml))
    assert "anyway" in res.report["warnings"][0] and res.report["privacy"]["selections"] == 1
    assert math.isclose(ledger.spent_rho, compose_budgets(b, []).rho, rel_tol=1e-9)


def test_new_parameters_are_validated() -> None:
    with pytest.raises(ConfigError, match="'uninformative'"):
        check_params({"uninformative": "skip"})
    with pytest.raises(ConfigError, match="'degrees'"):
        check_params({"degrees": "keep"})
    with pytest.raises(ConfigError, match="'degree_share'"):
        check_params({"degree_share": 1.5})
    with pytest.raises(ConfigError, match="'score' must be 'auto', 'gain' or 'aim', got 'best'"):
        check_params({"score": "best"})
    assert check_params({})["degrees"] == "preserve" and check_params({})["score"] == "auto"


def test_auto_score_is_chosen_from_public_sizes_only(ml: dict) -> None:
    """``score: auto`` picks ``gain`` when m / d_sens ≥ 200 and ``aim`` below (d_sens doubles for a
    self-referential link); an explicit score is kept; the one-measurement fallback keeps the choice; a run
    reports the score it used (decided before any private data is read)."""
    from privcube.relational.stages.selection import links_schedule, one_measurement

    dom1, dom2 = ml["tables"]["users"][1], ml["tables"]["movies"][1]

    def score(m: int, self_ref: bool = False, **kw: object) -> str:
        p = check_params({**FAST, **kw})
        return links_schedule(p, "many_to_many", self_ref, dom1, dom2, 0.1, m)[1].score

    assert score(1999) == "aim" and score(2000) == "gain" and score(3053) == "gain"
    assert score(3999, self_ref=True) == "aim" and score(4000, self_ref=True) == "gain"
    assert score(10**7, score="aim") == "aim" and score(50, score="gain") == "gain"
    sched = links_schedule(check_params(FAST), "many_to_many", False, dom1, dom2, 0.1, 5000)[1]
    assert one_measurement(sched, True).score == "gain"
    b = {"links": {"epsilon": 1.0, "delta": 1e-6}}
    for ds, d_max, expected in ((ml, 10, "aim"), (movielens_like(300, 200, 3, d_max=2, seed=1), 2, "gain")):
        m = len(ds["links"]["pairs"])  # the generator keeps every degree within d_max: nothing is truncated
        assert (m < 200 * d_max) if expected == "aim" else (m >= 200 * d_max)  # 592 < 2000; 400 (the movies full) ≥ 400
        noise = NoiseSource(3)
        res = run_relational(ds["tables"], ds["links"], {**FAST, "d_max": d_max}, b,
                             PrivacyLedger(compose_budgets(b, []), noise=noise), noise, synthetic_tables=_identity(ds))
        assert res.report["privacy"]["score"] == expected
