"""QuerySmasher: decomposition, solvers with certificates, paper tables, run/reconstruct/variance."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
from privcube.mechanisms import get_mechanism
from privcube.mechanisms.querysmasher.decomposition import decompose, projected
from privcube.mechanisms.querysmasher.mechanism import QuerySmasher
from privcube.mechanisms.querysmasher.solvers import centering, solve
from privcube.mechanisms.residual_planner import ResidualPlanner
from privcube.core.oracle import ArrayOracle
from privcube.privacy.budget import PrivacyBudget
from privcube.core.query_types import QueryType, attribute_matrix
from privcube.core.workload import Workload, hybrid, parse_workload
from mechanism_fakes import RecordingLedger, RngNoise, ZeroNoise

COST1 = PrivacyBudget(0.5, 1.0, 1e-9)  # privacy cost β = 1 ⇔ ρ = 0.5
ADULT = Path("/work/shared/data/adult/adult-domain.json")
ADULT_NUMERIC = ["age", "fnlwgt", "capital-gain", "capital-loss", "hours-per-week"]


def _grid(n: int, d: int = 40) -> Domain:
    return Domain(tuple(f"x{i}" for i in range(d)), (n,) * d)


def test_registry() -> None:
    assert get_mechanism("querysmasher") is QuerySmasher
    with pytest.raises(ConfigError, match="solver"):
        QuerySmasher({"solver": "magic"})


def test_worked_example_figure2() -> None:
    """Paper Figs. 1-2: q = [0,1,1,0,0,1] on A1 (2) × A2 (3); hand-derived subqueries (digest §3)."""
    qt = QueryType("explicit", (("matrix", ((0.0, 1.0, 1.0, 0.0, 0.0, 1.0),)),))
    # the explicit type is per attribute; the joint subqueries follow the same centring/averaging
    q = np.array([[0, 1, 1], [0, 0, 1]], dtype=float)
    del qt
    sub_empty = q.mean()
    sub_a1 = q.mean(axis=1) - q.mean()
    sub_a2 = q.mean(axis=0) - q.mean()
    sub_both = q - q.mean(axis=0, keepdims=True) - q.mean(axis=1, keepdims=True) + q.mean()
    np.testing.assert_allclose(sub_empty, 0.5)
    np.testing.assert_allclose(sub_a1, [1 / 6, -1 / 6])
    np.testing.assert_allclose(sub_a2, [-1 / 2, 0, 1 / 2])
    np.testing.assert_allclose(sub_both.ravel(), [-1 / 6, 1 / 3, -1 / 6, 1 / 6, -1 / 3, 1 / 6])
    # the engine's per-factor projection reproduces the same pieces for a Kronecker query
    f1 = QueryType("explicit", (("matrix", ((1.0, 0.0),)),))
    p = projected(f1, (2,), (True,))
    np.testing.assert_allclose(p, [[0.5, -0.5]])
    p0 = projected(f1, (2,), (False,))
    np.testing.assert_allclose(p0, [[0.5]])


def test_decomposition_exactness_random() -> None:
    """Σ_{𝒜'} q_{⇒𝒜'}·x_𝒜' = q·x_𝒜 for prefix⊗allrange queries on random data (noiseless run)."""
    dom = Domain(("a", "b", "c"), (3, 4, 5))
    rng = np.random.default_rng(0)
    oracle = ArrayOracle(dom, np.stack([rng.integers(0, n, 300) for n in dom.shape], axis=1))
    wl = parse_workload([{"attributes": ["a", "c"], "queries": {"a": "prefix", "c": "allrange"}},
                         {"attributes": ["b", "c"], "queries": "affine"},
                         {"attributes": ["b"], "queries": "circular", "weight": 3},
                         {"attributes": ["a", "b", "c"], "queries": {"a": "total", "default": "prefix"}}], dom)
    res = QuerySmasher().run(oracle, wl, COST1, RecordingLedger(), ZeroNoise())
    truth = oracle.marginals([g.attributes for g in wl])
    for ans in res.answers:
        expect = ans.group.matrix(dom) @ truth[ans.group.attributes].reshape(-1)
        np.testing.assert_allclose(ans.estimate, expect, atol=1e-7)
        assert ans.variance.shape == ans.estimate.shape and np.all(ans.variance > 0)


