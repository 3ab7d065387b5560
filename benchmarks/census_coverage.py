"""Coverage of the census release's intervals (issue 35 item 6): over many independent measurements of one small
generated hierarchy, how often the published answers' ``ci_low``–``ci_high`` hold the true count, per level.

Each repetition draws fresh noise (seed r), publishes (hierarchical fit, non-negativity, whole counts when
``--integer``) and computes the bootstrap intervals exactly as a run does; the truth is counted with numpy.
Usage: ``python benchmarks/census_coverage.py --repetitions 200``; the slow test
(tests/integration/test_census_coverage.py) runs it and asserts 0.93–0.97 per level.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

SIZES = {"age": 4, "marital": 3, "sex": 2}


def small_case(seed: int = 0, states: int = 3, counties_per: int = 4, tracts_per: int = 5,
               rows: int = 30_000) -> tuple[Any, Any, dict[str, np.ndarray]]:
    """A spec, its hierarchy and the persons' columns (tract index and attributes), seeded."""
    from pathlib import Path

    from privcube.census.hierarchy import Hierarchy
    from privcube.census.spec import parse_census

    rng = np.random.default_rng(seed)
    n_tracts = states * counties_per * tracts_per
    tract = np.arange(n_tracts)
    county = tract // tracts_per
    state = county // counties_per
    h = Hierarchy.from_columns({"state": state, "county": county, "tract": tract}, ["state", "county", "tract"])
    weights = rng.dirichlet(np.full(n_tracts, 1.5))
    t = rng.choice(n_tracts, rows, p=weights)
    shift = (t % 5) / 5.0
    age = np.minimum((rng.random(rows) * 4 + shift).astype(int), 3)
    marital = rng.integers(0, 3, rows)
    sex = (rng.random(rows) < 0.3 + 0.4 * shift).astype(int)
    raw = {"data": {"domain": {"tract": n_tracts, **SIZES}},
           "geography": {"attribute": "tract", "map": "unused.parquet", "levels": ["state", "county", "tract"]},
           "workload": [{"kway": 1, "by": "tract"}, {"kway": 2, "by": "county"}, {"kway": 2, "by": "state"}],
           "invariants": [{"by": "state"}], "privacy": {"rho": 0.5}}
    spec = parse_census(raw, Path("."), need_data=False)
    return spec, h, {"tract": h.index_of("tract", t), "age": age, "marital": marital, "sex": sex}


def exact(spec: Any, h: Any, cols: dict[str, np.ndarray], level: str, attrs: tuple[str, ...]) -> np.ndarray:
    """Per-unit exact marginal by bincount."""
    unit = h.ancestor("tract", cols["tract"], level) if level != "tract" else cols["tract"]
    shape = (h.n_units(level), *(spec.sizes[a] for a in attrs))
    key = np.ravel_multi_index((unit, *(cols[a] for a in attrs)), shape)
    return np.bincount(key, minlength=int(np.prod(shape))).reshape(shape).astype(float)


def _quiet_map(fn: Any, items: Any, **_: Any) -> list[Any]:
    """The run context's local map without its progress line (one line per repetition would flood the terminal)."""
    return [fn(x) for x in items]


def coverage(repetitions: int, replicates: int = 50, integer: bool = True, seed: int = 0) -> dict[str, float]:
    """Share of published cells whose interval holds the truth, per level, over ``repetitions`` runs."""
    from privcube.census.intervals import bootstrap_intervals
    from privcube.census.measurement import level_plans, measure_level
    from privcube.census.release import release
    from privcube.privacy.noise import NoiseSource

    spec, h, cols = small_case(seed)
    spec.output.update(integer=integer, bootstrap=replicates)
    plans = level_plans(spec, h)
    counts = {lv: {t: exact(spec, h, cols, lv, t) for t in p.sigma2} for lv, p in plans.items()}
    truth = {g: exact(spec, h, cols, g.level, g.attributes) for g in spec.groups}
    invariants = {"state": counts["state"][()]}
    hits: dict[str, list[float]] = {lv: [] for lv in spec.levels}
    for r in range(repetitions):
        noise = NoiseSource(seed=10_000 + r)
        residuals = {lv: measure_level(counts[lv], p, noise) for lv, p in plans.items()}
        rel = release(spec, h, residuals, plans, invariants)
        ci = bootstrap_intervals(spec, h, rel, plans, invariants, spec.groups, replicates=replicates,
                                 level=0.95, draw=noise.gaussian, map=_quiet_map)
        for g, (lo, hi) in ci.items():
            hits[g.level].append(float(np.mean((lo <= truth[g]) & (truth[g] <= hi))))
    return {lv: float(np.mean(v)) for lv, v in hits.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repetitions", type=int, default=200)
    ap.add_argument("--replicates", type=int, default=50)
    ap.add_argument("--real", action="store_true", help="real-valued published tables (default: whole counts)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    cov = coverage(args.repetitions, args.replicates, integer=not args.real)
    print(f"coverage of 95% intervals over {args.repetitions} repetitions ({args.replicates} bootstrap replicates, "
          f"{'real' if args.real else 'integer'} output): " + ", ".join(f"{lv} {v:.3f}" for lv, v in cov.items())
          + f"; {time.perf_counter() - t0:.0f} s, 1-min load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
