"""AIM+GReM's spread final round: the workload-optimal allocation over the selected cliques' residuals,
exact accounting, the reserved share, resume, and that it beats the paper's single-marginal last round."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privcube.core.context import RunContext
from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
from privcube.mechanisms.aim_grem import final_round
from privcube.mechanisms.aim_grem.mechanism import AIMGReM
from privcube.core.oracle import ArrayOracle
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.discrete import DiscreteNoiseSource
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.core.residuals import p_coef, subsets, v_coef
from privcube.storage.checkpoint import RunCheckpoint
from privcube.core.workload import Workload

DOM = Domain(("a", "b", "c", "d", "e"), (3, 2, 4, 2, 3))


def _oracle(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 3, n)
    cols = [base] + [(base + rng.integers(0, 2, n)) % s for s in DOM.shape[1:]]
    return ArrayOracle(DOM, np.stack(cols, 1))


def _run(params=None, rho=0.3, seed=1, oracle=None, ctx=None, noise=None, k=2):
    budget = PrivacyBudget.from_rho(rho)
    ledger = PrivacyLedger(budget)
    res = AIMGReM(params).run(oracle or _oracle(), Workload.kway(DOM, k), budget, ledger,
                              noise or NoiseSource(seed), ctx)
    return res, ledger


def _closure(cliques):
    return sorted({t for g in cliques for t in subsets(g)}, key=len)


def _objective(plan, taus, cliques, lam, rho):
    """Σ_γ Σ_τ⊆γ n_γ v_τ / (λ_τ + 1/σ_τ²): the workload's expected squared error after the round."""
    total = 0.0
    for g in cliques:
        n_g = math.prod(DOM[a] for a in g)
        for t in subsets(g):
            prec = lam.get(t, 0.0) + (1.0 / plan[t] if t in plan else 0.0)
            total += n_g * v_coef(t, g, DOM) / prec if prec > 0 else math.inf
    return total


@pytest.mark.parametrize("seed", range(6))
def test_plan_spends_exactly_its_budget_and_never_more(seed):
    rng = np.random.default_rng(seed)
    cliques = [tuple(sorted(c, key=DOM.attributes.index)) for c in itertools.combinations(DOM.attributes, 2)]
    taus = _closure(cliques)
    lam = {t: float(rng.choice([0.0, rng.exponential(5.0)])) for t in taus}
    rho = float(10.0 ** rng.uniform(-4, 1))
    for whole in (False, True):
        plan = final_round.plan_final(taus, DOM, cliques, {c: 1.0 for c in cliques}, lam, rho, whole)
        spent = math.fsum((1.0 if whole else p_coef(t, DOM)) / (2 * s2) for t, s2 in plan.items())
        assert spent <= rho and spent == pytest.approx(rho, rel=1e-9)
        assert final_round.cost(plan, DOM, whole) == pytest.approx(spent, rel=1e-12)


def test_one_clique_without_priors_gets_the_iid_allocation():
    """c_τ ∝ v_τ for a single clique, so the plan is CRP's no-prior solution: σ_τ² = σ² ∏_{γ∖τ} n_j."""
    g = ("a", "b", "c")
    rho = 0.7
    plan = final_round.plan_final(_closure([g]), DOM, [g], {g: 1.0}, {}, rho)
    sigma2 = 1.0 / (2 * rho)
    for t in _closure([g]):
        assert plan[t] == pytest.approx(sigma2 * math.prod(DOM[a] for a in g if a not in t), rel=1e-9)


def test_plan_is_optimal_against_feasible_perturbations():
    rng = np.random.default_rng(3)
    cliques = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d", "e")]
    taus = _closure(cliques)
    lam = {t: float(rng.exponential(2.0)) for t in taus if rng.random() < 0.5}
    rho = 0.05
    plan = final_round.plan_final(taus, DOM, cliques, {c: 1.0 for c in cliques}, lam, rho)
    best = _objective(plan, taus, cliques, lam, rho)
    x = np.array([1.0 / (2 * rho * plan[t]) if t in plan else 0.0 for t in taus])
    p = np.array([p_coef(t, DOM) for t in taus])
    for _ in range(200):  # random feasible points: x' ≥ 0 with Σ p x' = 1
        y = np.maximum(x * np.exp(rng.normal(0, 0.3, x.size)) + rng.exponential(0.01, x.size) * (x == 0), 0)
        y /= float(np.sum(p * y))
        other = {t: 1.0 / (2 * rho * yi) for t, yi in zip(taus, y) if yi > 0}
        assert _objective(other, taus, cliques, lam, rho) >= best * (1 - 1e-9)


def test_precise_residuals_get_less_budget():
    cliques = [("a", "b"), ("a", "c")]
    taus = _closure(cliques)
    lo = final_round.plan_final(taus, DOM, cliques, {c: 1.0 for c in cliques}, {}, 0.1)
    hi = final_round.plan_final(taus, DOM, cliques, {c: 1.0 for c in cliques}, {("a",): 1e6}, 0.1)
    assert ("a",) in lo and ("a",) not in hi  # already known far better than this round could add
    assert all(hi[t] <= lo[t] for t in hi)  # its budget goes to the others


