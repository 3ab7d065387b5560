"""HDMM and Eigen-Design mechanisms end to end: plan/run shapes, ledger, Monte-Carlo unbiasedness and variance."""
from __future__ import annotations

import math

import numpy as np
import pytest

from privcube.domain import Domain
from privcube.errors import ConfigError, MemoryLimitError
from privcube.mechanisms import get_mechanism
from privcube.oracle import ArrayOracle
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.workload import parse_workload

DOM = Domain.from_mapping({"a": 3, "b": 4, "c": 5})
WL = parse_workload([{"kway": 2, "queries": {"a": "prefix", "default": "identity"}},
                     {"attributes": ["b", "c"], "queries": "affine"}, {"kway": 0}], DOM)
REC = np.column_stack([np.random.default_rng(0).integers(0, s, 400) for s in DOM.shape])
ORACLE = ArrayOracle(DOM, REC)
# a joint query over non-adjacent attributes forces one merged block (a, b, c)
WL_JOINT = parse_workload([{"attributes": ["a", "c"], "queries": "abs-diff"}, {"attributes": ["b"]}], DOM)


def _truth(group):
    marg = ORACLE.marginals([group.attributes])[group.attributes]
    return group.matrix(DOM) @ np.asarray(marg, dtype=float).reshape(-1)


@pytest.mark.parametrize("optimizer", ["auto", "kron", "plus", "marginals", "opt0"])
@pytest.mark.parametrize("budget", [PrivacyBudget.pure_epsilon(1.0), PrivacyBudget.from_epsilon_delta(1.0, 1e-6)],
                         ids=["laplace", "gaussian"])
def test_run_shapes_ledger_and_plan(optimizer, budget):
    mech = get_mechanism("hdmm")({"optimizer": optimizer, "restarts": 1})
    plan = mech.plan(WL, budget)
    assert plan.privacy["noise"] == ("laplace" if budget.pure else "gaussian")
    assert len(plan.groups) == len(WL.groups) and plan.rmse > 0
    ledger = PrivacyLedger(budget)
    res = mech.run(ORACLE, WL, budget, ledger, NoiseSource(3))
    (charge,) = ledger.charges
    assert charge["rho"] == pytest.approx(budget.rho)
    for ans in res.answers:
        assert ans.estimate.shape == ans.variance.shape == (ans.group.num_queries(DOM),)
    # per-group plan rmse equals sqrt(mean variance) reported with the answers
    for g, ans in zip(plan.groups, res.answers):
        assert g["rmse"] == pytest.approx(math.sqrt(float(np.mean(ans.variance))), rel=1e-9)


@pytest.mark.parametrize("name,params,budget", [
    ("hdmm", {"optimizer": "kron"}, PrivacyBudget.pure_epsilon(2.0)),
    ("hdmm", {"optimizer": "marginals"}, PrivacyBudget.from_rho(1.0)),
    ("hdmm", {"optimizer": "plus"}, PrivacyBudget.from_rho(1.0)),
    ("eigen-design", {}, PrivacyBudget.from_rho(1.0)),
    ("hdmm", {"optimizer": "auto", "workload": "joint"}, PrivacyBudget.pure_epsilon(1.0)),
])
def test_monte_carlo_unbiased_and_variance(name, params, budget):
    params = dict(params)
    wl = WL_JOINT if params.pop("workload", None) == "joint" else WL
    mech = get_mechanism(name)(params)
    trials = 400
    est = {i: [] for i in range(len(wl.groups))}
    for t in range(trials):
        res = mech.run(ORACLE, wl, budget, PrivacyLedger(budget), NoiseSource(1000 + t))
        for i, ans in enumerate(res.answers):
            est[i].append(ans.estimate)
    for i, ans in enumerate(res.answers):
        e = np.array(est[i])
        truth = _truth(ans.group)
        se = np.sqrt(ans.variance / trials)
        z = (e.mean(axis=0) - truth) / se
        assert np.max(np.abs(z)) < 5.0  # unbiased
        # total variance of the group within Monte-Carlo error (chi-square with many dof)
        emp = float(((e - truth) ** 2).sum(axis=1).mean())
        assert emp == pytest.approx(float(ans.variance.sum()), rel=0.2)


def test_memory_guard_and_param_errors():
    big = Domain.from_mapping({"x": 1000, "y": 1000})
    wl = parse_workload([{"attributes": ["x", "y"]}], big)
    with pytest.raises(MemoryLimitError, match="max_cells"):
        get_mechanism("hdmm")({"max_cells": 1000}).run(ArrayOracle(big, np.zeros((1, 2), int)), wl,
                                                       PrivacyBudget.pure_epsilon(1.0), None, NoiseSource(0))
    with pytest.raises(ConfigError, match="optimizer"):
        get_mechanism("hdmm")({"optimizer": "magic"})
    with pytest.raises(ConfigError, match="restarts"):
        get_mechanism("hdmm")({"restarts": 0})
    with pytest.raises(ConfigError, match="unknown parameter"):
        get_mechanism("hdmm")({"bogus": 1})


def test_analytic_calibration_plan_matches_paper_sigma():
    mech = get_mechanism("hdmm")({"calibration": "analytic", "optimizer": "kron"})
    _, var, sigma = mech.unit_scale(PrivacyBudget.from_epsilon_delta(1.0, 1e-6))
    assert sigma == pytest.approx(4.224679, abs=1e-5)


def test_analytic_calibration_run_charges_epsilon_delta_once():
    budget = PrivacyBudget.from_epsilon_delta(1.0, 1e-6)
    mech = get_mechanism("hdmm")({"calibration": "analytic", "optimizer": "kron", "noise": "gaussian"})
    ledger = PrivacyLedger(budget)
    res = mech.run(ORACLE, WL, budget, ledger, NoiseSource(4))
    assert ledger.spent["epsilon"] == 1.0 and ledger.spent["delta"] == 1e-6
    assert len(ledger.charges) == 1 and len(res.answers) == len(WL.groups)


def test_total_only_and_unused_attributes():
    budget = PrivacyBudget.pure_epsilon(1.0)
    wl = parse_workload([{"kway": 0}], DOM)
    res = get_mechanism("hdmm")().run(ORACLE, wl, budget, PrivacyLedger(budget), NoiseSource(0))
    assert res.answers[0].estimate.shape == (1,)
    assert res.answers[0].variance[0] == pytest.approx(2.0)  # Laplace b = 1/ε on the single count
    wl = parse_workload([{"attributes": ["c"], "queries": "prefix"}], DOM)
    plan = get_mechanism("hdmm")().plan(wl, budget)
    assert plan.details["cells"] == 5  # the data vector covers only the workload's attribute


def test_linalg_support_check():
    from privcube.linalg import Explicit, supports

    w = Explicit(np.eye(4))
    assert supports(w, Explicit(np.vstack([np.eye(4), np.ones((1, 4))])))
    assert not supports(w, Explicit(np.ones((1, 4))))
    assert supports(Explicit(np.ones((1, 4))), Explicit(np.ones((1, 4))))
