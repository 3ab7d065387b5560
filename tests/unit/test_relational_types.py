"""Stage 2 over record types: the aggregated relaxed problem, its rounding and the within-type assignment."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from scipy.optimize import minimize

from privcube.core.domain import Domain
from privcube.relational.stages.run import run_relational
from privcube.relational.stages.record_types import link_types, side_types, type_pair_counts
from privcube.relational.stages.type_assignment import assign_links, round_type_counts
from privcube.relational.solvers.type_problem import (
    RowBox,
    TypeConstraints,
    objective,
    project_weighted_rows,
    solve_types,
    type_operator,
)
from privcube.relational.stages.cross_workloads import CrossTables, CrossWorkload
from privcube.privacy.noise import NoiseSource
from privcube.relational.example_data import movielens_like, parent_child_like

FAST = {"iterations": 3, "d_max": 10, "evaluate_nonprivate": True}


def _tiny(seed: int) -> tuple[CrossTables, list[CrossWorkload], list[np.ndarray]]:
    """6 × 5 records on small domains, two cross workloads with arbitrary (noisy-looking) targets."""
    rng = np.random.default_rng(seed)
    d1, d2 = Domain(("a", "b"), (2, 2)), Domain(("c",), (3,))
    syn = CrossTables(rng.integers(0, 2, (6, 2)), d1, rng.integers(0, 3, (5, 1)), d2)
    ws = [CrossWorkload(("a",), ("c",)), CrossWorkload(("b",), ("c",))]
    targets = [rng.random(6) * 4.0 for _ in ws]
    return syn, ws, targets


def _record_operators(syn: CrossTables, ws: list[CrossWorkload]) -> list[np.ndarray]:
    """Per workload the dense record-level Q_w (cells × record pairs), built entry by entry."""
    n1, n2 = syn.n1, syn.n2
    Qs = []
    for w in ws:
        s1, s2 = w.sizes(syn.dom1, syn.dom2)
        c1, c2 = syn.index(1, w.left), syn.index(2, w.right)
        Q = np.zeros((s1 * s2, n1 * n2))
        for i in range(n1):
            for j in range(n2):
                Q[c1[i] * s2 + c2[j], i * n2 + j] = 1.0
        Qs.append(Q)
    return Qs


def _record_optimum(syn: CrossTables, ws: list[CrossWorkload], targets: list[np.ndarray], scale: float,
                    kind: str, m: int, deg: np.ndarray | None) -> float:
    """The record-level relaxed problem (dense Q_w built explicitly, every record pair a variable) by SLSQP."""
    n1, n2 = syn.n1, syn.n2
    Qs = _record_operators(syn, ws)

    def f(b: np.ndarray) -> float:
        return float(sum(np.sum(((Q @ b - t) / scale) ** 2) for Q, t in zip(Qs, targets)))

    if kind in ("total", "learned"):
        cons = [{"type": "eq", "fun": lambda b: b.sum() - m}]
        if kind == "learned":  # every record's degree at most d = deg (its cap), the total m
            cons.append({"type": "ineq", "fun": lambda b: deg - b.reshape(n1, n2).sum(axis=1)})
        x0 = np.full(n1 * n2, m / (n1 * n2))
    else:
        rs = np.ones(n1) if kind == "one_to_many" else deg
        cons = [{"type": "eq", "fun": lambda b: b.reshape(n1, n2).sum(axis=1) - rs}]
        x0 = np.repeat(rs / n2, n2)
    best = np.inf
    for start in (x0, np.clip(x0 + np.random.default_rng(1).normal(0, 0.1, x0.size), 0, 1)):
        res = minimize(f, start, bounds=[(0.0, 1.0)] * (n1 * n2), constraints=cons, method="SLSQP",
                       options={"ftol": 1e-14, "maxiter": 2000})
        best = min(best, res.fun)
    return best


@pytest.mark.parametrize("kind", ["total", "one_to_many", "preserve", "learned"])
@pytest.mark.parametrize("seed", [0, 1])
def test_type_optimum_equals_record_level_optimum(kind: str, seed: int) -> None:
    """The optimum over type-pair counts equals the record-level one (brute force over all n1·n2 cells);
    ``learned``: left degrees free up to a cap of 2 per record (row caps n_a·2 on the types)."""
    syn, ws, targets = _tiny(seed)
    t1, t2 = link_types(syn, ws)
    W = np.outer(t1.count, t2.count).astype(float)
    deg = np.array([2, 1, 2, 1, 2, 1])  # kept left degrees (many-to-many, degrees: preserve)
    m = int(deg.sum()) if kind != "one_to_many" else syn.n1
    rows = {"total": None, "one_to_many": t1.count.astype(float), "learned": None,
            "preserve": np.bincount(t1.of, weights=deg, minlength=t1.size)}[kind]
    if kind == "learned":
        deg = np.full(syn.n1, 2)
    cons = TypeConstraints(W, np.ones_like(W), rows, float(m),
                           row_caps=t1.count * 2.0 if kind == "learned" else None, dykstra=200)
    sizes = [w.sizes(syn.dom1, syn.dom2) for w in ws]
    op = type_operator([t1.cells(syn.dom1, w.left) for w in ws], [t2.cells(syn.dom2, w.right) for w in ws], sizes, W)
    scale = float(m)
    x = solve_types(op, targets, scale, cons, np.full(W.shape, 0.5), iters=20000, tol=1e-13)
    f_types = objective(op, x, targets, scale)
    f_rec = _record_optimum(syn, ws, targets, scale, kind, m, deg.astype(float))
    assert t1.size * t2.size < syn.n1 * syn.n2  # the aggregation is a real reduction here
    assert f_types == pytest.approx(f_rec, rel=1e-5, abs=1e-9)
    # and the type solution is feasible for the aggregated constraints
    L = W * x
    assert np.all(L >= -1e-12) and np.all(L <= W + 1e-9)
    if rows is not None:
        np.testing.assert_allclose(L.sum(axis=1), rows, rtol=1e-10)
    if kind == "learned":
        assert np.all(L.sum(axis=1) <= t1.count * 2.0 + 1e-6) and L.sum() == pytest.approx(m, rel=1e-10)


@pytest.mark.parametrize("seed", [0, 4])
def test_type_gradient_step_is_the_record_level_step(seed: int) -> None:
    """The type solver's gradient step is the paper's record-level one on block-uniform B: the same gradient
    at every record pair of a block, the same step size (σ_max² of C·diag(√W) equals ‖Q‖₂² of the dense
    record-level operator), and its projection is in the record-level norm (tested against a QP below)."""
    syn, ws, targets = _tiny(seed)
    t1, t2 = link_types(syn, ws)
    W = np.outer(t1.count, t2.count).astype(float)
    op = type_operator([t1.cells(syn.dom1, w.left) for w in ws], [t2.cells(syn.dom2, w.right) for w in ws],
                       [w.sizes(syn.dom1, syn.dom2) for w in ws], W)
    Q = np.vstack(_record_operators(syn, ws))
    assert op.sigma2(np.random.default_rng(0), iters=5000, tol=1e-14) == pytest.approx(
        float(np.linalg.norm(Q, 2)) ** 2, rel=1e-8)
    x = np.random.default_rng(seed).random(W.shape)
    B = x[t1.of][:, t2.of]  # the block-uniform record pairs
    grad_B = 2.0 * Q.T @ (Q @ B.ravel() - np.concatenate(targets))
    g = 2.0 * op.adjoint_counts([q - t for q, t in zip(op.apply(x), targets)])
    assert W.size < B.size  # a real aggregation
    np.testing.assert_allclose(grad_B.reshape(B.shape), g[t1.of][:, t2.of], rtol=1e-12, atol=1e-12)


def test_weighted_projection_matches_a_qp_solver() -> None:
    """The projection in the record-level norm Σ W (x − z)²."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        B = int(rng.integers(1, 6))
        W = np.outer(rng.integers(1, 9, 2), rng.integers(1, 9, B)).astype(float)
        hi = np.where(rng.random((2, B)) < 0.3, 0.5, 1.0)
        r = (W * hi).sum(axis=1) * rng.random(2)
        Z = rng.normal(size=(2, B))
        X = project_weighted_rows(Z, W, r, hi)
        np.testing.assert_allclose((W * X).sum(axis=1), r, rtol=1e-10, atol=1e-10)
        for a in range(2):
            res = minimize(lambda v: float((W[a] * (v - Z[a]) ** 2).sum()), np.clip(Z[a], 0, hi[a]),
                           bounds=list(zip(np.zeros(B), hi[a])), method="SLSQP",
                           constraints=[{"type": "eq", "fun": lambda v: W[a] @ v - r[a]}],
                           options={"ftol": 1e-15, "maxiter": 500})
            assert float((W[a] * (X[a] - Z[a]) ** 2).sum()) <= res.fun * (1 + 1e-9) + 1e-9  # SLSQP: ~1e-11 rel.


