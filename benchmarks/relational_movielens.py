"""Relational synthesis on the seeded MovieLens-like stand-in (many-to-many), run by hand.

    python benchmarks/relational_movielens.py [--eps-rel 0.5 1 2] [--seeds 0 1 2] [--identity-tables] [--paper]

Prints, per seed and ε_rel, the average % L1 cross-table 3-way marginal error (NON-private diagnostic) of
the learned links, the random-links baseline (the algorithm's initial state), the error floor (the real
links transplanted onto the same synthetic tables: each real record to a synthetic one with the same
codes), the same floor forced into a valid output (``floor<=d``: no synthetic record above d_max links, no
repeated pair; the plain floor piles the links of several real records onto one twin) and the ratios, then the mean and spread over seeds, next to the paper's Fig. 3 AIM curve for
MovieLens (read off the figure, ±0.3), with the machine's load. The stand-in data is smaller and
synthetic, so compare trends, not absolute values. ``--identity-tables`` feeds the real tables as the
"synthetic" ones (isolates stage 2; not a private run).

The paper's size (ML-1M truncated to d_max 10: 6,040 users, 3,883 movies, 18 genres, about 10^4 ratings):

    python benchmarks/relational_movielens.py --users 6040 --movies 3883 --genres 18 --mean-degree 1.45 \
        --eps-rel 2 --iterations 10 --param slice_fraction=null --param slices_per_iteration=8

(the engine's defaults; about 1.5 minutes a run at ε_rel 2 on 2 shared cores at load 1.8, longer with other runs
on the cores; see relational-quality.md for what the floor means at this size).
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

PAPER_AIM = {0.1: 18.1, 0.5: 15.3, 1: 12.6, 2: 10.0, 3: 8.7, 4: 8.2, 5: 7.8, 6: 7.5, 7: 7.0, 8: 7.2, 9: 6.8, 10: 6.7}


def _twin(real_codes: np.ndarray, syn_codes: np.ndarray, dom, rng: np.random.Generator) -> np.ndarray:
    """For each real row, a synthetic row with the same codes (uniform among them; any row if none)."""
    rk = np.ravel_multi_index(tuple(real_codes.T), dom.shape)
    sk = np.ravel_multi_index(tuple(syn_codes.T), dom.shape)
    by: dict = {}
    for r, k in enumerate(sk.tolist()):
        by.setdefault(k, []).append(r)
    out = np.empty(len(rk), dtype=np.int64)
    for r, k in enumerate(rk.tolist()):
        c = by.get(k)
        out[r] = c[rng.integers(len(c))] if c else int(rng.integers(len(sk)))
    return out


def _floor_inputs(ds: dict, res) -> tuple:
    """(real links' row positions li, lj; real codes r1, r2; synthetic codes s1, s2; domains d1, d2)."""
    from _real_links import real_positions
    from privcube.relational.stages.resolved_links import table_codes

    tables, li, lj = real_positions(ds)
    left, right = ds["links"]["left"].split(".")[0], ds["links"]["right"].split(".")[0]
    d1, d2 = tables[left][1], tables[right][1]
    r1, r2 = table_codes(tables[left][0], d1, left), table_codes(tables[right][0], d2, right)
    s1 = res.tables[left][list(d1.attributes)].to_numpy()
    s2 = res.tables[right][list(d2.attributes)].to_numpy()
    return li, lj, r1, r2, s1, s2, d1, d2


def _error_on(li, lj, r1, r2, s1, s2, d1, d2, si: np.ndarray, sj: np.ndarray) -> float:
    """Average % L1 over the cross 3-way marginals of links (si, sj) on the synthetic tables, against the real."""
    from privcube.relational.stages.cross_workloads import CrossTables, LinkedCodes, average_error, cross_workloads

    return average_error(LinkedCodes(CrossTables(r1, d1, r2, d2), li, lj), CrossTables(s1, d1, s2, d2), si, sj,
                         cross_workloads(d1, d2, 3))


def transplant_floor(ds: dict, res, rng: np.random.Generator) -> float:
    """NON-private error floor: the real links mapped onto the synthetic tables (same-code twins)."""
    li, lj, r1, r2, s1, s2, d1, d2 = _floor_inputs(ds, res)
    return _error_on(li, lj, r1, r2, s1, s2, d1, d2, _twin(r1, s1, d1, rng)[li], _twin(r2, s2, d2, rng)[lj])


def _nearest_with_room(code: np.ndarray, syn: np.ndarray, room: np.ndarray, rng: np.random.Generator,
                       taken: set | None = None) -> int:
    """A synthetic row with room left and the fewest attributes differing from ``code`` (uniform among ties)."""
    dist = (syn != code).sum(1).astype(float)
    dist[room <= 0] = np.inf
    if taken:
        dist[list(taken)] = np.inf
    c = np.flatnonzero(dist == dist.min())
    return int(c[rng.integers(len(c))])


def capped_floor(ds: dict, res, rng: np.random.Generator, d_max: int = 10) -> float:
    """NON-private: the transplant floor forced into a valid output. Each real user's links go, in turn, to a
    synthetic user with room (≤ ``d_max`` links) and the nearest codes (its twin while it has room), each link's
    movie to a synthetic movie with room and the nearest codes that this user is not linked to yet: every
    synthetic record keeps ≤ d_max links and pairs stay distinct, as in every run's output (the plain floor piles
    the links of several real records onto one twin)."""
    li, lj, r1, r2, s1, s2, d1, d2 = _floor_inputs(ds, res)
    room1, room2 = np.full(len(s1), d_max), np.full(len(s2), d_max)
    si, sj = np.empty(li.size, np.int64), np.empty(lj.size, np.int64)
    partners: dict[int, set] = {}
    order = np.argsort(li, kind="stable")
    sorted_li = li[order]
    for u in rng.permutation(np.unique(li)).tolist():
        cur = -1
        for e in order[np.searchsorted(sorted_li, u):np.searchsorted(sorted_li, u, side="right")].tolist():
            if cur < 0 or room1[cur] <= 0:
                cur = _nearest_with_room(r1[u], s1, room1, rng)
            v = _nearest_with_room(r2[lj[e]], s2, room2, rng, partners.get(cur))
            si[e], sj[e] = cur, v
            room1[cur] -= 1
            room2[v] -= 1
            partners.setdefault(cur, set()).add(v)
    return _error_on(li, lj, r1, r2, s1, s2, d1, d2, si, sj)


def _bins(report: dict) -> str:
    """The degree release's bins per side as 'users/movies' ('-' when nothing was released)."""
    import re

    found = re.findall(r"\((\d+) bins\)", str((report.get("degrees") or {}).get("source", "")))
    return "/".join(found) if found else "-"


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and print one row per (seed, ε_rel), then a summary per ε_rel."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps-rel", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--users", type=int, default=600)
    ap.add_argument("--movies", type=int, default=400)
    ap.add_argument("--genres", type=int, default=6)
    ap.add_argument("--mean-degree", type=float, default=5.0,
                    help="Poisson mean of ratings per user before the d_max cap (at least 1 each)")
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--slice-fraction", type=float, default=0.5)
    ap.add_argument("--slices", type=int, default=2)
    ap.add_argument("--identity-tables", action="store_true")
    ap.add_argument("--no-capped-floor", dest="capped_floor", action="store_false",
                    help="skip the floor forced into a valid output (≤ d_max links a record, distinct pairs)")
    ap.add_argument("--paper", action="store_true",
                    help="the paper's schedule: T·K k-way measurements, no noise-aware selection, no shrinkage")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=JSON",
                    help="override a mechanism parameter, e.g. --param iterations=20")
    a = ap.parse_args(argv)
    from _relational_runs import load_footer, timed_run
    from privcube.relational.example_data import movielens_like

    print(f"users {a.users}, movies {a.movies}, genres {a.genres}, "
          f"tables: {'identity (non-private)' if a.identity_tables else 'ResidualPlanner + tree synthesizer, eps 1 each'}"
          + (f", params {a.param}" if a.param else ""))
    print(f"{'seed':>4} {'eps_rel':>8} {'learned':>8} {'random':>8} {'floor':>8} {'l/rand':>7} {'l/floor':>8} "
          f"{'meas.':>5} {'seconds':>8} {'load1':>6} {'degTV u/m':>11} {'bins':>7} {'floor<=d':>8} {'l/fl<=d':>8}")
    rows: dict[float, list[tuple[float, float, float, float]]] = {e: [] for e in a.eps_rel}
    for seed in a.seeds:
        ds = movielens_like(a.users, a.movies, a.genres, d_max=10, mean_degree=a.mean_degree, seed=seed)
        syn = {n: v[0] for n, v in ds["tables"].items()} if a.identity_tables else None
        for eps in a.eps_rel:
            params = {"evaluate_nonprivate": True, "d_max": 10, "iterations": a.iterations,
                      "workloads_per_iteration": a.k, "slice_fraction": a.slice_fraction, "slices_per_iteration": a.slices}
            if a.paper:
                params.update({"candidate_orders": "k", "max_noise": None, "noise_penalty": False, "shrinkage": False})
            for kv in a.param:
                k, v = kv.split("=", 1)
                params[k] = json.loads(v)
            budgets = {"tables": {"users": {"epsilon": 1.0, "delta": 1e-5}, "movies": {"epsilon": 1.0, "delta": 1e-5}},
                       "links": {"epsilon": eps, "delta": 1e-5}}
            res, dt = timed_run(ds, params, budgets, seed, synthetic_tables=syn)
            ev = res.report["nonprivate_evaluation"]
            e, r = ev["average_cross_error_pct"], ev["initial_random_links_error_pct"]
            f = transplant_floor(ds, res, np.random.default_rng(seed))
            fc = capped_floor(ds, res, np.random.default_rng(seed)) if a.capped_floor else float("nan")
            rows[eps].append((e, r, f, fc))
            print(f"{seed:4d} {eps:8.2f} {e:8.2f} {r:8.2f} {f:8.2f} {e / r:7.3f} {e / f if f else float('nan'):8.3f} "
                  f"{res.report['privacy']['selections']:5d} {dt:8.1f} {os.getloadavg()[0]:6.2f} "
                  f"{ev['degree_tv']['left']:5.3f}/{ev['degree_tv']['right']:5.3f} {_bins(res.report):>7} {fc:8.2f} {e / fc:8.3f}",
                  flush=True)
    print("summary over seeds (mean ± std; 'wins' = seeds with learned < random)")
    for eps, rs in rows.items():
        arr = np.array(rs)
        ratio = arr[:, 0] / arr[:, 2]
        ref = PAPER_AIM.get(eps if eps != int(eps) else int(eps))
        print(f"  eps_rel {eps:5.2f}: learned {arr[:, 0].mean():6.2f} ± {arr[:, 0].std():5.2f}  random "
              f"{arr[:, 1].mean():6.2f} ± {arr[:, 1].std():5.2f}  floor {arr[:, 2].mean():6.2f} ± {arr[:, 2].std():5.2f}  "
              f"learned/floor {ratio.mean():5.3f} (max {ratio.max():5.3f})  wins {int((arr[:, 0] < arr[:, 1]).sum())}"
              f"/{len(rs)}  paper AIM {ref if ref is not None else '-'}"
              + (f"  learned/floor<=d_max {(arr[:, 0] / arr[:, 3]).mean():5.3f}" if a.capped_floor else ""))
    print(load_footer())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
