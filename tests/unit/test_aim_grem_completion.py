"""AIM+GReM without zero-fill: unmeasured residuals are completed from the measured ones (max entropy)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from privcube.core.domain import Domain
from privcube.mechanisms.aim_grem import strategy
from privcube.mechanisms.aim_grem.completion import LocalCompletion, global_values, marginal
from privcube.mechanisms.aim_grem.grem import GReMState, LocalMarginals
from privcube.mechanisms.aim_grem.mechanism import AIMGReM
from privcube.mechanisms.aim_grem.selection import downward_closure
from privcube.mechanisms.residual_planner import ResidualPlanner
from privcube.core.oracle import ArrayOracle
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.core.residuals import decomp
from privcube.core.workload import Workload

DOM = Domain(("a", "b", "c"), (2, 3, 2))
TINY = 1e-12  # a noiseless measurement: variance ~0


def _state(cliques, truth=None, completion=True):
    closure = downward_closure(cliques, DOM.attributes)
    table = LocalMarginals(DOM, [c for c in closure if c], truth)
    grem = GReMState(DOM, closure, table)
    if completion:
        grem.use_completion(LocalCompletion(DOM, grem.residuals))
    return grem


def _measure_exact(grem, joint, taus):
    """Combine exact residuals of the marginals on ``taus`` (and everything below them)."""
    done = set()
    for tau in taus:
        for k in range(len(tau) + 1):
            for t in itertools.combinations(tau, k):
                if t in done or t not in grem.z:
                    continue
                done.add(t)
                mu = joint.sum(axis=tuple(i for i, a in enumerate(DOM.attributes) if a not in t))
                grem.combine(t, decomp(mu, t, t), TINY)
    grem.flush()


def _chain_joint():
    """Counts of a chain a → b → c (c depends on a only through b), as expected values."""
    pa = np.array([0.3, 0.7])
    pb_a = np.array([[0.6, 0.3, 0.1], [0.1, 0.3, 0.6]])
    pc_b = np.array([[0.9, 0.1], [0.5, 0.5], [0.2, 0.8]])
    return 1000.0 * pa[:, None, None] * pb_a[:, :, None] * pc_b[None, :, :]


def test_chain_completion_is_conditional_independence():
    joint = _chain_joint()
    grem = _state([("a", "b", "c")])
    _measure_exact(grem, joint, [("a", "b"), ("b", "c")])
    assert grem.lam[("a", "c")] == 0 and grem.lam[("a", "b", "c")] == 0  # never measured
    vals = global_values(DOM.attributes, grem.z, grem.lam, DOM, [("a", "c"), ("a", "b", "c")], iters=200)
    grem.set_completed(vals)
    # the max-entropy model of a chain is p(ab) p(bc) / p(b): here the truth itself
    assert np.allclose(grem.estimate(("a", "b", "c")), joint, atol=1e-6)
    assert np.allclose(grem.estimate(("a", "c")), joint.sum(axis=1), atol=1e-6)
    # zero-fill would not: its a-c marginal is the additive no-interaction model
    zero = _state([("a", "b", "c")], completion=False)
    _measure_exact(zero, joint, [("a", "b"), ("b", "c")])
    assert np.abs(zero.estimate(("a", "c")) - joint.sum(axis=1)).sum() > 50


def test_local_completion_recovers_pairwise_model_and_is_consistent():
    rng = np.random.default_rng(3)
    theta = {p: rng.normal(size=(DOM[p[0]], DOM[p[1]])) for p in [("a", "b"), ("b", "c"), ("a", "c")]}
    logp = theta[("a", "b")][:, :, None] + theta[("b", "c")][None] + theta[("a", "c")][:, None, :]
    joint = 500.0 * np.exp(logp) / np.exp(logp).sum()  # a model with no 3-way interaction
    grem = _state([("a", "b", "c")])
    _measure_exact(grem, joint, [("a", "b"), ("b", "c"), ("a", "c")])
    abc = ("a", "b", "c")
    assert grem.lam[abc] == 0
    assert np.abs(grem.completion.value[abc]).sum() > 1e-3  # no longer zero
    assert np.allclose(grem.estimate(abc), joint, atol=1e-4)  # the table holds the completed estimate
    # consistency: the completed 3-way agrees with the 2-way estimates it contains
    assert np.allclose(grem.estimate(abc).sum(axis=2), grem.estimate(("a", "b")), atol=1e-9)


def test_selection_scores_use_completed_estimates():
    rng = np.random.default_rng(4)
    theta = {p: rng.normal(size=(DOM[p[0]], DOM[p[1]])) for p in [("a", "b"), ("b", "c"), ("a", "c")]}
    logp = theta[("a", "b")][:, :, None] + theta[("b", "c")][None] + theta[("a", "c")][:, None, :]
    joint = 800.0 * np.exp(logp) / np.exp(logp).sum()
    closure = downward_closure([("a", "b", "c")], DOM.attributes)
    truth = {c: joint.sum(axis=tuple(i for i, a in enumerate(DOM.attributes) if a not in c)) for c in closure if c}
    errs = {}
    for comp in (True, False):
        grem = _state([("a", "b", "c")], truth=truth, completion=comp)
        _measure_exact(grem, joint, [("a", "b"), ("b", "c"), ("a", "c")])
        errs[comp] = grem.table.l1_errors([("a", "b", "c")])[0]  # what the exponential mechanism scores
    assert errs[True] < 1e-3 < errs[False]


def _records(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    dom = Domain(("a", "b", "c", "d"), (3, 2, 4, 2))
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 2
    c = (2 * b + rng.integers(0, 2, n)) % 4
    d = (c + rng.integers(0, 2, n)) % 2
    return dom, np.stack([a, b, c, d], 1)


def _run(params, seed=7, rho=0.05):
    dom, rec = _records()
    budget = PrivacyBudget.from_rho(rho)
    ledger = PrivacyLedger(budget)
    res = AIMGReM(params).run(ArrayOracle(dom, rec), Workload.kway(dom, 3), budget, ledger, NoiseSource(seed))
    return res, ledger, budget


def test_budget_never_exceeded_and_report_names_completion():
    res, ledger, budget = _run({})
    assert ledger.spent_rho <= budget.rho * (1 + 1e-12)
    assert ledger.spent_rho == pytest.approx(budget.rho, rel=1e-9)
    comp = res.report["completion"]
    assert comp["method"] == "maxent" and comp["global"] is not None  # 48 cells: the global pass runs
    assert "completed" in res.report["variance_note"]


def test_seeded_run_is_reproducible_and_differs_from_zero_fill():
    r1, _, _ = _run({}, seed=11)
    r2, _, _ = _run({}, seed=11)
    for x, y in zip(r1.answers, r2.answers):
        assert np.array_equal(x.estimate, y.estimate)
    assert r1.report["trace"] == r2.report["trace"]
    z, _, _ = _run({"completion": "zero"}, seed=11)
    assert any(not np.allclose(x.estimate, y.estimate) for x, y in zip(r1.answers, z.answers))


def test_local_only_completion_without_global_pass():
    res, ledger, budget = _run({"completion_max_cells": 0})
    assert res.report["completion"]["global"] is None
    assert ledger.spent_rho <= budget.rho * (1 + 1e-12)


def test_measure_all_is_residual_planner_and_spends_the_budget_once():
    dom, rec = _records()
    budget = PrivacyBudget.from_rho(0.05)
    w = Workload.kway(dom, 3)
    led = PrivacyLedger(budget)
    res = AIMGReM({"strategy": "measure-all"}).run(ArrayOracle(dom, rec), w, budget, led, NoiseSource(3))
    led_rp = PrivacyLedger(budget)
    rp = ResidualPlanner().run(ArrayOracle(dom, rec), w, budget, led_rp, NoiseSource(3))
    for x, y in zip(res.answers, rp.answers):
        assert np.array_equal(x.estimate, y.estimate)
    assert led.spent_rho <= budget.rho * (1 + 1e-12)
    assert res.report["strategy"]["chosen"] == "measure-all"


def test_measure_all_test_uses_public_quantities_and_is_monotone():
    dom = Domain(tuple("abcdef"), (2,) * 6)
    w = Workload.kway(dom, 3)
    lo = strategy.measure_all_test(w, 0.001, 1000.0, threshold=0.05)
    hi = strategy.measure_all_test(w, 1.0, 1000.0, threshold=0.05)
    assert hi["measure_all_expected_error"] < lo["measure_all_expected_error"]
    assert lo["suggestion"] == "adaptive" and hi["suggestion"] == "measure-all"
    # doubling the (public) total halves the relative error
    big = strategy.measure_all_test(w, 0.001, 2000.0, threshold=0.05)
    assert big["measure_all_expected_error"] == pytest.approx(lo["measure_all_expected_error"] / 2, rel=1e-12)


def test_auto_suggest_reports_and_stays_adaptive():
    res, _, _ = _run({"strategy": "auto-suggest", "measure_all_threshold": 1e9})
    s = res.report["strategy"]
    assert s["chosen"] == "adaptive" and s["suggestion"] == "measure-all" and "advice" in s
    assert res.report["rounds"] >= 1


@pytest.mark.parametrize("bad", [{"completion": "ipf"}, {"strategy": "always"}, {"measure_all_threshold": 0},
                                 {"anneal_on": "truth"}, {"selection_on": "truth"},
                                 {"selection_threshold": -1}])
def test_bad_parameters_are_refused(bad):
    from privcube.core.errors import ConfigError

    with pytest.raises(ConfigError, match=next(iter(bad))):
        AIMGReM(bad)


def test_marginal_helper_sums_residual_components():
    joint = _chain_joint()
    z = {t: decomp(joint.sum(axis=tuple(i for i, a in enumerate(DOM.attributes) if a not in t)), t, t)
         for k in range(4) for t in itertools.combinations(DOM.attributes, k)}
    assert np.allclose(marginal(("a", "b", "c"), z, DOM), joint)


def test_selection_on_measured_completes_at_release_only():
    res, ledger, budget = _run({"selection_on": "measured", "completion_max_cells": 0})
    paper, _, _ = _run({"completion": "zero"})
    assert res.report["trace"] == paper.report["trace"]  # the loop is the paper's
    assert "at release only" in res.report["completion"]["local"]
    assert any(not np.allclose(x.estimate, y.estimate) for x, y in zip(res.answers, paper.answers))
    assert ledger.spent_rho <= budget.rho * (1 + 1e-12)


@pytest.mark.parametrize("mode", [{"selection_on": "completed"},
                                  {"selection_on": "auto", "selection_threshold": 1e-12},  # auto -> completed
                                  {"selection_on": "auto", "selection_threshold": 1e12}])  # auto -> measured
@pytest.mark.parametrize("max_log", [0, 1000])  # a snapshot every round / only the first base and a log
def test_resume_with_completion_equals_uninterrupted(tmp_path, mode, max_log):
    from privcube.core.context import RunContext
    from privcube.storage.checkpoint import RunCheckpoint

    dom, rec = _records()
    budget = PrivacyBudget.from_rho(0.05)
    w = Workload.kway(dom, 3)

    def run(params, ctx=None):
        led = PrivacyLedger(budget)
        return AIMGReM({**mode, **params}).run(ArrayOracle(dom, rec), w, budget, led, NoiseSource(5), ctx), led

    full, full_led = run({})
    want = "measured" if mode.get("selection_threshold", 0) > 1 else "completed"
    assert full.report["completion"]["selection_on"] == want
    k = full.report["rounds"] // 2
    assert k >= 1
    store = tmp_path / "store.zarr"
    run({"max_rounds": k}, RunContext(checkpoint=RunCheckpoint(store, identity={"s": 5}, max_log=max_log)))
    res, led = run({}, RunContext(checkpoint=RunCheckpoint(store, identity={"s": 5}, max_log=max_log), resume=True))
    assert res.report["trace"] == full.report["trace"]
    assert led.charges == full_led.charges
    for a, b in zip(res.answers, full.answers):
        assert np.array_equal(a.estimate, b.estimate)


@pytest.mark.parametrize("update", ["lazy", "full"])
def test_completion_on_the_distributed_table_matches_local(update):
    """Completed residuals travel to the sharded table as ordinary residual deltas: same answers."""
    distributed = pytest.importorskip("distributed")
    from privcube.graphs.execution import run_context

    dom, rec = _records()
    budget = PrivacyBudget.from_rho(0.05)
    w = Workload.kway(dom, 3)
    params = {"selection_on": "completed", "update": update}
    local = AIMGReM(params).run(ArrayOracle(dom, rec), w, budget, PrivacyLedger(budget), NoiseSource(2))
    with distributed.Client(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=None) as c:
        dist = AIMGReM({**params, "distribute_min_cells": 1}).run(
            ArrayOracle(dom, rec), w, budget, PrivacyLedger(budget), NoiseSource(2), run_context(c))
    assert dist.report["trace"] == local.report["trace"]
    for a, b in zip(dist.answers, local.answers):
        assert np.allclose(a.estimate, b.estimate, rtol=1e-9, atol=1e-9)


def test_axes_view_marginals_and_scaling_equal_numpys():
    """The full-domain IPF's fast marginal / scale equal numpy's multi-axis sum (to round-off) and broadcast
    multiply (exactly), for random shapes and axis subsets (leading, middle and trailing summed blocks)."""
    from privcube.mechanisms.aim_grem.completion import AxesView

    rng = np.random.default_rng(7)
    for _ in range(200):
        nd = int(rng.integers(1, 9))
        shape = tuple(int(n) for n in rng.integers(1, 5, size=nd))
        axes = tuple(sorted(rng.choice(nd, size=int(rng.integers(1, nd + 1)), replace=False).tolist()))
        q = rng.random(shape)
        view = AxesView(shape, axes)
        want = q.sum(axis=tuple(i for i in range(nd) if i not in axes))
        got = view.marginal(q)
        assert got.shape == want.shape and np.allclose(got, want, rtol=1e-12, atol=0)
        f = rng.random(want.shape)
        scaled = q.copy()
        view.scale(scaled, f)
        assert np.array_equal(scaled, q * f.reshape(tuple(shape[i] if i in axes else 1 for i in range(nd))))
