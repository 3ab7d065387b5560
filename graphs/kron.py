"""Kronecker matvec on a chunked dask vector: one tensordot per factor (a task graph).

Same ordering as :func:`privcube.core.kron.kron_matvec` (C-order tensor, first factor most significant,
identical to ``np.kron(...) @ x``). Factors are small per-attribute matrices and are densified.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np

from privcube.core.kron import check_operand, factor_shapes

__all__ = ["kron_matvec_dask", "kron_rmatvec_dask"]


def _dense(a: Any) -> np.ndarray:
    """A factor as a dense ndarray (sparse via toarray, operators via a @ I)."""
    if hasattr(a, "toarray"):
        return a.toarray()
    if isinstance(a, np.ndarray):
        return a
    return np.asarray(a @ np.eye(a.shape[1]))


def kron_matvec_dask(factors: Sequence[Any], x: Any) -> da.Array:
    """(A_1 ⊗ ... ⊗ A_k) x for a dask x of shape (N,) or (N, m); returns a dask array."""
    shapes = factor_shapes(factors)
    if not isinstance(x, da.Array):
        x = da.from_array(np.asarray(x))
    cols, m = check_operand(shapes, x)
    # (m, c_1, ..., c_k): the column axis leads, then each step contracts the leading factor axis
    # and appends the new row axis at the end, so after k steps the order is (m, r_1, ..., r_k).
    t = (x.T if x.ndim == 2 else x[None, :]).reshape((m,) + tuple(cols))
    for a in factors:
        t = da.tensordot(t, _dense(a), axes=([1], [1]))
    rows = math.prod(r for r, _ in shapes)
    out = t.reshape((m, rows))
    return out.T if x.ndim == 2 else out[0]


def kron_rmatvec_dask(factors: Sequence[Any], y: Any) -> da.Array:
    """(A_1 ⊗ ... ⊗ A_k)ᵀ y for a dask y of shape (M,) or (M, m)."""
    factor_shapes(factors)
    return kron_matvec_dask([_dense(a).T for a in factors], y)
