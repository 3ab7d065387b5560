"""ResidualPlanner (Xiao, Wang, Kifer 2023): optimal Gaussian noise per residual for marginal workloads.

Every workload marginal γ is the sum of its residual components τ ⊆ γ (see ``privcube.core.residuals``).
Residual τ is measured once as ``Decomp(μ_τ + N(0, σ_τ² I))``; its zCDP cost is ``p_τ / (2 σ_τ²)``
and it adds ``v_τ(γ) σ_τ²`` to the variance of every cell of every marginal γ ⊇ τ.

Objectives (privacy cost β = 2ρ, the paper's "cost"; "cost 1" is ρ = 0.5):

* ``sum``: minimise Σ_γ w_γ · E‖μ̂_γ − μ_γ‖² = Σ_τ a_τ σ_τ² with a_τ = Σ_{γ⊇τ} w_γ n_γ v_τ(γ),
  subject to Σ_τ p_τ/σ_τ² = β. The Lagrangian gives σ_τ² = (Σ_κ √(a_κ p_κ)) / β · √(p_τ / a_τ)
  and the optimum Σ w·SSE = (Σ_τ √(a_τ p_τ))² / β.
* ``max``: minimise max_γ w_γ · (per-cell variance of γ), a convex program in u_τ = 1/σ_τ² solved
  with cvxpy (Clarabel).

RMSE (the ResidualPlanner paper's definition): sqrt(total expected squared error over all workload
cells / total number of workload cells), unweighted; the weighted version is in ``details``.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from privcube.core.context import RunContext
from privcube.core.domain import Domain
from privcube.core.errors import ConfigError
from privcube.mechanisms.base import GroupAnswer, Mechanism, MechanismResult, PlanSummary
from privcube.core.oracle import MarginalOracle, measure
from privcube.privacy.budget import rho_of
from privcube.privacy.discrete import is_discrete
from privcube.core.workload import Workload

Clique = tuple[str, ...]


def downward_closure(domain: Domain, cliques: Iterable[Sequence[str]]) -> list[Clique]:
    """All subsets of the given cliques, in domain order, sorted by size then position."""
    out: set[Clique] = set()
    for c in cliques:
        c = domain.canonical(c)
        for r in range(len(c) + 1):
            out.update(itertools.combinations(c, r))
    order = {a: i for i, a in enumerate(domain.attributes)}
    return sorted(out, key=lambda t: (len(t), [order[a] for a in t]))


def p_coefficient(domain: Domain, tau: Clique, lattice: bool = False) -> float:
    """Privacy coefficient p_τ = ∏_{i∈τ} (n_i−1)/n_i (the cost of σ_τ² = 1 is p_τ/2 in zCDP).

    With ``lattice`` (exact discrete Gaussian noise) it is 1 for every measurable τ: the residual is
    then post-processing of μ_τ + Z, a sensitivity-1 integer query whose discrete-Gaussian cost is
    1/(2σ²) (CKS Thm 4); the smaller p_τ is proven only for the continuous Gaussian, whose
    projection onto the residual space is again Gaussian.
    """
    p = math.prod((domain[a] - 1) / domain[a] for a in tau)
    return 1.0 if lattice and p > 0 else p


def v_coefficient(domain: Domain, tau: Clique, gamma: Clique) -> float:
    """Per-cell variance of marginal γ contributed by residual τ ⊆ γ measured with σ_τ² = 1."""
    rest = [a for a in gamma if a not in tau]
    return math.prod((domain[a] - 1) / domain[a] for a in tau) / math.prod(domain[a] ** 2 for a in rest)


def substitution_cost(domain: Domain, sigma2: Mapping[Clique, float], lattice: bool = False,
                      max_work: float = 2e8) -> float:
    """Privacy cost β = 2ρ of the residual measurements ``sigma2`` when neighbours differ by changing one
    record's values (substitution) instead of adding or removing one.

    A substitution moves one count from cell i to cell j, so residual τ shifts by Π_τ(e_j − e_i), of
    squared norm 2p_τ − 2f_τ(S), with S the attributes where i and j differ and f_τ(S) = ∏_{k∈τ} (−1/n_k
    if k ∈ S else 1 − 1/n_k); with discrete noise (charged on the whole marginal μ_τ) it is 2 or 0.
    β = max_S Σ_τ (2p_τ − 2f_τ(S)) / σ_τ², enumerated over every S when 2^|attrs|·|τ's| ≤ ``max_work``;
    otherwise each τ's own worst case is summed (a valid upper bound: 2p_τ(1 + 1/(min n_k − 1)), 2 with
    discrete noise, 0 for the total, which a substitution leaves unchanged). At most 4× the add/remove cost.
    """
    taus = [t for t in sigma2 if p_coefficient(domain, t) > 0]
    attrs = sorted({a for t in taus for a in t}, key=domain.attributes.index)
    if not taus:
        return 0.0
    inv = np.array([1.0 / sigma2[t] for t in taus])
    if len(attrs) < 60 and float(2 ** len(attrs)) * len(taus) <= max_work:
        bit = {a: i for i, a in enumerate(attrs)}
        masks = np.arange(2 ** len(attrs), dtype=np.int64)
        total = np.zeros(masks.size)
        for t, w in zip(taus, inv):
            same = np.ones(masks.size)
            for a in t:
                n = domain[a]
                differ = (masks >> bit[a]) & 1 == 1
                same *= np.where(differ, 0.0 if lattice else -1.0 / n, 1.0 if lattice else 1.0 - 1.0 / n)
            total += w * (2.0 * p_coefficient(domain, t, lattice) - 2.0 * same)
        return float(total.max())
    worst = [0.0 if not t else 2.0 if lattice else
             2.0 * p_coefficient(domain, t) * (1.0 + 1.0 / (min(domain[a] for a in t) - 1)) for t in taus]
    return float(np.dot(worst, inv))


NEIGHBOURS = ("add-remove", "substitution")


class ResidualPlan:
    """Noise scales σ_τ² for the residuals of a marginal workload, and the resulting errors."""

    def __init__(self, domain: Domain, weights: Mapping[Clique, float], sigma2: Mapping[Clique, float],
                 beta: float, lattice: bool = False, neighbours: str = "add-remove") -> None:
        self.domain = domain
        self.weights = dict(weights)
        self.sigma2 = dict(sigma2)
        self.beta = float(beta)
        self.lattice = lattice  # discrete noise: p_τ = 1 (see p_coefficient)
        self.neighbours = neighbours

    def cell_variance(self, gamma: Clique) -> float:
        """Variance of every cell of the reconstructed marginal γ."""
        return float(sum(v_coefficient(self.domain, t, gamma) * self.sigma2[t]
                         for t in _subsets(gamma) if t in self.sigma2))

    def privacy_cost(self) -> float:
        """β = Σ_τ p_τ / σ_τ² (zCDP ρ = β/2) for add/remove neighbours; see :func:`substitution_cost`."""
        if self.neighbours == "substitution":
            return substitution_cost(self.domain, self.sigma2, self.lattice)
        return float(sum(p_coefficient(self.domain, t, self.lattice) / s for t, s in self.sigma2.items()))


def _subsets(c: Clique) -> Iterable[Clique]:
    for r in range(len(c) + 1):
        yield from itertools.combinations(c, r)


def optimize_sum(domain: Domain, weights: Mapping[Clique, float], beta: float,
                 lattice: bool = False) -> dict[Clique, float]:
    """Closed-form σ_τ² minimising the weighted total squared error at privacy cost β = 2ρ."""
    a: dict[Clique, float] = {}
    for gamma, w in weights.items():
        n_gamma = domain.size(gamma)
        for t in _subsets(gamma):
            a[t] = a.get(t, 0.0) + w * n_gamma * v_coefficient(domain, t, gamma)
    p = {t: p_coefficient(domain, t, lattice) for t in a}
    active = {t: x for t, x in a.items() if x > 0 and p[t] > 0}
    total = sum(math.sqrt(x * p[t]) for t, x in active.items())
    return {t: total / beta * math.sqrt(p[t] / x) for t, x in active.items()}


def optimize_max(domain: Domain, weights: Mapping[Clique, float], beta: float,
                 lattice: bool = False) -> dict[Clique, float]:
    """σ_τ² minimising max_γ w_γ·(cell variance of γ) at privacy cost β, via cvxpy/Clarabel."""
    import cvxpy as cp

    taus = [t for t in downward_closure(domain, weights) if p_coefficient(domain, t) > 0]
    index = {t: i for i, t in enumerate(taus)}
    p = np.array([p_coefficient(domain, t, lattice) for t in taus])
    # Scale u = 1/σ² by beta so the problem is well-conditioned regardless of the budget.
    u = cp.Variable(len(taus), pos=True)
    t_var = cp.Variable()
    cons = [p @ u <= 1.0]
    for gamma, w in weights.items():
        idx = [index[t] for t in _subsets(gamma) if t in index]
        coef = np.array([w * v_coefficient(domain, taus[i], gamma) for i in idx])
        scale = coef.max() if len(coef) else 1.0
        cons.append(cp.sum(cp.multiply(coef / scale, cp.inv_pos(u[idx]))) <= t_var / scale)
    prob = cp.Problem(cp.Minimize(t_var), cons)
    try:
        prob.solve(solver=cp.CLARABEL)
    except (cp.error.SolverError, Exception):  # noqa: BLE001 - fall back to the default conic solver
        prob.solve()
    if u.value is None:
        raise ConfigError(f"residual-planner: objective 'max' failed to solve ({prob.status})")
    uv = np.maximum(np.asarray(u.value, dtype=float), 1e-300)
    uv = uv / float(p @ uv)  # exactly cost 1 before scaling to beta
    return {t: 1.0 / (beta * uv[i]) for t, i in index.items()}


class ResidualPlanner(Mechanism):
    """Optimal residual measurements for weighted marginal workloads (sum or max variance)."""

    name = "residual-planner"
    PARAMS = {"objective": "sum", "neighbours": "add-remove"}
    PARAM_HELP = {
        "objective": "sum | max: minimise the workload's weighted sum of variances, or its largest variance",
        "neighbours": "add-remove | substitution: neighbouring datasets add or remove one record, or change one "
                      "record's values (the record count is then public; relational tables use it)",
    }
    INTEGER_MEASUREMENTS = True  # noise is added to the exact marginal μ_τ, then decomposed

    @classmethod
    def report_sections(cls) -> dict[str, Any]:
        """A residual measurement at noise σ_τ² costs ρ_τ = p_τ/(2σ_τ²) (continuous noise)."""
        return {**super().report_sections(), "residual_rho": "p_tau"}

    def __init__(self, params: Mapping[str, Any] | None = None) -> None:
        super().__init__(params)
        obj = self.params["objective"]
        if obj not in ("sum", "max"):
            raise ConfigError(f"mechanism 'residual-planner': parameter 'objective' must be 'sum' or 'max', got {obj!r}")
        if self.params["neighbours"] not in NEIGHBOURS:
            raise ConfigError(f"mechanism 'residual-planner': parameter 'neighbours' must be one of {NEIGHBOURS}, "
                              f"got {self.params['neighbours']!r}")

    # planning -----------------------------------------------------------------------------
    def _check(self, workload: Workload) -> None:
        bad = [g.label() + "(" + ",".join(f"{a}={q}" for a, q in g.query_types().items()) + ")"
               for g in workload if not g.is_marginal]
        if bad:
            raise ConfigError(
                f"mechanism 'residual-planner' answers marginal workloads only; group(s) {bad[:3]} are not "
                f"marginals: use mechanism 'querysmasher' for other query types"
            )

    def optimize(self, workload: Workload, budget: Any) -> ResidualPlan:
        """Noise scales for every residual in the downward closure of the workload."""
        self._check(workload)
        rho = rho_of(budget, "residual-planner")
        beta = 2.0 * rho
        weights = {workload.domain.canonical(c): w for c, w in workload.weights().items()}
        lattice = self.noise_sampler == "discrete"
        solve = optimize_sum if self.params["objective"] == "sum" else optimize_max
        sigma2 = solve(workload.domain, weights, beta, lattice)
        plan = ResidualPlan(workload.domain, weights, sigma2, beta, lattice, self.params["neighbours"])
        if plan.neighbours == "substitution":  # same allocation, noise scaled to the substitution cost
            f = plan.privacy_cost() / beta
            plan.sigma2 = sigma2 = {t: s * f for t, s in sigma2.items()}
        cost = plan.privacy_cost()
        if cost > beta:  # float round-off only: inflate noise so the spend never exceeds the budget
            f = cost / beta * (1 + 1e-12)
            plan.sigma2 = {t: s * f for t, s in sigma2.items()}
        return plan

    def plan(self, workload: Workload, budget: Any) -> PlanSummary:
        """Expected errors and measurement plan, without data."""
        rp = self.optimize(workload, budget)
        return _summary(self.name, self.params["objective"], workload, budget, rp)

    def plan_noise(self, workload: Workload, budget: Any) -> list[dict[str, Any]]:
        """Noise fields of each group's answers (see ``_noise_of``)."""
        if self.noise_sampler != "discrete":
            return [{"noise": "gaussian"} for _ in workload]
        rp = self.optimize(workload, budget)
        return [_noise_of(workload.domain.canonical(g.attributes), rp, self.noise_sampler) for g in workload]

    # running ------------------------------------------------------------------------------
    def run(self, oracle: MarginalOracle, workload: Workload, budget: Any, ledger: Any, noise: Any,
            context: RunContext | None = None) -> MechanismResult:
        """Measure every needed residual once, then reconstruct each workload marginal."""
        from privcube.core.residuals import recon_add

        if is_discrete(noise):
            self.use_noise_sampler("discrete")
        rp = self.optimize(workload, budget)
        domain = workload.domain
        taus = [t for t in downward_closure(domain, rp.weights) if t in rp.sigma2]
        progress = context.progress if context is not None else None
        spend = min(rp.privacy_cost() / 2.0, rho_of(budget, "residual-planner"))
        ledger.charge(self.name, rho=spend, residuals=len(taus), objective=self.params["objective"])
        # Each residual release runs where its marginal is counted (on a worker when there is a
        # client), so only the noisy residuals reach this process.
        sigmas = {t: math.sqrt(rp.sigma2[t]) for t in taus}
        z: dict[Clique, np.ndarray] = measure(oracle, taus, ResidualRelease(self.name, sigmas, noise))
        if progress is not None:
            progress("measure residuals", 1.0)
        answers = []
        for g in workload:
            gamma = domain.canonical(g.attributes)
            out = np.zeros(domain.shape_of(gamma))
            for t in _subsets(gamma):
                if t in z:
                    recon_add(out, z[t], t, gamma, domain)
            var = np.full(out.size, rp.cell_variance(gamma))
            answers.append(GroupAnswer(g, out.reshape(-1), var, **_noise_of(gamma, rp, self.noise_sampler)))
        summary = _summary(self.name, self.params["objective"], workload, budget, rp)
        report = {"mechanism": self.name, "rho_spent": spend, "expected_rmse": summary.rmse,
                  "residuals": len(taus)}
        return MechanismResult(answers, report=report, residuals={t: (z[t], 1.0 / rp.sigma2[t]) for t in z})


