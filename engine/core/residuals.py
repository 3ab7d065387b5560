"""Residual algebra (AIM+GReM Sec. 3, Table 1, Alg. 1-2, App. C-D): marginals <-> residuals.

A marginal on a clique ``gamma`` is a compact array with one axis per attribute of ``gamma`` (in
``gamma``'s order). The residual ``zeta_tau`` of ``tau ⊆ gamma`` has one axis of length ``n_j - 1``
per attribute of ``tau``, in ``gamma``'s order. Attributes are hashable keys; their sizes come from
``sizes`` (a :class:`~privcube.core.domain.Domain` or a mapping ``{key: size}``).

Everything is written with array methods, slicing and NumPy functions that dispatch through
``__array_function__``, so dask arrays pass through the pure functions unchanged (lazily). Only
:func:`recon_add` is NumPy-only (it updates its output in place).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Union

import numpy as np

from privcube.core.domain import Domain
from privcube.core.errors import DataError, DomainError, MemoryLimitError

Sizes = Union[Domain, Mapping[Hashable, int]]
Key = Hashable
Clique = tuple  # tuple of attribute keys

#: Largest dense residual covariance (rows) :func:`residual_covariance` will build.
DENSE_LIMIT = 4096

__all__ = [
    "axis_sum", "axis_sub", "axis_center", "axis_smear",
    "decomp", "recon", "recon_add", "residuals_of", "marginal_from_residuals", "subsets",
    "p_coef", "v_coef", "residual_covariance", "residual_precision_factors", "residual_gram_norm",
    "residual_shape", "size_of",
]


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------
def _as_array(x: Any) -> Any:
    """Numpy-ify scalars and lists; leave array objects (numpy, dask) untouched."""
    if isinstance(x, np.generic) or not hasattr(x, "ndim") or not hasattr(x, "shape"):
        return np.asarray(x)
    return x


def _check_axis(x: Any, axis: int) -> int:
    """Normalise a (possibly negative) axis of ``x``."""
    nd = x.ndim
    if not isinstance(axis, (int, np.integer)) or not -nd <= axis < nd:
        raise DomainError(f"axis {axis!r} is out of range for an array with {nd} axes")
    return int(axis) % nd


def _along(axis: int, sl: Any) -> tuple:
    """Index tuple selecting ``sl`` along ``axis`` and everything elsewhere."""
    return (slice(None),) * axis + (sl,)


def size_of(sizes: Sizes, key: Key) -> int:
    """Size of attribute ``key`` from a Domain or a mapping (DomainError naming unknown keys)."""
    if isinstance(sizes, Domain):
        return sizes[key]
    try:
        n = sizes[key]
    except (KeyError, TypeError):
        raise DomainError(f"unknown attribute {key!r}; sizes are given for {list(sizes)}") from None
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise DomainError(f"attribute {key!r} has size {n!r}; sizes must be positive integers")
    return int(n)


def _check_clique(clique: Sequence[Key], name: str) -> tuple:
    """Return ``clique`` as a tuple, rejecting repeated attributes."""
    if isinstance(clique, (str, bytes)):
        raise DomainError(f"{name} must be a sequence of attribute keys, got the string {clique!r}")
    c = tuple(clique)
    if len(set(c)) != len(c):
        dup = sorted({str(a) for a in c if c.count(a) > 1})
        raise DomainError(f"{name} repeats attribute(s) {dup}")
    return c


def _tau_in_gamma(tau: Sequence[Key], gamma: Sequence[Key]) -> tuple[tuple, tuple, tuple[int, ...]]:
    """Validate tau ⊆ gamma; return (gamma, tau in gamma order, axis positions of tau in gamma)."""
    g = _check_clique(gamma, "gamma")
    t = _check_clique(tau, "tau")
    extra = [a for a in t if a not in g]
    if extra:
        raise DomainError(f"tau attribute(s) {extra} are not in gamma {list(g)}; tau must be a subset")
    pos = tuple(i for i, a in enumerate(g) if a in t)
    return g, tuple(g[i] for i in pos), pos


def _need_two(key: Key, n: int) -> None:
    if n < 2:
        raise DomainError(
            f"attribute {key!r} has size {n}; residuals need every attribute of tau to have size >= 2"
        )


def residual_shape(tau: Sequence[Key], sizes: Sizes) -> tuple[int, ...]:
    """Shape ``(n_j - 1)_{j in tau}`` of the residual on ``tau`` (in the order given)."""
    out = []
    for a in _check_clique(tau, "tau"):
        n = size_of(sizes, a)
        _need_two(a, n)
        out.append(n - 1)
    return tuple(out)


def subsets(gamma: Sequence[Key]) -> list[tuple]:
    """All subsets of ``gamma`` as tuples in gamma's order, by increasing size (2^|gamma| of them)."""
    g = _check_clique(gamma, "gamma")
    return [c for k in range(len(g) + 1) for c in itertools.combinations(g, k)]


