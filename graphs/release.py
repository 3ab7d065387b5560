"""A linear release ``y = A x + noise`` as one task graph over a lazy chunked exact vector ``x``.

``A`` is a ``privcube.linalg`` operator (a Kronecker product, a weighted or stacked operator, weighted
marginals): the mechanism hands its strategy in that generic form (HDMM: ``Strategy.operator()``), so the
exact ``x`` is only ever touched by the tasks next to its chunks and only the noisy ``y`` is computed here.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from privcube.linalg.marginals import MarginalsStrategy, kept_axes
from privcube.linalg.matrices import Kronecker, Matrix, VStack, Weighted

#: rows of y per noise block in :func:`chunked_release` (the block index keys the noise stream)
RELEASE_BLOCK = 2**22


def operator_matvec_dask(op: Matrix, x: Any) -> Any:
    """A x as a task graph over a chunked dask vector x: one tensordot per Kronecker factor, one axis sum per
    weighted marginal, stacked operators concatenated."""
    import dask.array as da

    from privcube.graphs.kron import kron_matvec_dask

    if isinstance(op, Kronecker):
        return kron_matvec_dask(op.factors, x)
    if isinstance(op, Weighted):
        return op.weight * operator_matvec_dask(op.base, x)
    if isinstance(op, VStack):
        return da.concatenate([operator_matvec_dask(b, x) for b in op.blocks])
    if isinstance(op, MarginalsStrategy):
        d = len(op.domain_shape)
        t = x.reshape(op.domain_shape)
        parts = []
        for a in np.flatnonzero(op.theta):
            keep = kept_axes(int(a), d)
            drop = tuple(i for i in range(d) if i not in keep)
            parts.append(float(op.theta[a]) * (t.sum(axis=drop) if drop else t).reshape(-1))
        return da.concatenate(parts)
    raise TypeError(f"no chunked matvec for operator {type(op).__name__}")


def _add_noise(block: np.ndarray, kind: str, scale: float, key: tuple, noise: Any,
               block_info: dict | None = None) -> np.ndarray:
    i = block_info[0]["chunk-location"][0] if block_info else 0
    draw = noise.laplace if kind == "laplace" else noise.gaussian
    return block + draw((*key, "block", i), block.shape, scale)


def chunked_release(x: Any, operator: Matrix, kind: str, scale: float, key: tuple, noise: Any, *,
                    block: int | None = None) -> np.ndarray:
    """The ``chunked-release`` kernel: y = A x + noise for an exact data vector x held as a lazy chunked dask
    array (e.g. a marginal counted on the workers), computed as one task graph: the noise (``kind``
    ``laplace`` or ``gaussian`` of ``scale``) is added per block of ``block`` rows next to the block (stream
    keyed by ``key`` and the block index), so only the noisy y is ever computed here. ``block`` defaults to
    :data:`RELEASE_BLOCK`."""
    import dask.array as da

    if not isinstance(x, da.Array):
        x = da.from_array(np.asarray(x))
    y = operator_matvec_dask(operator, x.reshape(-1).astype(float)).rechunk(block or RELEASE_BLOCK)
    return y.map_blocks(_add_noise, kind, scale, key, noise, dtype=float).compute()


__all__ = ["RELEASE_BLOCK", "chunked_release", "operator_matvec_dask"]
