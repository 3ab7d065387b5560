"""Marginal-strategy algebra (HDMM Sec. 7–8): weighted marginals 𝕄(θ), Grams 𝔾(v), X(u), Y, SVDB.

Marginal index ``a`` in ``[0, 2^d)``: attribute ``i`` (0-based, domain order) is bit ``d-1-i`` (first
attribute most significant); bit 1 keeps the attribute (I), bit 0 sums it out (T).
Errata applied: the OPT_M objective carries the factor n (Thm 11) and uses the *restricted* generalised
inverse; SVDB multiplicities are ∏(n_i − 1) (Thm 12).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy.linalg import solve_triangular

from privcube.core.errors import WorkloadError
from privcube.linalg.matrices import Matrix

MAX_DIMS = 11  # dense 2^d × 2^d X-algebra (4^d pairs) up to this many attributes
SPECTRAL_MAX_DIMS = 22  # O(d·2^d) subset-sum (eigenvalue) algebra: objective, SVDB, pseudo-inverse weights


def bits(a: int | np.ndarray, d: int) -> np.ndarray:
    """Per-attribute keep bits of marginal index ``a`` (attribute order)."""
    a = np.asarray(a)
    return np.stack([(a >> (d - 1 - i)) & 1 for i in range(d)], axis=-1)


def kept_axes(a: int, d: int) -> tuple[int, ...]:
    """Attribute positions kept by marginal ``a``."""
    return tuple(i for i in range(d) if (a >> (d - 1 - i)) & 1)


def char_vector(shape: Sequence[int]) -> np.ndarray:
    """c(a) = ∏_{i: a_i=0} n_i: cells collapsed into each cell of marginal a."""
    d = len(shape)
    b = bits(np.arange(2**d), d)
    return np.prod(np.where(b == 0, np.asarray(shape)[None, :], 1), axis=1).astype(float)


def multiplicity(shape: Sequence[int]) -> np.ndarray:
    """Eigenvalue multiplicity ∏_{i: a_i=1}(n_i − 1) of κ(a) (Thm 12, corrected)."""
    d = len(shape)
    b = bits(np.arange(2**d), d)
    return np.prod(np.where(b == 1, np.asarray(shape)[None, :] - 1, 1), axis=1).astype(float)


@lru_cache(maxsize=8)
def _pairs(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All (a, b) index pairs, a&b and c(a|b) (4^d entries)."""
    d = len(shape)
    if d > MAX_DIMS:
        raise WorkloadError(f"marginal algebra supports at most {MAX_DIMS} attributes, got {d}")
    n = 2**d
    a = np.repeat(np.arange(n), n)
    b = np.tile(np.arange(n), n)
    c = char_vector(shape)
    return a, b, a & b, c[a | b]


