"""From noisy residuals to the published tables: hierarchical fit, tables, non-negativity, integers (issue 35).

1. ``privcube.census.gls``: each residual τ fitted over the whole hierarchy at once (generalised least squares,
   two passes), invariants held exactly; children then sum exactly to their parents.
2. Each unit's tables reconstructed from its fitted residuals (so a unit's tables agree with each other).
3. ``privcube.census.nonnegative``: top-down, every cell >= 0 and structural zeros 0, sums kept exact.
4. ``privcube.census.rounding`` (``output.integer``): controlled rounding, top-down, sums and invariants kept.
All of it is post-processing of the released residuals and the public invariants: it spends nothing.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privcube.census.measurement import LevelPlan, residual_levels
from privcube.census.residual_tables import cell_variance, table_from_residuals
from privcube.core.residuals import subsets
from privcube.census.spec import TOTAL, CensusSpec

Tables = dict[str, dict[tuple[str, ...], np.ndarray]]


@dataclass
class Release:
    """What a census run publishes: per level (``""`` = the nation) and attribute set, one table per unit."""

    linear: Tables                  # the hierarchical least-squares estimate (unbiased, may be negative)
    variance: Tables                # its per-unit cell variance (one value per unit)
    published: Tables               # non-negative, consistent (real, or whole counts with output.integer)
    real: Tables                    # the non-negative tables before rounding (the bootstrap's centre)
    diagnostics: dict[str, Any] = field(default_factory=dict)


def needed_sets(spec: CensusSpec) -> dict[str, list[tuple[str, ...]]]:
    """The attribute sets each level (and the nation) must carry: its own tables' subsets and every set a finer
    level publishes (children sum to a parent table that must exist and be non-negative too)."""
    out: dict[str, list[tuple[str, ...]]] = {}
    acc: list[tuple[str, ...]] = []
    for lv in reversed(spec.levels):
        for s in spec.level_sets(lv):
            for t in subsets(s):
                if t not in acc:
                    acc.append(t)
        out[lv] = sorted(acc, key=lambda t: (len(t), t))
    out[TOTAL] = list(out[spec.levels[0]])
    return out


def fit_residuals(spec: CensusSpec, hierarchy: Any, residuals: Mapping[str, Mapping[tuple[str, ...], np.ndarray]],
                  plans: Mapping[str, LevelPlan], invariants: Mapping[str, np.ndarray]
                  ) -> tuple[dict[tuple[str, ...], dict[str, np.ndarray]], dict[tuple[str, ...], dict[str, np.ndarray]]]:
    """Per residual τ: its fitted value and variance factor at every level, from every level's measurement of it
    (and the exact totals of ``invariants`` for τ = ∅)."""
    from privcube.census.gls import hierarchical_gls

    est, var = {}, {}
    for tau, lvs in residual_levels(spec).items():
        measured: dict[str, list[tuple[np.ndarray, float]]] = {}
        for lv in lvs:
            measured.setdefault(lv, []).append((np.asarray(residuals[lv][tau], dtype=float), plans[lv].sigma2[tau]))
        if tau == ():
            for lv, totals in invariants.items():
                measured.setdefault(lv, []).append((np.asarray(totals, dtype=float), 0.0))
        est[tau], var[tau] = hierarchical_gls(hierarchy, measured)
    return est, var


def build_tables(spec: CensusSpec, est: Mapping[tuple[str, ...], Mapping[str, np.ndarray]],
                 var: Mapping[tuple[str, ...], Mapping[str, np.ndarray]]) -> tuple[Tables, Tables]:
    """Each level's tables (every needed set) reconstructed unit by unit, and their per-unit cell variances."""
    tables: Tables = {}
    variances: Tables = {}
    for lv, sets in needed_sets(spec).items():
        tables[lv], variances[lv] = {}, {}
        for s in sets:
            tables[lv][s] = table_from_residuals({t: est[t][lv] for t in subsets(s)}, s, spec.sizes)
            variances[lv][s] = np.asarray(cell_variance({t: var[t][lv] for t in subsets(s)}, s, spec.sizes))
    return tables, variances


