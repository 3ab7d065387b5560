"""`noise_sampler: discrete` is accepted only where it is private, and accounted by what is proven for it.

* Mechanisms releasing real-valued strategy answers (QuerySmasher B x, HDMM/Eigen-Design A x) refuse it
  before any data is read: integer noise on a real query keeps the query's fractional part.
* ResidualPlanner charges each residual as the sensitivity-1 integer marginal the discrete noise is
  added to (p_τ = 1): the smaller continuous coefficient p_τ = ∏(n−1)/n relies on the projection of
  Gaussian noise being Gaussian, which does not hold on the integer lattice.
* AIM+GReM measures each selected marginal whole (IID) and refuses an explicit ``measure: crp``.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from privcube import api
from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
from privcube.mechanisms.aim_grem.mechanism import AIMGReM
from privcube.mechanisms.residual_planner import ResidualPlanner, p_coefficient
from privcube.core.oracle import ArrayOracle
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.discrete import DiscreteNoiseSource
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.core.workload import Workload

DOM = Domain(("a", "b", "c"), (3, 4, 2))


def _data(tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(3)
    n = 2000
    pd.DataFrame({"a": rng.integers(0, 3, n), "b": rng.integers(0, 4, n), "c": rng.integers(0, 2, n)}).to_parquet(
        tmp_path / "d.parquet", index=False)


@pytest.mark.parametrize("mech", ["querysmasher", "hdmm", "eigen-design"])
def test_real_valued_strategies_refuse_discrete_noise(tmp_path, mech: str) -> None:
    """plan and run refuse before reading data; the run directory is never created."""
    cfg = {"data": {"path": "missing.parquet", "domain": DOM.to_dict()}, "mechanism": {"name": mech},
           "workload": [{"kway": 2}], "privacy": {"epsilon": 1.0, "delta": 1e-6}, "noise_sampler": "discrete"}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match=rf"noise_sampler: discrete.*{mech}.*real-valued"):
        api.plan(path)
    with pytest.raises(ConfigError, match="noise_sampler: discrete"):
        api.run(path, tmp_path / "out", seed=1, quiet=True)  # data path does not even exist: not read
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mech", ["querysmasher", "hdmm", "eigen-design"])
def test_real_valued_run_refuses_a_discrete_source_before_charging(mech: str) -> None:
    """Through the Python API too: no charge, no measurement."""
    from privcube.mechanisms import get_mechanism

    oracle = ArrayOracle(DOM, np.zeros((5, 3), dtype=int))
    budget = PrivacyBudget.from_rho(0.5)
    ledger = PrivacyLedger(budget)
    with pytest.raises(ConfigError, match="real-valued"):
        get_mechanism(mech)().run(oracle, Workload.kway(DOM, 2), budget, ledger, DiscreteNoiseSource(seed=1))
    assert ledger.spent_rho == 0.0


def test_residual_planner_discrete_charges_full_marginal_per_residual() -> None:
    """The discrete plan spends exactly ρ under p_τ = 1; the continuous plan would overspend under it."""
    wl = Workload.kway(DOM, 2)
    budget = PrivacyBudget.from_rho(0.5)
    cont, disc = ResidualPlanner(), ResidualPlanner()
    disc.use_noise_sampler("discrete")
    pc, pd_ = cont.optimize(wl, budget), disc.optimize(wl, budget)
    lattice_cost = lambda plan: sum(1.0 / s for t, s in plan.sigma2.items() if p_coefficient(DOM, t) > 0)  # noqa: E731
    assert pd_.privacy_cost() == pytest.approx(1.0, rel=1e-9)  # β = 2ρ, by the plan's own (lattice) accounting
    assert lattice_cost(pd_) == pytest.approx(1.0, rel=1e-9)
    assert lattice_cost(pc) > 1.1  # the continuous σ's are too small for the lattice bound
    assert disc.plan(wl, budget).rmse > cont.plan(wl, budget).rmse  # the price of exact noise
    assert p_coefficient(DOM, ("a", "b"), lattice=True) == 1.0 and p_coefficient(DOM, (), lattice=True) == 1.0


def test_residual_planner_run_with_discrete_noise_is_integer_before_decomposition() -> None:
    """Run with the discrete source: the ledger spends ρ, answers are finite, noise keys are the residuals."""
    rng = np.random.default_rng(1)
    oracle = ArrayOracle(DOM, np.stack([rng.integers(0, n, 500) for n in DOM.shape], axis=1))
    wl = Workload.kway(DOM, 2)
    budget = PrivacyBudget.from_rho(0.5)
    ledger = PrivacyLedger(budget)
    mech = ResidualPlanner()
    res = mech.run(oracle, wl, budget, ledger, DiscreteNoiseSource(seed=2))
    assert mech.noise_sampler == "discrete"
    assert ledger.spent_rho == pytest.approx(0.5, rel=1e-9) and ledger.spent_rho <= 0.5
    assert all(np.all(np.isfinite(a.estimate)) for a in res.answers)


def test_aim_grem_discrete_measures_whole_marginals_and_refuses_explicit_crp() -> None:
    rng = np.random.default_rng(4)
    oracle = ArrayOracle(DOM, np.stack([rng.integers(0, n, 800) for n in DOM.shape], axis=1))
    wl = Workload.kway(DOM, 2)
    budget = PrivacyBudget.from_rho(0.2)
    with pytest.raises(ConfigError, match="measure: crp"):
        AIMGReM({"measure": "crp"}).use_noise_sampler("discrete")
    ledger = PrivacyLedger(budget)
    res = AIMGReM().run(oracle, wl, budget, ledger, DiscreteNoiseSource(seed=3))
    trace = res.report["trace"]
    assert res.report["measure"] == "iid" and trace and all(r["method"] == "iid" for r in trace[:-1])
    assert trace[-1]["method"] == "final-spread"  # whole τ-marginals, accounted 1/(2σ²) each
    assert ledger.spent_rho <= 0.2 * (1 + 1e-12) and ledger.spent_rho == pytest.approx(0.2, rel=1e-9)
    cont = AIMGReM().run(oracle, wl, budget, PrivacyLedger(budget), NoiseSource(seed=3))
    assert cont.report["measure"] == "crp"


def test_discrete_through_cli_config_for_aim_and_rp(tmp_path) -> None:
    """`noise_sampler: discrete` in the job file: RP plan is accounted with p_τ = 1; AIM records iid."""
    _data(tmp_path)
    for mech, extra in (("residual-planner", {}), ("aim-grem", {})):
        cfg = {"data": {"path": "d.parquet", "domain": DOM.to_dict()}, "mechanism": {"name": mech, **extra},
               "workload": [{"kway": 2}], "privacy": {"rho": 0.3}, "noise_sampler": "discrete"}
        (tmp_path / f"{mech}.yaml").write_text(yaml.safe_dump(cfg))
        out = api.run(tmp_path / f"{mech}.yaml", tmp_path / mech, seed=7, quiet=True).out_dir
        ledger = json.loads((out / "ledger.json").read_text())
        assert ledger["noise"]["sampler"] == "discrete" and ledger["spent"]["rho"] <= 0.3 * (1 + 1e-12)
    report = json.loads((tmp_path / "aim-grem" / "report.json").read_text())
    assert report["mechanism_report"]["measure"] == "iid"
    plan = api.plan(tmp_path / "residual-planner.yaml")
    cont_cfg = yaml.safe_load((tmp_path / "residual-planner.yaml").read_text())
    cont_cfg["noise_sampler"] = "continuous"
    (tmp_path / "cont.yaml").write_text(yaml.safe_dump(cont_cfg))
    assert plan.rmse > api.plan(tmp_path / "cont.yaml").rmse
    bad = {"data": {"path": "d.parquet", "domain": DOM.to_dict()}, "mechanism": {"name": "aim-grem", "measure": "crp"},
           "workload": [{"kway": 2}], "privacy": {"rho": 0.3}, "noise_sampler": "discrete"}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match="measure: crp"):
        api.run(tmp_path / "bad.yaml", tmp_path / "bad", seed=1, quiet=True)
    assert not (tmp_path / "bad").exists()


def test_a_forwarding_view_of_a_discrete_source_is_recognised() -> None:
    """Relational stage 1 wraps the source in a key-prefixing view: RP must still account for the lattice."""
    from privcube.relational.stages.composition import PrefixNoise as _PrefixNoise
    from privcube.privacy.discrete import is_discrete

    assert is_discrete(_PrefixNoise(DiscreteNoiseSource(seed=1), ("t",)))
    assert not is_discrete(_PrefixNoise(NoiseSource(seed=1), ("t",))) and not is_discrete(NoiseSource(seed=1))
    rng = np.random.default_rng(0)
    oracle = ArrayOracle(DOM, np.stack([rng.integers(0, n, 300) for n in DOM.shape], axis=1))
    mech = ResidualPlanner()
    mech.run(oracle, Workload.kway(DOM, 2), PrivacyBudget.from_rho(0.5), PrivacyLedger(PrivacyBudget.from_rho(0.5)),
             _PrefixNoise(DiscreteNoiseSource(seed=2), ("table", "users")))
    assert mech.noise_sampler == "discrete"
