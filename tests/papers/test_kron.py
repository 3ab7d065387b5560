"""Kronecker matvec against the dense ``np.kron`` product (HDMM Alg. 1; NOTES.md erratum E3)."""
from __future__ import annotations

from functools import reduce

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import aslinearoperator

from privcube.core.errors import DomainError, MemoryLimitError
from privcube.graphs.kron import kron_matvec_dask, kron_rmatvec_dask
from privcube.core.kron import kron_dense, kron_matvec, kron_rmatvec

SHAPES = [
    [(3, 3)],
    [(2, 3), (4, 4)],
    [(2, 3), (4, 4), (5, 2)],
    [(1, 4), (3, 2), (2, 2), (6, 3)],
]


def _factors(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s) for s in shapes]


def _dense(factors):
    """Independent reference: np.kron of dense copies."""
    return reduce(np.kron, [f.toarray() if sp.issparse(f) else np.asarray(f) for f in factors])


@pytest.mark.parametrize("shapes", SHAPES)
def test_matvec_and_rmatvec_equal_dense(shapes):
    F = _factors(shapes)
    K = _dense(F)
    rng = np.random.default_rng(1)
    x = rng.normal(size=K.shape[1])
    np.testing.assert_allclose(kron_matvec(F, x), K @ x, atol=1e-10)
    X = rng.normal(size=(K.shape[1], 3))
    np.testing.assert_allclose(kron_matvec(F, X), K @ X, atol=1e-10)
    y = rng.normal(size=K.shape[0])
    np.testing.assert_allclose(kron_rmatvec(F, y), K.T @ y, atol=1e-10)
    Y = rng.normal(size=(K.shape[0], 2))
    np.testing.assert_allclose(kron_rmatvec(F, Y), K.T @ Y, atol=1e-10)
    np.testing.assert_allclose(kron_dense(F), K, atol=1e-12)


def test_single_order_reshape_would_be_wrong_but_ours_is_right():
    # a non-symmetric example where the erratum matters: x indexes (i, j) in C order
    A = np.array([[1.0, 2.0], [0.0, 1.0]])
    B = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    x = np.arange(6.0)
    want = np.kron(A, B) @ x
    # hand-worked: Xmat = x.reshape(2, 3); result = A @ Xmat @ B.T, flattened C order
    np.testing.assert_allclose(want, (A @ x.reshape(2, 3) @ B.T).ravel())
    np.testing.assert_allclose(kron_matvec([A, B], x), want)


def test_sparse_and_operator_factors():
    rng = np.random.default_rng(3)
    F = [sp.random(4, 3, density=0.6, random_state=1, format="csr"),
         rng.normal(size=(2, 5)),
         sp.identity(3, format="csr"),
         aslinearoperator(rng.normal(size=(3, 2)))]
    dense = [F[0].toarray(), F[1], np.eye(3), F[3] @ np.eye(2)]
    K = reduce(np.kron, dense)
    x = rng.normal(size=K.shape[1])
    np.testing.assert_allclose(kron_matvec(F, x), K @ x, atol=1e-10)
    X = rng.normal(size=(K.shape[1], 2))
    np.testing.assert_allclose(kron_matvec(F, X), K @ X, atol=1e-10)
    np.testing.assert_allclose(kron_rmatvec(F, K @ x), K.T @ (K @ x), atol=1e-9)
    np.testing.assert_allclose(kron_dense(F), K, atol=1e-12)


def test_empty_factor_list_is_identity_on_one_cell():
    np.testing.assert_allclose(kron_matvec([], np.array([4.0])), [4.0])


def test_shape_errors():
    F = _factors([(2, 3), (4, 4)])
    with pytest.raises(DomainError, match="12"):
        kron_matvec(F, np.ones(11))
    with pytest.raises(DomainError, match="factors\\[1\\]"):
        kron_matvec([F[0], np.ones(3)], np.ones(9))
    with pytest.raises(MemoryLimitError):
        kron_dense([np.ones((100, 100))] * 4)


@pytest.mark.parametrize("shapes", SHAPES)
def test_dask_matvec_equals_dense(shapes):
    F = _factors(shapes, seed=5)
    K = _dense(F)
    rng = np.random.default_rng(6)
    x = rng.normal(size=K.shape[1])
    X = rng.normal(size=(K.shape[1], 3))
    y = rng.normal(size=K.shape[0])
    with dask.config.set(scheduler="synchronous"):
        out = kron_matvec_dask(F, da.from_array(x, chunks=5))
        assert isinstance(out, da.Array)
        np.testing.assert_allclose(out.compute(), K @ x, atol=1e-10)
        np.testing.assert_allclose(
            kron_matvec_dask(F, da.from_array(X, chunks=(7, 2))).compute(), K @ X, atol=1e-10
        )
        np.testing.assert_allclose(
            kron_rmatvec_dask(F, da.from_array(y, chunks=4)).compute(), K.T @ y, atol=1e-10
        )


def test_dask_sparse_factors():
    F = [sp.random(3, 4, density=0.5, random_state=2, format="csr"), np.arange(6.0).reshape(2, 3)]
    K = _dense(F)
    x = np.linspace(-1, 1, K.shape[1])
    with dask.config.set(scheduler="synchronous"):
        got = kron_matvec_dask(F, da.from_array(x, chunks=3)).compute()
    np.testing.assert_allclose(got, K @ x, atol=1e-10)
