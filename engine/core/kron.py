"""Kronecker-product matrix-vector products without forming the product (HDMM Alg. 1, Thm 14).

``x`` is read as a C-order tensor of shape (c_1, ..., c_k) (c_i = columns of factor i, the first
factor most significant, as in ``np.kron``); factor i is applied along axis i. This is the tensor
form of HDMM's Algorithm 1 and costs O(N Σ_i r_i) for N = ∏ c_i rather than O(N ∏ r_i). It matches
``np.kron(A_1, ..., A_k) @ x`` exactly (the paper's printed single-order reshapes do not; see the
erratum in NOTES.md).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from privcube.core.errors import DomainError, MemoryLimitError

#: Largest number of entries :func:`kron_dense` will materialise.
DENSE_LIMIT = 2**24

__all__ = ["kron_matvec", "kron_rmatvec", "kron_dense", "factor_shapes"]


def factor_shapes(factors: Sequence[Any]) -> list[tuple[int, int]]:
    """(rows, columns) of every factor, checking each is a 2-D operator."""
    out = []
    for i, a in enumerate(factors):
        shp = getattr(a, "shape", None)
        if shp is None or len(shp) != 2 or not hasattr(a, "__matmul__"):
            raise DomainError(f"factors[{i}] must be a 2-D matrix-like object with .shape and @")
        out.append((int(shp[0]), int(shp[1])))
    return out


def _apply(factor: Any, z: np.ndarray) -> np.ndarray:
    """factor @ z for a dense, sparse or operator factor, as a plain ndarray."""
    r = factor @ z
    if hasattr(r, "toarray"):  # sparse @ sparse (not expected, but harmless)
        r = r.toarray()
    return np.asarray(r)


def check_operand(shapes: Sequence[tuple[int, int]], x: Any) -> tuple[list[int], int]:
    """Check x (N,) or (N, m) against the factors' column sizes; return (column sizes, m)."""
    if x.ndim not in (1, 2):
        raise DomainError(f"x must have shape (N,) or (N, m), got {x.shape}")
    cols = [c for _, c in shapes]
    n = math.prod(cols)
    if x.shape[0] != n:
        raise DomainError(
            f"x has {x.shape[0]} rows but the factors' column sizes {cols} multiply to {n}"
        )
    return cols, (x.shape[1] if x.ndim == 2 else 1)


def kron_matvec(factors: Sequence[Any], x: Any) -> np.ndarray:
    """(A_1 ⊗ ... ⊗ A_k) x for x of shape (N,) or (N, m), one small product per factor."""
    shapes = factor_shapes(factors)
    x = np.asarray(x)
    cols, m = check_operand(shapes, x)
    t = x.reshape(tuple(cols) + (m,))
    # apply shrinking factors first: later products then run on smaller tensors
    order = sorted(range(len(factors)), key=lambda i: shapes[i][0] / max(shapes[i][1], 1))
    for i in order:
        rows, c = shapes[i]
        moved = np.moveaxis(t, i, 0)
        rest = moved.shape[1:]
        y = _apply(factors[i], moved.reshape(c, -1))
        t = np.moveaxis(y.reshape((rows,) + rest), 0, i)
    nrows = math.prod(r for r, _ in shapes)
    return t.reshape(nrows, m) if x.ndim == 2 else t.reshape(nrows)


def kron_rmatvec(factors: Sequence[Any], y: Any) -> np.ndarray:
    """(A_1 ⊗ ... ⊗ A_k)ᵀ y = (A_1ᵀ ⊗ ... ⊗ A_kᵀ) y, for y of shape (M,) or (M, m)."""
    factor_shapes(factors)
    return kron_matvec([a.T for a in factors], y)


def kron_dense(factors: Sequence[Any]) -> np.ndarray:
    """The explicit product A_1 ⊗ ... ⊗ A_k (small cases and tests only)."""
    shapes = factor_shapes(factors)
    size = math.prod(r for r, _ in shapes) * math.prod(c for _, c in shapes)
    if size > DENSE_LIMIT:
        raise MemoryLimitError(f"dense Kronecker product would have {size} entries (limit {DENSE_LIMIT})")
    out = np.ones((1, 1))
    for a in factors:
        d = a.toarray() if hasattr(a, "toarray") else np.asarray(a @ np.eye(a.shape[1]))
        out = np.kron(out, d)
    return out
