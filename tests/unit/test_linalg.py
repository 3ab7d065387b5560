"""Implicit matrices, marginal algebra and expected-error formulas against dense numpy."""
from __future__ import annotations

import itertools
import math
from functools import reduce

import numpy as np
import pytest

from privcube.core.errors import MemoryLimitError, WorkloadError
from privcube.linalg import (Explicit, Kronecker, MarginalsStrategy, VStack, Weighted, char_vector,
                             expected_total_squared_error, frobenius_error, gram_apply, marginal_approximation,
                             marginal_objective, marginal_query_variances, marginal_svdb, svd_bound, svdb_explicit,
                             union_of_kron, x_matrix, y_matrix, g_inverse_weights)

RNG = np.random.default_rng(7)


def _dense_marginal(shape, a):
    d = len(shape)
    fs = [np.eye(n) if (a >> (d - 1 - i)) & 1 else np.ones((1, n)) for i, n in enumerate(shape)]
    return reduce(np.kron, fs)


def test_kronecker_matvec_rmatvec_norms_pinv_match_dense():
    fs = [RNG.random((3, 2)), RNG.random((4, 5)), RNG.standard_normal((2, 3))]
    k = Kronecker(fs)
    d = reduce(np.kron, fs)
    x, y = RNG.random(30), RNG.random(24)
    assert np.allclose(k.matvec(x), d @ x)
    assert np.allclose(k.rmatvec(y), d.T @ y)
    assert np.allclose(k.column_norms_l1(), np.abs(d).sum(0))
    assert k.sensitivity(1) == pytest.approx(np.abs(d).sum(0).max())
    assert k.sensitivity(2) == pytest.approx(np.sqrt((d**2).sum(0)).max())
    assert k.frobenius_sq() == pytest.approx((d**2).sum())
    assert np.allclose(k.pinv().dense(), np.linalg.pinv(d))
    assert np.allclose(k.gram().dense(), d.T @ d)


def test_vstack_weighted_union():
    a, b = Kronecker([RNG.random((2, 3)), RNG.random((3, 2))]), Explicit(RNG.random((4, 6)))
    s = VStack([Weighted(a, 2.0), b])
    d = np.vstack([2 * a.dense(), b.dense()])
    x, y = RNG.random(6), RNG.random(10)
    assert np.allclose(s.matvec(x), d @ x) and np.allclose(s.rmatvec(y), d.T @ y)
    assert s.sensitivity(1) == pytest.approx(np.abs(d).sum(0).max())
    assert s.sensitivity(2) == pytest.approx(np.sqrt((d**2).sum(0).max()))
    assert np.allclose(s.gram().dense(), d.T @ d)
    assert np.allclose(Weighted(a, 2.0).pinv().dense(), np.linalg.pinv(2 * a.dense()))
    with pytest.raises(WorkloadError, match="columns"):
        VStack([Explicit(np.ones((1, 2))), Explicit(np.ones((1, 3)))])


def test_dense_guard_names_size():
    big = Kronecker([np.ones((1, 2**13)), np.ones((2**14, 1))])  # 2^27 entries, tiny factors
    with pytest.raises(MemoryLimitError, match="dense"):
        big.dense()


def test_expected_error_laplace_and_gaussian_dense():
    w = Explicit(RNG.random((7, 5)))
    a = Explicit(RNG.random((6, 5)))
    wa = w.a @ np.linalg.pinv(a.a)
    l1 = np.abs(a.a).sum(0).max()
    l2 = np.sqrt((a.a**2).sum(0).max())
    assert expected_total_squared_error(w, a, "laplace", epsilon=0.5) == pytest.approx(2 / 0.25 * l1**2 * (wa**2).sum())
    assert expected_total_squared_error(w, a, "gaussian", sigma=3.0) == pytest.approx(9 * l2**2 * (wa**2).sum())
    with pytest.raises(WorkloadError, match="epsilon"):
        expected_total_squared_error(w, a, "laplace")


def test_kronecker_error_decomposition_on_union():
    shape = (3, 4)
    terms = [(1.0, [RNG.random((2, 3)), RNG.random((5, 4))]), (0.5, [np.eye(3), np.ones((1, 4))])]
    w = union_of_kron(terms)
    a = Kronecker([RNG.random((4, 3)), RNG.random((4, 4))])
    dense = np.sum((w.dense() @ np.linalg.pinv(a.dense())) ** 2)
    assert frobenius_error(w, a) == pytest.approx(dense, rel=1e-9)
    del shape


def test_svdb_factorises_and_matches_dense():
    f1, f2 = RNG.random((4, 3)), RNG.random((5, 4))
    k = Kronecker([f1, f2])
    dense = svdb_explicit(k.dense().T @ k.dense())
    assert svd_bound(k) == pytest.approx(dense, rel=1e-9)
    s = np.linalg.svd(k.dense(), compute_uv=False)
    assert dense == pytest.approx(s.sum() ** 2 / 12, rel=1e-9)


def test_marginal_algebra_on_234():
    shape = (2, 3, 4)
    n = 24
    c = char_vector(shape)
    assert c[0] == 24 and c[7] == 1 and c[0b011] == 2 and c[0b100] == 12
    u, v = RNG.random(8), RNG.random(8)

    def gdense(z):
        return sum(z[a] * _dense_marginal(shape, a).T @ _dense_marginal(shape, a) for a in range(8))

    assert np.allclose(gdense(u) @ gdense(v), gdense(x_matrix(u, shape) @ v))
    assert np.allclose(gdense(u) @ gdense(v), gdense(v) @ gdense(u))
    x = RNG.random(n)
    assert np.allclose(gram_apply(u, x, shape), gdense(u) @ x)
    # eigenvalues κ = Y w with multiplicities ∏(n_i − 1) (Thm 9/12, corrected)
    lam = np.sort(np.linalg.eigvalsh(gdense(u)))
    kappa = y_matrix(shape) @ u
    mult = [math.prod(n_i - 1 for i, n_i in enumerate(shape) if (a >> (2 - i)) & 1) for a in range(8)]
    assert np.allclose(lam, np.sort(np.repeat(kappa, mult)))
    # g-inverse with a zero weight on the full marginal
    u2 = u.copy()
    u2[7] = 0.0
    u2[3] = 0.0
    eta = g_inverse_weights(u2, shape)
    assert np.allclose(gdense(u2) @ gdense(eta) @ gdense(u2), gdense(u2))


