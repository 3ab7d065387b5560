"""AIM+GReM user-level audit (issue 5): budgets outside (ε, δ) / ρ, memory limits of cluster workers,
self-describing residual outputs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
from privcube.mechanisms.aim_grem.mechanism import AIMGReM
from privcube.core.oracle import ArrayOracle
from privcube.privacy.budget import PrivacyBudget
from privcube.privacy.ledger import PrivacyLedger
from privcube.privacy.noise import NoiseSource
from privcube.core.workload import Workload

DOM = Domain(("a", "b", "c"), (3, 4, 2))


class _CountingOracle(ArrayOracle):
    calls = 0

    def marginals(self, cliques):  # noqa: ANN001, ANN201
        type(self).calls += 1
        return super().marginals(cliques)


def _records(n: int = 500, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(0, s, n) for s in DOM.shape], 1)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privcube", *args], capture_output=True, text=True, timeout=300)


def _job(tmp_path: Path, **over) -> Path:
    data = tmp_path / "data.parquet"
    pd.DataFrame(_records(), columns=list(DOM.attributes)).to_parquet(data, index=False)
    cfg = {"data": {"path": str(data)}, "domain": dict(zip(DOM.attributes, DOM.shape)),
           "mechanism": {"name": "aim-grem"}, "workload": [{"kway": 2}],
           "privacy": {"epsilon": 1.0, "delta": 1e-9}, "cluster": {"type": "threads"}}
    cfg.update(over)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_pure_epsilon_budget_is_refused_before_reading_data():
    """Gaussian measurements cannot be pure ε-DP: {epsilon} alone must not be spent as ρ = ε²/2."""
    oracle = _CountingOracle(DOM, _records())
    budget = PrivacyBudget.pure_epsilon(1.0)
    ledger = PrivacyLedger(budget)
    _CountingOracle.calls = 0
    with pytest.raises(ConfigError, match=r"privacy\.delta"):
        AIMGReM().run(oracle, Workload.kway(DOM, 2), budget, ledger, NoiseSource(0))
    assert _CountingOracle.calls == 0 and ledger.spent_rho == 0.0 and ledger.charges == []


def test_pure_epsilon_budget_cli_error_writes_nothing(tmp_path):
    cfg = _job(tmp_path, privacy={"epsilon": 1.0})
    out = tmp_path / "run"
    r = cli("run", str(cfg), "--out", str(out), "--seed", "1", "--quiet")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "privacy.delta" in lines[0] and "pure" in lines[0]
    assert not out.exists()
    # the same job with a delta runs and spends at most its budget
    ok = _job(tmp_path, privacy={"epsilon": 1.0, "delta": 1e-9})
    r = cli("run", str(ok), "--out", str(out), "--seed", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["budget"]["delta"] == 1e-9 and ledger["spent"]["rho"] <= ledger["budget"]["rho"]


class _FakeClient:
    """Just enough of a dask Client for the memory check: the workers' memory limits."""

    def __init__(self, limits):
        self.limits = limits

    def scheduler_info(self, n_workers=-1):  # noqa: ANN001, ANN201
        return {"workers": {f"tcp://127.0.0.1:{i}": {"memory_limit": m} for i, m in enumerate(self.limits)}}


def test_marginal_over_the_smallest_worker_memory_limit_is_refused():
    from privcube.core.errors import MemoryLimitError
    from privcube.graphs.execution import run_context

    dom = Domain(("a", "b"), (400, 500))  # the 2-way marginal: 200,000 cells, 1.6 MB in float64
    oracle = _CountingOracle(dom, np.zeros((10, 2), dtype=int))
    budget = PrivacyBudget.from_rho(0.1)
    ledger = PrivacyLedger(budget)
    _CountingOracle.calls = 0
    with pytest.raises(MemoryLimitError, match=r"\['a', 'b'\].*1600000 bytes.*workers' memory limit \(1000000 bytes"):
        AIMGReM().run(oracle, Workload.kway(dom, 2), budget, ledger, NoiseSource(0),
                      run_context(_FakeClient([4_000_000, 1_000_000])))
    assert _CountingOracle.calls == 0 and ledger.charges == []
    # workers with room (or reporting no limit) do not block the run
    prob = AIMGReM().problem(dom, Workload.kway(dom, 2), run_context(_FakeClient([2_000_000, 0])).worker_memory())
    assert ("a", "b") in prob.closure