def _noise_of(gamma: Clique, rp: Any, sampler: str) -> dict[str, Any]:
    """GroupAnswer's noise fields: Gaussian combinations of residual draws; with discrete noise the total
    (γ = ∅) is a single discrete-Gaussian draw μ_∅ + Z of parameter σ_∅² (exact lattice intervals)."""
    if sampler != "discrete":
        return {"noise": "gaussian"}
    single = len(gamma) == 0 and () in rp.sigma2
    return {"noise": "discrete-gaussian", "single_measurement": single,
            "noise_scale": rp.sigma2[()] if single else None}


class ResidualRelease:
    """Picklable release of one residual: Decomp(μ_τ + N(0, σ_τ² I)) with noise keyed by (name, τ)."""

    def __init__(self, name: str, sigmas: Mapping[Clique, float], noise: Any) -> None:
        self.name, self.sigmas, self.noise = name, dict(sigmas), noise

    def __call__(self, tau: Clique, mu: np.ndarray) -> np.ndarray:
        from privcube.core.residuals import decomp

        mu = np.asarray(mu, dtype=float)
        y = self.noise.add_gaussian((self.name, tau), mu, self.sigmas[tau])  # discrete: integer μ only
        return decomp(y, tau, tau)


def reconstruct(domain: Domain, residuals: Mapping[Clique, np.ndarray], gamma: Sequence[str]) -> np.ndarray:
    """Marginal on γ from its available residuals (missing residuals contribute zero)."""
    from privcube.core.residuals import recon_add

    gamma = domain.canonical(gamma)
    out = np.zeros(domain.shape_of(gamma))
    for t in _subsets(gamma):
        if t in residuals:
            recon_add(out, np.asarray(residuals[t], dtype=float), t, gamma, domain)
    return out


