"""The final round of AIM+GReM as a *spread* measurement: the budget left when the loop's last round
comes (plus a share reserved for it from the start) measures the residuals of every clique already
selected, allocated by a conditional ResidualPlanner over the whole workload.

Why: AIM's budget schedule (T = 2|W↓| nominal rounds, ×4 annealing, "spend the rest when fewer than
two rounds fit") concentrates the budget at the end: on nltcs at ε = 10, the first 530 rounds spent
38% of ρ and the last 34 rounds (after three annealings) 52%, on 34 marginals. The measured part of the
estimate then has about 2× the variance ResidualPlanner's allocation would give for the same ρ, which is
most of AIM+GReM's gap to ResidualPlanner at ε ≥ 1. Here the final round skips the exponential mechanism
(nothing is selected) and measures each residual τ of the selected cliques' closure with variance
σ_τ² V_τ chosen to minimise the workload's expected squared error given the precisions λ_τ already
gathered (CRP's problem, eq. 8, with the objective summed over every workload marginal containing τ):

    minimise Σ_τ c_τ / (x_τ + a_τ)   s.t.  Σ_τ p_τ x_τ ≤ 1,  x ≥ 0,   a_τ = λ_τ / C,  C = 2ρ_final,
    c_τ = Σ_{γ∈W, γ⊇τ} w_γ · n_γ · v_τ(γ)         (total squared error of γ per unit variance of τ)

solved exactly by water-filling (:func:`privcube.mechanisms.aim_grem.crp.waterfill`); σ_τ² = 1/(C x_τ).
The plan reads only public quantities (domain sizes, workload, the released selection trace and the
precisions, which depend on the noise plan only), never the data. Its cost is Σ p_τ/(2σ_τ²) = ρ_final
(Prop. 4.3), or Σ 1/(2σ_τ²) when each residual is measured as its whole marginal (discrete noise, as
ResidualPlanner accounts it there). Cliques never selected stay unmeasured (completed by maximum entropy
as before): this is AIM's adaptive choice of what to measure, not a switch to measuring the workload.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from privcube.core.errors import ConfigError
from privcube.mechanisms.aim_grem import crp
from privcube.core.residuals import Sizes, p_coef, size_of, v_coef

Clique = tuple[str, ...]
MODES = ("spread", "select")
SHARE = 0.4  # share of ρ reserved for the final round (measured on nltcs/adult15, README aim-grem lines)
MIN_SHARE = 1e-9  # residuals whose budget share p_τ x_τ falls below this are not measured (rest rescaled)


def eligible(residuals: Iterable[Clique], selected: Iterable[Sequence[str]]) -> list[Clique]:
    """The residuals τ (in ``residuals`` order, ∅ included) contained in some selected clique."""
    sets = {frozenset(g) for g in selected}
    if any(len(g) > 12 for g in sets):  # too many subsets to list: test each residual against each clique
        return [tuple(t) for t in residuals if any(frozenset(t) <= s for s in sets)]
    covered: set[frozenset[str]] = set()  # every subset of a selected clique
    for g in sets:
        items = sorted(g, key=str)
        for mask in range(1 << len(items)):
            covered.add(frozenset(a for i, a in enumerate(items) if mask >> i & 1))
    return [tuple(t) for t in residuals if frozenset(t) in covered]


def workload_coefficients(taus: Sequence[Clique], cliques: Sequence[Clique], weights: Mapping[Clique, float],
                          sizes: Sizes) -> np.ndarray:
    """c_τ = Σ_{γ∈W, γ⊇τ} w_γ n_γ v_τ(γ): the workload's total squared error per unit variance of τ."""
    out = np.zeros(len(taus))
    sets = [(g, frozenset(g), math.prod(size_of(sizes, a) for a in g)) for g in cliques]
    for i, t in enumerate(taus):
        ts = frozenset(t)
        for g, gs, n_g in sets:
            if ts <= gs:
                out[i] += float(weights.get(g, 1.0)) * n_g * v_coef(t, g, sizes)
    return out


def plan_final(taus: Sequence[Clique], sizes: Sizes, cliques: Sequence[Clique], weights: Mapping[Clique, float],
               precisions: Mapping[Clique, float], rho: float, whole_marginal: bool = False) -> dict[Clique, float]:
    """τ -> σ_τ² for the final round with budget ``rho``; Σ p_τ/(2σ_τ²) ≤ ρ exactly in floating point
    (p_τ = 1 with ``whole_marginal``). Residuals no workload marginal needs, or whose optimal share is
    below :data:`MIN_SHARE`, are left out and their share is given to the others."""
    if not (isinstance(rho, (int, float)) and math.isfinite(rho) and rho > 0):
        raise ConfigError(f"final round: rho must be a positive finite number, got {rho!r}")
    taus = [tuple(t) for t in taus]
    c = workload_coefficients(taus, cliques, weights, sizes)
    keep = c > 0
    if not keep.any():
        return {}
    taus = [t for t, k in zip(taus, keep) if k]
    c = c[keep]
    p = np.ones(len(taus)) if whole_marginal else np.array([p_coef(t, sizes) for t in taus])
    big_c = 2.0 * float(rho)
    a = np.array([float(precisions.get(t, 0.0)) / big_c for t in taus])
    x = crp.waterfill(c, p, a)
    x = np.where(p * x >= MIN_SHARE, x, 0.0)
    spent = float(np.sum(p * x))
    if spent <= 0:
        return {}
    x = crp.fit_budget(x / spent * (1.0 - 1e-12), p)
    return {t: 1.0 / (big_c * float(xi)) for t, xi in zip(taus, x) if xi > 0}


def cost(plan: Mapping[Clique, float], sizes: Sizes, whole_marginal: bool = False) -> float:
    """ρ of measuring every τ of ``plan`` with variance σ_τ² V_τ: Σ p_τ/(2σ_τ²) (p_τ = 1 for whole marginals)."""
    return math.fsum((1.0 if whole_marginal else p_coef(t, sizes)) / (2.0 * s2) for t, s2 in plan.items())


__all__ = ["MIN_SHARE", "MODES", "SHARE", "cost", "eligible", "plan_final", "workload_coefficients"]
