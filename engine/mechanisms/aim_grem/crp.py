"""Conditional ResidualPlanner (AIM+GReM Sec. 4.3, App. D.2): per-residual noise for one marginal.

For the selected clique γ and a round measurement budget ρ_meas = 1/(2σ_t²) (C = 1/σ_t²), with prior
precisions λ_τ of the residual estimates, solve the stabilised problem (eq. 8)

    minimise Σ_τ v_τ / (x_τ + a_τ)   s.t.  Σ_τ p_τ x_τ ≤ 1,  x ≥ 0,   a_τ = λ_τ / C,

and measure each kept τ with σ_τ² = 1/(C x_τ) = σ_t² / x_τ. The problem is separable with one linear
constraint, so its KKT conditions give a water-filling solution x_τ = max(0, s·√(v_τ/p_τ) − a_τ);
we find s exactly from the sorted breakpoints. The paper's closed form (Thm D.1) is the case where
no x_τ is clipped; CVXPY + Clarabel (the paper's fallback) is kept as an option and a test oracle.
Residuals with p_τ x_τ < η (η = 1e-3) are dropped; their share of the budget is not reallocated.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from privcube.core.errors import ConfigError
from privcube.core.residuals import Sizes, p_coef, size_of, subsets, v_coef

Clique = tuple[str, ...]

ETA = 1e-3
SOLVERS = ("exact", "cvxpy")


@dataclass(frozen=True)
class CRPPlan:
    """Measurement plan for one clique: which residuals to measure and with what variance."""

    gamma: Clique
    taus: tuple[Clique, ...]
    x: np.ndarray
    sigma2: dict[Clique, float]
    dropped: tuple[Clique, ...] = ()
    method: str = "relaxed"
    p: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def budget_fraction(self) -> float:
        """Σ_{kept τ} p_τ x_τ: share of the round's measurement budget the plan actually spends (≤ 1)."""
        keep = np.array([t in self.sigma2 for t in self.taus], dtype=bool)
        return float(np.sum(self.p[keep] * self.x[keep])) if keep.any() else 0.0


def measurable_subsets(gamma: Sequence[str], sizes: Sizes) -> list[Clique]:
    """Subsets τ ⊆ γ (by size, then γ order) whose residual is non-empty (every n_i ≥ 2)."""
    return [t for t in subsets(tuple(gamma)) if all(size_of(sizes, a) >= 2 for a in t)]


def coefficients(gamma: Sequence[str], sizes: Sizes) -> tuple[list[Clique], np.ndarray, np.ndarray]:
    """(τ list, p_τ, v_τ w.r.t. γ) over the measurable subsets of γ (public constants of γ's attribute
    sizes: computed once per (γ, sizes) and shared; the arrays are read-only)."""
    g = tuple(gamma)
    key = (g, tuple(size_of(sizes, a) for a in g))
    got = _COEFFICIENTS.get(key)
    if got is None:
        local = dict(zip(g, key[1]))
        taus = measurable_subsets(g, local)
        p = np.array([p_coef(t, local) for t in taus], dtype=float)
        v = np.array([v_coef(t, g, local) for t in taus], dtype=float)
        p.flags.writeable = v.flags.writeable = False
        if len(_COEFFICIENTS) > 100_000:
            _COEFFICIENTS.clear()
        got = _COEFFICIENTS[key] = (taus, p, v)
    return list(got[0]), got[1], got[2]


_COEFFICIENTS: dict[tuple[Clique, tuple[int, ...]], tuple[list[Clique], np.ndarray, np.ndarray]] = {}