def _bisection_projection(z: np.ndarray, w: np.ndarray, r: float, hi: np.ndarray) -> np.ndarray:
    """Reference for one row: the KKT shift y by plain bisection (300 halvings), x = clip(z + y·d, 0, hi) with
    d = 1 on records (the record-level norm) and 0 where w = 0 (no records: they do not move)."""
    live = (w > 0) & (hi > 0)
    if not live.any() or r <= 0:
        return np.where(live, 0.0, np.clip(z, 0, hi))
    d = (w > 0).astype(float)
    lo, up = float(np.min(-z[live] / d[live])), float(np.max((hi[live] - z[live]) / d[live]))
    for _ in range(300):
        mid = 0.5 * (lo + up)
        if float((w * np.clip(z + mid * d, 0, hi)).sum()) < r:
            lo = mid
        else:
            up = mid
    return np.clip(z + 0.5 * (lo + up) * d, 0, hi)


def test_weighted_projection_matches_bisection_on_hard_rows() -> None:
    # totals at 0 and at capacity, zero weights and zero bounds, badly scaled inputs: the Newton/bisection
    # solver equals a plain bisection of the KKT shift, and entries with W = 0 (which do not count in the
    # total) stay at clip(z, 0, hi)
    rng = np.random.default_rng(11)
    for trial in range(200):
        A, B = int(rng.integers(1, 12)), int(rng.integers(1, 40))
        W = np.outer(rng.integers(0, 9, A), rng.integers(0, 9, B)).astype(float)
        hi = np.where(rng.random((A, B)) < 0.2, rng.random((A, B)), 1.0)
        hi[rng.random((A, B)) < 0.05] = 0.0
        r = (W * hi).sum(axis=1) * rng.choice([0.0, 1.0, 0.5, 0.999, 1e-3], A)
        Z = rng.normal(size=(A, B)) * rng.choice([1e-2, 1.0, 100.0])
        X = project_weighted_rows(Z, W, r, hi)
        np.testing.assert_allclose((W * X).sum(axis=1), r, rtol=1e-10, atol=1e-9)
        for a in range(A):
            np.testing.assert_allclose(X[a], _bisection_projection(Z[a], W[a], r[a], hi[a]), atol=1e-7)
        # a start for the multipliers (anywhere, even far outside the bracket) changes only the work
        X0 = project_weighted_rows(Z, W, r, hi, y0=rng.normal(size=A) * rng.choice([1e-3, 1.0, 1e4]))
        np.testing.assert_allclose(X0, X, atol=1e-7)


