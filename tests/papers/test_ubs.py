"""UBS (Algorithm 3): exact size, unbiased inclusion, Figure 1 behaviour; and the exact projections."""
from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from scipy.optimize import minimize

from privcube.core.errors import DataError
from privcube.relational.solvers.projection import project_box_sum, project_rows_simplex
from privcube.relational.solvers.ubs import (
    categorical_rows,
    merge_groups,
    sample_and_reject,
    ubs,
    ubs_indicator,
)

FIG1 = np.array([0.1, 0.2, 0.5, 0.7, 0.6, 0.9])


def _fig1_exact() -> dict[tuple[int, ...], float]:
    """Exact joint of Figure 1 (0-based), derived by hand from the merge/exclude/pick structure."""
    pick0 = {0: 0.125, 1: 0.25, 2: 0.625}
    out = {(3, 4, 5): 0.2}
    for excl, pe in ((3, 0.3), (4, 0.4), (5, 0.1)):
        rest = tuple(i for i in (3, 4, 5) if i != excl)
        for i, pi in pick0.items():
            out[tuple(sorted((i, *rest)))] = pe * pi
    return out


def test_figure1_merge_groups() -> None:
    starts = merge_groups(FIG1)
    assert starts.tolist() == [0, 3, 4, 5]  # G0={1,2,3}, G1={4}, G2={5}, G3={6} in 1-based labels


def test_figure1_joint_distribution() -> None:
    rng = np.random.default_rng(1)
    R = 20000
    counts = Counter(tuple(ubs(FIG1, 3, rng, shuffle=False).tolist()) for _ in range(R))
    exact = _fig1_exact()
    assert set(counts) <= set(exact)
    assert abs(sum(exact.values()) - 1.0) < 1e-12
    for s, p in exact.items():
        assert abs(counts[s] / R - p) < 4.5 * np.sqrt(p * (1 - p) / R) + 1e-4, s
    assert abs(exact[(2, 4, 5)] - 0.1875) < 1e-12 and abs(exact[(2, 3, 5)] - 0.25) < 1e-12


@pytest.mark.parametrize("x,m", [
    (FIG1, 3),
    (np.full(10, 0.3), 3),
    (np.array([1.0, 0.0, 0.5, 0.5, 1.0, 0.0]), 3),
    (np.array([0.2, 0.3, 0.1, 0.4]), 1),
    (np.array([0.9, 0.9, 0.8, 0.7, 0.7]), 4),
    (np.array([0.5, 0.5, 0.25, 0.75, 0.5, 0.5]), 3),  # prefix sums hit exactly 1
])
def test_inclusion_probabilities_match_input(x: np.ndarray, m: int) -> None:
    rng = np.random.default_rng(7)
    R = 8000
    freq = np.zeros(x.size)
    for _ in range(R):
        out = ubs(x, m, rng)
        assert out.size == m and np.unique(out).size == m
        assert np.all(x[out] > 0)
        freq[out] += 1
    freq /= R
    assert np.all(freq[x == 1.0] == 1.0) and np.all(freq[x == 0.0] == 0.0)
    bound = 4.5 * np.sqrt(x * (1 - x) / R) + 1e-9
    assert np.all(np.abs(freq - x) <= bound), (freq, x)


def test_exactly_m_ones_large_random() -> None:
    rng = np.random.default_rng(3)
    for n, m in ((100000, 40), (5000, 2500), (1000, 999)):
        x = rng.random(n)
        x = project_box_sum(x, m)
        v = ubs_indicator(x, m, rng)
        assert int(v.sum()) == m and set(np.unique(v)) <= {0, 1}


def test_merge_structure_and_negative_correlation() -> None:
    rng = np.random.default_rng(5)
    x = project_box_sum(rng.random(200), 30)
    starts = merge_groups(x)
    p = np.add.reduceat(x, starts)
    assert 30 <= starts.size <= 59
    assert np.all(p[:-1] + p[1:] > 1.0 - 1e-9) and np.all(p <= 1 + 1e-9)
    x = np.array([0.4, 0.6, 0.5, 0.5])
    draws = np.array([ubs_indicator(x, 2, rng) for _ in range(8000)], dtype=float)
    cov = np.cov(draws.T)
    assert np.all(cov[~np.eye(4, dtype=bool)] <= 0.01)


def test_sample_and_reject_is_biased_example1() -> None:
    rng = np.random.default_rng(0)
    x = np.array([1.0, 0.5, 0.5])
    R = 6000
    f = sum(0 in sample_and_reject(x, 2, rng) for _ in range(R)) / R
    assert abs(f - 5 / 6) < 0.015  # the naive method gives 5/6, not x_1 = 1
    assert all(0 in ubs(x, 2, rng) for _ in range(2000))


def test_ubs_bad_input() -> None:
    with pytest.raises(DataError, match="sums to"):
        ubs(np.array([0.5, 0.6]), 2)
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        ubs(np.array([1.5, 0.5]), 2)