def test_solvers_agree_and_certify() -> None:
    n = 10
    c = centering((n,))
    for name in ("prefix", "allrange"):
        f = attribute_matrix(QueryType(name), n)
        g = c @ f.T @ f @ c
        s_auto = solve(g, (n,), "auto")
        s_sdp = solve(g, (n,), "sdp")
        assert s_auto.gap < 1e-4
        assert s_auto.L == pytest.approx(s_sdp.L, rel=1e-4)
        assert np.max(np.diag(s_auto.b @ s_auto.b)) == pytest.approx(1.0, rel=1e-9)  # privacy cost 1
        assert s_auto.L <= solve(g, (n,), "fourier").L * (1 + 1e-9)  # QS dominates WFF
        # RP-equivalent strategy: L_RP = (d-1)/d · tr(G) (digest §5.3) is never better
        assert s_auto.L <= (n - 1) / n * np.trace(g) * (1 + 1e-9)


@pytest.mark.parametrize("n,query,printed,exact", [
    (10, "identity", 23.48, True), (10, "prefix", 33.70, False), (10, "allrange", 41.08, False),
    (10, "circular", 39.77, True), (20, "identity", 25.70, True), (20, "prefix", 49.51, False),
    (20, "allrange", 63.32, False), (20, "circular", 63.01, True),
])
def test_table4_kronecker_rows(n: int, query: str, printed: float, exact: bool) -> None:
    """QS Table 4 ([n]^40, all 1-way + 2-way, cost 1): marginal/circular within 0.5%, others ≤ +0.5%."""
    wl = parse_workload([{"kway": 1, "queries": query}, {"kway": 2, "queries": query}], _grid(n))
    plan = QuerySmasher().plan(wl, COST1)
    if exact:
        assert plan.rmse == pytest.approx(printed, rel=0.005)
    else:
        assert plan.rmse <= printed * 1.005
    assert plan.details["max_duality_gap"] < 1e-4
    assert plan.privacy["rho"] <= 0.5 + 1e-12


def test_table4_counts() -> None:
    wl = parse_workload([{"kway": 1, "queries": "allrange"}, {"kway": 2, "queries": "allrange"}], _grid(10))
    assert QuerySmasher().plan(wl, COST1).details["num_queries"] == 2_361_700


@pytest.mark.skipif(not ADULT.exists(), reason="Adult domain file absent")
@pytest.mark.parametrize("ks,printed,count", [([1], 5.047, 588), ([2], 17.632, 148_137),
                                              ([3], 47.055, 20_894_536), ([1, 2, 3], 47.853, 21_043_261)])
def test_table2_adult_hybrid(ks: list[int], printed: float, count: int) -> None:
    """QS Table 2, Adult hybrid (categorical '=', numeric '<'): at most 0.5% above the paper's QS."""
    dom = Domain.load(ADULT)
    plan = QuerySmasher().plan(hybrid(dom, ks, ADULT_NUMERIC), COST1)
    assert plan.details["num_queries"] == count
    assert plan.rmse <= printed * 1.005
    if ks == [1]:
        assert plan.rmse == pytest.approx(printed, rel=0.005)


def test_agrees_with_residual_planner_on_marginals() -> None:
    dom = Domain(("a", "b", "c", "d"), (2, 5, 7, 3))
    wl = parse_workload([{"kway": 2, "weight": 2.0}, {"attributes": ["a", "b", "c"]}, {"kway": 1, "weight": 0.5}], dom)
    qs = QuerySmasher().plan(wl, COST1)
    rp = ResidualPlanner().plan(wl, COST1)
    assert qs.rmse == pytest.approx(rp.rmse, rel=1e-9)
    for gq, gr in zip(qs.groups, rp.groups):
        assert gq["rmse"] == pytest.approx(gr["rmse"], rel=1e-9)


@pytest.mark.skipif(not ADULT.exists(), reason="Adult domain file absent")
def test_agrees_with_residual_planner_adult_3way() -> None:
    dom = Domain.load(ADULT)
    assert QuerySmasher().plan(Workload.kway(dom, 3), COST1).rmse == pytest.approx(10.515, rel=0.005)


