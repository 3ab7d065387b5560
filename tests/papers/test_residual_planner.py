"""ResidualPlanner: closed-form plan, published Adult RMSE, exact reconstruction, variance, ledger."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from privcube.core.domain import Domain
from privcube.core.errors import BudgetError, ConfigError
from privcube.mechanisms import get_mechanism
from privcube.mechanisms.residual_planner import ResidualPlanner, p_coefficient
from privcube.core.oracle import ArrayOracle
from privcube.privacy.budget import PrivacyBudget
from privcube.core.workload import Workload, parse_workload
from mechanism_fakes import RecordingLedger, RngNoise, ZeroNoise

ADULT_DOMAIN = Path("/work/shared/data/adult/adult-domain.json")
# Published sizes (ResidualPlanner / QuerySmasher papers, Adult): 9 categorical + 5 numeric.
ADULT_SIZES = [42, 16, 15, 9, 7, 6, 5, 2, 2, 100, 100, 100, 99, 85]


def _budget(rho: float) -> PrivacyBudget:
    return PrivacyBudget(rho, 1.0, 1e-9)


def _small() -> tuple[Domain, ArrayOracle]:
    dom = Domain(("a", "b", "c", "d"), (2, 3, 4, 1))
    rng = np.random.default_rng(0)
    recs = np.stack([rng.integers(0, n, 500) for n in dom.shape], axis=1)
    return dom, ArrayOracle(dom, recs)


def test_registry_resolves() -> None:
    assert get_mechanism("residual-planner") is ResidualPlanner


def test_adult_all_3way_published_rmse() -> None:
    """ResidualPlanner paper: Adult, all 3-way marginals, privacy cost 1 (ρ = 0.5): RMSE 10.515."""
    if ADULT_DOMAIN.exists():
        dom = Domain.load(ADULT_DOMAIN)
    else:
        dom = Domain(tuple(f"x{i}" for i in range(14)), tuple(ADULT_SIZES))
    assert sorted(dom.shape) == sorted(ADULT_SIZES)
    plan = ResidualPlanner().plan(Workload.kway(dom, 3), _budget(0.5))
    assert plan.rmse == pytest.approx(10.515, rel=0.005)
    assert plan.privacy["rho"] == pytest.approx(0.5, rel=1e-9)
    assert plan.privacy["rho"] <= 0.5
    assert len(plan.measurements) == 1 + 14 + 91 + 364  # the downward closure of all 3-way sets
    assert plan.details["cells"] == 20_894_536


def test_closed_form_single_marginal() -> None:
    """One marginal on γ: the optimum SSE by hand."""
    dom = Domain(("a", "b"), (3, 5))
    plan = ResidualPlanner().plan(Workload.marginals(dom, [("a", "b")]), _budget(0.5))
    # Hand derivation (β = 1): SSE = (Σ_τ √(a_τ p_τ))² with a_τ = ∏_τ(n−1)/∏_{γ∖τ} n, p_τ = ∏_τ(n−1)/n.
    a = {(): 1 / 15, ("a",): 2 / 5, ("b",): 4 / 3, ("a", "b"): 8.0}
    p = {(): 1.0, ("a",): 2 / 3, ("b",): 4 / 5, ("a", "b"): 8 / 15}
    sse = sum(math.sqrt(a[t] * p[t]) for t in a) ** 2
    assert plan.rmse == pytest.approx(math.sqrt(sse / 15), rel=1e-12)
    assert plan.groups[0]["rmse"] == pytest.approx(math.sqrt(sse / 15), rel=1e-12)


def test_marginal_rows_table4_closed_form() -> None:
    """QS paper Table 4 marginal rows ([n]^40, all 1- and 2-way, cost 1): 23.48 (n=10), 25.70 (n=20)."""
    for n, printed in ((10, 23.48), (20, 25.70)):
        dom = Domain(tuple(f"x{i}" for i in range(40)), (n,) * 40)
        wl = parse_workload([{"kway": 1}, {"kway": 2}], dom)
        plan = ResidualPlanner().plan(wl, _budget(0.5))
        assert plan.rmse == pytest.approx(printed, rel=0.005)


def test_non_marginal_rejected_with_hint() -> None:
    dom = Domain(("a", "b"), (3, 4))
    wl = parse_workload([{"attributes": ["a"], "queries": "prefix"}], dom)
    with pytest.raises(ConfigError, match="querysmasher"):
        ResidualPlanner().plan(wl, _budget(0.5))
    with pytest.raises(ConfigError, match="objective"):
        ResidualPlanner({"objective": "median"})
    with pytest.raises(ConfigError, match="bogus"):
        ResidualPlanner({"bogus": 1})
    with pytest.raises(BudgetError, match="rho"):
        ResidualPlanner().plan(Workload.kway(dom, 1), -1.0)


def test_noiseless_reconstruction_is_exact() -> None:
    dom, oracle = _small()
    wl = parse_workload([{"kway": 2, "weight": 2}, {"kway": 1}, {"kway": 0}, {"attributes": ["a", "b", "c"]}], dom)
    ledger = RecordingLedger()
    res = ResidualPlanner().run(oracle, wl, _budget(0.5), ledger, ZeroNoise())
    truth = oracle.marginals([g.attributes for g in wl])
    assert len(res.answers) == len(wl)
    for ans in res.answers:
        np.testing.assert_allclose(ans.estimate, truth[ans.group.attributes].reshape(-1), atol=1e-8)
        assert ans.variance.shape == ans.estimate.shape
        assert np.all(ans.variance > 0)


def test_ledger_spends_exactly_budget_and_noise_keys() -> None:
    dom, oracle = _small()
    wl = Workload.kway(dom, 2)
    ledger = RecordingLedger()
    noise = RngNoise(1)
    ResidualPlanner().run(oracle, wl, _budget(0.37), ledger, noise)
    total = sum(c["rho"] for c in ledger.charges)
    assert total == pytest.approx(0.37, rel=1e-9)
    assert total <= 0.37
    # one noise draw per residual with positive dimension, keyed by ("residual-planner", clique)
    assert all(k[0] == "residual-planner" for k in noise.keys)
    assert len(set(noise.keys)) == len(noise.keys)
    assert all("d" not in k[1] for k in noise.keys)  # size-1 attribute: empty residuals are skipped


def test_monte_carlo_variance_matches_reported() -> None:
    dom, oracle = _small()
    wl = parse_workload([{"kway": 2}, {"attributes": ["a"], "weight": 5}, {"kway": 0}], dom)
    truth = oracle.marginals([g.attributes for g in wl])
    noise = RngNoise(7)
    reps = 1500
    sq = [np.zeros(dom.size(g.attributes)) for g in wl]
    reported = None
    for _ in range(reps):
        res = ResidualPlanner().run(oracle, wl, _budget(0.5), RecordingLedger(), noise)
        for i, ans in enumerate(res.answers):
            sq[i] += (ans.estimate - truth[ans.group.attributes].reshape(-1)) ** 2
        reported = [a.variance for a in res.answers]
    for i, g in enumerate(wl):
        emp = sq[i].mean() / reps
        rep = reported[i].mean()
        # relative standard error of the mean of chi-square(1)-type squares: sqrt(2 / (reps * cells))
        tol = 5 * math.sqrt(2 / (reps * dom.size(g.attributes)))
        assert emp == pytest.approx(rep, rel=max(tol, 0.02)), g.label()


def test_max_objective_single_marginal_equals_sum() -> None:
    """For one marginal the max and sum objectives coincide (both minimise its cell variance)."""
    dom = Domain(("a", "b", "c"), (3, 4, 5))
    wl = Workload.marginals(dom, [("a", "b", "c")])
    s = ResidualPlanner().plan(wl, _budget(0.5))
    m = ResidualPlanner({"objective": "max"}).plan(wl, _budget(0.5))
    assert m.rmse == pytest.approx(s.rmse, rel=1e-4)
    assert m.privacy["rho"] <= 0.5 + 1e-12


def test_max_objective_lowers_max_variance() -> None:
    dom = Domain(("a", "b", "c", "d"), (2, 10, 30, 5))
    wl = parse_workload([{"kway": 1}, {"attributes": ["b", "c"]}, {"attributes": ["a", "d"]}], dom)
    s = ResidualPlanner().plan(wl, _budget(0.5))
    m = ResidualPlanner({"objective": "max"}).plan(wl, _budget(0.5))
    assert m.details["max_cell_variance"] < s.details["max_cell_variance"] * 0.999
    assert m.rmse >= s.rmse * (1 - 1e-6)  # the sum objective is optimal for total error
    assert m.privacy["rho"] == pytest.approx(0.5, rel=1e-6)


def test_plan_json_round_trip() -> None:
    dom = Domain(("a", "b"), (3, 4))
    plan = ResidualPlanner().plan(Workload.kway(dom, 2), _budget(0.5))
    d = json.loads(plan.to_json())
    assert d["mechanism"] == "residual-planner"
    assert {tuple(m["residual"]) for m in d["measurements"]} == {(), ("a",), ("b",), ("a", "b")}
    assert all(m["sigma2"] > 0 for m in d["measurements"])
    assert set(d["privacy"]) >= {"rho", "epsilon", "delta"}


def test_real_ledger_and_noise_source() -> None:
    """With the engine's PrivacyLedger and NoiseSource: spend == budget, seeded runs reproduce."""
    from privcube.privacy.ledger import PrivacyLedger
    from privcube.privacy.noise import NoiseSource

    dom, oracle = _small()
    wl = Workload.kway(dom, 2)
    budget = PrivacyBudget.from_rho(0.25)
    outs = []
    for _ in range(2):
        ledger = PrivacyLedger(budget)
        outs.append(ResidualPlanner().run(oracle, wl, budget, ledger, NoiseSource(3)))
        assert ledger.spent_rho == pytest.approx(0.25, rel=1e-9)
        assert ledger.spent_rho <= 0.25 * (1 + 1e-12)
        with pytest.raises(BudgetError):
            ledger.charge("more", rho=0.01)
    for a, b in zip(outs[0].answers, outs[1].answers):
        np.testing.assert_array_equal(a.estimate, b.estimate)


