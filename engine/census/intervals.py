"""Error bars that hold for what is published: a parametric bootstrap of the whole estimator (issue 35 item 6).

The noise distribution is public (each level's σ_τ), so the estimator can be re-run on measurements simulated
around the published tables: ``y* = published_τ + N(0, σ_τ²)`` at every level, the invariants as they are, then the
same fit, non-negativity and (not) rounding. The spread of ``published* − published`` is the error of the whole
pipeline, clipping and sums included, which the mechanism's own variance does not describe. Interval: the
published value minus the bootstrap's mean shift (bias correction), ± t·sd of the shift (Student's t with B − 1
degrees of freedom: the sd is estimated from B replicates), clipped at 0; with integer output, the whole counts
inside that interval (an integer truth is in one exactly when it is in the other). It reads no data and spends no
budget: the draws come from the run's noise source under keys of their own.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy.stats import t as student_t

from privcube.census.measurement import LevelPlan
from privcube.census.release import Release, release
from privcube.census.residual_tables import decomp_units
from privcube.census.spec import CensusGroup, CensusSpec
from privcube.core.context import local_map


def simulate_residuals(rel: Release, plans: Mapping[str, LevelPlan], draw: Callable[[Any, tuple[int, ...], float],
                                                                                    np.ndarray], replicate: int
                       ) -> dict[str, dict[tuple[str, ...], np.ndarray]]:
    """One replicate's residual measurements around the published (real) tables."""
    out: dict[str, dict[tuple[str, ...], np.ndarray]] = {}
    for lv, plan in plans.items():
        out[lv] = {}
        for tau, s2 in plan.sigma2.items():
            mu = rel.real[lv][tau]
            y = mu + draw(("census-bootstrap", replicate, lv, tau), mu.shape, float(np.sqrt(s2)))
            out[lv][tau] = decomp_units(y, tau)
    return out


def replicate_moments(task: tuple[Any, Sequence[int]]) -> dict[CensusGroup, tuple[np.ndarray, np.ndarray]]:
    """Σ d and Σ d² of ``d = published* − published`` over the replicates ``task[1]`` (one task of the
    bootstrap; ``task[0]`` holds what every replicate shares)."""
    (spec, hierarchy, real, plans, invariants, groups, draw), reps = task
    rel = Release(linear={}, variance={}, published=real, real=real)
    acc = {g: (np.zeros(real[g.level][g.attributes].shape), np.zeros(real[g.level][g.attributes].shape))
           for g in groups}
    for b in reps:
        sim = simulate_residuals(rel, plans, draw, b)
        rep = release(spec, hierarchy, sim, plans, invariants, integer=False)
        for g in groups:
            d = rep.published[g.level][g.attributes] - real[g.level][g.attributes]
            acc[g][0].__iadd__(d)
            acc[g][1].__iadd__(d * d)
    return acc


def bootstrap_intervals(spec: CensusSpec, hierarchy: Any, rel: Release, plans: Mapping[str, LevelPlan],
                        invariants: Mapping[str, np.ndarray], groups: Sequence[CensusGroup], *, replicates: int,
                        level: float, draw: Callable[[Any, tuple[int, ...], float], np.ndarray],
                        map: Callable[..., list[Any]] = local_map, scatter: Callable[[Any], Any] = lambda x: x,
                        tasks: int | None = None) -> dict[CensusGroup, tuple[np.ndarray, np.ndarray]]:
    """``(ci_low, ci_high)`` of every group's published table (see the module docstring). The replicates run as
    ``tasks`` independent tasks of ``map`` (the run context's: on the cluster when there is one; default one
    task per replicate), each returning two running moments per published cell."""
    shared = scatter((spec, hierarchy, rel.real, plans, dict(invariants), list(groups), draw))
    n = max(1, min(tasks or replicates, replicates))
    chunks = [list(range(replicates))[i::n] for i in range(n)]
    parts = map(replicate_moments, [(shared, c) for c in chunks], label="census-bootstrap",
                title=f"intervals: bootstrap of the estimator ({replicates} replicates)")
    z = float(student_t.ppf(0.5 + level / 2.0, max(replicates - 1, 1)))  # the sd is estimated from the replicates
    integer = bool(spec.output["integer"])
    out = {}
    for g in groups:
        total = sum(p[g][0] for p in parts)
        total_sq = sum(p[g][1] for p in parts)
        m = total / replicates
        sd = np.sqrt(np.maximum(total_sq / replicates - m * m, 0.0) * replicates / max(replicates - 1, 1))
        centre = np.asarray(rel.published[g.level][g.attributes], dtype=float) - m
        lo, hi = np.maximum(centre - z * sd, 0.0), np.maximum(centre + z * sd, 0.0)
        if integer:  # whole counts: the integers inside [lo, hi] (the truth is one), never an empty interval
            lo, hi = np.ceil(lo - 1e-9), np.floor(hi + 1e-9)
            empty = lo > hi
            lo[empty] = hi[empty] = np.maximum(np.round(centre[empty]), 0.0)
        zero = spec.zero_mask(g.attributes)
        if zero is not None:
            lo[..., zero], hi[..., zero] = 0.0, 0.0
        out[g] = (lo, hi)
    return out


__all__ = ["bootstrap_intervals", "replicate_moments", "simulate_residuals"]
