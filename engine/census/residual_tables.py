"""Residuals and tables with a leading unit axis: ``decomp`` and ``recon`` of ResidualPlanner (AIM+GReM Alg. 1-2)
applied to every unit of a level at once.

A table on ``gamma`` is an array ``(n_units, *sizes(gamma))``; the residual ``tau ⊆ gamma`` is ``(n_units,
*(n_a - 1 for a in tau))``. Both maps are linear and act on each unit alone, so the sum of the children's residuals
is the parent's residual: the hierarchy can be fitted residual by residual (``privcube.census.gls``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from privcube.core.residuals import axis_center, axis_sub, subsets, v_coef


def decomp_units(table: np.ndarray, tau: Sequence[str]) -> np.ndarray:
    """The residual of ``tau`` of each unit's marginal on ``tau`` (``table``: ``(n_units, *sizes(tau))``)."""
    z = np.asarray(table, dtype=float)
    for axis in range(1, len(tau) + 1):
        z = axis_sub(z, axis)
    return z


def recon_units(z: np.ndarray, tau: Sequence[str], gamma: Sequence[str], sizes: Mapping[str, int]) -> np.ndarray:
    """Each unit's contribution of residual ``z`` (of ``tau``) to its marginal on ``gamma`` (``tau ⊆ gamma``)."""
    out = np.asarray(z, dtype=float)
    for axis in range(1, len(tau) + 1):
        out = axis_center(out, axis)
    # now (n, *sizes(tau)) in tau's order; spread over the attributes of gamma that tau lacks
    shape = [out.shape[0]]
    for a in gamma:
        shape.append(sizes[a] if a in tau else 1)
    out = out.reshape(shape)
    spread = float(np.prod([sizes[a] for a in gamma if a not in tau], dtype=float))
    full = (out.shape[0], *(sizes[a] for a in gamma))
    return np.broadcast_to(out / spread, full)


def table_from_residuals(residuals: Mapping[tuple[str, ...], np.ndarray], gamma: Sequence[str],
                         sizes: Mapping[str, int]) -> np.ndarray:
    """Each unit's marginal on ``gamma`` from its residuals of every subset of ``gamma`` (all must be present)."""
    gamma = tuple(gamma)
    total = None
    for tau in subsets(gamma):
        part = recon_units(residuals[tau], tau, gamma, sizes)
        total = np.array(part) if total is None else total + part
    assert total is not None
    return total


def cell_variance(variances: Mapping[tuple[str, ...], np.ndarray | float], gamma: Sequence[str],
                  sizes: Mapping[str, int]) -> np.ndarray | float:
    """Variance of each cell of the reconstructed marginal on ``gamma`` when each residual ``tau`` carries noise
    ``v_tau · Sub Subᵀ``: Σ_τ v_coef(τ, γ) · v_τ (ResidualPlanner's per-cell variance)."""
    out: np.ndarray | float = 0.0
    for tau in subsets(gamma):
        out = out + v_coef(tau, gamma, sizes) * np.asarray(variances[tau], dtype=float)
    return out


__all__ = ["cell_variance", "decomp_units", "recon_units", "table_from_residuals"]
