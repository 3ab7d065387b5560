"""Residual Decomp/Recon on chunked dask arrays (task graphs; AIM+GReM Alg. 1-2).

Same conventions as :mod:`privcube.core.residuals`. Each in-axis op first rechunks only the axis it
works along to a single chunk, then runs the NumPy kernel block by block (``map_blocks``), so the
graph has one task per block and the chunks of the other axes are kept.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dask.array as da
import numpy as np

from privcube.core import residuals as R
from privcube.core.errors import DomainError

__all__ = [
    "as_dask", "axis_sub_dask", "axis_center_dask", "decomp_dask", "recon_dask",
    "residuals_of_dask", "marginal_from_residuals_dask",
]


def as_dask(x: Any, chunks: Any = "auto") -> da.Array:
    """Wrap ``x`` as a dask array (a dask array is returned unchanged)."""
    return x if isinstance(x, da.Array) else da.from_array(np.asarray(x), chunks=chunks)


def _one_chunk(x: da.Array, ax: int) -> da.Array:
    """Rechunk ``x`` so that axis ``ax`` is a single chunk (other axes untouched)."""
    return x if len(x.chunks[ax]) == 1 else x.rechunk({ax: -1})


def axis_sub_dask(x: Any, axis: int) -> da.Array:
    """Blockwise v[1:] - v[0] along ``axis`` (length l -> l-1)."""
    x = as_dask(x)
    ax = R._check_axis(x, axis)
    if x.shape[ax] < 1:
        raise DomainError(f"axis {ax} has length 0; sub needs at least one level")
    x = _one_chunk(x, ax)
    chunks = tuple((c[0] - 1,) if i == ax else c for i, c in enumerate(x.chunks))
    dtype = (np.zeros(1, x.dtype) - np.zeros(1, x.dtype)).dtype
    return x.map_blocks(R.axis_sub, ax, chunks=chunks, dtype=dtype)


def axis_center_dask(x: Any, axis: int) -> da.Array:
    """Blockwise pseudoinverse of sub along ``axis`` (length l-1 -> l, zero mean)."""
    x = as_dask(x)
    ax = R._check_axis(x, axis)
    x = _one_chunk(x, ax)
    chunks = tuple((c[0] + 1,) if i == ax else c for i, c in enumerate(x.chunks))
    dtype = np.result_type(x.dtype, np.float64)
    return x.map_blocks(R.axis_center, ax, chunks=chunks, dtype=dtype)


def decomp_dask(mu: Any, gamma: Sequence[Any], tau: Sequence[Any]) -> da.Array:
    """Algorithm 1 as a task graph: ζ_τ from a chunked μ_γ (axes: τ's attributes in γ order)."""
    mu = as_dask(mu)
    g, t, pos = R._tau_in_gamma(tau, gamma)
    if mu.ndim != len(g):
        raise DomainError(f"mu has {mu.ndim} axes but gamma {list(g)} has {len(g)} attributes")
    for i in pos:
        R._need_two(g[i], mu.shape[i])
    drop = tuple(i for i in range(len(g)) if i not in pos)
    z = mu.sum(axis=drop) if drop else mu
    for ax in range(z.ndim):
        z = axis_sub_dask(z, ax)
    return z


def recon_dask(zeta: Any, tau: Sequence[Any], gamma: Sequence[Any], sizes: R.Sizes) -> da.Array:
    """Algorithm 2 as a task graph: the τ-component of μ_γ, smeared lazily by broadcasting."""
    zeta = as_dask(zeta)
    g, t, pos = R._tau_in_gamma(tau, gamma)
    want = R.residual_shape(t, sizes)
    if tuple(zeta.shape) != want:
        raise DomainError(
            f"zeta has shape {tuple(zeta.shape)} but the residual on {list(t)} has shape {want}"
        )
    m = zeta
    for ax in range(m.ndim):
        m = axis_center_dask(m, ax)
    shape = tuple(R.size_of(sizes, a) for a in g)
    idx = tuple(slice(None) if i in pos else None for i in range(len(g)))
    denom = float(np.prod([shape[i] for i in range(len(g)) if i not in pos]))
    lifted = m[idx] if g else m
    chunks = tuple(
        lifted.chunks[i] if i in pos else (shape[i],) for i in range(len(g))
    )
    return da.broadcast_to(lifted, shape, chunks=chunks) / denom if g else lifted / 1.0


def residuals_of_dask(mu: Any, gamma: Sequence[Any]) -> dict[tuple, da.Array]:
    """All residuals {τ: ζ_τ} of a chunked μ_γ, as dask arrays keyed by τ in γ order."""
    mu = as_dask(mu)
    g = R._check_clique(gamma, "gamma")
    return {t: decomp_dask(mu, g, t) for t in R.subsets(g)}


def marginal_from_residuals_dask(
    residuals: Mapping[tuple, Any], gamma: Sequence[Any], sizes: R.Sizes, allow_missing: bool = False,
) -> da.Array:
    """μ_γ = Σ_{τ⊆γ} Recon(ζ_τ) as one dask array (keys not ⊆ γ ignored; see the numpy version)."""
    g = R._check_clique(gamma, "gamma")
    by_set = {}
    for key, z in residuals.items():
        k = (key,) if isinstance(key, str) else tuple(key)
        if all(a in g for a in k):
            by_set[frozenset(k)] = (k, z)
    shape = tuple(R.size_of(sizes, a) for a in g)
    total: da.Array | None = None
    for t in R.subsets(g):
        hit = by_set.get(frozenset(t))
        if hit is None:
            if allow_missing:
                continue
            raise DomainError(f"residual on {list(t)} is missing; gamma {list(g)} needs all subsets")
        k, z = hit
        z = as_dask(z)
        if k != t:
            z = z.transpose([k.index(a) for a in t])
        part = recon_dask(z, t, g, sizes)
        total = part if total is None else total + part
    return total if total is not None else da.zeros(shape, dtype=float)
