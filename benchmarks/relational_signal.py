"""Relational synthesis with and without cross-table signal: does learning beat the random start? Run by hand.

    python benchmarks/relational_signal.py [--beta 0 3] [--eps-rel 0.5 1 2] [--seeds 1 2 3] [--param KEY=JSON]

``relational.example_data.parent_child_like`` (parents: region 4 × size 3; children: kind 3 × device 4 × hour 4;
one parent each, ≤ d_max children): ``--beta 0`` draws each child's parent uniformly among those with room (the
links carry no cross-table signal, so the random start is already the best answer), ``--beta 3`` plants the
device ↔ region and kind ↔ size dependencies. Prints, per β, ε_rel and seed, the NON-private average % L1 error
over the cross 3-way marginals of the learned links and of the data-independent random links, their ratio, the
number of releases, and the load. ``--param shrinkage_margin=4`` shows the trade-off measured in
benchmarks/relational-quality.md ("Links without cross-table signal").
"""
from __future__ import annotations

import argparse
import json
import os


def main(argv: list[str] | None = None) -> int:
    """One row per (β, ε_rel, seed), then the mean learned ÷ random per (β, ε_rel)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beta", type=float, nargs="+", default=[0.0, 3.0])
    ap.add_argument("--eps-rel", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--parents", type=int, default=5000)
    ap.add_argument("--children", type=int, default=8000)
    ap.add_argument("--d-max", type=int, default=10)
    ap.add_argument("--param", action="append", default=[], metavar="KEY=JSON")
    a = ap.parse_args(argv)
    import numpy as np

    from _relational_runs import load_footer, timed_run
    from privcube.relational.example_data import parent_child_like

    params = {"d_max": a.d_max, "iterations": 10, "evaluate_nonprivate": True}
    for kv in a.param:
        k, v = kv.split("=", 1)
        params[k] = json.loads(v)
    print(f"parents {a.parents}, children {a.children}, d_max {a.d_max}, tables eps 1 each, params {params}")
    print(f"{'beta':>4} {'eps_rel':>7} {'seed':>4} {'learned':>8} {'random':>7} {'l/rand':>6} {'releases':>8} "
          f"{'seconds':>7} {'load1':>5}")
    for beta in a.beta:
        for eps in a.eps_rel:
            ratios = []
            for seed in a.seeds:
                ds = parent_child_like(a.parents, a.children, d_max=a.d_max, beta=beta, seed=seed)
                budgets = {"tables": {n: {"epsilon": 1.0, "delta": 1e-6} for n in ds["tables"]},
                           "links": {"epsilon": eps, "delta": 1e-6}}
                res, dt = timed_run(ds, params, budgets, seed)
                ev = res.report["nonprivate_evaluation"]
                e, r = ev["average_cross_error_pct"], ev["initial_random_links_error_pct"]
                ratios.append(e / r)
                print(f"{beta:4g} {eps:7g} {seed:4d} {e:8.2f} {r:7.2f} {e / r:6.3f} "
                      f"{res.report['privacy']['selections']:8d} {dt:7.1f} {os.getloadavg()[0]:5.2f}", flush=True)
            print(f"  beta {beta:g}, eps_rel {eps:g}: learned / random {np.mean(ratios):.3f} (max {max(ratios):.3f}), "
                  f"learned below random on {sum(x < 1 for x in ratios)} of {len(ratios)} seeds", flush=True)
    print(load_footer())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
