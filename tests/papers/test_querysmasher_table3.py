"""QuerySmasher paper Table 3 (2-way affine / abs-diff on CPS, Adult, Loans at privacy cost 1) and the
factored (low-rank) solver that handles its large pair parts (up to 101 × 51 = 5151 cells).

Workload (the authors' experiment code; digest §2 "Table 3 fallback"): 1-way prefix on numeric /
identity on categorical attributes, and on every pair the joint type when (d_i − 1)(d_j − 1) ≤ 5000,
else the Kronecker hybrid prefix/identity. The paper's #Queries and WFF column pin this definition
down: both are reproduced exactly here. The paper's QS column comes from a loose log-barrier L-BFGS
(μ = 0.1, ftol = 1e-3; digest §5.1); our solver is exact with a duality-gap certificate, so our QS is
below the printed value (the issue's bound is "at most 0.5 % above").
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
from privcube.mechanisms.querysmasher import solvers
from privcube.mechanisms.querysmasher.decomposition import projected
from privcube.mechanisms.querysmasher.mechanism import QuerySmasher
from papers_data.querysmasher_workloads import table3_workload
from privcube.mechanisms.querysmasher.solvers import centering, dual_value, solve, solve_lowrank
from privcube.core.oracle import ArrayOracle
from privcube.privacy.budget import PrivacyBudget
from privcube.core.query_types import QueryType
from privcube.core.workload import parse_workload
from mechanism_fakes import RecordingLedger, RngNoise, ZeroNoise

COST1 = PrivacyBudget(0.5, 1.0, 1e-9)  # privacy cost β = 1 ⇔ ρ = 0.5

# paper Table 3, printed: (#Queries, WFF, QS)
TABLE3 = {
    ("CPS", "affine"): (805, 7.147, 5.935), ("CPS", "abs-diff"): (731, 7.387, 5.900),
    ("Adult", "affine"): (99_830, 21.559, 16.435), ("Adult", "abs-diff"): (99_200, 21.587, 16.254),
    ("Loans", "affine"): (66_318, 18.671, 14.305), ("Loans", "abs-diff"): (65_682, 18.714, 14.330),
}


@pytest.mark.parametrize("name,query", list(TABLE3))
def test_table3_counts(name: str, query: str) -> None:
    """#Queries of every Table 3 cell (they fix the 1-way types and the r > 5000 fallback pairs)."""
    wl = table3_workload(name, query)
    assert sum(g.num_queries(wl.domain) for g in wl) == TABLE3[(name, query)][0]


def _check_qs_cell(name: str, query: str) -> None:
    count, _, printed = TABLE3[(name, query)]
    plan = QuerySmasher().plan(table3_workload(name, query), COST1)
    d = plan.details
    assert d["num_queries"] == count
    assert plan.rmse <= printed * 1.005  # the bound; ours is exact, hence lower (see module doc)
    # certificate: every part's duality gap, and the assembled dual bound on the whole plan
    assert d["max_duality_gap"] < 1e-4
    assert d["weighted_sse_lower_bound"] <= d["weighted_sse"] <= d["weighted_sse_lower_bound"] * (1 + 2e-4)
    assert d["weighted_sse"] == pytest.approx(d["weighted_sse_closed_form"], rel=1e-9)
    assert plan.privacy["rho"] <= 0.5 * (1 + 1e-12)
    assert "lowrank" in d["methods"]  # the large pair parts went through the factored solver


@pytest.mark.slow
@pytest.mark.parametrize("name,query", list(TABLE3))
def test_table3_qs(name: str, query: str) -> None:
    """QS column of Table 3: at most 0.5% above the printed value, with a certified optimum (every part's
    duality gap < 1e-4). Ours is 9-19% below the printed QS: the paper's solver is not exact (module doc),
    while the WFF column and #Queries of the same workload match the paper exactly."""
    _check_qs_cell(name, query)


@pytest.mark.parametrize("name,query", [k if k[0] == "CPS" else pytest.param(*k, marks=pytest.mark.slow)
                                         for k in TABLE3])
def test_table3_wff(name: str, query: str) -> None:
    """WFF column of Table 3 (exact in the paper): the Fourier solver on the same workload, within 0.5%."""
    plan = QuerySmasher({"solver": "fourier"}).plan(table3_workload(name, query), COST1)
    assert plan.rmse == pytest.approx(TABLE3[(name, query)][1], rel=0.005)


