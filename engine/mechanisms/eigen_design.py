"""Eigen-Design (Li & Miklau, PVLDB 2012): weighted eigen-queries of WᵀW plus completion rows.

1. Eigendecompose G = WᵀW = Qᵀ D Q; the eigen-queries are the rows of Q (zero eigenvalues dropped).
2. Program 1: min Σ c_i/u_i s.t. Σ_i u_i Q_ij² ≤ 1 ∀j (cvxpy, Clarabel), c_i = eigenvalue i; λ_i = √u_i.
3. Completion: append diag(√(max_j m_j − m_j)) so every column has the maximal L2 norm.
The closed-form weighting u_i = √c_i (AᵀA = G^{1/2}) is also completed; the lower-error one is kept.
Scale-free error X(A) = ‖A‖₂² · tr(G (AᵀA)⁺); lower bound svdb = (Σ √eig G)² / n (Theorem 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcube.core.errors import ConfigError, WorkloadError
from privcube.linalg.error import svdb_explicit
from privcube.mechanisms.base import Mechanism
from privcube.mechanisms.hdmm.implicit import ImplicitWorkload, from_workload
from privcube.mechanisms.hdmm.mechanism import HDMM
from privcube.mechanisms.hdmm.strategy import KronStrategy, Strategy
from privcube.privacy.budget import PrivacyBudget
from privcube.core.workload import Workload


def scale_free_error(g: np.ndarray, a: np.ndarray) -> float:
    """X(A) = ‖A‖₂² · tr(G (AᵀA)⁺) (max column L2 norm squared)."""
    return float((a**2).sum(axis=0).max() * np.sum(np.linalg.pinv(a.T @ a, hermitian=True) * g))


def eigen_queries(g: np.ndarray, tol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """Nonzero eigenvalues c and eigen-queries (rows of Q) of the Gram G."""
    g = np.asarray(g, dtype=float)
    if g.ndim != 2 or g.shape[0] != g.shape[1]:
        raise WorkloadError(f"Gram matrix must be square, got shape {g.shape}")
    d, v = np.linalg.eigh((g + g.T) / 2)
    d = np.clip(d, 0, None)
    keep = d > tol * max(float(d.max()), 1e-300)
    return d[keep], v[:, keep].T


def program1(c: np.ndarray, q: np.ndarray, solver: str = "CLARABEL") -> tuple[np.ndarray, float]:
    """Optimal weights u (Program 1) and its optimum Σ c_i/u_i at sensitivity² ≤ 1."""
    return weighting_program(c, q**2, solver)


def weighting_program(c: np.ndarray, load: np.ndarray, solver: str = "CLARABEL") -> tuple[np.ndarray, float]:
    """min Σ_i c_i/u_i s.t. Σ_i u_i load[i, j] ≤ 1 for every column j (Program 1's form), u > 0."""
    import cvxpy as cp

    scale = float(c.max())
    u = cp.Variable(len(c), pos=True)
    prob = cp.Problem(cp.Minimize(cp.sum(cp.multiply(c / scale, cp.inv_pos(u)))), [load.T @ u <= 1])
    try:
        prob.solve(solver=solver)
    except cp.error.SolverError as e:
        raise ConfigError(f"eigen-design: solver {solver!r} failed on Program 1 ({e})") from None
    if u.value is None:
        raise ConfigError(f"eigen-design: solver {solver!r} returned no solution ({prob.status})")
    val = np.maximum(np.asarray(u.value, dtype=float), 1e-300)
    return val, float(np.sum(c / val))


def principal_vectors(c: np.ndarray, q: np.ndarray, k: int, solver: str = "CLARABEL") -> np.ndarray:
    """Sec. 4.2 speed-up: the top-k eigen-queries get their own weights, all others share one (k+1 variables).

    Returns per-eigen-query weights u (same order as ``c``).
    """
    order = np.argsort(c)[::-1]
    k = int(min(max(k, 1), len(c)))
    top, rest = order[:k], order[k:]
    if len(rest) == 0:
        return weighting_program(c, q**2, solver)[0]
    cc = np.append(c[top], c[rest].sum())
    load = np.vstack([q[top] ** 2, (q[rest] ** 2).sum(axis=0)])
    w, _ = weighting_program(cc, load, solver)
    u = np.empty(len(c))
    u[top], u[rest] = w[:-1], w[-1]
    return u


def eigen_separation(c: np.ndarray, q: np.ndarray, group_size: int, solver: str = "CLARABEL") -> np.ndarray:
    """Sec. 4.2 speed-up: Program 1 per group of ``group_size`` consecutive eigen-queries (by eigenvalue),
    then one program over per-group factors s_t (C_t = Σ_{i∈t} c_i/u_i, N_tj = Σ_{i∈t} u_i Q_ij²); u_i = s_t u_i."""
    order = np.argsort(c)[::-1]
    g = int(max(group_size, 1))
    groups = [order[i:i + g] for i in range(0, len(order), g)]
    u = np.empty(len(c))
    big_c, load = [], []
    for grp in groups:
        ug, val = weighting_program(c[grp], q[grp] ** 2, solver)
        u[grp] = ug
        big_c.append(val)
        load.append(ug @ (q[grp] ** 2))
    s, _ = weighting_program(np.array(big_c), np.array(load), solver)
    for grp, st in zip(groups, s):
        u[grp] *= st
    return u


def complete(a1: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """Append diagonal rows d_j = √(max_i m_i² − m_j²) so all columns reach the maximal L2 norm."""
    m2 = (a1**2).sum(axis=0)
    dp = np.sqrt(np.maximum(m2.max() - m2, 0))
    dp[dp < tol * math.sqrt(m2.max())] = 0
    rows = np.diag(dp)[dp > 0]
    return np.vstack([a1, rows]) if len(rows) else a1


@dataclass
class EigenDesignResult:
    """The chosen strategy, its scale-free error, the alternatives' errors and the lower bound."""

    matrix: np.ndarray
    error: float
    variant: str
    program1_optimum: float
    errors: dict[str, float]
    svdb: float


VARIANTS = ("best", "program1", "closed-form", "principal", "separation")


def eigen_design(g: np.ndarray, *, variant: str = "best", solver: str = "CLARABEL", principal: float = 0.1,
                 group_size: int = 16) -> EigenDesignResult:
    """Eigen-Design strategy for Gram G (``variant``: best | program1 | closed-form | principal | separation).

    ``principal`` is the fraction (< 1) or number (≥ 1) of principal eigen-queries kept with own weights;
    ``group_size`` is n_g for eigen-query separation. Every variant is completed and compared with the
    closed form; the lower-error strategy is returned.
    """
    if variant not in VARIANTS:
        raise ConfigError(f"eigen-design: variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    c, q = eigen_queries(g)
    cands: dict[str, np.ndarray] = {}
    p1 = math.nan
    if variant in ("best", "program1"):
        u, p1 = program1(c, q, solver)
        cands["program1"] = complete(np.sqrt(u)[:, None] * q)
    if variant == "principal":
        k = int(round(principal * len(c))) if principal < 1 else int(principal)
        u = principal_vectors(c, q, k, solver)
        p1 = float(np.sum(c / u))
        cands["principal"] = complete(np.sqrt(u)[:, None] * q)
    if variant == "separation":
        u = eigen_separation(c, q, group_size, solver)
        p1 = float(np.sum(c / u))
        cands["separation"] = complete(np.sqrt(u)[:, None] * q)
    if variant != "program1":
        cands["closed-form"] = complete((c**0.25)[:, None] * q)
    errors = {k: scale_free_error(g, a) for k, a in cands.items()}
    best = min(errors, key=errors.get)
    a = cands[best]
    a = a / math.sqrt((a**2).sum(axis=0).max())  # unit L2 sensitivity
    return EigenDesignResult(a, errors[best], best, p1, errors, svdb_explicit(g))


def querysmasher_part(g: np.ndarray, *, variant: str = "best", solver: str = "CLARABEL") -> Any:
    """Eigen-Design as a QuerySmasher low-dimensional solver: a ``PartSolution`` for the part Gram ``g``.

    V = AᵀA of the Eigen-Design strategy scaled to privacy cost 1 (max diag V = 1), L = tr(G V⁺), certified
    by the uniform-λ dual (tr √G)² / c, which is Eigen-Design's own lower bound (Li & Miklau, Thm 2).
    """
    from privcube.linalg.psd import psd_pinv, psd_sqrt
    from privcube.mechanisms.querysmasher.solution import PartSolution

    g = np.asarray(g, dtype=float)
    g = (g + g.T) / 2
    res = eigen_design(g, variant=variant, solver=solver)
    v = res.matrix.T @ res.matrix
    v = v / float(np.max(np.diag(v)))
    vp = psd_pinv(v)
    return PartSolution(float(np.sum(g * vp)), vp, psd_sqrt(v), "eigen-design", res.svdb,
                        {"variant": res.variant})


class EigenDesign(HDMM):
    """Eigen-Design strategy on the explicit data vector, measured and reconstructed like HDMM's OPT_0."""

    name = "eigen-design"
    PARAMS = {"noise": "auto", "calibration": "zcdp", "variant": "best", "solver": "CLARABEL", "max_cells": 4096,
              "principal": 0.1, "group_size": 16}
    PARAM_HELP = {
        "noise": "auto | laplace | gaussian: auto is Laplace for a pure {epsilon} budget, Gaussian otherwise",
        "calibration": "zcdp | analytic: Gaussian noise calibrated to the budget's rho (zCDP), or to (epsilon, "
                       "delta) by the analytic Gaussian mechanism",
        "variant": "best | program1 | closed-form | principal | separation: how the eigen-queries are weighted "
                   "(each is completed and compared with the closed form; the lower error is kept)",
        "solver": "the cvxpy solver of Program 1 (the eigen-query weights)",
        "max_cells": "largest explicit data vector (cells) it accepts",
        "principal": "variant principal: the fraction (< 1) or number (>= 1) of principal eigen-queries that keep "
                     "their own weights",
        "group_size": "variant separation: eigen-queries per group (n_g)",
    }

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        Mechanism.__init__(self, params)
        p = self.params
        if p["noise"] not in ("auto", "laplace", "gaussian"):
            raise ConfigError(f"eigen-design: noise must be auto, laplace or gaussian, got {p['noise']!r}")
        if p["calibration"] not in ("zcdp", "analytic"):
            raise ConfigError(f"eigen-design: calibration must be zcdp or analytic, got {p['calibration']!r}")
        if p["variant"] not in VARIANTS:
            raise ConfigError(f"eigen-design: variant must be one of {', '.join(VARIANTS)}, got {p['variant']!r}")
        v = p["max_cells"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"eigen-design: max_cells must be a positive integer, got {v!r}")
        g = p["group_size"]
        if isinstance(g, bool) or not isinstance(g, int) or g < 1:
            raise ConfigError(f"eigen-design: group_size must be a positive integer, got {g!r}")
        k = p["principal"]
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not k > 0:
            raise ConfigError(f"eigen-design: principal must be a positive fraction or count, got {k!r}")

    def _select(self, workload: Workload, budget: PrivacyBudget, client: Any = None
                ) -> tuple[ImplicitWorkload, Strategy, dict[str, float], str]:
        iw = from_workload(workload)
        if iw.size > self.params["max_cells"]:
            raise ConfigError(f"eigen-design: the data vector has {iw.size} cells, above max_cells="
                              f"{self.params['max_cells']} (the method is O(n^3) on an explicit Gram)")
        iw = iw.merged()
        g = sum(c**2 * f[0].T @ f[0] for c, f in iw.terms)
        res = eigen_design(g, variant=self.params["variant"], solver=self.params["solver"],
                           principal=self.params["principal"], group_size=self.params["group_size"])
        kind = self.noise_kind(budget)
        strat = KronStrategy([res.matrix], res.error, kind="eigen-design")
        losses = {f"X_{k}": v for k, v in res.errors.items()}
        losses["svdb"] = res.svdb
        return iw, strat, losses, kind