def test_weighted_projection_fast_paths_match_bisection() -> None:
    # every entry live and one bound for all (the scalar clip, no masks: the common case on record types),
    # many rows so that passes over all rows with some closed and passes over gathered open rows both run,
    # and a RowBox computed once and reused across projections: equal to the bisection reference, totals kept
    rng = np.random.default_rng(29)
    for trial in range(60):
        A, B = int(rng.integers(2, 60)), int(rng.integers(1, 50))
        W = np.outer(rng.integers(1, 9, A), rng.integers(1, 9, B)).astype(float)
        hi = np.full((A, B), float(rng.choice([1.0, 0.7])))
        box = RowBox.of(W, hi)
        assert box.live is None and box.top == hi[0, 0]
        r = (W * hi).sum(axis=1) * rng.choice([0.0, 1.0, 0.5, 0.999, 1e-3, 0.25], A)
        y0 = None
        for _ in range(3):  # consecutive projections warm-started from the last multipliers, as in a solve
            Z = rng.normal(size=(A, B)) * rng.choice([1e-2, 1.0, 100.0])
            X, y0 = project_weighted_rows(Z, W, r, hi, shifts=True, y0=y0, box=box)
            np.testing.assert_allclose((W * X).sum(axis=1), r, rtol=1e-12, atol=1e-9)
            assert np.all(X >= 0) and np.all(X <= hi)
            for a in range(A):
                np.testing.assert_allclose(X[a], _bisection_projection(Z[a], W[a], r[a], hi[a]), atol=1e-7)
            np.testing.assert_array_equal(project_weighted_rows(Z, W, r, hi, y0=y0), X)  # box or not: the same