def _pair_rows(query: str, d1: int, d2: int) -> np.ndarray:
    return np.asarray(projected(QueryType(query), (d1, d2), (True, True)))


@pytest.mark.parametrize("query", ["affine", "abs-diff"])
def test_lowrank_matches_dense_newton(query: str) -> None:
    """The active-set factored solver equals the full dense dual Newton (independent path) on a 2-D
    part, and its factored strategy is feasible at cost 1 with the reported error and certificate."""
    d1, d2 = 12, 15
    rows = _pair_rows(query, d1, d2)
    g = rows.T @ rows
    lr = solve_lowrank(rows, tol=1e-7)
    nt = solve(g, (d1, d2), "newton", tol=1e-7)
    assert lr.L == pytest.approx(nt.L, rel=1e-5)
    assert lr.vpinv is None and lr.b.shape[0] < lr.b.shape[1]  # factored: B is r × c
    v = lr.b.T @ lr.b
    assert np.max(np.diag(v)) == pytest.approx(1.0, rel=1e-9)  # privacy cost 1
    primal = float(np.sum(g * np.linalg.pinv(v, rcond=1e-10, hermitian=True)))  # tr(G V⁺) from V itself
    assert primal == pytest.approx(lr.L, rel=1e-6)
    dual = dual_value(g, lr.info["lam"])  # the dual bound recomputed from λ alone
    assert dual <= primal * (1 + 1e-7) and abs(primal - dual) / primal < 1e-6  # 1e-7: pinv round-off
    # dominance over the RP-equivalent and WFF strategies (digest §11.7)
    assert lr.L <= ((d1 - 1) / d1) * ((d2 - 1) / d2) * np.trace(g) * (1 + 1e-9)
    assert lr.L <= solve(g, (d1, d2), "fourier").L * (1 + 1e-9)


@pytest.mark.slow
def test_lowrank_cps_big_part_certified() -> None:
    """The CPS 50 × 100 affine pair (5000 cells, rank 147): solved factored, certificate < 1e-6,
    recomputed from λ and from the factored V⁺ (no 5000 × 5000 matrix)."""
    rows = _pair_rows("affine", 50, 100)
    sol = solve_lowrank(rows, tol=1e-6)
    assert sol.b.shape == (sol.info["rank"], 5000)
    assert sol.gap < 1e-6
    assert sol.trace_rows(rows) == pytest.approx(sol.L, rel=1e-8)
    assert np.max(np.sum(sol.b**2, axis=0)) == pytest.approx(1.0, rel=1e-9)  # max diag BᵀB = 1
    f = rows.T  # dual bound (tr √(FᵀΛF))² from λ, in r × r form
    lam = sol.info["lam"]
    w = np.linalg.eigvalsh(f.T @ (lam[:, None] * f) / lam.sum())
    dual = float(np.sqrt(np.clip(w, 0, None)).sum() ** 2)
    assert dual <= sol.L * (1 + 1e-12) and (sol.L - dual) / sol.L < 1e-6


def test_parts_above_dense_limit_are_solved() -> None:
    """Parts above ``dense_limit`` are solved in factored form (no ConfigError), with the same plan."""
    dom = Domain(("a", "b", "c"), (12, 15, 4))
    wl = parse_workload([{"kway": 1, "queries": "prefix"}, {"kway": 2, "queries": "affine"}], dom)
    ref = QuerySmasher().plan(wl, COST1)
    big = QuerySmasher({"dense_limit": 50}).plan(wl, COST1)  # 12×15 = 180 cells > 50
    assert "lowrank" in big.details["methods"]
    assert big.rmse == pytest.approx(ref.rmse, rel=2e-5)
    assert big.details["max_duality_gap"] < 1e-4