def _brute_substitution_beta(dom: Domain, sigma2: dict, lattice: bool) -> float:
    """max over pairs of full-domain cells (i → j) of Σ_τ ‖shift of residual τ‖² / σ_τ², by explicit vectors."""
    import itertools

    cells = list(itertools.product(*[range(n) for n in dom.shape]))
    best = 0.0
    for i in cells:
        for j in cells:
            tot = 0.0
            for t, s2 in sigma2.items():
                if not t or p_coefficient(dom, t) == 0:
                    continue
                idx = [dom.attributes.index(a) for a in t]
                v = np.zeros([dom[a] for a in t])
                v[tuple(j[k] for k in idx)] += 1
                v[tuple(i[k] for k in idx)] -= 1
                if not lattice:  # the residual: centred along every axis of τ
                    for ax in range(v.ndim):
                        v = v - v.mean(axis=ax, keepdims=True)
                tot += float((v**2).sum()) / s2
            best = max(best, tot)
    return best


@pytest.mark.parametrize("lattice", [False, True])
def test_substitution_cost_equals_brute_force_over_cell_pairs(lattice: bool) -> None:
    from privcube.mechanisms.residual_planner import substitution_cost

    dom = Domain(("a", "b", "c"), (2, 3, 4))
    rp = ResidualPlanner().optimize(Workload.kway(dom, 2), _budget(0.5))
    exact = _brute_substitution_beta(dom, rp.sigma2, lattice)
    assert substitution_cost(dom, rp.sigma2, lattice) == pytest.approx(exact, rel=1e-12)
    assert substitution_cost(dom, rp.sigma2, lattice, max_work=0) >= exact * (1 - 1e-12)  # the cheap bound
    add_remove = sum((1.0 if lattice else p_coefficient(dom, t)) / s for t, s in rp.sigma2.items() if t)
    assert 1.0 < exact / add_remove <= 4.0