def release(spec: CensusSpec, hierarchy: Any, residuals: Mapping[str, Mapping[tuple[str, ...], np.ndarray]],
            plans: Mapping[str, LevelPlan], invariants: Mapping[str, np.ndarray], *, integer: bool | None = None,
            progress: Any = None) -> Release:
    """The whole estimator (steps 1-4 of the module docstring) on one set of measurements; ``progress(message,
    fraction)`` hears of each step."""
    say = progress or (lambda message, fraction: None)
    integer = spec.output["integer"] if integer is None else integer
    say("census fit: hierarchical least squares", 0.0)
    est, var = fit_residuals(spec, hierarchy, residuals, plans, invariants)
    linear, variance = build_tables(spec, est, var)
    del est, var  # the tables hold what they said (bounded memory in the bootstrap's replicates too)
    say("census fit: non-negative, top-down", 0.3)
    zeros = {s: m for s in needed_sets(spec)[TOTAL] if (m := spec.zero_mask(s)) is not None}
    fixed = {lv: np.asarray(v, dtype=float) for lv, v in invariants.items()}
    real, diag = make_nonnegative(hierarchy, linear, zeros, fixed, start_options(spec, variance))
    published: Tables = real
    rounding_diag: dict[str, Any] = {}
    if integer:
        say("census fit: controlled rounding", 0.6)
        published, rounding_diag = make_integer(hierarchy, real, zeros, fixed)
    say("census fit: done", 1.0)
    return Release(linear, variance, published, real, {"nonnegative": diag, "rounding": rounding_diag})


def start_options(spec: CensusSpec, variance: Tables) -> dict[str, Any]:
    """Where the non-negative fit starts: every level's estimate projected onto its unit's already-fitted margin
    (clipping alone biases cells that are truly zero), and, below the top level, a prior of one typical noise
    standard deviation per cell spread as the parent's table (a unit made mostly of noise leans on its parent).
    Measured on 10^6 persons in 70,000 tracts (issue 35): county 1-/2-way RMSE 20.7/8.41 -> 16.6/5.30, tract
    6.25 -> 5.08; a prior at the top level made it worse (state 1-way 69 -> 80), so it has none."""
    prior = {}
    for lv in spec.levels[1:]:
        cells = np.concatenate([np.ravel(v) for v in variance[lv].values()])
        prior[lv] = float(np.sqrt(np.median(cells))) if cells.size else 0.0
    return {"project": True, "prior": prior}


def make_nonnegative(hierarchy: Any, tables: Tables, zeros: Mapping[tuple[str, ...], np.ndarray],
                     fixed: Mapping[str, np.ndarray], options: Mapping[str, Any] | None = None
                     ) -> tuple[Tables, dict[str, Any]]:
    """``privcube.census.nonnegative.nonnegative_tables`` on tables keyed in domain order (``options``: its
    keyword arguments, e.g. :func:`start_options`)."""
    from privcube.census.nonnegative import nonnegative_tables

    return _by_sorted_names(nonnegative_tables, hierarchy, tables, zeros, fixed, **(options or {}))


def make_integer(hierarchy: Any, tables: Tables, zeros: Mapping[tuple[str, ...], np.ndarray],
                 fixed: Mapping[str, np.ndarray]) -> tuple[Tables, dict[str, Any]]:
    """``privcube.census.rounding.controlled_rounding`` on tables keyed in domain order."""
    from privcube.census.rounding import controlled_rounding

    return _by_sorted_names(controlled_rounding, hierarchy, tables, zeros, fixed)


def _by_sorted_names(step: Any, hierarchy: Any, tables: Tables, zeros: Mapping[tuple[str, ...], np.ndarray],
                     fixed: Mapping[str, np.ndarray], **options: Any) -> tuple[Tables, dict[str, Any]]:
    """Run a top-down step (``nonnegative_tables``, ``controlled_rounding``), which keys 2-way tables by their
    names in alphabetical order, on tables keyed in domain order: transposed in, transposed back."""
    def turn(key: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(key))

    def axes(key: tuple[str, ...], a: np.ndarray, lead: int) -> np.ndarray:
        return a if turn(key) == key else np.swapaxes(a, lead, lead + 1)

    given = {lv: {turn(k): axes(k, a, 1) for k, a in t.items()} for lv, t in tables.items()}
    masks = {turn(k): axes(k, m, 0) for k, m in zeros.items()}
    done, diag = step(hierarchy, given, zeros=masks, fixed_totals=fixed, **options)
    return {lv: {k: axes(k, done[lv][turn(k)], 1) for k in t} for lv, t in tables.items()}, diag


__all__ = ["Release", "Tables", "build_tables", "fit_residuals", "make_integer", "make_nonnegative", "needed_sets",
           "release", "start_options"]
