"""Measuring each geographic level with ResidualPlanner, unit by unit (issue 35 item 2).

Within a level every person is in exactly one unit, so running ResidualPlanner's plan on each unit's rows is a
parallel composition: the whole level costs what one run costs, ρ_L = Σ_τ p_τ / (2σ_τ²). Levels compose
sequentially: Σ_L ρ_L ≤ ρ. Each unit's residual τ is measured as ``Sub(μ_τ + N(0, σ_τ² I))``, the same kernel at
every level, so the hierarchy is fitted exactly with scalar weights (``privcube.census.gls``).
The split of ρ over levels is given (``privacy.levels``) or chosen here: the one that minimises the geometric
mean over levels of the expected cell variance of each level's published tables after the hierarchical fit
(scale-free, so a level of few large units and one of many small ones count alike). Plans read no data.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privcube.census.residual_tables import cell_variance, decomp_units
from privcube.core.residuals import subsets
from privcube.census.spec import TOTAL, CensusSpec
from privcube.core.domain import Domain
from privcube.core.workload import Workload

NAME = "residual-planner"


@dataclass
class LevelPlan:
    """ResidualPlanner's noise for one level: σ_τ² of every residual its tables need, and its ρ."""

    level: str
    rho: float
    sigma2: dict[tuple[str, ...], float]
    sets: list[tuple[str, ...]]

    def scaled(self, rho: float) -> LevelPlan:
        """The same allocation at budget ``rho`` (σ² ∝ 1/ρ)."""
        f = self.rho / rho
        return LevelPlan(self.level, rho, {t: s * f for t, s in self.sigma2.items()}, self.sets)


def attribute_domain(spec: CensusSpec) -> Domain:
    """The non-geographic attributes as a Domain (what ResidualPlanner plans over)."""
    return Domain.from_mapping(spec.sizes)


def unit_plan(spec: CensusSpec, level: str, rho: float = 1.0) -> LevelPlan:
    """ResidualPlanner's plan of one level's published tables at budget ``rho`` (charged once per level)."""
    from privcube.mechanisms.residual_planner import ResidualPlanner
    from privcube.privacy.budget import PrivacyBudget

    sets = spec.level_sets(level)
    domain = attribute_domain(spec)
    mech = ResidualPlanner(spec.mechanism_params)
    if spec.noise_sampler == "discrete":
        mech.use_noise_sampler("discrete")
    plan = mech.optimize(Workload.marginals(domain, sets), PrivacyBudget.from_rho(rho))
    cost = plan.privacy_cost() / 2.0
    return LevelPlan(level, cost, {tuple(t): float(s) for t, s in plan.sigma2.items()}, sets)


def level_plans(spec: CensusSpec, hierarchy: Any) -> dict[str, LevelPlan]:
    """The plan of every measured level under the config's split, or the planner's (see the module docstring)."""
    base = {lv: unit_plan(spec, lv) for lv in spec.measured_levels()}
    rho = float(spec.budget.rho)
    split = spec.split or choose_split(spec, hierarchy, base)
    return {lv: p.scaled(rho * split[lv] * (1 - 1e-12)) for lv, p in base.items()}


def choose_split(spec: CensusSpec, hierarchy: Any, base: Mapping[str, LevelPlan]) -> dict[str, float]:
    """The split (on a grid of 1/20ths, then refined to 1/100ths near it) minimising the geometric mean of the
    levels' expected published cell variances; one measured level takes everything."""
    levels = list(base)
    if len(levels) == 1:
        return {levels[0]: 1.0}

    def score(shares: Sequence[float]) -> float:
        plans = {lv: base[lv].scaled(s) for lv, s in zip(levels, shares)}
        errs = expected_variances(spec, hierarchy, plans)
        return float(np.mean([np.log(errs[lv]) for lv in levels]))

    from contextlib import nullcontext

    from privcube.core.progress import progress

    # a progress line where planning takes more than a few seconds (10^5 units x 500 residuals: about a minute)
    work = sum(hierarchy.n_units(lv) for lv in spec.levels) * len(residual_levels(spec))
    def bar(label: str, n: int):  # noqa: ANN202 - a context manager yielding update(n)
        return progress(label, n, heartbeat=1.0) if work > 2_000_000 else nullcontext(lambda k=1: None)

    coarse = _grid(len(levels), 20)
    with bar("planning the budget split over levels", len(coarse)) as update:
        best = min(coarse, key=lambda s: (update(1), score(s))[1])
    near = [s for s in _grid(len(levels), 100) if max(abs(a - b) for a, b in zip(s, best)) <= 0.05 + 1e-9]
    with bar("refining the split", len(near)) as update:
        best = min(near, key=lambda s: (update(1), score(s))[1])
    return dict(zip(levels, best))


