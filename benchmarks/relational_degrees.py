"""Degree distributions of relational synthesis: one-to-many users ← sessions, run by hand.

    python benchmarks/relational_degrees.py [--users 10000 100000] [--d-max 20] [--eps-rel 1] [--seeds 0 1 2]

``relational.example_data.users_sessions_like`` (skewed sessions per user, few repeating codes). For each size
and seed, the default run and one with ``degree_share: 0`` (no degree release: only the d_max cap) print the
NON-private average % L1 error over the cross 3-way marginals after and before the degree repair, the random
links' error, the total variation distance between the real and synthetic children-per-parent distributions,
the users with sessions (synthetic / real), the release's form and the links moved, the run time and the load.

Measured (2026-11-27, seed 1, ε_rel 1, d_max 20, 2 cores, load ≈ 1): see benchmarks/relational-quality.md,
"Degree distributions released and re-dealt within same-code groups".
"""
from __future__ import annotations

import argparse
import os



def main(argv: list[str] | None = None) -> int:
    """Run each size × seed with and without the degree release and print one row each."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--d-max", type=int, default=20)
    ap.add_argument("--eps-rel", type=float, default=1.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    a = ap.parse_args(argv)
    from _relational_runs import load_footer, timed_run
    from privcube.relational.example_data import users_sessions_like

    budgets = {"tables": {"users": {"epsilon": 1.0, "delta": 1e-6}, "sessions": {"epsilon": 1.0, "delta": 1e-6}},
               "links": {"epsilon": a.eps_rel, "delta": 1e-6}}
    print(f"{'users':>7} {'seed':>4} {'share':>5} {'error':>7} {'pre-rep.':>8} {'random':>7} {'deg TV':>6} "
          f"{'w/ sess. syn/real':>18} {'seconds':>7} {'load1':>5}  release")
    for n in a.users:
        for seed in a.seeds:
            ds = users_sessions_like(n, d_max=a.d_max, seed=seed)
            for share in (0.05, 0.0):
                params = {"d_max": a.d_max, "iterations": 3, "evaluate_nonprivate": True, "degree_share": share}
                res, dt = timed_run(ds, params, budgets, seed)
                ev, deg = res.report["nonprivate_evaluation"], res.report["degrees"]
                wl = ev["right_records_with_links"]
                print(f"{n:7d} {seed:4d} {share:5.2f} {ev['average_cross_error_pct']:7.2f} "
                      f"{ev['before_degree_repair_pct']:8.2f} {ev['initial_random_links_error_pct']:7.2f} "
                      f"{ev['degree_tv']['right']:6.3f} {str(wl['synthetic']) + '/' + str(int((ds['degrees'] > 0).sum())):>18} "
                      f"{dt:7.1f} {os.getloadavg()[0]:5.2f}  {deg['source']}; {deg.get('shaped', '')}", flush=True)
    print(load_footer())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