def test_closed_form_matches_group_sums() -> None:
    """(Σ√L)²/β equals Σ_g w_g Σ_q Var(q) computed group by group (digest §11.5)."""
    dom = Domain(("a", "b", "c"), (4, 5, 6))
    wl = parse_workload([{"kway": 2, "queries": "prefix", "weight": 2}, {"kway": 1, "queries": "allrange"},
                         {"attributes": ["a", "c"], "queries": "abs-diff"}], dom)
    plan = QuerySmasher().plan(wl, COST1)
    d = plan.details
    assert d["weighted_sse"] == pytest.approx(d["weighted_sse_closed_form"], rel=1e-9)
    assert d["weighted_sse_lower_bound"] <= d["weighted_sse"] * (1 + 1e-12)
    assert plan.privacy["rho"] == pytest.approx(0.5, rel=1e-9)


def test_monte_carlo_variance_and_ledger() -> None:
    dom = Domain(("a", "b", "c"), (3, 4, 5))
    rng = np.random.default_rng(1)
    oracle = ArrayOracle(dom, np.stack([rng.integers(0, n, 400) for n in dom.shape], axis=1))
    wl = parse_workload([{"attributes": ["a", "b"], "queries": {"a": "prefix", "b": "allrange"}},
                         {"attributes": ["b", "c"], "queries": "affine"},
                         {"attributes": ["c"], "queries": "circular"}], dom)
    truth = oracle.marginals([g.attributes for g in wl])
    noise = RngNoise(3)
    reps = 800
    sq = [None] * len(wl)
    mech = QuerySmasher()
    for _ in range(reps):
        ledger = RecordingLedger()
        res = mech.run(oracle, wl, COST1, ledger, noise)
        assert ledger.rho == pytest.approx(0.5, rel=1e-9) and ledger.rho <= 0.5 * (1 + 1e-12)
        for i, ans in enumerate(res.answers):
            err = (ans.estimate - ans.group.matrix(dom) @ truth[ans.group.attributes].reshape(-1)) ** 2
            sq[i] = err if sq[i] is None else sq[i] + err
    for i, ans in enumerate(res.answers):
        emp, rep = sq[i].sum() / reps, ans.variance.sum()
        # errors are correlated across queries; 10% is > 4 standard errors for 800 draws
        assert emp == pytest.approx(rep, rel=0.10), ans.group.label()


def test_identical_subworkloads_solved_once() -> None:
    wl = parse_workload([{"kway": 1, "queries": "prefix"}, {"kway": 2, "queries": "prefix"}], _grid(10, 12))
    sols, info = QuerySmasher().optimize(wl, COST1)
    assert info["subworkloads"] == 1 + 12 + 66
    assert info["distinct_parts"] == 1  # every subworkload is ⊗ of the same 1-D prefix block


def test_decompose_structure_mixed() -> None:
    dom = _grid(4, 4)
    wl = parse_workload([{"kway": 1, "queries": "allrange"}, {"kway": 2, "queries": "affine"},
                         {"kway": 3, "queries": "prefix"}], dom)
    subs = decompose(wl)
    assert [len(p.attrs) for p in subs[("x0", "x1", "x2")].parts] == [1, 1, 1]  # prefix ⊗ prefix ⊗ prefix
    assert [len(p.attrs) for p in subs[("x0", "x1")].parts] == [2]  # affine + prefix: one dense part


