"""HDMM and Eigen-Design mechanisms end to end: plan/run shapes, ledger, Monte-Carlo unbiasedness and variance."""
from __future__ import annotations

import math

import numpy as np
import pytest

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError, MemoryLimitError
from privcube.mechanisms import get_mechanism
from privcube.core.oracle import ArrayOracle
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.core.workload import parse_workload

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


# ---------------------------------------------------------------- privcube plan / run, ledger, errors
def _job(tmp_path, mechanism: dict, privacy: dict, workload: list | None = None):
    """A small Parquet dataset and a job file (threads cluster) for the CLI."""
    import json

    import pandas as pd
    import yaml

    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    frame = pd.DataFrame(REC, columns=list(DOM.attributes))
    frame.to_parquet(data / "part.parquet", index=False)
    (tmp_path / "domain.json").write_text(json.dumps(dict(zip(DOM.attributes, DOM.shape))))
    cfg = {"data": {"path": "data", "domain": "domain.json"}, "mechanism": mechanism, "privacy": privacy,
           "workload": workload or [{"kway": 2, "queries": {"a": "prefix", "default": "identity"}}, {"kway": 0}],
           "cluster": {"type": "threads"}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


CLI_CASES = [  # mechanism section, privacy section, expected (noise, calibration) and the ledger's charge
    ({"name": "hdmm", "restarts": 1}, {"epsilon": 1.0}, ("laplace", "laplace"), {"epsilon": 1.0}),
    ({"name": "hdmm", "restarts": 1, "noise": "laplace"}, {"rho": 0.5}, ("laplace", "laplace"), {"rho": 0.5}),
    ({"name": "hdmm", "restarts": 1, "noise": "gaussian"}, {"epsilon": 1.0, "delta": 1e-6}, ("gaussian", "zcdp"), None),
    ({"name": "hdmm", "restarts": 1, "noise": "gaussian", "calibration": "analytic"}, {"epsilon": 1.0, "delta": 1e-6},
     ("gaussian", "analytic"), {"epsilon": 1.0, "delta": 1e-6}),
    ({"name": "eigen-design", "noise": "laplace"}, {"epsilon": 0.5}, ("laplace", "laplace"), {"epsilon": 0.5}),
    ({"name": "eigen-design", "calibration": "analytic"}, {"epsilon": 1.0, "delta": 1e-6}, ("gaussian", "analytic"),
     {"epsilon": 1.0, "delta": 1e-6}),
]


@pytest.mark.parametrize("mechanism,privacy,expected,charge", CLI_CASES,
                         ids=["hdmm-pure", "hdmm-laplace-rho", "hdmm-gauss-zcdp", "hdmm-gauss-analytic",
                              "eigen-laplace", "eigen-analytic"])
def test_cli_plan_and_run_accept_noise_and_calibration(tmp_path, capsys, mechanism, privacy, expected, charge):
    import json

    import pandas as pd

    from privcube.cli import main

    cfg = _job(tmp_path, mechanism, privacy)
    assert main(["plan", str(cfg), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["mechanism"] == mechanism["name"]
    assert (plan["privacy"]["noise"], plan["privacy"]["calibration"]) == expected
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--seed", "3", "--quiet"]) == 0
    ledger = json.loads((out / "ledger.json").read_text())
    (entry,) = ledger["charges"]                                    # one release, one charge
    for key in ("rho", "epsilon", "delta"):                        # never past the budget
        if ledger["budget"].get(key) is not None and ledger["spent"].get(key) is not None:
            assert ledger["spent"][key] <= ledger["budget"][key] * (1 + 1e-12)
    if charge is not None:
        assert {k: entry[k] for k in charge} == pytest.approx(charge)
    else:
        assert entry["rho"] == pytest.approx(ledger["budget"]["rho"])
    index = json.loads((out / "answers" / "index.json").read_text())["groups"]
    assert len(index) == 4                                          # three 2-way groups and the total
    total = next(g for g in index if g["rows"] == 1)
    t = pd.read_parquet(out / "answers" / total["file"])
    # the noisy total is near the true 400 records: within 6 reported standard deviations
    assert abs(float(t["estimate"].iloc[0]) - len(REC)) <= 6 * math.sqrt(float(t["variance"].iloc[0]))


@pytest.mark.parametrize("mechanism,privacy,needle", [
    ({"name": "hdmm", "noise": "poisson"}, {"epsilon": 1.0}, "noise"),
    ({"name": "hdmm", "calibration": "renyi"}, {"epsilon": 1.0, "delta": 1e-6}, "calibration"),
    ({"name": "hdmm", "calibration": "analytic", "noise": "gaussian"}, {"epsilon": 1.0}, "analytic"),
    ({"name": "hdmm", "restarts": 0}, {"epsilon": 1.0}, "restarts"),
    ({"name": "hdmm", "restarts": "many"}, {"epsilon": 1.0}, "restarts"),
    ({"name": "hdmm", "optimizer": "opt1"}, {"epsilon": 1.0}, "optimizer"),
    ({"name": "eigen-design", "variant": "fast"}, {"epsilon": 1.0}, "variant"),
    ({"name": "eigen-design", "max_cells": 10}, {"epsilon": 1.0}, "max_cells"),
    ({"name": "eigen-design", "restarts": 3}, {"epsilon": 1.0}, "restarts"),
])
def test_cli_bad_mechanism_config_is_one_line(tmp_path, capsys, mechanism, privacy, needle):
    from privcube.cli import main

    cfg = _job(tmp_path, mechanism, privacy)
    for argv in (["plan", str(cfg)], ["run", str(cfg), "--out", str(tmp_path / "run"), "--quiet"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("privcube: error:") and needle in err, err
        assert not (tmp_path / "run").exists()                     # nothing partial written


@pytest.mark.parametrize("name,params", [("hdmm", {"optimizer": "kron"}), ("eigen-design", {})])
def test_release_refused_when_the_ledger_cannot_pay(name, params):
    """The charge precedes the release: a ledger with too little budget refuses, no measurement is taken."""
    from privcube.core.errors import BudgetError

    budget = PrivacyBudget.pure_epsilon(1.0)
    ledger = PrivacyLedger(PrivacyBudget.pure_epsilon(0.5))

    class Spy(ArrayOracle):
        calls = 0

        def marginals(self, cliques):
            Spy.calls += 1
            return super().marginals(cliques)

    with pytest.raises(BudgetError):
        get_mechanism(name)(params).run(Spy(DOM, REC), WL, budget, ledger, NoiseSource(0))
    assert Spy.calls == 0 and ledger.charges == [] and ledger.spent["epsilon"] == 0
    # the same budget twice: the second run is refused, the spent total stays at the budget
    ledger = PrivacyLedger(budget)
    get_mechanism(name)(params).run(ORACLE, WL, budget, ledger, NoiseSource(1))
    with pytest.raises(BudgetError):
        get_mechanism(name)(params).run(ORACLE, WL, budget, ledger, NoiseSource(2))
    assert ledger.spent["epsilon"] == pytest.approx(1.0) and len(ledger.charges) == 1


class _LazyOracle(ArrayOracle):
    """An oracle that also hands marginals as lazy chunked dask arrays (as a cluster oracle would)."""

    def __init__(self, domain, records):
        super().__init__(domain, records)
        self.lazy_calls = 0

    def marginal_dask(self, clique):
        import dask.array as da

        self.lazy_calls += 1
        mu = np.asarray(self.marginals([tuple(clique)])[tuple(clique)], dtype=float)
        return da.from_array(mu, chunks=(1,) + mu.shape[1:])


@pytest.mark.parametrize("optimizer", ["kron", "plus", "marginals"])
def test_large_data_vector_released_as_a_chunked_task_graph(optimizer):
    """Above chunk_cells, A x + noise is one dask graph over the chunked exact vector, noise per 16-row block;
    y equals the dense A (built here from the strategy's parts) times x plus those keyed noise blocks."""
    from functools import reduce

    import privcube.graphs.release as gh
    from privcube.graphs.execution import run_context
    from privcube.linalg.marginals import MarginalsStrategy
    from privcube.mechanisms.hdmm.strategy import KronStrategy, MarginalStrategy, UnionStrategy

    budget = PrivacyBudget.pure_epsilon(1.0)
    oracle = _LazyOracle(DOM, REC)
    mech = get_mechanism("hdmm")({"optimizer": optimizer, "restarts": 1, "chunk_cells": 10})
    old, gh.RELEASE_BLOCK = gh.RELEASE_BLOCK, 16
    try:
        res = mech.run(oracle, WL, budget, PrivacyLedger(budget), NoiseSource(5), run_context())
    finally:
        gh.RELEASE_BLOCK = old
    assert oracle.lazy_calls == 1
    y = res.tensors["hdmm.measurements"]
    iw, strat, _, kind = mech._cached_select(WL, budget)
    if isinstance(strat, KronStrategy):
        a = reduce(np.kron, strat.factors)
    elif isinstance(strat, UnionStrategy):
        a = np.vstack([c * reduce(np.kron, b.factors) for c, b in zip(strat.weights, strat.blocks)])
    else:
        assert isinstance(strat, MarginalStrategy)
        a = MarginalsStrategy(strat.shape, strat.theta).dense()
    x = np.asarray(ORACLE.marginals([iw.attributes])[iw.attributes], dtype=float).reshape(-1)
    scale = np.abs(a).sum(axis=0).max() / 1.0                      # Laplace b = Δ₁/ε
    src = NoiseSource(5)
    noise = np.concatenate([src.laplace(("hdmm", "measure", "block", i), min(16, len(y) - 16 * i), scale)
                            for i in range(-(-len(y) // 16))])
    assert y.shape == (a.shape[0],) and np.allclose(y, a @ x + noise, rtol=1e-10, atol=1e-8)
    assert len(res.answers) == len(WL.groups)


def test_data_oracle_takes_the_chunked_release_path():
    """The engine's DataOracle offers marginal_dask (exact counts, counted lazily in one pass), so a real run
    above chunk_cells releases through the chunked graph: same y as the lazy test oracle, same keyed noise."""
    import dask.dataframe as dd
    import pandas as pd

    from privcube.graphs.execution import run_context
    from privcube.graphs.marginals import DataOracle

    frame = dd.from_pandas(pd.DataFrame(REC, columns=list(DOM.attributes)), npartitions=3)
    data = DataOracle(frame, DOM)
    lazy = data.marginal_dask(("a", "c"))
    np.testing.assert_array_equal(lazy.compute(), ORACLE.marginals([("a", "c")])[("a", "c")])
    budget = PrivacyBudget.pure_epsilon(1.0)
    params = {"optimizer": "kron", "restarts": 1, "chunk_cells": 10}
    got = get_mechanism("hdmm")(params).run(data, WL, budget, PrivacyLedger(budget), NoiseSource(5), run_context())
    ref = get_mechanism("hdmm")(params).run(_LazyOracle(DOM, REC), WL, budget, PrivacyLedger(budget), NoiseSource(5),
                                            run_context())
    np.testing.assert_allclose(got.tensors["hdmm.measurements"], ref.tensors["hdmm.measurements"], rtol=1e-12)
    assert data.n_passes == 0  # no dense exact marginal was computed in this process


@pytest.mark.parametrize("name", ["hdmm", "eigen-design"])
@pytest.mark.parametrize("calibration", ["zcdp", "analytic"])
def test_gaussian_noise_refuses_a_pure_epsilon_budget(name, calibration):
    """privacy: {epsilon} alone asks for pure ε-DP; Gaussian noise cannot give it (it would spend ρ = ε²/2
    and report δ = 0): plan and run refuse before any charge, naming the budget and the way out."""
    mech = get_mechanism(name)({"noise": "gaussian", "calibration": calibration})
    budget = PrivacyBudget.pure_epsilon(1.0)
    with pytest.raises(ConfigError, match=r"gaussian.*pure epsilon-DP.*delta"):
        mech.plan(WL, budget)
    ledger = PrivacyLedger(budget)
    with pytest.raises(ConfigError, match=r"gaussian.*pure epsilon-DP"):
        mech.run(ORACLE, WL, budget, ledger, NoiseSource(3))
    assert ledger.charges == []
    # the same budget with Laplace noise runs and spends exactly ε
    lap = get_mechanism(name)({"noise": "laplace"})
    lap.run(ORACLE, WL, budget, ledger, NoiseSource(3))
    (charge,) = ledger.charges
    assert charge["epsilon"] == 1.0 and charge["delta"] == 0.0


def test_cli_plan_refuses_gaussian_with_pure_epsilon(tmp_path):
    """Through the CLI: one line naming the problem, exit code 2, nothing written."""
    import subprocess
    import sys

    cfg = tmp_path / "job.yaml"
    cfg.write_text("domain: {a: 4, b: 3}\nmechanism: {name: hdmm, noise: gaussian}\nworkload: [{kway: 2}]\n"
                   "privacy: {epsilon: 1}\n")
    r = subprocess.run([sys.executable, "-m", "privcube", "plan", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "pure epsilon-DP" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]