def test_weighted_projection_spreads_a_residual_left_by_the_tolerance() -> None:
    # Newton stops within 1e-13 of a row's capacity; with heavy blocks (W 1e12) that is 0.4 here, far more than
    # float rounding of a total of 5: the residual is spread so the total is met, the box kept, and a row that
    # needs no spreading is left exactly as clip(z + y)
    W = np.array([[1e12] * 4 + [1.0] * 10, [1.0] * 14])
    hi = np.ones_like(W)
    z_small = np.linspace(0.2, 0.7, 10)
    r = np.array([z_small.sum() + 0.05, 3.0])
    Z = np.vstack([np.r_[[-0.5] * 4, z_small], np.linspace(0.0, 0.4, 14)])
    X, y = project_weighted_rows(Z, W, r, hi, shifts=True, y0=np.zeros(2))
    assert y[0] == 0.0  # the start was within the tolerance: no Newton step taken, the residual 0.05 remains
    np.testing.assert_allclose((W * X).sum(axis=1), r, rtol=1e-12)
    assert np.all(X >= 0) and np.all(X <= hi)
    np.testing.assert_array_equal(X[1], np.clip(Z[1] + y[1], 0.0, 1.0))


def test_rounding_keeps_row_totals_bounds_and_is_unbiased() -> None:
    rng = np.random.default_rng(0)
    U = np.array([[3.0, 1.0, 2.0], [1.0, 4.0, 1.0]])
    L = np.array([[1.3, 0.4, 1.3], [0.5, 2.25, 0.25]])
    rows = L.sum(axis=1)
    draws = np.array([round_type_counts(L, U, rows, 0, rng) for _ in range(5000)])
    assert np.all(draws.sum(axis=2) == rows.astype(int)) and np.all(draws >= 0) and np.all(draws <= U)
    np.testing.assert_allclose(draws.mean(axis=0), L, atol=0.03)
    tot = round_type_counts(L, U, None, 6, rng)
    assert tot.sum() == 6


def test_assignment_meets_type_counts_degrees_and_no_repeats() -> None:
    rng = np.random.default_rng(5)
    d1, d2 = Domain(("a",), (3,)), Domain(("c",), (4,))
    t1 = side_types(rng.integers(0, 3, (40, 1)), d1, ["a"])
    t2 = side_types(rng.integers(0, 4, (30, 1)), d2, ["c"])
    deg1 = rng.integers(0, 5, 40)
    D = np.bincount(t1.of, weights=deg1, minlength=t1.size).astype(int)
    Lint = np.zeros((t1.size, t2.size), dtype=np.int64)
    for a in range(t1.size):  # a random split of each row total over the right types
        Lint[a] = np.bincount(rng.choice(t2.size, D[a], p=t2.count / t2.count.sum()), minlength=t2.size)
    si, sj = assign_links(t1, t2, Lint, deg1, rng, cap=10)
    np.testing.assert_array_equal(type_pair_counts(t1, t2, si, sj), Lint)
    np.testing.assert_array_equal(np.bincount(si, minlength=40), deg1)
    assert np.unique(si * 30 + sj).size == si.size  # no repeated pair
    deg2 = np.bincount(sj, minlength=30)
    for b in range(t2.size):  # right degrees inside a type differ by at most one
        d = deg2[t2.of == b]
        assert d.max() - d.min() <= 1