# ------------------------------------------------------------------------------------------------
# in-axis operations (Table 1)
# ------------------------------------------------------------------------------------------------
def axis_sum(x: Any, axis: int) -> Any:
    """Sum out ``axis`` (1ᵀ along one axis); the axis is removed."""
    x = _as_array(x)
    return _as_array(x.sum(axis=_check_axis(x, axis)))


def axis_sub(x: Any, axis: int) -> Any:
    """Difference against the first level along ``axis``: v[1:] - v[0] (length l -> l-1)."""
    x = _as_array(x)
    ax = _check_axis(x, axis)
    if x.shape[ax] < 1:
        raise DomainError(f"axis {ax} has length 0; sub needs at least one level")
    return x[_along(ax, slice(1, None))] - x[_along(ax, slice(0, 1))]


def axis_center(x: Any, axis: int) -> Any:
    """Pseudoinverse of sub along ``axis``: u=[0, v], return u - mean(u) (length l-1 -> l, zero mean)."""
    x = _as_array(x)
    ax = _check_axis(x, axis)
    ell = x.shape[ax] + 1
    shift = x.sum(axis=ax, keepdims=True) / ell
    return np.concatenate([-shift, x - shift], axis=ax)


def axis_smear(x: Any, axis: int, k: int) -> Any:
    """Pseudoinverse of sum: insert a new axis at position ``axis`` of length ``k`` holding x/k."""
    x = _as_array(x)
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise DomainError(f"smear length k={k!r} must be a positive integer")
    k = int(k)
    if not isinstance(axis, (int, np.integer)) or not -(x.ndim + 1) <= axis <= x.ndim:
        raise DomainError(f"axis {axis!r} is out of range for inserting into {x.ndim} axes")
    ax = int(axis) % (x.ndim + 1)
    expanded = x[_along(ax, None)]
    shape = tuple(x.shape[:ax]) + (k,) + tuple(x.shape[ax:])
    return np.broadcast_to(expanded, shape) / k


# ------------------------------------------------------------------------------------------------
# Decomp / Recon (Algorithms 1 and 2)
# ------------------------------------------------------------------------------------------------
def decomp(mu: Any, gamma: Sequence[Key], tau: Sequence[Key]) -> Any:
    """Algorithm 1: residual ζ_τ from the marginal μ_γ (τ ⊆ γ); axes are τ's attributes in γ order."""
    mu = _as_array(mu)
    g, t, pos = _tau_in_gamma(tau, gamma)
    if mu.ndim != len(g):
        raise DomainError(f"mu has {mu.ndim} axes but gamma {list(g)} has {len(g)} attributes")
    for i in pos:
        _need_two(g[i], mu.shape[i])
    drop = tuple(i for i in range(len(g)) if i not in pos)
    z = mu.sum(axis=drop) if drop else mu
    z = _as_array(z)
    for ax in range(z.ndim):
        z = axis_sub(z, ax)
    return z


