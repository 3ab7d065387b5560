"""Benchmark (issue 35): the census estimation core at the US shape, stage by stage, single process.

51 states, ~3,100 counties, ~70,000 tracts (skewed sizes); 30 attributes of 6-10 cells; 1-way tables by
tract, 20 chosen 2-way tables by county, all 435 2-way tables by state (and the root). Random data:

- ``gls``: ``hierarchical_gls`` for every residual clique: () and the 30 1-way ones measured at state, county
  and tract, the 20 county pairs at state and county, the other 415 pairs at state only (random measurements,
  scalar variances per level, the state totals exact);
- ``nonnegative``: ``nonnegative_tables`` on random CONSISTENT tables (children sum to parents, tables agree
  within a unit) with negative cells (zero-sum noise), state totals fixed;
- ``rounding``: ``controlled_rounding`` of the non-negative output.

Prints per stage wall time and the process's peak RSS during the stage (``_rss.MemorySampler``), and the
1-minute load before the run.

    python benchmarks/census_estimation_core.py [--tracts 70000 --counties 3100 --states 51]
    python benchmarks/census_estimation_core.py --log-size 1.5 --noise 25   # degenerate: ~5 persons per tract

Per non-negative stage it prints the raking sweeps (bounded), the residual after the exact finish, the wall
time and the largest cell change of the finish. Measured (load 4.5, 1-min): nonnegative 11.0 s, rounding
19.0 s, peak 1.5 GB; degenerate (load 4): nonnegative 23.3 s, every residual <= 8.5e-13, rounding 40.8 s.
"""
from __future__ import annotations

import argparse
import itertools
import os
import time

import numpy as np

from _rss import MemorySampler
from privcube.census.gls import hierarchical_gls
from privcube.census.hierarchy import Hierarchy
from privcube.census.nonnegative import nonnegative_tables
from privcube.census.rounding import controlled_rounding


def geography(rng: np.random.Generator, n_states: int, n_counties: int, n_tracts: int) -> Hierarchy:
    """A tree with skewed unit sizes (lognormal weights for the counties of a state, tracts of a county)."""
    cs = np.concatenate([np.arange(n_states), rng.choice(n_states, n_counties - n_states, p=_skew(rng, n_states))])
    tc = np.concatenate([np.arange(n_counties), rng.choice(n_counties, n_tracts - n_counties, p=_skew(rng, n_counties))])
    return Hierarchy.from_columns({"state": cs[tc] + 1, "county": tc + 1000, "tract": np.arange(n_tracts) + 10**6},
                                  ["state", "county", "tract"])


def _skew(rng: np.random.Generator, n: int) -> np.ndarray:
    w = rng.lognormal(0.0, 1.2, n)
    return w / w.sum()


def _up(h: Hierarchy, tables: dict, level: str, s: tuple) -> None:
    chain = ["", *h.levels]
    for i in range(chain.index(level), 0, -1):
        lv, up = chain[i], chain[i - 1]
        tables[up][s] = np.add.reduceat(tables[lv][s], h.segment_starts(lv), axis=0)


def consistent_tables(rng, h, sizes, county_pairs, state_pairs, log_size=7.3, noise=3.0):
    """Random tables that add up (children to parents, tables to their sub-margins) with negative cells: tract
    sizes lognormal(log_size, 0.5), zero-sum noise of sd ``noise`` per 1-way cell (2/3 of it per 2-way cell)."""
    attrs = sorted(sizes)
    tables = {lv: {} for lv in ("", *h.levels)}
    n = h.n_units("tract")
    tables["tract"][()] = np.rint(rng.lognormal(log_size, 0.5, n))   # whole persons: integer invariants
    _up(h, tables, "tract", ())
    for a in attrs:
        share = rng.dirichlet(np.ones(sizes[a]), n)
        eps = rng.normal(0, noise, (n, sizes[a]))
        tables["tract"][(a,)] = tables["tract"][()][:, None] * share + eps - eps.mean(axis=1, keepdims=True)
        _up(h, tables, "tract", (a,))
    for level, pairs in (("county", county_pairs), ("state", state_pairs)):
        for a, b in pairs:
            A, B, T = tables[level][(a,)], tables[level][(b,)], tables[level][()]
            e = rng.normal(0, noise * 2 / 3, (len(T), sizes[a], sizes[b]))
            e = e - e.mean(axis=1, keepdims=True) - e.mean(axis=2, keepdims=True) + e.mean(axis=(1, 2), keepdims=True)
            tables[level][(a, b)] = A[:, :, None] * B[:, None, :] / T[:, None, None] + e
            _up(h, tables, level, (a, b))
    return tables


