"""Relational synthesis on Airbnb users → sessions (one-to-many), run by hand.

    python benchmarks/relational_airbnb.py [--eps-rel 0.5 1 2] [--iterations 10] [--slices 20] [--seed 0]

Reads ../shared/data/airbnb (relative to the project root), encodes both tables with the explicit public
schema below (categories and bins fixed here, never read off the data), truncates parents to d_max
children, and prints the average % L1 cross-table 3-way marginal error (the paper's metric) for each
ε_rel against the random-links baseline, with the run time. The error is a NON-private diagnostic.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "airbnb"

USERS = {
    "gender": {"values": ["-unknown-", "FEMALE", "MALE"]},  # OTHER/missing -> extra code
    "age": {"bins": [0, 18, 25, 30, 35, 45, 55, 65, 120]},  # missing/implausible -> extra code
    "signup_method": {"values": ["basic", "facebook"]},
    "signup_app": {"values": ["Web", "iOS", "Moweb", "Android"]},
    "first_device_type": {"values": ["Mac Desktop", "Windows Desktop", "iPhone", "iPad", "Other/Unknown"]},
    "affiliate_channel": {"values": ["direct", "sem-brand", "sem-non-brand", "other", "api", "seo"]},
    "country_destination": {"values": ["NDF", "US", "other", "FR", "IT", "GB", "ES", "CA"]},
}
SESSIONS = {
    "action_type": {"values": ["view", "data", "click", "-unknown-", "submit", "message_post", "booking_request"]},
    "device_type": {"values": ["Mac Desktop", "Windows Desktop", "iPhone", "iPad Tablet", "-unknown-",
                               "Android App Unknown Phone/Tablet", "Android Phone"]},
    "secs_elapsed": {"bins": [0, 10, 60, 300, 1800, 10800, 86400, 1e8]},
}


def load(root: Path = DATA) -> dict:
    """Both tables encoded, with their Domains, and the FK links spec."""
    from privcube.storage.relational_data import encode_columns, read_table

    users = read_table(root / "users.csv")
    sessions = read_table(root / "sessions.csv")
    u, udom = encode_columns(users, USERS, "users")
    s, sdom = encode_columns(sessions, SESSIONS, "sessions")
    return {"tables": {"sessions": (s[["user_id", *sdom.attributes]], sdom), "users": (u[["id", *udom.attributes]], udom)},
            "links": {"from": "sessions.user_id", "to": "users.id", "child_key": "session_id"}}


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and print one row per ε_rel."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps-rel", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--eps-table", type=float, default=1.0)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--k", type=int, default=3, help="workloads per iteration")
    ap.add_argument("--slices", type=int, default=20, help="disjoint slices per iteration")
    ap.add_argument("--slice-cells", type=float, default=250_000)
    ap.add_argument("--pgd-iters", type=int, default=50)
    ap.add_argument("--d-max", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if not DATA.exists():
        print(f"skip: {DATA} not found", file=sys.stderr)
        return 0
    from privcube.mechanisms.relational.mechanism import run_relational
    from privcube.privacy.noise import NoiseSource

    ds = load()
    print(f"users {len(ds['tables']['users'][0])} × {len(ds['tables']['users'][1])} attrs, "
          f"sessions {len(ds['tables']['sessions'][0])} × {len(ds['tables']['sessions'][1])} attrs, d_max {a.d_max}")
    print(f"{'eps_rel':>8} {'error %':>9} {'random %':>9} {'ratio':>6} {'m':>7} {'seconds':>8}")
    for eps in a.eps_rel:
        params = {"d_max": a.d_max, "truncate": True, "iterations": a.iterations, "workloads_per_iteration": a.k,
                  "slices_per_iteration": a.slices, "slice_cells": a.slice_cells, "pgd_iters": a.pgd_iters}
        budgets = {"tables": {"users": {"epsilon": a.eps_table, "delta": 1e-6},
                              "sessions": {"epsilon": a.eps_table, "delta": 1e-6}},
                   "links": {"epsilon": eps, "delta": 1e-6}}
        t0 = time.perf_counter()
        res = run_relational(ds["tables"], ds["links"], params, budgets, noise=NoiseSource(a.seed))
        dt = time.perf_counter() - t0
        ev = res.report["nonprivate_evaluation"]
        e, r = ev["average_cross_error_pct"], ev["initial_random_links_error_pct"]
        print(f"{eps:8.2f} {e:9.2f} {r:9.2f} {e / r:6.3f} {res.report['m']:7d} {dt:8.1f}")
        np.testing.assert_equal(len(res.links), len(res.tables["sessions"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