def _centered(zeta: Any, t: tuple, sizes: Sizes) -> Any:
    """Center every axis of ``zeta`` (residual on ``t``), checking its shape against ``sizes``."""
    zeta = _as_array(zeta)
    want = residual_shape(t, sizes)
    if tuple(zeta.shape) != want:
        raise DomainError(
            f"zeta has shape {tuple(zeta.shape)} but the residual on {list(t)} has shape {want}"
        )
    m = zeta
    for ax in range(m.ndim):
        m = axis_center(m, ax)
    return m


def _lift(m: Any, g: tuple, pos: tuple[int, ...], sizes: Sizes) -> tuple[Any, tuple[int, ...], int]:
    """Reshape the centred τ-array to γ's rank (singletons off τ); return it, γ's shape, ∏_{γ\\τ} n."""
    shape = tuple(size_of(sizes, a) for a in g)
    idx = tuple(slice(None) if i in pos else None for i in range(len(g)))
    denom = math.prod(shape[i] for i in range(len(g)) if i not in pos)
    return m[idx], shape, denom


def recon(zeta: Any, tau: Sequence[Key], gamma: Sequence[Key], sizes: Sizes) -> Any:
    """Algorithm 2: the τ-component of μ_γ (shape of γ) from the residual ζ_τ (axes in γ order)."""
    g, t, pos = _tau_in_gamma(tau, gamma)
    m = _centered(zeta, t, sizes)
    lifted, shape, denom = _lift(m, g, pos, sizes)
    if not g:
        return _as_array(lifted / 1.0)
    return np.broadcast_to(lifted, shape) / denom


def recon_add(
    out: np.ndarray, zeta: Any, tau: Sequence[Key], gamma: Sequence[Key], sizes: Sizes,
    scale: float = 1.0,
) -> np.ndarray:
    """Add ``scale * Recon(zeta)`` into the float array ``out`` in place, by broadcasting (O(n_γ))."""
    if not isinstance(out, np.ndarray):
        raise DataError(f"out must be a numpy array (updated in place), got {type(out).__name__}")
    if not np.issubdtype(out.dtype, np.floating):
        raise DataError(f"out must have a floating dtype to be updated in place, got {out.dtype}")
    g, t, pos = _tau_in_gamma(tau, gamma)
    shape = tuple(size_of(sizes, a) for a in g)
    if out.shape != shape:
        raise DomainError(f"out has shape {out.shape} but the marginal on {list(g)} has shape {shape}")
    m = np.asarray(_centered(zeta, t, sizes))
    lifted, _, denom = _lift(m, g, pos, sizes)
    out += lifted * (float(scale) / denom)
    return out


def residuals_of(mu: Any, gamma: Sequence[Key]) -> dict[tuple, Any]:
    """All residuals {τ: ζ_τ} of the marginal μ_γ, τ ⊆ γ as tuples in γ order (sums shared top-down)."""
    mu = _as_array(mu)
    g = _check_clique(gamma, "gamma")
    if mu.ndim != len(g):
        raise DomainError(f"mu has {mu.ndim} axes but gamma {list(g)} has {len(g)} attributes")
    for a, n in zip(g, mu.shape):
        _need_two(a, n)
    # marginals of every subset, each summed from a parent with one more attribute
    margs: dict[tuple, Any] = {g: mu}
    for t in reversed(subsets(g)):
        if t == g:
            continue
        missing = next(a for a in g if a not in t)
        parent = tuple(a for a in g if a in t or a == missing)
        margs[t] = axis_sum(margs[parent], parent.index(missing))
    out: dict[tuple, Any] = {}
    for t in subsets(g):
        z = margs[t]
        for ax in range(len(t)):
            z = axis_sub(z, ax)
        out[t] = _as_array(z)
    return out


