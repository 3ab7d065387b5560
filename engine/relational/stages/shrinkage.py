"""Shrinkage of noisy releases towards a data-independent prior: linear (Wiener) weights from the estimated
signal power, whole or per orthogonal ANOVA component, then onto the probability simplex (post-processing).
Used for the cross-table releases (``link_learning``) and the many-to-many degree histograms (``degree_histograms``).
"""
from __future__ import annotations

import math

import numpy as np


def shrink(noisy: np.ndarray, prior: np.ndarray, sigma: float, margin: float = 2.0,
           shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Linear (Wiener) shrinkage of a noisy marginal towards ``prior``, then onto the probability simplex.

    With d cells and noise variance σ², the signal power s² = ‖p − prior‖² is estimated as
    ‖y − prior‖² − dσ² − margin·σ²√(2d) (conservative: ``margin`` noise standard deviations below the
    unbiased estimate), clipped to [0, 2] (two distributions are at most √2 apart in L2), and
    y is replaced by prior + λ(y − prior), λ = s²/(s² + dσ²). At low budgets λ → 0 keeps the links
    near the prior instead of fitting noise; at high budgets λ → 1. With ``shape`` (the marginal's
    per-attribute sizes) the difference is split into its orthogonal ANOVA components (``components``)
    and each is shrunk on its own noise power, so a strong low-order signal survives while the noise of
    the many high-order cells is dropped. The Euclidean projection onto the simplex (a marginal is a
    distribution) only brings it closer to the true marginal. Both steps are post-processing.
    """
    from privcube.relational.solvers.projection import project_rows_simplex

    if not math.isfinite(sigma):
        noisy = prior.copy()
    elif shape is not None and len(shape) > 1:
        diff = (noisy - prior).reshape(shape)
        out = prior.astype(float).copy()
        for comp, dim in components(diff):
            out += wiener(comp, dim, sigma, margin).ravel()
        noisy = out
    else:
        noisy = prior + wiener(noisy - prior, noisy.size, sigma, margin)
    return project_rows_simplex(noisy[None, :])[0]


def wiener(diff: np.ndarray, dim: int, sigma: float, margin: float) -> np.ndarray:
    """λ·diff with λ = ŝ²/(ŝ² + dim·σ²), ŝ² the conservative signal power of ``diff`` (see ``shrink``)."""
    noise_pow = dim * sigma * sigma
    excess = float(np.sum(diff * diff)) - noise_pow - margin * sigma * sigma * math.sqrt(2.0 * dim)
    s2 = min(max(excess, 0.0), 2.0)
    lam = s2 / (s2 + noise_pow) if s2 + noise_pow > 0 else 1.0
    return lam * diff


def components(x: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """The orthogonal ANOVA components of a table (one per non-empty axis subset S: centred along S,
    averaged over the others) with their dimensions Π_{i∈S}(n_i − 1); they sum to x minus its mean.
    I.i.d. noise of variance σ² has power dim·σ² in each."""
    k = x.ndim
    out = []
    for mask in range(1, 1 << k):
        c = x
        for ax in range(k):
            mean = c.mean(axis=ax, keepdims=True)
            c = c - mean if mask >> ax & 1 else mean
        dim = int(np.prod([x.shape[ax] - 1 for ax in range(k) if mask >> ax & 1]))
        if dim:
            out.append((np.broadcast_to(c, x.shape), dim))
    return out


__all__ = ["shrink", "wiener", "components"]