def test_substitution_neighbours_spend_exactly_the_budget() -> None:
    dom = Domain(("a", "b", "c"), (2, 3, 4))
    wl = Workload.kway(dom, 2)
    sub = ResidualPlanner({"neighbours": "substitution"})
    plan = sub.optimize(wl, _budget(0.5))
    assert _brute_substitution_beta(dom, plan.sigma2, False) == pytest.approx(1.0, rel=1e-9)  # β = 2ρ
    assert sub.plan(wl, _budget(0.5)).rmse > ResidualPlanner().plan(wl, _budget(0.5)).rmse
    with pytest.raises(ConfigError, match="neighbours"):
        ResidualPlanner({"neighbours": "edges"})


@pytest.mark.parametrize("mechanism", ["residual-planner", "querysmasher"])
def test_pure_epsilon_budget_refused_before_anything_is_written(tmp_path: Path, mechanism: str) -> None:
    """`privacy: {epsilon: 1}` asks for pure ε-DP. Gaussian noise spends ρ = ε²/2, which is ρ-zCDP, not
    ε-DP (ε-DP ⇒ ε²/2-zCDP, never the converse): the plan used to print "epsilon=1, delta=0" and the run
    wrote a ledger with "spent epsilon 0". Both must refuse, naming privacy and delta, and write nothing."""
    from privcube import api

    (tmp_path / "d.csv").write_text("x,y\n0,1\n1,0\n")
    cfg = {"data": {"path": str(tmp_path / "d.csv"), "domain": {"x": 2, "y": 2}}, "mechanism": {"name": mechanism},
           "workload": [{"kway": 1}], "privacy": {"epsilon": 1.0}, "cluster": {"type": "threads"}}
    with pytest.raises(ConfigError, match=r"privacy: \{epsilon: 1\}.*pure.*delta"):
        api.plan(cfg)
    with pytest.raises(ConfigError, match=r"pure epsilon-DP"):
        api.run(cfg, tmp_path / "out", seed=0, quiet=True)
    assert not (tmp_path / "out").exists()
    cfg["privacy"] = {"epsilon": 1.0, "delta": 1e-9}  # the same ε with a δ runs
    ledger = api.run(cfg, tmp_path / "out2", seed=0, quiet=True).ledger
    assert ledger["spent"]["delta"] == 1e-9 and ledger["spent"]["epsilon"] <= 1.0 * (1 + 1e-9)