def test_many_to_many_run_on_types_keeps_degrees_and_reports_relinking() -> None:
    ml = movielens_like(n_users=120, n_movies=80, n_genres=4, d_max=10, seed=2)
    syn = {n: v[0] for n, v in ml["tables"].items()}
    r = run_relational(ml["tables"], ml["links"], {**FAST, "left_degrees": "kept"},
                       {"links": {"epsilon": 4.0, "delta": 1e-6}}, noise=NoiseSource(0), synthetic_tables=syn)
    hist = r.report["iterations"]
    assert hist and all(h["optimiser"] == "types" and h["relinked_share"] == 1.0 for h in hist)
    assert all(0.0 <= h["links_changed_share"] <= 1.0 for h in hist)
    assert all(h["type_iters"] == 500 for h in hist)  # a small grid: the full 500 steps with type_iters auto
    si, sj = r.links.iloc[:, 0].to_numpy(), r.links.iloc[:, 1].to_numpy()
    m_syn = r.report["m_syn"]
    assert si.size == m_syn and np.unique(si * 80 + sj).size == m_syn
    deg1 = np.bincount(si, minlength=120)
    assert deg1.max() - deg1.min() <= 1  # the balanced left degrees are kept through learning (left_degrees: kept)
    assert np.bincount(sj, minlength=80).max() <= 10 and r.report["degrees"]["d_max_respected"]
    ev = r.report["nonprivate_evaluation"]
    assert ev["average_cross_error_pct"] < ev["initial_random_links_error_pct"]


def test_many_to_many_learned_left_degrees_follow_the_data_within_d_max() -> None:
    """left_degrees: learned: links move towards the user types the releases ask for; every record keeps
    ≤ d_max links on both sides, the link count and distinct pairs are kept."""
    ml = movielens_like(n_users=120, n_movies=80, n_genres=4, d_max=10, seed=2)
    syn = {n: v[0] for n, v in ml["tables"].items()}
    r = run_relational(ml["tables"], ml["links"], {**FAST, "left_degrees": "learned"},
                       {"links": {"epsilon": 4.0, "delta": 1e-6}}, noise=NoiseSource(0), synthetic_tables=syn)
    hist = r.report["iterations"]
    assert hist and all(h["optimiser"] == "types" and h["left_degrees"] == "learned" for h in hist)
    si, sj = r.links.iloc[:, 0].to_numpy(), r.links.iloc[:, 1].to_numpy()
    m_syn = r.report["m_syn"]
    assert si.size == m_syn and np.unique(si * 80 + sj).size == m_syn
    deg1, deg2 = np.bincount(si, minlength=120), np.bincount(sj, minlength=80)
    assert deg1.max() <= 10 and deg2.max() <= 10 and r.report["degrees"]["d_max_respected"]
    assert deg1.max() - deg1.min() > 1  # no longer the balanced start
    ev = r.report["nonprivate_evaluation"]
    assert ev["average_cross_error_pct"] < ev["initial_random_links_error_pct"]
    kept = run_relational(ml["tables"], ml["links"], {**FAST, "left_degrees": "kept"},
                          {"links": {"epsilon": 4.0, "delta": 1e-6}}, noise=NoiseSource(0), synthetic_tables=syn)
    assert ev["average_cross_error_pct"] < kept.report["nonprivate_evaluation"]["average_cross_error_pct"]


def test_row_capped_projection_is_feasible() -> None:
    """Dykstra over the total, the row caps and the column caps: the total exact, the caps met."""
    rng = np.random.default_rng(5)
    for _ in range(20):
        A, B = int(rng.integers(2, 6)), int(rng.integers(2, 6))
        W = np.outer(rng.integers(1, 9, A), rng.integers(1, 9, B)).astype(float)
        hi = np.ones((A, B))
        total = float(W.sum()) * 0.3
        cons = TypeConstraints(W, hi, None, total, caps=W.sum(axis=0) * 0.6, row_caps=W.sum(axis=1) * 0.5,
                               dykstra=200)
        X = cons.project(rng.normal(size=(A, B)))
        L = W * X
        assert L.sum() == pytest.approx(total, rel=1e-9)
        assert np.all(X >= -1e-12) and np.all(X <= hi + 1e-12)
        assert np.all(L.sum(axis=1) <= cons.row_caps * (1 + 1e-6)) and np.all(L.sum(axis=0) <= cons.caps * (1 + 1e-6))


def test_one_to_many_run_on_types_one_parent_per_child_within_d_max() -> None:
    pc = parent_child_like(n_parents=60, n_children=240, d_max=10, seed=2)
    syn = {n: v[0] for n, v in pc["tables"].items()}
    r = run_relational(pc["tables"], pc["links"], FAST, {"links": {"epsilon": 4.0, "delta": 1e-6}},
                       noise=NoiseSource(1), synthetic_tables=syn)
    assert all(h["optimiser"] == "types" and h["relinked_share"] == 1.0 for h in r.report["iterations"])
    child = r.tables["children"]
    parent = child["parent_id"].to_numpy()
    assert parent.size == 240 and parent.min() >= 0 and parent.max() < 60  # one parent per child
    assert np.bincount(parent, minlength=60).max() <= 10


