"""The empirical privacy audit (issue 37): its statistics, the CLI, the real mechanisms passing, and the
deliberately broken variants (tests/support/audit_broken.py) caught: their lower bound on ε exceeds what their ledger
claims."""
from __future__ import annotations

import math
import subprocess
import sys
import time

import numpy as np
import pytest
from scipy.stats import binom

from audit_broken import BROKEN
from privcube.audit.runner import Case, Outcome, format_table, run_case
from privcube.audit.cases import NAMES, select, suite
from privcube.audit.bounds import audit_bound, clopper_pearson_upper, epsilon_lower_bound


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privcube", *args], capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------------------------------- statistics
@pytest.mark.parametrize("k, n", [(0, 10), (3, 50), (17, 1000), (999, 1000)])
def test_clopper_pearson_upper_is_the_binomial_tail_inversion(k: int, n: int) -> None:
    alpha = 0.025
    ub = clopper_pearson_upper(k, n, alpha)
    assert binom.cdf(k, n, ub) == pytest.approx(alpha, rel=1e-6)  # P(X <= k | p = ub) = alpha
    assert ub > k / n
    assert clopper_pearson_upper(n, n, alpha) == 1.0
    assert clopper_pearson_upper(0, n, alpha) == pytest.approx(1 - alpha ** (1 / n), rel=1e-9)


def test_epsilon_lower_bound_formula() -> None:
    u = 1 - 0.025 ** (1 / 1000)  # no error among 1000 held-out outputs of either dataset, 95 % confidence
    assert epsilon_lower_bound(0, 1000, 0, 1000, 0.01, 0.95) == pytest.approx(math.log((1 - 0.01 - u) / u))
    # a test no better than chance bounds nothing
    assert epsilon_lower_bound(500, 1000, 500, 1000, 0.0, 0.95) == 0.0
    # the symmetric counterpart: few false negatives, many false positives
    fp, fn = 600, 5
    a = clopper_pearson_upper(fp, 1000, 0.025)
    b = clopper_pearson_upper(fn, 1000, 0.025)
    assert epsilon_lower_bound(fp, 1000, fn, 1000, 0.0, 0.95) == pytest.approx(math.log((1 - a) / b))


def _randomized_response(eps: float, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Outputs of ε-DP randomized response on a bit 0 (D) and 1 (D'): the bit kept with e^ε/(1+e^ε)."""
    keep = math.exp(eps) / (1 + math.exp(eps))
    x0 = (rng.random(n) >= keep).astype(float)
    x1 = (rng.random(n) < keep).astype(float)
    return x0[:, None], x1[:, None]


def test_bound_is_valid_and_tight_on_a_mechanism_with_known_epsilon() -> None:
    """Randomized response is exactly ε-DP (its best test reaches ε): the 95 % bound stays at or below ε in
    at least 95 % of repetitions, and with many trials it comes close to ε."""
    rng = np.random.default_rng(12)
    eps = 1.5
    over = 0
    for _ in range(200):
        x0, x1 = _randomized_response(eps, 2000, rng)
        b = audit_bound(x0[:1000], x1[:1000], x0[1000:], x1[1000:], 0.0, 0.95)
        over += b.epsilon > eps
    assert over <= 10, over
    x0, x1 = _randomized_response(eps, 200_000, rng)
    b = audit_bound(x0[:100_000], x1[:100_000], x0[100_000:], x1[100_000:], 0.0, 0.95)
    assert 0.95 * eps < b.epsilon <= eps


def test_linear_discriminant_finds_a_shift_spread_over_features() -> None:
    """Gaussian outputs whose mean moves a little in each of 8 coordinates: no single coordinate tells the
    datasets apart, the discriminant (the likelihood-ratio statistic here) does."""
    rng = np.random.default_rng(3)
    shift = np.full(8, 0.5)  # total separation ‖shift‖ = √2
    x0 = rng.normal(size=(4000, 8))
    x1 = rng.normal(size=(4000, 8)) + shift
    b = audit_bound(x0[:2000], x1[:2000], x0[2000:], x1[2000:], 0.0, 0.95)
    assert b.statistic == "linear discriminant"
    single = audit_bound(x0[:2000, :1], x1[:2000, :1], x0[2000:, :1], x1[2000:, :1], 0.0, 0.95)
    assert b.epsilon > single.epsilon + 0.5


# --------------------------------------------------------------------------------------------- the suite
def test_suite_covers_every_mechanism_and_noise() -> None:
    rows = {(c.mechanism, c.noise_kind) for c in suite()}
    assert {("residual-planner", "gaussian"), ("residual-planner", "discrete-gaussian"), ("querysmasher", "gaussian"),
            ("hdmm", "gaussian"), ("hdmm", "laplace"), ("eigen-design", "gaussian"), ("eigen-design", "laplace"),
            ("aim-grem", "gaussian"), ("aim-grem", "discrete-gaussian"), ("relational", "gaussian"),
            ("relational", "discrete-gaussian"),
            ("residual-planner + postprocess + synthesize", "gaussian")} <= rows
    assert {c.mechanism for c in select(suite(), ["pipeline"])} == {"residual-planner + postprocess + synthesize"}
    assert all({"fast", "all"} <= set(c.trials) for c in suite())
    assert {c.key for c in suite() if c.fast_suite} == {"rp", "rp-discrete", "rp-unit", "hdmm-laplace",
                                                        "aim-selection", "pipeline"}
    assert set(NAMES) == {"residual-planner", "querysmasher", "hdmm", "eigen-design", "aim-grem", "relational",
                          "pipeline"}


def test_trials_draw_different_noise_and_claims_come_from_the_ledger() -> None:
    case = next(c for c in suite() if c.key == "rp")
    outs = [case.run(case.first, case.noise(e)) for e in (1, 2, 1)]
    assert not np.allclose(outs[0].features, outs[1].features)  # another seed, other noise
    assert np.array_equal(outs[0].features, outs[2].features)  # the same seed repeats
    from privcube.privacy.zcdp import cdp_epsilon

    assert outs[0].claim == pytest.approx(cdp_epsilon(0.5, 0.01), rel=1e-9)  # ρ 0.5 read at δ 0.01


def test_audit_fast_cli_every_bound_within_its_claim() -> None:
    t0 = time.perf_counter()
    r = cli("audit", "--fast", timeout=600)
    elapsed = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].split()[:6] == ["mechanism", "noise", "claimed", "ε", "lower", "bound"]
    rows = [ln for ln in lines[1:] if ln.strip()]
    fast = [c for c in suite() if c.fast_suite]
    assert len(rows) == len(fast)
    for ln in rows:
        assert " pass " in ln and "FAIL" not in ln
    print(f"privcube audit --fast: {elapsed:.0f} s")
    assert elapsed < 240  # about 1 min on 2 shared cores; the issue asks for at most 2 min at rest


def test_audit_json_and_mechanism_filter() -> None:
    import json

    r = cli("audit", "--mechanism", "hdmm", "--json", "--quiet")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["mechanism"], x["noise"]) for x in rows] == [("hdmm", "gaussian"), ("hdmm", "laplace")]
    gauss, laplace = rows
    assert laplace["lower_bound"] <= laplace["claimed_epsilon"] == 1.0 and laplace["delta"] == 0
    assert gauss["lower_bound"] <= gauss["claimed_epsilon"] and gauss["delta"] == 0.01
    for x in rows:
        assert x["verdict"] == "pass" and x["confidence"] == 0.95
        assert x["errors"]["held_out_first"] == x["errors"]["held_out_second"] == x["trials"] // 2