def test_eligible_residuals_are_the_selected_cliques_closure():
    res = _closure([("a", "b", "c"), ("d", "e")])
    got = final_round.eligible(res, [("a", "b"), ("e",)])
    assert got == [t for t in res if t in {(), ("a",), ("b",), ("e",), ("a", "b")}]  # in the given order


def test_default_last_round_is_a_spread_without_selection_and_spends_the_rest():
    res, ledger = _run()
    last = res.report["trace"][-1]
    assert last["final_round"] == "spread" and last["rho_select"] == 0.0 and last["final"]
    assert ledger.charges[-1]["label"].endswith("final")
    assert not any(c["label"].endswith(f"round {last['round']} select") for c in ledger.charges)
    assert ledger.spent_rho <= 0.3 * (1 + 1e-12) and ledger.spent_rho == pytest.approx(0.3, rel=1e-12)
    assert ledger.charges[-1]["realized_rho"] <= ledger.charges[-1]["rho"] * (1 + 1e-12)
    selected = {frozenset(r["clique"]) for r in res.report["trace"] if r["clique"]}
    for t in last["measured"]:  # only residuals of cliques AIM selected (or the 1-way initialisation)
        assert len(t) <= 1 or any(frozenset(t) <= s for s in selected)


def test_select_keeps_the_papers_last_round():
    res, ledger = _run({"final_round": "select"})
    assert all("final_round" not in r for r in res.report["trace"])
    assert ledger.charges[-1]["label"].endswith("measure")
    assert ledger.spent_rho == pytest.approx(0.3, rel=1e-12) and ledger.spent_rho <= 0.3 * (1 + 1e-12)


def test_share_reserves_budget_for_the_final_round():
    res, ledger = _run({"final_share": 0.4})
    assert res.report["init"]["final_share"] == 0.4
    assert ledger.charges[-1]["rho"] >= 0.4 * 0.3 * (1 - 1e-9)
    assert ledger.spent_rho == pytest.approx(0.3, rel=1e-12) and ledger.spent_rho <= 0.3 * (1 + 1e-12)


def test_auto_share_follows_the_public_measure_all_test():
    big, _ = _run(rho=50.0)  # measuring everything is cheap: reserve the share
    small, _ = _run(rho=1e-4)
    assert big.report["init"]["final_share"] == final_round.SHARE
    assert small.report["init"]["final_share"] == 0.0


def test_discrete_noise_accounts_each_residual_as_its_whole_marginal():
    rng = np.random.default_rng(4)
    oracle = ArrayOracle(DOM, np.stack([rng.integers(0, n, 800) for n in DOM.shape], axis=1))
    res, ledger = _run(oracle=oracle, noise=DiscreteNoiseSource(seed=3))
    last = res.report["trace"][-1]
    charge = ledger.charges[-1]
    assert last["final_round"] == "spread" and charge["label"].endswith("final")
    assert ledger.spent_rho <= 0.3 * (1 + 1e-12)
    assert charge["realized_rho"] <= charge["rho"] * (1 + 1e-12)
    assert charge["realized_rho"] == pytest.approx(charge["rho"], rel=1e-9)  # Σ 1/(2σ²), p_τ = 1


@pytest.mark.parametrize("bad", [{"final_round": "last"}, {"final_share": 1.0}, {"final_share": -0.1},
                                 {"final_share": True}, {"final_share": "half"}])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        AIMGReM(bad)


def test_resume_just_before_the_final_round_equals_uninterrupted(tmp_path):
    params = {"final_share": 0.4}
    full, full_ledger = _run(params, rho=5.0)
    rounds = full.report["rounds"]
    ck = RunCheckpoint(tmp_path / "s.zarr", identity={"mechanism": "aim-grem", "seed": 1})
    part, _ = _run({**params, "max_rounds": rounds - 1}, rho=5.0, ctx=RunContext(checkpoint=ck))
    assert not part.report["done"] and "final_round" not in part.report["trace"][-1]
    ck2 = RunCheckpoint(tmp_path / "s.zarr", identity={"mechanism": "aim-grem", "seed": 1})
    res, ledger = _run(params, rho=5.0, ctx=RunContext(checkpoint=ck2, resume=True))
    assert res.report["trace"] == full.report["trace"]
    assert ledger.charges == full_ledger.charges
    for a, b in zip(res.answers, full.answers):
        assert np.array_equal(a.estimate, b.estimate)
    again, ledger3 = _run(params, rho=5.0, ctx=RunContext(checkpoint=RunCheckpoint(tmp_path / "s.zarr", identity={
        "mechanism": "aim-grem", "seed": 1}), resume=True))
    assert ledger3.charges == full_ledger.charges  # a finished run's spread round is not spent twice


def test_spread_beats_the_papers_last_round_where_measuring_is_cheap():
    """Mean L1 error over the workload, 4 seeds, where AIM selects nearly every marginal (high ρ)."""
    oracle = _oracle(4000, seed=2)
    truth = {c: oracle.marginals([c])[c] for c in Workload.kway(DOM, 2).cliques()}

    def err(params, seed):
        res, _ = _run(params, rho=20.0, seed=seed, oracle=oracle)
        return np.mean([np.abs(a.estimate - truth[tuple(a.group.attributes)].ravel()).sum() for a in res.answers])

    spread = np.mean([err({}, s) for s in range(4)])
    select = np.mean([err({"final_round": "select"}, s) for s in range(4)])
    assert spread < select