def test_marginal_objective_matches_dense_and_gradient():
    shape = (2, 3, 4)
    terms = [(1.0, [RNG.random((3, 2)), np.eye(3), RNG.random((2, 4))]),
             (0.7, [np.ones((1, 2)), np.tril(np.ones((3, 3))), np.eye(4)])]
    w = marginal_approximation(terms, shape)
    theta = RNG.random(8) + 0.1
    m = MarginalsStrategy(shape, theta)
    wd = union_of_kron(terms).dense()
    dense = np.sum((wd @ np.linalg.pinv(m.dense())) ** 2)
    val, g = marginal_objective(theta**2, w, shape, gradient=True)
    assert val == pytest.approx(dense, rel=1e-8)
    assert frobenius_error(union_of_kron(terms), m) == pytest.approx(dense, rel=1e-8)
    u = theta**2
    num = np.array([(marginal_objective(u + 1e-6 * e, w, shape)[0] - marginal_objective(u - 1e-6 * e, w, shape)[0])
                    / 2e-6 for e in np.eye(8)])
    assert np.allclose(g, num, rtol=1e-5)
    # not supported: only the total is measured
    t = np.zeros(8)
    t[0] = 1.0
    assert marginal_objective(t, w, shape)[0] == math.inf


def test_marginals_strategy_ops_pinv_and_variances():
    shape = (2, 3, 4)
    theta = np.zeros(8)
    theta[[0b110, 0b011, 0b101]] = [0.5, 0.3, 0.2]
    m = MarginalsStrategy(shape, theta)
    d = np.vstack([theta[a] * _dense_marginal(shape, a) for a in range(8) if theta[a]])
    x, y = RNG.random(24), RNG.random(d.shape[0])
    assert np.allclose(m.matvec(x), d @ x) and np.allclose(m.rmatvec(y), d.T @ y)
    assert m.sensitivity(1) == pytest.approx(1.0) and m.sensitivity(2) == pytest.approx(math.sqrt(0.38))
    q = [np.eye(2), np.eye(3), np.ones((1, 4))]  # marginal 110, supported
    wq = reduce(np.kron, q)
    assert np.allclose(wq @ m.pinv().matvec(y), wq @ np.linalg.pinv(d) @ y)
    eta = g_inverse_weights(theta**2, shape)
    assert np.allclose(marginal_query_variances(eta, q), np.diag(wq @ np.linalg.pinv(d.T @ d) @ wq.T))


def test_marginal_svdb_matches_dense():
    shape = (2, 3, 4)
    terms = [(1.0, [np.eye(n) if i in c else np.ones((1, n)) for i, n in enumerate(shape)])
             for c in itertools.combinations(range(3), 2)]
    wd = union_of_kron(terms).dense()
    assert marginal_svdb(marginal_approximation(terms, shape), shape) == pytest.approx(
        svdb_explicit(wd.T @ wd), rel=1e-6)  # dense zero eigenvalues add ~1e-7 of sqrt noise


def test_subset_sum_algebra_matches_dense_y_and_pinv():
    """O(d·2^d) transforms: κ = Y u, its inverse, and 𝔾(η) = 𝔾(u)⁺ (used past 11 attributes) against dense."""
    from privcube.linalg.marginals import eigenvalues, from_eigenvalues, pinv_weights, subset_sum, superset_sum

    shape = (2, 3, 4)
    u = RNG.random(8)
    u[[0b111, 0b011]] = 0.0            # singular 𝔾(u)
    assert np.allclose(eigenvalues(u, shape), y_matrix(shape) @ u)
    assert np.allclose(from_eigenvalues(y_matrix(shape) @ u, shape), u)
    f = RNG.random(16)
    sup = np.array([sum(f[b] for b in range(16) if b & a == a) for a in range(16)])
    sub = np.array([sum(f[a] for a in range(16) if a & b == a) for b in range(16)])
    assert np.allclose(superset_sum(f), sup) and np.allclose(subset_sum(f), sub)

    def gdense(z):
        return sum(z[a] * _dense_marginal(shape, a).T @ _dense_marginal(shape, a) for a in range(8))

    assert np.allclose(gdense(pinv_weights(u, shape)), np.linalg.pinv(gdense(u), hermitian=True), atol=1e-10)


def test_marginal_objective_runs_on_14_attributes():
    """Adult's 14 attributes (2^14 weights): objective and gradient in O(d·2^d), identity = ‖W‖_F²."""
    shape = (100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2)
    terms = [(1.0, [np.eye(n) if i in c else np.ones((1, n)) for i, n in enumerate(shape)])
             for c in itertools.combinations(range(14), 2)]
    w = marginal_approximation(terms, shape)
    ident = np.zeros(2**14)
    ident[-1] = 1.0
    val, g = marginal_objective(ident, w, shape, gradient=True)
    fro = sum(math.prod(shape) for _ in terms)   # each 2-way marginal of the identity: ‖W_j‖_F² = n
    assert val == pytest.approx(fro, rel=1e-9) and g.shape == (2**14,) and np.all(np.isfinite(g))