def test_categorical_rows_unbiased() -> None:
    rng = np.random.default_rng(2)
    P = np.array([[0.2, 0.8, 0.0], [0.0, 0.0, 1.0], [1 / 3, 1 / 3, 1 / 3]])
    R = 20000
    draws = np.array([categorical_rows(P, rng) for _ in range(R)])
    for i in range(3):
        f = np.bincount(draws[:, i], minlength=3) / R
        assert np.all(np.abs(f - P[i]) < 0.015)


# -------------------------------------------------------------------------------- projection
def _qp_projection(b: np.ndarray, m: float, hi: np.ndarray) -> np.ndarray:
    """Brute-force QP via scipy SLSQP: min ||x-b||² s.t. 0 ≤ x ≤ hi, Σx = m."""
    res = minimize(lambda x: np.sum((x - b) ** 2), np.full(b.size, m / b.size).clip(0, hi),
                   jac=lambda x: 2 * (x - b), bounds=list(zip(np.zeros(b.size), hi)),
                   constraints=[{"type": "eq", "fun": lambda x: x.sum() - m, "jac": lambda x: np.ones_like(x)}],
                   method="SLSQP", options={"ftol": 1e-14, "maxiter": 500})
    return res.x


@pytest.mark.parametrize("seed", range(6))
def test_projection_matches_qp(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 12))
    b = rng.normal(0.5, 1.0, n)
    hi = np.ones(n)
    if seed % 2:
        hi[rng.random(n) < 0.2] = 0.0  # masked entries
    m = float(rng.integers(0, int(hi.sum()) + 1))
    x = project_box_sum(b, m, 0.0, hi)
    ref = _qp_projection(b, m, hi)
    assert abs(x.sum() - m) < 1e-9
    assert np.all(x >= 0) and np.all(x <= hi)
    assert np.max(np.abs(x - ref)) < 1e-5
    assert np.sum((x - b) ** 2) <= np.sum((ref - b) ** 2) + 1e-9


def test_projection_properties() -> None:
    rng = np.random.default_rng(11)
    a, c = rng.normal(size=500), rng.normal(size=500)
    pa, pc = project_box_sum(a, 37), project_box_sum(c, 37)
    assert np.linalg.norm(pa - pc) <= np.linalg.norm(a - c) + 1e-12  # non-expansive
    assert np.allclose(project_box_sum(pa, 37), pa, atol=1e-12)  # idempotent
    # KKT: interior entries share one shift; clipped ones are on the right side
    y = (pa - a)[(pa > 1e-12) & (pa < 1 - 1e-12)]
    assert np.ptp(y) < 1e-9
    assert np.all(a[pa <= 1e-12] + y[0] <= 1e-9) and np.all(a[pa >= 1 - 1e-12] + y[0] >= 1 - 1e-9)
    with pytest.raises(DataError, match="infeasible"):
        project_box_sum(a[:3], 4)


def test_row_simplex_projection_matches_brute_force() -> None:
    rng = np.random.default_rng(4)
    B = rng.normal(size=(5, 4))
    out = project_rows_simplex(B)
    assert np.allclose(out.sum(axis=1), 1.0) and np.all(out >= 0)
    for i in range(5):
        assert np.allclose(out[i], _qp_projection(B[i], 1.0, np.ones(4)), atol=1e-5)
    mask = np.array([[True, False, True, True]] * 5)
    out = project_rows_simplex(B, mask)
    assert np.all(out[:, 1] == 0) and np.allclose(out.sum(axis=1), 1.0)
    assert np.allclose(out, np.vstack([project_box_sum(B[i], 1.0, 0.0, mask[i].astype(float)) for i in range(5)]),
                       atol=1e-9)


def test_fig1_exact_joint_is_a_distribution_with_fig1_marginals() -> None:
    exact = _fig1_exact()
    marg = np.zeros(6)
    for s, p in exact.items():
        marg[list(s)] += p
    assert np.allclose(marg, FIG1)
    assert all(len(s) == 3 for s in exact) and len(list(itertools.chain(exact))) == 10


def test_reusable_projector_writes_out_and_matches_qp() -> None:
    """The PGD projector (scratch buffers reused, result written into ``out``) equals the brute-force QP
    on every call, with scalar or masked bounds, and refuses an ``out`` that overlaps its input."""
    from privcube.relational.solvers.projection import BoxSumProjector

    rng = np.random.default_rng(21)
    hi = np.ones((3, 4))
    hi[0, 0] = hi[2, 1] = 0.0  # masked cells (self-loops)
    for bounds in (1.0, hi):
        proj = BoxSumProjector(5.0, 0.0, bounds)
        out = np.empty((3, 4))
        for _ in range(4):
            b = rng.normal(0.4, 0.8, (3, 4))
            res = proj(b, out=out)
            assert res.base is out or res is out
            ref = _qp_projection(b.ravel(), 5.0, np.broadcast_to(bounds, (3, 4)).ravel())
            assert np.max(np.abs(out.ravel() - ref)) < 1e-5 and abs(out.sum() - 5.0) < 1e-9
            assert np.all(out >= 0) and np.all(out <= bounds)
        with pytest.raises(DataError, match="overlap"):
            proj(out, out=out)