def test_marginal_over_local_cluster_worker_limit_cli_error_writes_nothing(tmp_path):
    """A 2-worker LocalCluster with 200 MB per worker and a 400 MB marginal: one clear line, exit 2, no
    output folder (before the fix: workers restarted four times, then a CommClosedError traceback)."""
    data = tmp_path / "data.parquet"
    pd.DataFrame({"a": [0, 1, 2], "b": [3, 4, 5]}).to_parquet(data, index=False)
    cfg = tmp_path / "job.yaml"
    cfg.write_text(yaml.safe_dump({
        "data": {"path": str(data)}, "domain": {"a": 10000, "b": 5000},
        "mechanism": {"name": "aim-grem"}, "workload": [{"kway": 2}],
        "privacy": {"epsilon": 1.0, "delta": 1e-9},
        "cluster": {"type": "local", "n_workers": 2, "threads_per_worker": 1, "memory_limit": "200MB"}}))
    out = tmp_path / "run"
    r = cli("run", str(cfg), "--out", str(out), "--seed", "1", "--quiet")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "['a', 'b']" in lines[0] and "memory limit" in lines[0], r.stderr
    assert not out.exists()


def test_residual_estimates_and_precisions_are_labelled_in_the_store(tmp_path):
    """Each store.zarr residual array names its residual τ and precision λ_τ; with a huge budget the
    1-way residuals equal the data's level-j-minus-level-0 count differences (computed here with pandas)."""
    import zarr

    cfg = _job(tmp_path, privacy={"rho": 1.0e8})
    out = tmp_path / "run"
    r = cli("run", str(cfg), "--out", str(out), "--seed", "3", "--quiet")
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())["mechanism_report"]
    group = zarr.open_group(str(out / "store.zarr"), mode="r")
    prec = group["aim_grem.precision"]
    assert prec.attrs["kind"] == "precision" and prec.attrs["residuals"] == report["residuals"]
    frame = pd.DataFrame(_records(), columns=list(DOM.attributes))
    seen = set()
    for i, tau in enumerate(report["residuals"]):
        arr = group[f"aim_grem.residual.{i:05d}"]
        assert arr.attrs["kind"] == "residual" and arr.attrs["attributes"] == tau
        assert arr.attrs["precision"] == prec[i]
        assert arr.shape == tuple(DOM[a] - 1 for a in tau)
        seen.add(tuple(tau))
        if len(tau) == 1:
            (a,) = tau
            counts = frame[a].value_counts().reindex(range(DOM[a]), fill_value=0).to_numpy()
            assert arr.attrs["precision"] > 1e6
            np.testing.assert_allclose(arr[...], counts[1:] - counts[0], atol=0.05)
    assert {("a",), ("b",), ("c",), ()} <= seen


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 3.0])
def test_exact_sum_of_charges_never_exceeds_the_budget(epsilon):
    """ledger total ≤ budget in exact arithmetic (exact sum of ledger.json's charges), not only up to float
    accumulation: the last round spends the exact rest. Before the fix 7 of these 18 runs overshot by an ulp."""
    import math
    from fractions import Fraction

    dom = Domain(("a", "b", "c", "d"), (3, 4, 2, 5))
    rng = np.random.default_rng(0)
    records = np.stack([rng.integers(0, s, 300) for s in dom.shape], 1)
    for seed in range(6):
        budget = PrivacyBudget.from_epsilon_delta(epsilon, 1e-9)
        ledger = PrivacyLedger(budget)
        AIMGReM().run(ArrayOracle(dom, records), Workload.kway(dom, 3), budget, ledger, NoiseSource(seed))
        rhos = [c["rho"] for c in ledger.to_dict()["charges"]]
        total = sum(map(Fraction, rhos))  # exact
        assert total <= Fraction(budget.rho), (seed, float(total - Fraction(budget.rho)))
        assert Fraction(budget.rho) - total <= Fraction(4 * math.ulp(budget.rho))  # and nothing is left unspent