def test_part_too_big_for_memory_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A part that has no thin factor and whose dense solve would not fit raises a clear ConfigError."""
    dom = Domain(("a", "b"), (10, 10))
    wl = parse_workload([{"attributes": ["a", "b"], "queries": {"type": "random", "seed": 1}}], dom)
    monkeypatch.setattr(solvers, "_available_memory", lambda: 1e6)
    with pytest.raises(ConfigError, match=r"\['a', 'b'\].*100 cells.*GB"):
        QuerySmasher({"dense_limit": 50}).plan(wl, COST1)
    thin = parse_workload([{"attributes": ["a", "b"], "queries": "affine"}], dom)  # 19 rows ≤ 100/3
    monkeypatch.setattr(solvers, "_available_memory", lambda: 1e3)
    with pytest.raises(ConfigError, match=r"\['a', 'b'\].*100 cells.*factored form"):
        QuerySmasher({"dense_limit": 50}).plan(thin, COST1)


def test_factored_parts_reconstruct_and_variance() -> None:
    """Runs with factored parts: noiseless answers are exact; empirical variance matches the report."""
    dom = Domain(("a", "b", "c"), (7, 9, 3))
    rng = np.random.default_rng(2)
    oracle = ArrayOracle(dom, np.stack([rng.integers(0, n, 300) for n in dom.shape], axis=1))
    wl = parse_workload([{"kway": 1, "queries": "prefix"}, {"attributes": ["a", "b"], "queries": "affine"},
                         {"attributes": ["b", "c"], "queries": "abs-diff"}], dom)
    mech = QuerySmasher({"dense_limit": 20, "solver": "lowrank"})
    truth = oracle.marginals([g.attributes for g in wl])
    res = mech.run(oracle, wl, COST1, RecordingLedger(), ZeroNoise())
    assert "lowrank" in res.report["methods"]
    for ans in res.answers:
        expect = ans.group.matrix(dom) @ truth[ans.group.attributes].reshape(-1)
        np.testing.assert_allclose(ans.estimate, expect, atol=1e-7)
    noise, reps = RngNoise(4), 600
    sq = [0.0] * len(wl)
    for _ in range(reps):
        ledger = RecordingLedger()
        res = mech.run(oracle, wl, COST1, ledger, noise)
        assert ledger.rho <= 0.5 * (1 + 1e-12)
        for i, ans in enumerate(res.answers):
            sq[i] += float(np.sum((ans.estimate - ans.group.matrix(dom) @ truth[ans.group.attributes].reshape(-1)) ** 2))
    for i, ans in enumerate(res.answers):
        # correlated errors: 12% is > 4 standard errors for 600 draws
        assert sq[i] / reps == pytest.approx(float(ans.variance.sum()), rel=0.12), ans.group.label()


def test_fourier_fft_matches_dense_dft() -> None:
    """The FFT-based WFF solver equals the dense-DFT definition V = Fᴴ diag(s) F / c (App. C)."""
    from privcube.core.query_types import joint_matrix

    shape = (6, 7)
    w = joint_matrix(QueryType("abs-diff"), *shape)
    c = centering(shape)
    g = c @ w.T @ w @ c
    sol = solve(g, shape, "fourier")
    f = np.ones((1, 1), dtype=complex)
    for d in shape:
        k = np.arange(d)
        f = np.kron(f, np.exp(-2j * np.pi * np.outer(k, k) / d))
    n = math.prod(shape)
    gk = np.real(np.einsum("ki,ij,kj->k", f, g, f.conj())) / n
    gk = np.where(gk > 1e-12 * gk.max(), gk, 0)
    assert sol.L == pytest.approx(np.sqrt(gk).sum() ** 2 / n, rel=1e-10)
    s = n * np.sqrt(gk) / np.sqrt(gk).sum()
    vp = np.real(f.conj().T @ (np.where(s > 0, 1 / np.where(s > 0, s, 1), 0)[:, None] * f)) / n
    np.testing.assert_allclose(sol.vpinv, vp, atol=1e-10)
    np.testing.assert_allclose(sol.b @ sol.b, np.real(f.conj().T @ (s[:, None] * f)) / n, atol=1e-10)


@pytest.mark.parametrize("query", ["affine", "abs-diff"])
def test_lowrank_matches_clarabel_sdp(query: str) -> None:
    """The factored solver agrees with the SDP solved by cvxpy/Clarabel (an independent solver)."""
    d1, d2 = 4, 6
    rows = _pair_rows(query, d1, d2)
    lr = solve_lowrank(rows, tol=1e-7)
    sd = solve(rows.T @ rows, (d1, d2), "sdp")
    assert lr.L == pytest.approx(sd.L, rel=1e-4)
    assert lr.L <= sd.L * (1 + 1e-6)
