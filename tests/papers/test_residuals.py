"""Residual algebra: checked against dense matrix forms (App. C) and the paper's worked example (App. A)."""
from __future__ import annotations

import itertools
from functools import reduce

import dask
import dask.array as da
import numpy as np
import pytest

from privcube.core.domain import Domain
from privcube.core.errors import DataError, DomainError, MemoryLimitError
from privcube.core.residuals import (
    axis_center,
    axis_smear,
    axis_sub,
    axis_sum,
    decomp,
    marginal_from_residuals,
    p_coef,
    recon,
    recon_add,
    residual_covariance,
    residual_gram_norm,
    residual_precision_factors,
    residuals_of,
    subsets,
    v_coef,
)


# ---------------------------------------------------------------- independent dense matrix forms
def S(n: int) -> np.ndarray:
    """Table 1: S_(n) = [-1 | I] of shape (n-1, n)."""
    return np.hstack([-np.ones((n - 1, 1)), np.eye(n - 1)])


def S_plus(n: int) -> np.ndarray:
    """Table 1: S⁺ = [0ᵀ; I] - (1/n) 1_n 1_{n-1}ᵀ of shape (n, n-1)."""
    return np.vstack([np.zeros((1, n - 1)), np.eye(n - 1)]) - np.ones((n, n - 1)) / n


def T(tau, gamma, sizes) -> np.ndarray:
    """Eq. 3: T_{τ,γ} = ⊗_{k∈γ} (S if k∈τ else 1ᵀ)."""
    mats = [S(sizes[k]) if k in tau else np.ones((1, sizes[k])) for k in gamma]
    return reduce(np.kron, mats, np.ones((1, 1)))


def T_plus(tau, gamma, sizes) -> np.ndarray:
    """Eq. 4: T⁺_{τ,γ} = ⊗_{k∈γ} (S⁺ if k∈τ else 1/n_k)."""
    mats = [S_plus(sizes[k]) if k in tau else np.ones((sizes[k], 1)) / sizes[k] for k in gamma]
    return reduce(np.kron, mats, np.ones((1, 1)))


SHAPES = [(5,), (3, 4), (2, 3, 2), (2, 3, 4, 2)]


def _clique(shape):
    names = ["a", "b", "c", "d"][: len(shape)]
    return tuple(names), dict(zip(names, shape))