def x_matrix(u: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """X(u)[k, b] = Σ_{a: a&b=k} u(a) c(a|b), so that 𝔾(u)𝔾(v) = 𝔾(X(u) v) (upper triangular)."""
    a, b, k, cab = _pairs(tuple(shape))
    n = 2 ** len(shape)
    return np.bincount(k * n + b, weights=u[a] * cab, minlength=n * n).reshape(n, n)


def y_matrix(shape: Sequence[int]) -> np.ndarray:
    """Y[a, b] = c(b) if a ⊆ b else 0; the eigenvalues of 𝔾(w) are κ = Y w."""
    n = 2 ** len(shape)
    idx = np.arange(n)
    sub = (idx[:, None] & idx[None, :]) == idx[:, None]
    return np.where(sub, char_vector(shape)[None, :], 0.0)


def restricted_solve(x: np.ndarray, rhs: np.ndarray, transpose: bool = False,
                     tol: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """Solve on S = {k: X[k,k] ≠ 0} (zero elsewhere); returns (solution, residual off S)."""
    diag = np.diag(x)
    s = diag > tol * max(float(np.max(np.abs(diag))), 1e-300)
    out = np.zeros_like(rhs, dtype=float)
    xs = x[np.ix_(s, s)]
    out[s] = solve_triangular(xs, rhs[s], lower=False, trans="T" if transpose else "N", check_finite=False)
    return out, np.where(s, 0.0, rhs)


def marginal_approximation(terms: Sequence[tuple[float, Sequence[np.ndarray]]], shape: Sequence[int]) -> np.ndarray:
    """Thm 10: w with tr[𝔾(u)𝕎ᵀ𝕎] = tr[𝔾(u)𝔾(w)] for every u; factors are query matrices per attribute."""
    d = len(shape)
    w = np.zeros(2**d)
    for weight, factors in terms:
        if len(factors) != d:
            raise WorkloadError(f"workload term has {len(factors)} factors, the domain has {d} attributes")
        vec = np.ones(1)
        for f, n in zip(factors, shape):
            f = np.atleast_2d(f)
            tr = float((f**2).sum())
            tot = float((f.sum(axis=1) ** 2).sum())
            if n == 1:
                gamma, beta = 0.0, tr
            else:
                gamma = (tot - tr) / (n * (n - 1))
                beta = tr / n - gamma
            vec = np.kron(vec, [gamma, beta])
        w += weight**2 * vec
    return w


def superset_sum(f: np.ndarray) -> np.ndarray:
    """g(a) = Σ_{b ⊇ a} f(b) over the 2^d marginal lattice, in O(d·2^d)."""
    g = np.array(f, dtype=float)
    d = int(round(math.log2(g.size)))
    for j in range(d):
        v = g.reshape(-1, 2, 2**j)
        v[:, 0, :] += v[:, 1, :]
    return g


def superset_mobius(g: np.ndarray) -> np.ndarray:
    """Inverse of :func:`superset_sum`: f(a) = Σ_{b ⊇ a} (−1)^{|b∖a|} g(b)."""
    f = np.array(g, dtype=float)
    d = int(round(math.log2(f.size)))
    for j in range(d):
        v = f.reshape(-1, 2, 2**j)
        v[:, 0, :] -= v[:, 1, :]
    return f


def subset_sum(f: np.ndarray) -> np.ndarray:
    """g(b) = Σ_{a ⊆ b} f(a) over the 2^d marginal lattice, in O(d·2^d)."""
    g = np.array(f, dtype=float)
    d = int(round(math.log2(g.size)))
    for j in range(d):
        v = g.reshape(-1, 2, 2**j)
        v[:, 1, :] += v[:, 0, :]
    return g


def eigenvalues(u: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """κ = Y u (κ(a) = Σ_{b ⊇ a} c(b) u(b)): the eigenvalue of 𝔾(u) on eigenspace a, in O(d·2^d)."""
    return superset_sum(char_vector(shape) * np.asarray(u, dtype=float))


def from_eigenvalues(kappa: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """u = Y⁻¹ κ, the marginal weights whose Gram 𝔾(u) has eigenvalues κ."""
    return superset_mobius(kappa) / char_vector(shape)


def marginal_svdb(w: np.ndarray, shape: Sequence[int]) -> float:
    """SVD bound (Σ sqrt eigenvalues)²/n of 𝔾(w), using κ = Y w and multiplicities ∏(n_i − 1)."""
    kappa = eigenvalues(w, shape)
    return float((multiplicity(shape) @ np.sqrt(np.clip(kappa, 0, None))) ** 2 / math.prod(shape))


def marginal_objective(u: np.ndarray, w: np.ndarray, shape: Sequence[int],
                       gradient: bool = False) -> tuple[float, np.ndarray | None]:
    """‖W 𝕄(√u)⁺‖_F² = tr[𝔾(u)⁺𝔾(w)] = Σ_a mult(a)·κ_w(a)/κ_u(a); +inf if 𝕄 does not support W.

    All marginal Grams share the eigenspaces indexed by a (dimension mult(a) = ∏_{i∈a}(n_i − 1)), with
    eigenvalues κ = Y u, so the objective and its gradient −c(b)·Σ_{a⊆b} mult(a)κ_w(a)/κ_u(a)² are
    subset-sum transforms: O(d·2^d) per evaluation and no 2^d × 2^d matrix (this equals Thm 11's n·1ᵀφ,
    X(u)φ = w, with the restricted inverse). 𝕄 supports W iff κ_w = 0 wherever κ_u = 0.
    """
    mult = multiplicity(shape)
    ku, kw = eigenvalues(u, shape), eigenvalues(w, shape)
    scale = max(float(np.max(np.abs(ku), initial=0.0)), 1e-300)
    live = (mult > 0) & (ku > 1e-13 * scale)
    dead = (mult > 0) & ~live
    if np.any(kw[dead] > 1e-10 * max(float(np.max(np.abs(kw), initial=0.0)), 1e-300)):
        return math.inf, (np.zeros_like(u, dtype=float) if gradient else None)
    ratio = np.zeros_like(ku)
    ratio[live] = mult[live] * kw[live] / ku[live]
    val = float(ratio.sum())
    if not gradient:
        return val, None
    r2 = np.zeros_like(ku)
    r2[live] = ratio[live] / ku[live]
    return val, -char_vector(shape) * subset_sum(r2)


def gram_apply(v: np.ndarray, x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """𝔾(v) x = Σ_a v_a ℍ(a) x, with ℍ(a)x summing x over the axes a drops (and broadcasting back)."""
    d = len(shape)
    t = np.asarray(x, dtype=float).reshape(shape)
    out = np.zeros(shape)
    for a in np.flatnonzero(v):
        drop = tuple(i for i in range(d) if not (a >> (d - 1 - i)) & 1)
        out += v[a] * (t.sum(axis=drop, keepdims=True) if drop else t)
    return out.reshape(-1)


def g_inverse_weights(u: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """η with 𝔾(u)𝔾(η)𝔾(u) = 𝔾(u): η_S = X_SS⁻¹ X_SS⁻¹ u_S (Thm 8, restricted) up to MAX_DIMS attributes;
    beyond, the Moore–Penrose weights 𝔾(η) = 𝔾(u)⁺ from the eigenvalues (κ_η = 1/κ_u on κ_u > 0)."""
    if len(shape) > MAX_DIMS:
        return pinv_weights(u, shape)
    x = x_matrix(u, shape)
    first, _ = restricted_solve(x, u)
    eta, _ = restricted_solve(x, first)
    return eta


def pinv_weights(u: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """η with 𝔾(η) = 𝔾(u)⁺, in O(d·2^d)."""
    if len(shape) > SPECTRAL_MAX_DIMS:
        raise WorkloadError(f"marginal algebra supports at most {SPECTRAL_MAX_DIMS} attributes, got {len(shape)}")
    ku = eigenvalues(u, shape)
    live = ku > 1e-13 * max(float(np.max(np.abs(ku), initial=0.0)), 1e-300)
    inv = np.zeros_like(ku)
    inv[live] = 1.0 / ku[live]
    return from_eigenvalues(inv, shape)


class MarginalsStrategy(Matrix):
    """𝕄(θ) = stack over a (θ_a ≠ 0, increasing a) of θ_a · Q_a, Q_a the marginal on bits of a."""

    def __init__(self, shape: Sequence[int], theta: np.ndarray) -> None:
        self.domain_shape = tuple(int(s) for s in shape)
        self.d = len(self.domain_shape)
        theta = np.asarray(theta, dtype=float)
        if theta.shape != (2**self.d,):
            raise WorkloadError(f"theta must have length 2^{self.d}, got shape {theta.shape}")
        self.theta = theta
        self.support = [int(a) for a in np.flatnonzero(theta)]
        sizes = [math.prod(self.domain_shape[i] for i in kept_axes(a, self.d)) for a in self.support]
        self._offsets = np.cumsum([0] + sizes)
        self.shape = (int(self._offsets[-1]), math.prod(self.domain_shape))

    def _drop(self, a: int) -> tuple[int, ...]:
        return tuple(i for i in range(self.d) if not (a >> (self.d - 1 - i)) & 1)

    def matvec(self, x: np.ndarray) -> np.ndarray:
        t = np.asarray(x, dtype=float).reshape(self.domain_shape)
        return np.concatenate([self.theta[a] * t.sum(axis=self._drop(a)).reshape(-1) for a in self.support])

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        out = np.zeros(self.domain_shape)
        for j, a in enumerate(self.support):
            keep_shape = tuple(s if (a >> (self.d - 1 - i)) & 1 else 1 for i, s in enumerate(self.domain_shape))
            out += self.theta[a] * y[self._offsets[j]:self._offsets[j + 1]].reshape(keep_shape)
        return out.reshape(-1)

    def column_norms_l1(self) -> np.ndarray:
        return np.full(self.shape[1], float(np.abs(self.theta).sum()))

    def column_norms_sq(self) -> np.ndarray:
        return np.full(self.shape[1], float((self.theta**2).sum()))

    def sensitivity(self, p: int) -> float:
        """Prop. 7: ‖θ‖_1 (p=1) or ‖θ‖_2 (p=2)."""
        return float(np.abs(self.theta).sum()) if p == 1 else float(np.sqrt((self.theta**2).sum()))

    def pinv(self) -> Matrix:
        return MarginalsPinv(self)


class MarginalsPinv(Matrix):
    """A generalised inverse 𝔾(η)𝕄ᵀ of a marginal strategy (gives 𝕎𝕄⁺y for supported 𝕎)."""

    def __init__(self, m: MarginalsStrategy) -> None:
        self.m = m
        self.eta = g_inverse_weights(m.theta**2, m.domain_shape)
        self.shape = (m.shape[1], m.shape[0])

    def matvec(self, y: np.ndarray) -> np.ndarray:
        return gram_apply(self.eta, self.m.rmatvec(y), self.m.domain_shape)

    def rmatvec(self, x: np.ndarray) -> np.ndarray:
        return self.m.matvec(gram_apply(self.eta, x, self.m.domain_shape))

    def column_norms_l1(self) -> np.ndarray:
        return np.abs(self.dense()).sum(axis=0)

    def column_norms_sq(self) -> np.ndarray:
        return (self.dense() ** 2).sum(axis=0)


def marginal_query_variances(eta: np.ndarray, factors: Sequence[np.ndarray]) -> np.ndarray:
    """diag(W 𝔾(η) Wᵀ) for W = ⊗ factors (Kronecker row order), without forming W."""
    d = len(factors)
    out = 0.0
    ones_part = [np.atleast_2d(f).sum(axis=1) ** 2 for f in factors]
    id_part = [(np.atleast_2d(f) ** 2).sum(axis=1) for f in factors]
    for a in np.flatnonzero(eta):
        vec = np.ones(1)
        for i in range(d):
            vec = np.kron(vec, id_part[i] if (a >> (d - 1 - i)) & 1 else ones_part[i])
        out = out + eta[a] * vec
    return np.asarray(out, dtype=float) * np.ones(math.prod(np.atleast_2d(f).shape[0] for f in factors))