def _summary(name: str, objective: str, workload: Workload, budget: Any, rp: ResidualPlan) -> PlanSummary:
    domain = workload.domain
    groups = []
    sse = wsse = cells = 0.0
    for g in workload:
        gamma = domain.canonical(g.attributes)
        var = rp.cell_variance(gamma)
        n = domain.size(gamma)
        sse += n * var
        wsse += g.weight * n * var
        cells += n
        groups.append({"attributes": list(g.attributes), "label": g.label(), "weight": g.weight, "cells": n,
                       "rmse": math.sqrt(var), "variance": var})
    privacy = {"rho": rp.privacy_cost() / 2.0, "epsilon": getattr(budget, "epsilon", None),
               "delta": getattr(budget, "delta", None)}
    meas = [{"residual": list(t), "sigma2": s, "cells": domain.size(t)}
            for t, s in sorted(rp.sigma2.items(), key=lambda kv: (len(kv[0]), kv[0]))]
    details = {"objective": objective, "rmse_definition": "sqrt(sum over workload cells of expected squared "
               "error / number of workload cells)", "weighted_rmse": math.sqrt(wsse / cells),
               "total_squared_error": sse, "weighted_squared_error": wsse, "cells": cells,
               "privacy_cost_beta": rp.privacy_cost(), "max_cell_variance": max(
                   (gr["variance"] for gr in groups), default=0.0)}
    return PlanSummary(name, math.sqrt(sse / cells), privacy, groups, meas, details)