def test_type_cell_budget_falls_back_to_slices() -> None:
    ml = movielens_like(n_users=120, n_movies=80, n_genres=4, d_max=10, seed=2)
    syn = {n: v[0] for n, v in ml["tables"].items()}
    r = run_relational(ml["tables"], ml["links"], {**FAST, "type_cells": 1}, {"links": {"epsilon": 4.0, "delta": 1e-6}},
                       noise=NoiseSource(0), synthetic_tables=syn)
    assert all(h["optimiser"] == "slices" and 0.0 < h["relinked_share"] <= 1.0 for h in r.report["iterations"])


def test_type_iterations_auto_bounds_the_work_of_a_solve() -> None:
    """``type_iters: auto``: 500 steps on small grids, a fixed work budget (type pairs × steps) on larger ones,
    never fewer than 50; an explicit integer is kept; anything else is refused naming the key."""
    from privcube.core.errors import ConfigError
    from privcube.relational.stages.parameters import check_params
    from privcube.relational.stages.type_iteration import TYPE_WORK, type_iterations

    auto = check_params({})
    assert auto["type_iters"] == "auto" and auto["type_cells"] == 3_000_000
    assert type_iterations(auto, 38_000) == 500 and type_iterations(auto, TYPE_WORK // 500) == 500
    assert type_iterations(auto, 549_000) == TYPE_WORK // 549_000 == 91
    assert type_iterations(auto, 1_140_000) == 50 and type_iterations(auto, 3_000_000) == 50
    assert type_iterations(check_params({"type_iters": 7}), 3_000_000) == 7
    for bad in ("fast", 0, 2.5, True):
        with pytest.raises(ConfigError, match="'type_iters' must be an integer >= 1 or auto"):
            check_params({"type_iters": bad})


def test_type_runs_are_reproducible_with_a_seed() -> None:
    ml = movielens_like(n_users=120, n_movies=80, n_genres=4, d_max=10, seed=2)
    syn = {n: v[0] for n, v in ml["tables"].items()}
    a, b = (run_relational(ml["tables"], ml["links"], FAST, {"links": {"epsilon": 4.0, "delta": 1e-6}},
                           noise=NoiseSource(7), synthetic_tables=syn) for _ in range(2))
    assert a.links.equals(b.links)


def test_incremental_assignment_keeps_what_the_new_counts_allow() -> None:
    from privcube.relational.stages.type_assignment import assign_incremental

    rng = np.random.default_rng(9)
    d1, d2 = Domain(("a",), (3,)), Domain(("c",), (4,))
    t1 = side_types(rng.integers(0, 3, (50, 1)), d1, ["a"])
    t2 = side_types(rng.integers(0, 4, (40, 1)), d2, ["c"])
    deg1 = rng.integers(1, 4, 50)
    si, sj = assign_links(t1, t2, _split(t1, t2, deg1, rng)[0], deg1, rng)
    Lnew, _ = _split(t1, t2, deg1, rng)
    ni, nj = assign_incremental(t1, t2, Lnew, si, sj, rng)
    np.testing.assert_array_equal(type_pair_counts(t1, t2, ni, nj), Lnew)
    np.testing.assert_array_equal(np.bincount(ni, minlength=50), deg1)
    assert np.unique(ni * 40 + nj).size == ni.size
    kept = np.intersect1d(si * 40 + sj, ni * 40 + nj).size
    assert kept >= int(np.minimum(type_pair_counts(t1, t2, si, sj), Lnew).sum()) - 5  # repairs may move a few
    same, _ = assign_incremental(t1, t2, type_pair_counts(t1, t2, si, sj).astype(np.int64), si, sj, rng), None
    assert np.intersect1d(si * 40 + sj, same[0] * 40 + same[1]).size == si.size  # unchanged counts: same links


def _split(t1, t2, deg1, rng):  # noqa: ANN001, ANN202
    """Random type-pair counts with the left types' stub totals."""
    D = np.bincount(t1.of, weights=deg1, minlength=t1.size).astype(int)
    L = np.zeros((t1.size, t2.size), dtype=np.int64)
    for a in range(t1.size):
        L[a] = np.bincount(rng.choice(t2.size, D[a], p=t2.count / t2.count.sum()), minlength=t2.size)
    return L, None


def test_self_referential_on_types_has_no_self_loops_or_repeats() -> None:
    from privcube.relational.example_data import self_referential_like

    sr = self_referential_like(60, seed=0)
    params = {"d_max": 4, "iterations": 3, "candidates": 60, "max_noise": None}
    b = {"tables": {"people": {"epsilon": 1.0, "delta": 1e-6}}, "links": {"epsilon": 10.0, "delta": 1e-6}}
    for seed in range(2):
        r = run_relational(sr["tables"], sr["links"], params, b, noise=NoiseSource(seed))
        assert all(h["optimiser"] == "types" for h in r.report["iterations"])
        s, t = r.links.iloc[:, 0].to_numpy(), r.links.iloc[:, 1].to_numpy()
        n = int(max(s.max(), t.max())) + 1
        assert s.size == r.report["m_syn"] and not np.any(s == t) and np.unique(s * n + t).size == s.size


def test_the_optimiser_spends_nothing(  # post-processing: the ledger is the same whichever optimiser runs
) -> None:
    ml = movielens_like(n_users=120, n_movies=80, n_genres=4, d_max=10, seed=2)
    syn = {n: v[0] for n, v in ml["tables"].items()}
    spent = {}
    for opt in ("types", "slices"):
        r = run_relational(ml["tables"], ml["links"], {**FAST, "optimiser": opt, "max_noise": None},
                           {"links": {"epsilon": 1.0, "delta": 1e-6}}, noise=NoiseSource(3), synthetic_tables=syn)
        spent[opt] = (r.report["privacy"]["rho_links_spent"], r.report["privacy"]["selections"])
        assert r.report["privacy"]["rho_links_spent"] <= r.report["privacy"]["rho_links"] * (1 + 1e-9)
    assert spent["types"][1] == spent["slices"][1]
    assert spent["types"][0] == pytest.approx(spent["slices"][0], rel=1e-12)


@pytest.mark.parametrize("dense", [True, False])
def test_type_operator_equals_the_dense_count_matrices(dense: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """apply = Q (W∘x) with Q built entry by entry from the cells, and adjoint = W∘(Qᵀ R); workloads share
    left cells (grouped) or not; ``dense: False`` takes the sparse right aggregation."""
    import privcube.relational.solvers.type_problem as tp
    if not dense:
        monkeypatch.setattr(tp, "_one_hot", functools.partial(tp._one_hot, dense_cells=0))
    rng = np.random.default_rng(4)
    A, B = 9, 13
    a1, a2 = rng.integers(0, 3, A), rng.integers(0, 5, A)
    c1 = [a1, a1, a2, a1]  # workloads 0, 1 and 3 share their left cells
    shapes = [(3, 2), (3, 4), (5, 3), (3, 1)]
    c2 = [rng.integers(0, s2, B) for _, s2 in shapes]
    W = rng.integers(0, 4, (A, B)).astype(float)
    op = type_operator(c1, c2, shapes, W)
    x, R = rng.random((A, B)), [rng.normal(size=s1 * s2) for s1, s2 in shapes]
    G = np.zeros((A, B))
    for k, (s1, s2) in enumerate(shapes):
        Q = np.zeros((s1 * s2, A * B))
        for a in range(A):
            for b in range(B):
                Q[c1[k][a] * s2 + c2[k][b], a * B + b] = 1.0
        np.testing.assert_allclose(op.apply(x)[k], Q @ (W * x).ravel(), rtol=1e-12)
        G += (Q.T @ R[k]).reshape(A, B)
    np.testing.assert_allclose(op.adjoint_counts(R), G, rtol=1e-12)
    assert op.sizes == [6, 12, 15, 3]


def _qp_projection(Z: np.ndarray, W: np.ndarray, hi: np.ndarray, rows, total: float, caps, row_caps) -> np.ndarray:
    """Reference: the projection in the record-level norm Σ_ab W_ab (x_ab − z_ab)² (the norm of the
    block-uniform record pairs) as a QP solved by cvxpy (Clarabel)."""
    import cvxpy as cp

    x = cp.Variable(Z.shape)
    L = cp.multiply(W, x)
    cons = [x >= 0, x <= hi]
    cons.append(cp.sum(L, axis=1) == rows if rows is not None else cp.sum(L) == total)
    if caps is not None:
        cons.append(cp.sum(L, axis=0) <= caps)
    if row_caps is not None:
        cons.append(cp.sum(L, axis=1) <= row_caps)
    cp.Problem(cp.Minimize(cp.sum(cp.multiply(W, cp.square(x - Z)))), cons).solve(solver=cp.CLARABEL, tol_gap_abs=1e-12,
                                                               tol_gap_rel=1e-12, tol_feas=1e-12)
    return np.asarray(x.value)


@pytest.mark.parametrize("kind", ["rows+caps", "total+row_caps", "total+both"])
def test_capped_projection_matches_a_qp_solver(kind: str) -> None:
    """With caps the projection (dual block coordinate ascent) is the QP's solution, cold and warm-started;
    the same constraints projected along a PGD-like sequence of nearby points give the cold results."""
    rng = np.random.default_rng(11)
    checked = binding = 0
    for _ in range(12):
        A, B = int(rng.integers(2, 9)), int(rng.integers(2, 9))
        W = np.outer(rng.integers(1, 9, A), rng.integers(1, 9, B)).astype(float)
        hi = np.where(rng.random((A, B)) < 0.2, 0.5, 1.0)
        full = W * hi
        if kind == "rows+caps":
            rows, row_caps = full.sum(axis=1) * rng.uniform(0.1, 0.5, A), None
            total = float(rows.sum())
            caps = np.minimum(full.sum(axis=0), np.maximum(full.sum(axis=0) * rng.uniform(0.05, 0.6, B),
                                                           1.2 * total / B))
            if caps.sum() < total:
                continue
        else:
            rows, total, row_caps = None, float(full.sum()) * 0.3, full.sum(axis=1) * 0.5
            caps = full.sum(axis=0) * 0.6 if kind == "total+both" else None
        cons = TypeConstraints(W, hi, rows, total, caps=caps, row_caps=row_caps, dykstra=5000)
        Z = rng.normal(0.3, 1.0, (A, B))
        for step in range(4):  # the same object: warm starts from the previous point's multipliers
            Zs = Z + 0.05 * step * rng.normal(size=Z.shape)
            X = cons.project(Zs)
            ref = _qp_projection(Zs, W, hi, rows, total, caps, row_caps)
            np.testing.assert_allclose(X, ref, atol=1e-6)
            cold = TypeConstraints(W, hi, rows, total, caps=caps, row_caps=row_caps, dykstra=5000).project(Zs)
            np.testing.assert_allclose(X, cold, atol=1e-8)
            checked += 1
            L = W * X  # a cap binds where the projection sits on it
            binding += any(c is not None and bool(np.any(L.sum(axis=ax) >= c - 1e-9 * max(1.0, float(c.max()))))
                           for c, ax in ((caps, 0), (row_caps, 1)))
    assert checked >= 32 and binding >= 8  # real instances, and caps that bind in many of them


def test_capped_projection_after_caps_are_added_to_the_same_constraints() -> None:
    """As in a type step: one solve without the column caps (row caps only), then the caps are set on the same
    object and its next projections start from the first solve's multipliers; they are still the QP's."""
    rng = np.random.default_rng(7)
    for _ in range(6):
        A, B = int(rng.integers(2, 8)), int(rng.integers(2, 8))
        W = np.outer(rng.integers(1, 9, A), rng.integers(1, 9, B)).astype(float)
        hi = np.ones((A, B))
        total, row_caps, caps = float(W.sum()) * 0.3, W.sum(axis=1) * 0.5, W.sum(axis=0) * 0.4
        cons = TypeConstraints(W, hi, None, total, row_caps=row_caps, dykstra=5000)
        Z = rng.normal(0.3, 1.0, (A, B))
        np.testing.assert_allclose(cons.project(Z), _qp_projection(Z, W, hi, None, total, None, row_caps), atol=1e-6)
        cons.caps = caps
        Z2 = Z + 0.1 * rng.normal(size=Z.shape)
        X = cons.project(Z2)
        np.testing.assert_allclose(X, _qp_projection(Z2, W, hi, None, total, caps, row_caps), atol=1e-6)
        assert np.all((W * X).sum(axis=0) <= caps + 1e-9 * max(1.0, float(caps.max())))  # the stop's tolerance
