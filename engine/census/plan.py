"""A census job's plan (``privcube plan``): each level's share of the budget and its expected error, from the
public map alone, after the hierarchical fit and as each level would be on its own."""
from __future__ import annotations

from typing import Any

import numpy as np

from privcube.census.measurement import LevelPlan, expected_variances, level_plans
from privcube.census.residual_tables import cell_variance
from privcube.core.residuals import subsets
from privcube.census.spec import TOTAL, CensusSpec


def read_hierarchy(spec: CensusSpec) -> Any:
    """The geography tree of the public map (``geography.map``), checked (privcube.census.hierarchy)."""
    from privcube.census.hierarchy import Hierarchy
    from privcube.storage.geography_map import read_geography_map

    columns = read_geography_map(spec.map_path, spec.levels, spec.attribute)
    return Hierarchy.from_columns(columns, spec.levels)


def plan_census(spec: CensusSpec, hierarchy: Any = None, plans: dict[str, LevelPlan] | None = None) -> Any:
    """The PlanSummary of a census job: per level (units, share, ρ, expected RMSE fitted and alone) and per
    published table family; reads the public map, never the data."""
    from privcube.census.measurement import posterior_variances
    from privcube.mechanisms.base import PlanSummary

    hierarchy = hierarchy if hierarchy is not None else read_hierarchy(spec)
    plans = plans if plans is not None else level_plans(spec, hierarchy)
    post = posterior_variances(spec, hierarchy, plans)
    fitted = expected_variances(spec, hierarchy, plans, post=post)
    alone = expected_variances(spec, hierarchy, plans, fitted=False)
    rho = float(spec.budget.rho)
    levels = {lv: {"units": int(hierarchy.n_units(lv)), "share": p.rho / rho, "rho": p.rho,
                   "rmse": float(np.sqrt(fitted[lv])), "rmse_alone": float(np.sqrt(alone[lv])),
                   "tables": [list(s) for s in p.sets]} for lv, p in plans.items()}
    groups = []
    for g in spec.groups:
        v = cell_variance({t: post[t][g.level] for t in subsets(g.attributes)}, g.attributes, spec.sizes)
        own = cell_variance({t: plans[g.level].sigma2[t] for t in subsets(g.attributes)}, g.attributes, spec.sizes)
        groups.append({"by": g.level, "attributes": list(g.attributes), "rmse": float(np.sqrt(np.mean(v))),
                       "rmse_alone": float(np.sqrt(np.mean(own)))})
    sse = sum(levels[g["by"]]["units"] * g["rmse"] ** 2 for g in groups)
    count = sum(levels[g["by"]]["units"] for g in groups)
    privacy = {**spec.budget.to_dict(), "split": {lv: p.rho / rho for lv, p in plans.items()},
               "split_chosen_by": "config" if spec.split else "planner (geometric mean of the levels' variances)"}
    details = {"census": True, "levels": levels,
               "invariants": ["total" if lv == TOTAL else lv for lv in spec.invariants],
               "structural_zeros": [{a: list(c) for a, c in r.codes.items()} for r in spec.zeros],
               "integer": bool(spec.output["integer"])}
    return PlanSummary(mechanism="census", rmse=float(np.sqrt(sse / max(count, 1))), privacy=privacy,
                       groups=groups, details=details)


__all__ = ["plan_census", "read_hierarchy"]