def gls_stage(rng, h, sizes, county_pairs, state_pairs) -> float:
    var = {"state": 5.0, "county": 3.3, "tract": 2.0}
    taus = [((), ("state", "county", "tract"))] + [((a,), ("state", "county", "tract")) for a in sorted(sizes)]
    taus += [(p, ("state", "county")) for p in county_pairs] + [(p, ("state",)) for p in state_pairs]
    measured_all = []
    for tau, levels in taus:
        cells = tuple(sizes[a] for a in tau)
        m = {lv: [(rng.normal(0, 10, (h.n_units(lv), *cells)), var[lv])] for lv in levels}
        if tau == ():
            m["state"].append((np.abs(rng.normal(0, 1e5, h.n_units("state"))), 0.0))   # the invariants
        measured_all.append(m)
    t0 = time.perf_counter()
    for m in measured_all:
        hierarchical_gls(h, m)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--states", type=int, default=51)
    ap.add_argument("--counties", type=int, default=3100)
    ap.add_argument("--tracts", type=int, default=70000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-size", type=float, default=7.3, help="log of a typical tract's persons (1.5: ~5)")
    ap.add_argument("--noise", type=float, default=3.0, help="sd of the noise per 1-way cell (25: degenerate)")
    args = ap.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} (1-min)")
    rng = np.random.default_rng(args.seed)
    h = geography(rng, args.states, args.counties, args.tracts)
    sizes = {f"x{i:02d}": 6 + i % 5 for i in range(30)}
    pairs = list(itertools.combinations(sorted(sizes), 2))
    county_pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), 20, replace=False))]
    state_pairs = [p for p in pairs if p not in county_pairs]
    with MemorySampler() as sampler:
        base = sampler.sample()
        sampler.reset_stage()
        elapsed = gls_stage(rng, h, sizes, county_pairs, state_pairs)
        print(f"gls: {elapsed:.1f} s for {1 + 30 + 435} cliques, peak RSS {sampler.stage_peak / 1e9:.2f} GB "
              f"(process before {base / 1e9:.2f} GB)")
        tables = consistent_tables(rng, h, sizes, county_pairs, state_pairs, args.log_size, args.noise)
        fixed = {"state": tables["state"][()]}
        before = sampler.sample()
        sampler.reset_stage()
        t0 = time.perf_counter()
        nn, diag = nonnegative_tables(h, tables, fixed_totals=fixed)
        elapsed = time.perf_counter() - t0
        print(f"nonnegative: {elapsed:.1f} s, peak RSS {sampler.stage_peak / 1e9:.2f} GB (before {before / 1e9:.2f} GB); "
              f"converged {diag['converged']}, max residual {diag['max_residual']:.1e}, "
              f"b-margin max abs deviation {diag['b_margin_max_abs_deviation']}")
        for s in diag["stages"]:
            print(f"   {s['level'] or 'root':7s} {s['stage']:14s} tables {s['tables']:4d} iterations <= {s['iterations']:4d} "
                  f"residual {s['max_residual']:.1e} converged {s['converged']} {s['seconds']:.1f} s "
                  f"finish change <= {s['finish_max_change']:.2g}")
        del tables
        fixed = {"state": nn["state"][()]}
        before = sampler.sample()
        sampler.reset_stage()
        t0 = time.perf_counter()
        ints, rdiag = controlled_rounding(h, nn, fixed_totals=fixed)
        elapsed = time.perf_counter() - t0
        print(f"rounding: {elapsed:.1f} s, peak RSS {sampler.stage_peak / 1e9:.2f} GB (before {before / 1e9:.2f} GB); "
              f"max change {rdiag['max_change']}, re-raked parents {rdiag['reraked_groups']}, "
              f"b-margin max abs deviation {rdiag['b_margin_max_abs_deviation']}")
    print(f"load after: {os.getloadavg()[0]:.2f} (1-min)")


if __name__ == "__main__":
    main()