def _check(v: np.ndarray, p: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate the CRP coefficients (positive v, p; non-negative finite a; equal lengths)."""
    v, p, a = (np.asarray(z, dtype=float).ravel() for z in (v, p, a))
    if not (v.shape == p.shape == a.shape) or v.size == 0:
        raise ConfigError(f"crp: v, p, a must be non-empty and of equal length, got {v.size}, {p.size}, {a.size}")
    if np.any(~np.isfinite(v)) or np.any(v <= 0):
        raise ConfigError("crp: variance coefficients v must be positive and finite")
    if np.any(~np.isfinite(p)) or np.any(p <= 0):
        raise ConfigError("crp: privacy coefficients p must be positive and finite")
    if np.any(~np.isfinite(a)) or np.any(a < 0):
        raise ConfigError("crp: prior precisions a must be non-negative and finite")
    return v, p, a


def relaxed_solution(v: np.ndarray, p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Thm D.1: x = ((1+Q)/S)·√(v/p) − a with S = Σ√(p v), Q = Σ p a (may be negative)."""
    v, p, a = _check(v, p, a)
    s = np.sum(np.sqrt(p * v))
    q = np.sum(p * a)
    return (1.0 + q) / s * np.sqrt(v / p) - a


def waterfill(v: np.ndarray, p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Exact optimum of eq. 8: x = max(0, s·√(v/p) − a), s the root of Σ p x = 1 (sorted breakpoints)."""
    v, p, a = _check(v, p, a)
    r = np.sqrt(v / p)
    b = a / r  # x_τ becomes positive once s exceeds b_τ
    order = np.argsort(b, kind="stable")
    pr = np.cumsum((p * r)[order])
    pa = np.cumsum((p * a)[order])
    s_k = (1.0 + pa) / pr
    b_next = np.append(b[order][1:], np.inf)
    k = int(np.argmax(s_k <= b_next))  # first segment whose line reaches 1 inside it
    x = np.maximum(0.0, s_k[k] * r - a)
    return fit_budget(x, p)


def fit_budget(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Clip to x ≥ 0 and scale down so that Σ p x ≤ 1 holds exactly in floating point."""
    x = np.maximum(np.asarray(x, dtype=float), 0.0)
    tot = float(np.sum(p * x))
    while tot > 1.0:
        x = x * (1.0 / tot) * (1.0 - 1e-15)
        tot = float(np.sum(p * x))
    return x


def solve_cvxpy(v: np.ndarray, p: np.ndarray, a: np.ndarray, warm_start: np.ndarray | None = None,
                tol: float = 1e-8) -> np.ndarray:
    """Eq. 8 with CVXPY + Clarabel (the paper's fallback), warm-started; result clipped into the budget."""
    import cvxpy as cp

    v, p, a = _check(v, p, a)
    x = cp.Variable(v.size, nonneg=True)
    if warm_start is not None:
        x.value = np.maximum(np.asarray(warm_start, dtype=float), 0.0)
    objective = cp.Minimize(cp.sum(cp.multiply(v, cp.inv_pos(x + a))))
    prob = cp.Problem(objective, [p @ x <= 1.0])
    prob.solve(solver=cp.CLARABEL, warm_start=warm_start is not None,
               tol_gap_abs=tol, tol_gap_rel=tol, tol_feas=tol)
    if x.value is None:
        raise ConfigError(f"crp: the cvxpy solver failed with status {prob.status!r}")
    return fit_budget(x.value, p)


def solve(v: np.ndarray, p: np.ndarray, a: np.ndarray, solver: str = "exact") -> tuple[np.ndarray, str]:
    """The paper's procedure: closed form if feasible, else water-filling (or cvxpy); returns (x, method)."""
    if solver not in SOLVERS:
        raise ConfigError(f"crp_solver must be one of {SOLVERS}, got {solver!r}")
    x0 = relaxed_solution(v, p, a)
    if np.all(x0 >= 0):
        return fit_budget(x0, np.asarray(p, dtype=float)), "relaxed"
    if solver == "cvxpy":
        return solve_cvxpy(v, p, a, warm_start=x0), "cvxpy"
    return waterfill(v, p, a), "waterfill"


def objective(v: np.ndarray, x: np.ndarray, a: np.ndarray) -> float:
    """CRP objective Σ v/(x+a) (per-cell variance of γ in units of σ_t²; inf if some τ stays unknown)."""
    d = np.asarray(x, dtype=float) + np.asarray(a, dtype=float)
    with np.errstate(divide="ignore"):
        return float(np.sum(np.where(d > 0, np.asarray(v) / np.where(d > 0, d, 1.0), np.inf)))


def plan_crp(gamma: Sequence[str], sizes: Sizes, precisions: Mapping[Clique, float], sigma2: float, *,
             eta: float = ETA, solver: str = "exact") -> CRPPlan:
    """CRP plan for γ with round variance σ_t² (C = 1/σ_t²) given prior precisions λ_τ (missing = 0)."""
    if not (isinstance(sigma2, (int, float)) and math.isfinite(sigma2) and sigma2 > 0):
        raise ConfigError(f"crp: sigma2 must be a positive finite number, got {sigma2!r}")
    if not (isinstance(eta, (int, float)) and 0 <= eta < 1):
        raise ConfigError(f"crp: eta must lie in [0, 1), got {eta!r}")
    g = tuple(gamma)
    taus, p, v = coefficients(g, sizes)
    if not taus:
        return CRPPlan(g, (), np.zeros(0), {}, (), "empty", p)
    a = np.array([float(precisions.get(t, 0.0)) * sigma2 for t in taus])
    x, method = solve(v, p, a, solver)
    keep = (p * x >= eta) & (x > 0)
    sig = {t: sigma2 / float(xi) for t, xi, k in zip(taus, x, keep) if k}
    dropped = tuple(t for t, k in zip(taus, keep) if not k)
    return CRPPlan(g, tuple(taus), x, sig, dropped, method, p)


def plan_iid(gamma: Sequence[str], sizes: Sizes, sigma2: float) -> CRPPlan:
    """The IID strategy: N(0, σ² I) on μ_γ, decomposed; residual τ gets σ² ∏_{γ\\τ} n_j (nothing dropped)."""
    if not (isinstance(sigma2, (int, float)) and math.isfinite(sigma2) and sigma2 > 0):
        raise ConfigError(f"iid: sigma2 must be a positive finite number, got {sigma2!r}")
    g = tuple(gamma)
    taus, p, _ = coefficients(g, sizes)
    mult = [math.prod(size_of(sizes, a) for a in g if a not in t) for t in taus]
    x = np.array([1.0 / m for m in mult])
    sig = {t: sigma2 * m for t, m in zip(taus, mult)}
    return CRPPlan(g, tuple(taus), x, sig, (), "iid", p)


__all__ = ["CRPPlan", "ETA", "coefficients", "fit_budget", "measurable_subsets", "objective", "plan_crp", "plan_iid",
           "relaxed_solution", "solve", "solve_cvxpy", "waterfill"]