# ---------------------------------------------------------------- in-axis ops
def test_axis_ops_match_table1_matrices():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 5))
    np.testing.assert_allclose(axis_sum(x, 1), x @ np.ones(5))
    np.testing.assert_allclose(axis_sub(x, 1), x @ S(5).T)
    np.testing.assert_allclose(axis_sub(x, 0), S(4) @ x)
    np.testing.assert_allclose(axis_center(x, 1), x @ S_plus(6).T)
    np.testing.assert_allclose(axis_center(x, 0), S_plus(5) @ x)
    np.testing.assert_allclose(axis_center(x, -1).sum(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(axis_sub(axis_center(x, 1), 1), x)  # S S⁺ = I
    sm = axis_smear(x, 1, 3)
    assert sm.shape == (4, 3, 5)
    np.testing.assert_allclose(sm[:, 2, :], x / 3)
    np.testing.assert_allclose(axis_sum(sm, 1), x)


def test_axis_sum_of_vector_is_array():
    out = axis_sum(np.array([1, 2, 3]), 0)
    assert isinstance(out, np.ndarray) and out.shape == () and out == 6


# ---------------------------------------------------------------- decomp / recon vs dense forms
@pytest.mark.parametrize("shape", SHAPES)
def test_decomp_and_recon_equal_dense_T(shape):
    gamma, sizes = _clique(shape)
    rng = np.random.default_rng(len(shape))
    mu = rng.integers(0, 20, size=shape).astype(float)
    for tau in subsets(gamma):
        z = decomp(mu, gamma, tau)
        assert z.shape == tuple(sizes[k] - 1 for k in tau)
        np.testing.assert_allclose(z.ravel(), T(tau, gamma, sizes) @ mu.ravel(), atol=1e-10)
        np.testing.assert_allclose(
            recon(z, tau, gamma, sizes).ravel(), T_plus(tau, gamma, sizes) @ z.ravel(), atol=1e-10
        )


@pytest.mark.parametrize("shape", SHAPES)
def test_recon_of_all_decomps_is_identity(shape):
    gamma, sizes = _clique(shape)
    mu = np.random.default_rng(7).normal(size=shape)
    total = sum(recon(decomp(mu, gamma, t), t, gamma, sizes) for t in subsets(gamma))
    np.testing.assert_allclose(total, mu, atol=1e-10)
    np.testing.assert_allclose(marginal_from_residuals(residuals_of(mu, gamma), gamma, sizes), mu, atol=1e-10)


def test_residuals_of_matches_decomp_and_domain_sizes():
    dom = Domain(("x", "y", "z"), (3, 2, 4))
    mu = np.random.default_rng(3).integers(0, 9, size=(3, 2, 4))
    res = residuals_of(mu, dom.attributes)
    assert list(res) == subsets(dom.attributes)
    for t, z in res.items():
        np.testing.assert_array_equal(z, decomp(mu, dom.attributes, t))
    np.testing.assert_allclose(marginal_from_residuals(res, dom.attributes, dom), mu, atol=1e-10)


def test_subsets_order():
    assert subsets(("a", "b", "c")) == [
        (), ("a",), ("b",), ("c",), ("a", "b"), ("a", "c"), ("b", "c"), ("a", "b", "c"),
    ]
    assert subsets(()) == [()]


def test_one_dimensional_gamma_and_empty_gamma():
    mu = np.array([3.0, 1.0, 6.0])
    z = decomp(mu, ["a"], ["a"])
    np.testing.assert_allclose(z, [-2.0, 3.0])
    np.testing.assert_allclose(recon(z, ["a"], ["a"], {"a": 3}), mu - mu.mean())
    np.testing.assert_allclose(recon(10, [], ["a"], {"a": 3}), [10 / 3] * 3)
    assert float(decomp(np.array(5.0), (), ())) == 5.0
    assert float(recon(np.array(5.0), (), (), {})) == 5.0


# ---------------------------------------------------------------- paper's worked example (App. A)
MU = np.array([[7, 5, 2], [3, 5, 11], [10, 2, 11], [9, 18, 17]])
G = ("Age", "Educ")
SZ = {"Age": 4, "Educ": 3}


def test_appendix_a_residuals():
    assert decomp(MU, G, ()) == 100
    np.testing.assert_array_equal(decomp(MU, G, ("Age",)), [5, 9, 30])
    np.testing.assert_array_equal(decomp(MU, G, ("Educ",)), [1, 12])
    np.testing.assert_array_equal(decomp(MU, G, G), [[4, 13], [-6, 6], [11, 13]])
    # footnote 1: decomposing the sub-marginals gives the same residuals
    np.testing.assert_array_equal(decomp(np.array([14, 19, 23, 44]), ("Age",), ("Age",)), [5, 9, 30])
    np.testing.assert_array_equal(decomp(np.array([29, 30, 41]), ("Educ",), ("Educ",)), [1, 12])


def test_appendix_a_recon_components_with_erratum():
    comps = {
        (): np.full((4, 3), 100.0),
        ("Age",): np.repeat([[-44.0], [-24.0], [-8.0], [76.0]], 3, axis=1),
        ("Educ",): np.tile([-13.0, -10.0, 23.0], (4, 1)),
        # the paper prints 32 at row 1, col 2; rows must sum to 0, so it is 33
        G: np.array([[41.0, 14, -55], [-27, -6, 33], [41, -58, 17], [-55, 50, 5]]),
    }
    zetas = {(): 100, ("Age",): [5, 9, 30], ("Educ",): [1, 12], G: [[4, 13], [-6, 6], [11, 13]]}
    for t, want in comps.items():
        np.testing.assert_allclose(12 * recon(np.array(zetas[t]), t, G, SZ), want, atol=1e-10)
    np.testing.assert_allclose(sum(comps.values()) / 12, MU, atol=1e-10)
    np.testing.assert_allclose(marginal_from_residuals(zetas, G, SZ), MU, atol=1e-10)


# ---------------------------------------------------------------- structural properties
def test_decomp_of_superset_equals_decomp_of_marginal():
    gamma, sizes = _clique((3, 4, 2, 3))
    mu = np.random.default_rng(11).integers(0, 30, size=(3, 4, 2, 3))
    for sub in subsets(gamma):
        axes = tuple(i for i, a in enumerate(gamma) if a not in sub)
        mu_sub = mu.sum(axis=axes)
        for t in subsets(sub):
            np.testing.assert_array_equal(decomp(mu, gamma, t), decomp(mu_sub, sub, t))


def test_recon_images_orthogonal_and_decomp_recon_selects():
    gamma, sizes = _clique((3, 2, 4))
    rng = np.random.default_rng(5)
    taus = subsets(gamma)
    parts = {}
    for t in taus:
        z = rng.normal(size=tuple(sizes[k] - 1 for k in t))
        parts[t] = (z, recon(z, t, gamma, sizes))
    for t1, t2 in itertools.combinations(taus, 2):
        assert abs(np.vdot(parts[t1][1], parts[t2][1])) < 1e-10
    for t1 in taus:
        for t2 in taus:
            back = decomp(parts[t1][1], gamma, t2)
            want = parts[t1][0] if t1 == t2 else np.zeros_like(back)
            np.testing.assert_allclose(back, want, atol=1e-10)


def test_recon_add_equals_recon_and_scales():
    gamma, sizes = _clique((3, 4, 2))
    rng = np.random.default_rng(9)
    for t in subsets(gamma):
        z = rng.normal(size=tuple(sizes[k] - 1 for k in t))
        base = rng.normal(size=(3, 4, 2))
        out = base.copy()
        ret = recon_add(out, z, t, gamma, sizes, scale=-2.5)
        assert ret is out
        np.testing.assert_allclose(out, base - 2.5 * recon(z, t, gamma, sizes), atol=1e-12)


def test_recon_add_rejects_int_output_and_bad_shape():
    with pytest.raises(DataError, match="floating"):
        recon_add(np.zeros((3,), dtype=int), [1, 2], ["a"], ["a"], {"a": 3})
    with pytest.raises(DomainError, match="shape"):
        recon_add(np.zeros((4,)), [1, 2], ["a"], ["a"], {"a": 3})


# ---------------------------------------------------------------- coefficients vs dense forms
SIZES3 = {"a": 3, "b": 4, "c": 2}
ATTRS3 = ("a", "b", "c")


def R_dense(tau) -> np.ndarray:
    """R_τ over the full 3-attribute data vector: ⊗_k (S if k∈τ else 1ᵀ)."""
    return T(tau, ATTRS3, SIZES3)


def test_p_coef_is_diagonal_of_precision_form():
    sigma2 = 2.7
    for tau in subsets(ATTRS3):
        Rt = R_dense(tau)
        V = reduce(np.kron, [np.eye(SIZES3[k] - 1) + 1 for k in tau], np.ones((1, 1)))
        SS = reduce(np.kron, [S(SIZES3[k]) @ S(SIZES3[k]).T for k in tau], np.ones((1, 1)))
        np.testing.assert_allclose(V, SS, atol=1e-12)  # V_τ = ⊗ S Sᵀ
        np.testing.assert_allclose(residual_covariance(tau, SIZES3), V, atol=1e-12)
        M = Rt.T @ np.linalg.inv(sigma2 * V) @ Rt
        np.testing.assert_allclose(np.diag(M), p_coef(tau, SIZES3) / sigma2, atol=1e-12)
        prec = reduce(np.kron, residual_precision_factors(tau, SIZES3), np.ones((1, 1)))
        np.testing.assert_allclose(prec, np.linalg.inv(V), atol=1e-10)
    assert p_coef((), SIZES3) == 1.0
    assert p_coef(("a", "b"), SIZES3) == pytest.approx(2 / 3 * 3 / 4)


def test_v_coef_is_per_cell_variance_of_recon_noise():
    for gamma in [ATTRS3, ("a", "c"), ("b",)]:
        for tau in subsets(gamma):
            Tp = T_plus(tau, gamma, SIZES3)
            V = reduce(np.kron, [np.eye(SIZES3[k] - 1) + 1 for k in tau], np.ones((1, 1)))
            cov = Tp @ V @ Tp.T
            np.testing.assert_allclose(np.diag(cov), v_coef(tau, gamma, SIZES3), atol=1e-12)


def test_iid_equivalence():
    for gamma in [ATTRS3, ("a", "b"), ("c",), ()]:
        total = sum(
            p_coef(t, SIZES3) / np.prod([SIZES3[j] for j in gamma if j not in t])
            for t in subsets(gamma)
        )
        assert total == pytest.approx(1.0)
        # and Decomp of IID noise on μ_γ has covariance (∏_{γ\τ} n_j) V_τ
        for t in subsets(gamma):
            Tm = T(t, gamma, SIZES3)
            scale = np.prod([SIZES3[j] for j in gamma if j not in t])
            np.testing.assert_allclose(Tm @ Tm.T, scale * residual_covariance(t, SIZES3), atol=1e-10)


def test_residual_gram_norm_matches_dense():
    rng = np.random.default_rng(2)
    for tau in subsets(ATTRS3):
        u = rng.normal(size=tuple(SIZES3[k] - 1 for k in tau))
        V = residual_covariance(tau, SIZES3)
        want = u.ravel() @ np.linalg.solve(V, u.ravel())
        assert residual_gram_norm(u, tau, SIZES3) == pytest.approx(want)


# ---------------------------------------------------------------- errors
def test_errors_name_the_problem():
    with pytest.raises(DomainError, match="'s'"):
        decomp(np.ones((1, 3)), ("s", "t"), ("s",))
    with pytest.raises(DomainError, match="'s'"):
        p_coef(("s",), {"s": 1})
    with pytest.raises(DomainError, match="not in gamma"):
        decomp(np.ones((2, 3)), ("s", "t"), ("u",))
    with pytest.raises(DomainError, match="unknown attribute 'q'"):
        recon(np.ones(2), ("q",), ("q",), {"a": 3})
    with pytest.raises(DomainError, match="shape"):
        recon(np.ones(3), ("a",), ("a",), {"a": 3})
    with pytest.raises(DomainError, match="missing"):
        marginal_from_residuals({(): 1.0}, ("a",), {"a": 3})
    with pytest.raises(MemoryLimitError):
        residual_covariance(("a", "b"), {"a": 100, "b": 100})
    got = marginal_from_residuals({(): 6.0, ("z",): [1.0]}, ("a",), {"a": 3}, allow_missing=True)
    np.testing.assert_allclose(got, [2.0, 2.0, 2.0])


# ---------------------------------------------------------------- dask
def test_engine_functions_accept_dask():
    gamma, sizes = _clique((5, 4, 3))
    mu = np.random.default_rng(4).integers(0, 50, size=(5, 4, 3)).astype(float)
    dmu = da.from_array(mu, chunks=(2, 3, 2))
    with dask.config.set(scheduler="synchronous"):
        for t in subsets(gamma):
            want = decomp(mu, gamma, t)
            z1 = decomp(dmu, gamma, t)
            assert isinstance(z1, da.Array)
            np.testing.assert_allclose(z1.compute(), want)
            dz = da.from_array(want, chunks=2) if want.ndim else da.from_array(want)
            r_np = recon(want, t, gamma, sizes)
            r1 = recon(dz, t, gamma, sizes)
            np.testing.assert_allclose(r1.compute(), r_np, atol=1e-10)
            assert residual_gram_norm(dz, t, sizes).compute() == pytest.approx(
                residual_gram_norm(want, t, sizes)
            )
        lazy = marginal_from_residuals(residuals_of(dmu, gamma), gamma, sizes)
        assert isinstance(lazy, da.Array)
        np.testing.assert_allclose(lazy.compute(), mu, atol=1e-9)