@pytest.mark.parametrize(("epsilon", "rho"), [(0.3, None), (3.0, None), (10.0, None), (None, 0.5)])
def test_spending_the_whole_budget_reads_as_at_most_its_epsilon(epsilon, rho):
    """A run that spends exactly its ρ reported 'spent epsilon 3.000000000000105' of a budget of 3 (the
    ρ → ε conversion rounds up by its bisection tolerance); the reading never exceeds the budget's ε."""
    budget = PrivacyBudget.from_rho(rho, 1e-9) if rho else PrivacyBudget.from_epsilon_delta(epsilon, 1e-9)
    ledger = PrivacyLedger(budget)
    ledger.charge("first half", rho=budget.rho / 2)
    half = ledger.spent["epsilon"]
    assert 0 < half < budget.epsilon
    ledger.charge("second half", rho=budget.rho - budget.rho / 2)
    assert ledger.spent["rho"] == budget.rho
    assert ledger.spent["epsilon"] <= budget.epsilon
    if epsilon is not None:
        assert ledger.spent["epsilon"] == epsilon


def test_cli_ledger_spent_epsilon_within_budget(tmp_path):
    cfg = _job(tmp_path, privacy={"epsilon": 3.0, "delta": 1e-9})
    out = tmp_path / "run"
    r = cli("run", str(cfg), "--out", str(out), "--seed", "2", "--quiet")
    assert r.returncode == 0, r.stderr
    led = json.loads((out / "ledger.json").read_text())
    assert led["spent"]["epsilon"] <= 3.0 and led["spent"]["delta"] == 1e-9
    assert "epsilon=3 " in r.stdout


def test_finished_run_is_refused_with_the_way_out_named(tmp_path):
    cfg = _job(tmp_path)
    out = tmp_path / "run"
    assert cli("run", str(cfg), "--out", str(out), "--seed", "4", "--quiet").returncode == 0
    before = (out / "ledger.json").read_bytes()
    for extra in ([], ["--resume"]):
        r = cli("run", str(cfg), "--out", str(out), "--seed", "4", "--quiet", *extra)
        assert r.returncode == 2 and "finished run" in r.stderr and "--overwrite" in r.stderr, r.stderr
        assert (out / "ledger.json").read_bytes() == before
    r = cli("run", str(cfg), "--out", str(tmp_path / "never"), "--seed", "4", "--resume", "--quiet")
    assert r.returncode == 2 and "without --resume" in r.stderr, r.stderr
    assert not (tmp_path / "never").exists()


def test_last_round_rest_is_exact_and_quick_when_it_is_tiny():
    """A rest far below an ulp of the budget, with an excess of the float rest over the exact one: the
    correction is computed, not stepped ulp by ulp (2**38 steps here), and the exact total stays ≤ budget."""
    import time
    from fractions import Fraction
    from types import SimpleNamespace

    from privcube.mechanisms.aim_grem.mechanism import _rest

    a, b = 1.0 - 2.0**-40, 2.0**-54  # fsum(a, b) rounds to a: the float rest 2**-40 overshoots by 2**-54
    ledger = SimpleNamespace(charges=[{"rho": a}, {"rho": b}])
    exact = lambda xs: sum(map(Fraction, xs))  # noqa: E731
    assert exact([a, b, 1.0 - a]) > 1  # the naive rest would overspend
    t0 = time.perf_counter()
    rest = _rest(1.0, ledger)
    assert time.perf_counter() - t0 < 1.0
    assert 0 < rest < 1.0 - a
    assert exact([a, b, rest]) <= 1
    assert 1 - exact([a, b, rest]) <= Fraction(2.0**-90)  # and all but an ulp of the rest is spent


def test_epsilon_reading_is_not_clamped_when_charges_exceed_the_budget_exactly():
    """The clamp to the budget's ε needs the exact sum of charges ≤ ρ; an excess hidden by float rounding
    (here 2**-80) keeps the honest, larger reading."""
    budget = PrivacyBudget.from_epsilon_delta(10.0, 1e-9)
    ledger = PrivacyLedger(budget)
    ledger.charge("all", rho=budget.rho)
    assert ledger.spent["epsilon"] == 10.0
    ledger.charge("a hair more", rho=2.0**-80)  # within the ledger's float tolerance, and rounds away in ρ
    assert ledger.spent["rho"] == budget.rho
    assert ledger.spent["epsilon"] > 10.0