# Table 4 affine/abs rows: the paper's QS values are solver-limited (digest §10.2); the exact optimum,
# bracketed independently in the digest by [dual², primal] of a separate fixed-point solver, is lower.
AFFINE_ABS = [
    (10, "affine", 28.25, 15_220, (28.010, 28.026)),
    (10, "abs-diff", 35.85, 8_200, (30.103, 30.283)),
    pytest.param(20, "affine", 35.71, 31_220, (35.164, 35.212), marks=pytest.mark.slow),
    pytest.param(20, "abs-diff", 39.49, 16_400, (37.170, 37.259), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("n,query,printed,count,bracket", AFFINE_ABS)
def test_table4_affine_abs(n: int, query: str, printed: float, count: int, bracket: tuple[float, float]) -> None:
    """QS Table 4 ([n]^40, 1-way prefix + 2-way affine/abs, cost 1): ≤ 0.5% above the paper, and inside
    the digest's independent bracket of the exact optimum (±0.01%), with a certified duality gap."""
    wl = parse_workload([{"kway": 1, "queries": "prefix"}, {"kway": 2, "queries": query}], _grid(n))
    plan = QuerySmasher().plan(wl, COST1)
    assert plan.details["num_queries"] == count
    assert plan.rmse <= printed * 1.005
    lo, hi = bracket
    assert lo * (1 - 1e-4) <= plan.rmse <= hi * (1 + 1e-4)
    assert plan.details["max_duality_gap"] < 1e-4
    assert "newton" in plan.details["methods"]
    # the certificate: the assembled lower bound is within the gap of the plan's weighted SSE
    d = plan.details
    assert d["weighted_sse_lower_bound"] <= d["weighted_sse"] <= d["weighted_sse_lower_bound"] * (1 + 3e-4)


def _affine_gram(query: str, n: int) -> np.ndarray:
    from privcube.core.query_types import joint_matrix

    w = joint_matrix(QueryType(query), n, n)
    c = centering((n, n))
    return c @ w.T @ w @ c


@pytest.mark.parametrize("query", ["affine", "abs-diff"])
def test_newton_solver_matches_clarabel_sdp(query: str) -> None:
    """The dual Newton solver agrees with the SDP (cvxpy/Clarabel, an independent solver) on a 2-D part."""
    n = 5
    g = _affine_gram(query, n)
    nt = solve(g, (n, n), "newton", tol=1e-6)
    sd = solve(g, (n, n), "sdp")
    assert nt.gap < 1e-6
    assert nt.L == pytest.approx(sd.L, rel=1e-5)
    v = nt.b @ nt.b
    assert np.max(np.diag(v)) == pytest.approx(1.0, rel=1e-9)  # privacy cost 1
    assert float(np.sum(g * np.linalg.pinv(v, rcond=1e-10, hermitian=True))) == pytest.approx(nt.L, rel=1e-6)
    # dominance over the RP-equivalent and WFF strategies (digest §11.7)
    assert nt.L <= ((n - 1) / n) ** 2 * np.trace(g) * (1 + 1e-9)
    assert nt.L <= solve(g, (n, n), "fourier").L * (1 + 1e-9)


def test_newton_certificate_full_rank_part() -> None:
    """Full-rank 100-cell part (random workload; exercises the quadrature Hessian): the certificate
    checked independently — primal tr(G V⁺) from V itself, dual from the returned λ via eigenvalues."""
    from privcube.mechanisms.querysmasher.solvers import dual_value

    n = 10
    w = (np.random.default_rng(5).random((3 * n * n, n * n)) < 0.3).astype(float)
    c = centering((n, n))
    g = c @ w.T @ w @ c
    sol = solve(g, (n, n), "newton", tol=1e-6)
    v = sol.b @ sol.b
    assert np.max(np.diag(v)) == pytest.approx(1.0, rel=1e-9)
    primal = float(np.sum(g * np.linalg.pinv(v, rcond=1e-10, hermitian=True)))
    dual = dual_value(g, sol.info["lam"])
    assert dual <= primal * (1 + 1e-12)
    assert (primal - dual) / primal < 1e-6
    assert primal <= solve(g, (n, n), "eigen").L * (1 + 1e-12)


def test_scaled_parts_solved_once() -> None:
    """Parts equal up to a positive scale share one solve; L scales with the Gram."""
    wl = parse_workload([{"kway": 1, "queries": "prefix"}, {"kway": 2, "queries": "affine"}], _grid(6, 8))
    sols, info = QuerySmasher().optimize(wl, COST1)
    assert info["distinct_parts"] == 2  # one 1-D (prefix + projected affine) and one 2-D affine part
    one_d = [x for k, x in sols.items() if len(k) == 1]
    for x in one_d:
        g = x.sub.parts[0].gram()
        assert x.sub.alpha * float(np.sum(g * x.parts[0].vpinv)) == pytest.approx(x.L, rel=1e-9)


def _paper_random(n: int) -> list[dict]:
    """Table 4 random row, the authors' convention: np.random.seed(42+n); W1 then W2 from one stream."""
    rnd = {"type": "random", "generator": "mt19937", "seed": 42 + n}
    return [{"kway": 1, "queries": rnd}, {"kway": 2, "queries": {**rnd, "offset": 3 * n * n}}]


@pytest.mark.parametrize("n,printed,count", [
    (10, 104.43, 235_200), pytest.param(20, 233.69, 938_400, marks=pytest.mark.slow)])
def test_table4_random(n: int, printed: float, count: int) -> None:
    """QS Table 4 random row: ≤ 0.5% above the paper (n = 10: the paper's value is exact, digest §10.2)."""
    plan = QuerySmasher().plan(parse_workload(_paper_random(n), _grid(n)), COST1)
    assert plan.details["num_queries"] == count
    assert plan.rmse <= printed * 1.005
    if n == 10:
        assert plan.rmse == pytest.approx(printed, rel=0.005)
    assert plan.details["max_duality_gap"] < 1e-4


@pytest.mark.parametrize("n,d,printed", [
    (10, 10, 20.41), (10, 20, 51.63), (10, 30, 93.50),
    pytest.param(20, 10, 34.60, marks=pytest.mark.slow), pytest.param(10, 40, 138.38, marks=pytest.mark.slow),
])
def test_table5_mixed(n: int, d: int, printed: float) -> None:
    """QS Table 5 (1-way range + 2-way affine + 3-way prefix on [n]^d, cost 1): ≤ 0.5% above the paper;
    the digest's independent feasible QS (20.41 / 51.545 / 89.583 for d = 10/20/30) is matched or beaten."""
    plan = QuerySmasher().plan(parse_workload([{"kway": 1, "queries": "allrange"}, {"kway": 2, "queries": "affine"},
                                               {"kway": 3, "queries": "prefix"}], _grid(n, d)), COST1)
    count = d * n * (n + 1) // 2 + math.comb(d, 2) * (2 * n - 1) + math.comb(d, 3) * n**3
    assert plan.details["num_queries"] == count
    assert plan.rmse <= printed * 1.005
    feasible = {(10, 10): 20.41, (10, 20): 51.545, (10, 30): 89.583, (10, 40): 133.212}.get((n, d))
    if feasible is not None:
        assert plan.rmse <= feasible * 1.0005
    assert plan.details["max_duality_gap"] < 1e-4


def _table8_workload(n: int, kind: str, d: int = 40):  # noqa: ANN202
    """Table 8: weighted 1-way + 2-way on [n]^40, one integer weight 1..5 per marginal drawn by
    RandomState(42).randint(1, 6) over the marginals in combinations order (digest §2, 'Weights')."""
    import itertools

    rnd = {"type": "random", "generator": "mt19937", "seed": 42 + n}
    q1, q2 = {"marginal": ("identity", "identity"), "prefix": ("prefix", "prefix"),
              "range": ("allrange", "allrange"), "circular": ("circular", "circular"),
              "affine": ("prefix", "affine"), "abs": ("prefix", "abs-diff"),
              "random": (rnd, {**rnd, "offset": 3 * n * n})}[kind]
    dom = _grid(n, d)
    rs = np.random.RandomState(42)
    cliques = list(itertools.combinations(dom.attributes, 1)) + list(itertools.combinations(dom.attributes, 2))
    return parse_workload([{"attributes": list(c), "queries": q1 if len(c) == 1 else q2,
                            "weight": int(rs.randint(1, 6))} for c in cliques], dom)


TABLE8 = {10: {"marginal": 39.22, "prefix": 56.59, "range": 68.82, "circular": 66.70, "affine": 47.33,
               "abs": 51.94, "random": 174.49},
          20: {"marginal": 42.90, "prefix": 84.18, "range": 105.93, "circular": 105.53, "affine": 61.68,
               "abs": 66.89, "random": 386.32}}


@pytest.mark.parametrize("n,kind", [(10, k) for k in TABLE8[10]]
                         + [pytest.param(20, k, marks=pytest.mark.slow) for k in TABLE8[20]])
def test_table8_weighted(n: int, kind: str) -> None:
    """QS Table 8 (WRMSE, per-marginal weights): marginal and circular rows exact within 0.5%, every
    other QS cell at most 0.5% above the paper."""
    printed = TABLE8[n][kind]
    plan = QuerySmasher().plan(_table8_workload(n, kind), COST1)
    wrmse = plan.details["weighted_rmse"]
    assert wrmse <= printed * 1.005
    if kind in ("marginal", "circular"):
        assert wrmse == pytest.approx(printed, rel=0.005)
    assert plan.details["max_duality_gap"] < 1e-4


# WFF column (exact in the paper: the Weighted Fourier Factorisation has a closed form, digest §10.2).
WFF_TABLE4 = [(10, "prefix", 39.70), (10, "allrange", 41.36), (10, "circular", 39.77), (10, "affine", 45.23),
              (10, "abs-diff", 64.11), (10, "random", 107.81), (20, "prefix", 62.95), (20, "allrange", 63.58),
              (20, "circular", 63.01), (20, "affine", 70.31), (20, "abs-diff", 102.54)]


@pytest.mark.parametrize("n,query,printed", WFF_TABLE4)
def test_table4_wff_column(n: int, query: str, printed: float) -> None:
    """Table 4's WFF column with solver 'fourier' on the same workloads, within 0.5%; QS never worse."""
    if query == "random":
        entries = _paper_random(n)
    elif query in ("affine", "abs-diff"):
        entries = [{"kway": 1, "queries": "prefix"}, {"kway": 2, "queries": query}]
    else:
        entries = [{"kway": 1, "queries": query}, {"kway": 2, "queries": query}]
    wl = parse_workload(entries, _grid(n))
    wff = QuerySmasher({"solver": "fourier"}).plan(wl, COST1)
    assert wff.rmse == pytest.approx(printed, rel=0.005)
    assert wff.privacy["rho"] <= 0.5 * (1 + 1e-12)


@pytest.mark.skipif(not ADULT.exists(), reason="Adult domain file absent")
@pytest.mark.parametrize("ks,printed", [([1], 5.804), ([2], 22.493), ([3], 66.934), ([1, 2, 3], 66.794)])
def test_table2_adult_wff_column(ks: list[int], printed: float) -> None:
    """Table 2 (Adult hybrid marginal/prefix) WFF column, within 0.5%."""
    plan = QuerySmasher({"solver": "fourier"}).plan(hybrid(Domain.load(ADULT), ks, ADULT_NUMERIC), COST1)
    assert plan.rmse == pytest.approx(printed, rel=0.005)


@pytest.mark.parametrize("d,printed", [(10, 25.37), (20, 65.13), (30, 113.98)])
def test_table5_wff_column(d: int, printed: float) -> None:
    """Table 5 (mixed workload on [10]^d) WFF column, within 0.5%."""
    wl = parse_workload([{"kway": 1, "queries": "allrange"}, {"kway": 2, "queries": "affine"},
                         {"kway": 3, "queries": "prefix"}], _grid(10, d))
    assert QuerySmasher({"solver": "fourier"}).plan(wl, COST1).rmse == pytest.approx(printed, rel=0.005)


def test_auto_certifies_full_rank_parts_beyond_the_dense_newton_limit() -> None:
    """A full-rank 2-D part of 609 cells (prefix x identity plus abs-diff on 30 x 22): dense Newton is over
    its cost limit, and auto used to fall back to uncertified L-BFGS; it must reach the duality-gap target,
    and agree with the dedicated active-set solver."""
    dom = Domain.from_mapping({"a": 30, "b": 22})
    wl = parse_workload([{"attributes": ["a", "b"], "queries": {"a": "prefix", "default": "identity"}},
                         {"attributes": ["a", "b"], "queries": "abs-diff"}], dom)
    budget = PrivacyBudget.from_rho(0.5)
    auto = QuerySmasher({"tol": 1e-4}).plan(wl, budget)
    lowrank = QuerySmasher({"tol": 1e-4, "solver": "lowrank"}).plan(wl, budget)
    assert auto.details["max_duality_gap"] <= 1e-4
    # both certified at gap <= 1e-4 on the error L, so their RMSEs (sqrt L) agree within 5e-5
    # (the old L-BFGS fallback was 9.3e-5 above)
    assert auto.rmse == pytest.approx(lowrank.rmse, rel=5e-5)
    # thin part above THIN_DENSE_LIMIT (23 x 23 abs-diff, rank << cells): certified too
    dom2 = Domain.from_mapping({"a": 24, "b": 24})
    wl2 = parse_workload([{"attributes": ["a", "b"], "queries": "abs-diff"}], dom2)
    thin = QuerySmasher({"tol": 1e-4}).plan(wl2, budget)
    newton = QuerySmasher({"tol": 1e-4, "solver": "newton"}).plan(wl2, budget)
    assert thin.details["max_duality_gap"] <= 1e-4
    assert thin.rmse == pytest.approx(newton.rmse, rel=5e-5)