def marginal_from_residuals(
    residuals: Mapping[tuple, Any], gamma: Sequence[Key], sizes: Sizes, allow_missing: bool = False,
) -> Any:
    """μ_γ = Σ_{τ⊆γ} Recon(ζ_τ); keys not ⊆ γ are ignored, missing τ are zero if ``allow_missing``."""
    g = _check_clique(gamma, "gamma")
    by_set: dict[frozenset, tuple[tuple, Any]] = {}
    for key, z in residuals.items():
        k = (key,) if isinstance(key, str) else tuple(key)
        if all(a in g for a in k):
            by_set[frozenset(k)] = (k, z)
    lazy = any(not isinstance(_as_array(z), np.ndarray) for _, z in by_set.values())
    shape = tuple(size_of(sizes, a) for a in g)
    total: Any = None if lazy else np.zeros(shape, dtype=float)
    for t in subsets(g):
        hit = by_set.get(frozenset(t))
        if hit is None:
            if allow_missing:
                continue
            raise DomainError(f"residual on {list(t)} is missing; gamma {list(g)} needs all subsets")
        k, z = hit
        if k != t:  # stored with axes in another attribute order: bring them into gamma order
            z = np.transpose(_as_array(z), [k.index(a) for a in t])
        if lazy:
            part = recon(z, t, g, sizes)
            total = part if total is None else total + part
        else:
            recon_add(total, z, t, g, sizes)
    if total is None:  # lazy mode with nothing to add
        total = np.zeros(shape, dtype=float)
    return total


# ------------------------------------------------------------------------------------------------
# privacy and variance coefficients (Prop. 4.3, 4.4; App. D.1)
# ------------------------------------------------------------------------------------------------
def p_coef(tau: Iterable[Key], sizes: Sizes) -> float:
    """Privacy cost factor p_τ = ∏_{i∈τ} (n_i-1)/n_i (p_∅ = 1): releasing ζ_τ + N(0,σ²V_τ) costs p_τ/(2σ²)."""
    p = 1.0
    for a in _check_clique(tuple(tau), "tau"):
        n = size_of(sizes, a)
        _need_two(a, n)
        p *= (n - 1) / n
    return p


def v_coef(tau: Iterable[Key], gamma: Iterable[Key], sizes: Sizes) -> float:
    """Per-cell variance factor v_τ = ∏_{τ}(n_i-1)/n_i · ∏_{γ\\τ} 1/n_j² of Recon(noise σ²V_τ) in μ_γ."""
    g, t, _ = _tau_in_gamma(tuple(tau), tuple(gamma))
    v = p_coef(t, sizes)
    for a in g:
        if a not in t:
            v /= size_of(sizes, a) ** 2
    return v


def residual_covariance(tau: Sequence[Key], sizes: Sizes) -> np.ndarray:
    """Dense V_τ = ⊗_{k∈τ}(I + 11ᵀ), the covariance shape of Decomp(N(0,I)); small τ only (tests)."""
    shape = residual_shape(tau, sizes)
    if math.prod(shape) > DENSE_LIMIT:
        raise MemoryLimitError(
            f"dense residual covariance on {list(tau)} would have {math.prod(shape)} rows "
            f"(limit {DENSE_LIMIT}); use residual_precision_factors / residual_gram_norm"
        )
    v = np.ones((1, 1))
    for m in shape:
        v = np.kron(v, np.eye(m) + np.ones((m, m)))
    return v


def residual_precision_factors(tau: Sequence[Key], sizes: Sizes) -> list[np.ndarray]:
    """Per-axis factors I - 11ᵀ/n_k of V_τ^{-1} = ⊗_{k∈τ}(I - 11ᵀ/n_k) (Sherman-Morrison)."""
    return [np.eye(m) - np.ones((m, m)) / (m + 1) for m in residual_shape(tau, sizes)]


def residual_gram_norm(u: Any, tau: Sequence[Key], sizes: Sizes) -> Any:
    """uᵀ V_τ^{-1} u (the ‖·‖_V norm of GReM-MLE) by in-axis ops, never forming V_τ^{-1}."""
    u = _as_array(u)
    want = residual_shape(tau, sizes)
    if tuple(u.shape) != want:
        raise DomainError(f"u has shape {tuple(u.shape)} but the residual on {list(tau)} has shape {want}")
    w = u
    for ax, m in enumerate(want):
        w = w - w.sum(axis=ax, keepdims=True) / (m + 1)
    r = (u * w).sum()
    return float(r) if isinstance(r, (np.ndarray, np.generic)) else r