def _grid(k: int, steps: int) -> list[tuple[float, ...]]:
    """Points of the simplex in ``k`` dimensions with coordinates in multiples of 1/steps, all > 0."""
    out = []
    for cut in itertools.combinations(range(1, steps), k - 1):
        edges = (0, *cut, steps)
        out.append(tuple((edges[i + 1] - edges[i]) / steps for i in range(k)))
    return out


def residual_levels(spec: CensusSpec) -> dict[tuple[str, ...], list[str]]:
    """Each residual τ and the levels that measure it (coarse to fine)."""
    out: dict[tuple[str, ...], list[str]] = {}
    for lv in spec.measured_levels():
        for s in spec.level_sets(lv):
            for tau in subsets(s):
                if lv not in out.setdefault(tau, []):
                    out[tau].append(lv)
    return out


def expected_variances(spec: CensusSpec, hierarchy: Any, plans: Mapping[str, LevelPlan],
                       fitted: bool = True, post: Mapping[tuple[str, ...], Mapping[str, np.ndarray]] | None = None
                       ) -> dict[str, float]:
    """Mean cell variance of each measured level's published tables: after the hierarchical fit (``fitted``; from
    ``post``, :func:`posterior_variances`, when the caller has it), or from the level's own measurements alone.
    Needs only the public map (unit counts)."""
    if fitted and post is None:
        post = posterior_variances(spec, hierarchy, plans)
    if not fitted:
        post = None
    out = {}
    for lv, plan in plans.items():
        vals = []
        for s in plan.sets:
            if post is None:
                v = {tau: plan.sigma2[tau] for tau in subsets(s)}
            else:
                v = {tau: post[tau][lv] for tau in subsets(s)}
            vals.append(float(np.mean(cell_variance(v, s, spec.sizes))))
        out[lv] = float(np.mean(vals))
    return out


def posterior_variances(spec: CensusSpec, hierarchy: Any, plans: Mapping[str, LevelPlan]
                        ) -> dict[tuple[str, ...], dict[str, np.ndarray]]:
    """Per residual τ and level, each unit's variance factor after the hierarchical fit (invariants exact)."""
    from privcube.census.gls import hierarchical_gls

    out = {}
    for tau, lvs in residual_levels(spec).items():
        measured: dict[str, list[tuple[np.ndarray, float]]] = {}
        for lv in lvs:
            measured.setdefault(lv, []).append((np.zeros(hierarchy.n_units(lv)), plans[lv].sigma2[tau]))
        if tau == ():
            for lv in spec.invariants:
                n = 1 if lv == TOTAL else hierarchy.n_units(lv)
                measured.setdefault(lv, []).append((np.zeros(n), 0.0))
        _, var = hierarchical_gls(hierarchy, measured)
        out[tau] = var
    return out


def measure_level(counts: Mapping[tuple[str, ...], np.ndarray], plan: LevelPlan, noise: Any
                  ) -> dict[tuple[str, ...], np.ndarray]:
    """The noisy residuals of one level: ``counts[τ]`` is each unit's exact marginal on τ ``(n_units, *sizes)``;
    every unit gets fresh noise of scale σ_τ (key ``(census:<level>, τ)``)."""
    out = {}
    for tau in sorted(plan.sigma2, key=lambda t: (len(t), t)):
        mu = np.asarray(counts[tau], dtype=float)
        y = noise.add_gaussian((f"census:{plan.level}", tau), mu, float(np.sqrt(plan.sigma2[tau])))
        out[tau] = decomp_units(y, tau)
    return out


def charge_levels(ledger: Any, plans: Mapping[str, LevelPlan], n_units: Mapping[str, int]) -> None:
    """One ledger charge per level (parallel composition over its units)."""
    for lv, plan in plans.items():
        ledger.charge(f"{NAME}:{lv}", rho=plan.rho, level=lv, units=int(n_units[lv]), residuals=len(plan.sigma2),
                      composition="parallel over the level's units")


__all__ = ["LevelPlan", "attribute_domain", "charge_levels", "choose_split", "expected_variances", "level_plans",
           "measure_level", "posterior_variances", "residual_levels", "unit_plan"]