def test_audit_named_mechanism_runs_all_its_cases_with_fast_trials() -> None:
    r = cli("audit", "--mechanism", "eigen-design", "--quiet")
    assert r.returncode == 0, r.stderr
    rows = r.stdout.strip().splitlines()[1:]
    assert len(rows) == 2 and {ln.split()[1] for ln in rows} == {"gaussian", "laplace"}
    assert all(ln.split()[7] == "1000" for ln in rows)


def test_audit_cli_refuses_unknown_mechanism_in_one_line() -> None:
    r = cli("audit", "--mechanism", "mst")
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "'mst'" in lines[0] and "residual-planner" in lines[0]
    r = cli("audit", "--fast", "--all")
    assert r.returncode == 2


def test_audit_exits_1_when_a_bound_exceeds_its_claim(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    """A mechanism that releases its input bit as it is, while its ledger claims ε = 1: the CLI prints FAIL
    and exits 1."""
    from privcube import cli as cli_module
    from privcube.audit import cases as audit_cases

    leak = Case("leak", "leaky", "none", "add/remove one record", 0.0,
                lambda data, noise: Outcome(np.array([float(data)]), 1.0), lambda e: None, 0, [("one", 1)],
                {"fast": 50, "all": 50}, fast_suite=True)
    monkeypatch.setattr(audit_cases, "suite", lambda: [leak])
    monkeypatch.setattr(audit_cases, "select", lambda cases, names: list(cases))
    assert cli_module.main(["audit", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "leaky" in out


# ------------------------------------------------------------------------------------- broken variants
@pytest.mark.parametrize("broken", BROKEN, ids=[b.name for b in BROKEN])
def test_broken_variant_is_caught(broken) -> None:  # noqa: ANN001
    case = broken.case()
    with broken.patch():
        row = run_case(case, trials=broken.trials)
    print(format_table([row]))
    assert row.lower_bound > row.claim, (broken.what, row.lower_bound, row.claim)


@pytest.mark.slow
def test_audit_all_cli() -> None:
    """Every case with the --all trials (about 9 min on 2 shared cores at load 5-6)."""
    t0 = time.perf_counter()
    r = cli("audit", "--all", timeout=1800)
    print(r.stdout)
    print(f"privcube audit --all: {time.perf_counter() - t0:.0f} s")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [ln for ln in r.stdout.strip().splitlines()[1:] if ln.strip()]
    assert len(rows) == len(suite()) and all(" pass " in ln for ln in rows)
    assert time.perf_counter() - t0 < 1800
