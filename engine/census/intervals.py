"""Error bars that hold for what is published: a parametric bootstrap of the whole estimator (issue 35 item 6).

The noise distribution is public (each level's σ_τ), so the estimator can be re-run on measurements simulated
around the published tables: ``y* = published_τ + N(0, σ_τ²)`` at every level, the invariants as they are, then the
same fit, non-negativity and (not) rounding. The spread of ``published* − published`` is the error of the whole
pipeline, clipping and sums included, which the mechanism's own variance does not describe. Interval: the
published value minus the bootstrap's mean shift (bias correction), ± z·sd of the shift, clipped at 0; with
integer output widened to whole counts (rounding moves a cell by less than 1). It reads no data and spends no
budget: the draws come from the run's noise source under keys of their own.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from privcube.census.measurement import LevelPlan
from privcube.census.release import Release, release
from privcube.census.residual_tables import decomp_units
from privcube.census.spec import CensusGroup, CensusSpec


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


def bootstrap_intervals(spec: CensusSpec, hierarchy: Any, rel: Release, plans: Mapping[str, LevelPlan],
                        invariants: Mapping[str, np.ndarray], groups: Sequence[CensusGroup], *, replicates: int,
                        level: float, draw: Callable[[Any, tuple[int, ...], float], np.ndarray],
                        progress: Callable[[str, float], None] | None = None
                        ) -> dict[CensusGroup, tuple[np.ndarray, np.ndarray]]:
    """``(ci_low, ci_high)`` of every group's published table (see the module docstring); memory: two running
    moments per published cell."""
    mean = {g: np.zeros_like(rel.real[g.level][g.attributes], dtype=float) for g in groups}
    sq = {g: np.zeros_like(m) for g, m in mean.items()}
    for b in range(replicates):
        sim = simulate_residuals(rel, plans, draw, b)
        rep = release(spec, hierarchy, sim, plans, invariants, integer=False)
        for g in groups:
            d = rep.published[g.level][g.attributes] - rel.real[g.level][g.attributes]
            mean[g] += d
            sq[g] += d * d
        if progress is not None:
            progress("intervals (bootstrap)", (b + 1) / replicates)
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    integer = bool(spec.output["integer"])
    out = {}
    for g in groups:
        m = mean[g] / replicates
        sd = np.sqrt(np.maximum(sq[g] / replicates - m * m, 0.0) * replicates / max(replicates - 1, 1))
        centre = np.asarray(rel.published[g.level][g.attributes], dtype=float) - m
        lo, hi = np.maximum(centre - z * sd, 0.0), np.maximum(centre + z * sd, 0.0)
        if integer:
            lo, hi = np.floor(lo), np.ceil(hi)
        zero = spec.zero_mask(g.attributes)
        if zero is not None:
            lo[..., zero], hi[..., zero] = 0.0, 0.0
        out[g] = (lo, hi)
    return out


__all__ = ["bootstrap_intervals", "simulate_residuals"]
