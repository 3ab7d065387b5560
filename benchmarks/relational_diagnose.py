"""Where does the learned links' error come from? NON-private diagnostic of stage 2, run by hand.

    python benchmarks/relational_diagnose.py movielens --eps-rel 2 --seeds 0 1 2
    python benchmarks/relational_diagnose.py airbnb --eps-rel 2 --seeds 0 1 2

For each run it separates the error sources (average % L1 over all cross 3-way marginals, before the
degree repair unless stated), all on the same synthetic tables and the same data-independent start:
  (c) the product's run (noisy releases of the workloads it selected),
  (a) the same selected workloads released EXACTLY (noise-free), fitted by the same optimiser,
  (b) EVERY candidate workload released exactly, fitted by the same optimiser,
plus the random start and the floor (the real links transplanted onto the synthetic tables). If (b) is
far above the floor the optimiser/rounding is the bottleneck; if (a) ≈ floor but (c) is far, it is the
noise, the selection or the budget split. The exact fits read the real marginals directly: this script
is a diagnostic, never a private release (no budget is charged for them).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

OPTIMISERS: list[str] = []  # the optimiser each exact fit's last iteration used (types, or slices beyond type_cells)


def _exact_fit(run, ls0, workloads: list, sigma: float = 0.0, seed: int = 0) -> float:
    """Fit ``workloads`` released exactly (``sigma`` 0) from the start ``ls0`` with the product's optimiser;
    with ``sigma`` > 0 each release gets N(0, σ²) per cell (a simulated equal-split measure-all, shrunk as
    the product shrinks). % L1 error."""
    from privcube.relational.stages import link_learning
    from privcube.relational.stages.cross_workloads import average_error

    rng = np.random.default_rng(seed)
    ls = copy.deepcopy(ls0)
    ls.selected = list(workloads)
    ls.released = [run.real.marginal(w) + (rng.normal(0, sigma, run.real.marginal(w).shape) if sigma else 0.0)
                   for w in workloads]
    ls.sigmas = [sigma] * len(workloads)
    sched = copy.copy(run.sched)
    sched.ks = [0] * sched.T
    sched.first = []  # the releases are given: no measure-all round
    sched.shrinkage = sigma > 0
    r2 = copy.copy(run)
    r2.sched, r2.ledger, r2.save, r2.progress = sched, None, (lambda *a: None), None
    r2.p = {**run.p, "refit": True}
    out = link_learning.learn_links(r2, ls)
    OPTIMISERS.append(out.history[-1].get("optimiser", "?") if out.history else "-")
    return average_error(run.real, run.syn, out.si, out.sj, _all_w(run))


def _all_w(run) -> list:
    from privcube.relational.stages.cross_workloads import cross_workloads

    return cross_workloads(run.syn.dom1, run.syn.dom2, int(run.p["k"]))


def instrument(found: dict) -> None:
    """Wrap the mechanism's ``learn_links`` so each run also records the exact-release fits."""
    from privcube.relational.stages import run as relational_run
    from privcube.relational.stages.link_learning import learn_links
    from privcube.relational.stages.cross_workloads import average_error

    def wrapped(run, ls):
        ls0 = copy.deepcopy(ls)
        out = learn_links(run, ls)
        found["c_pre_repair"] = average_error(run.real, run.syn, out.si, out.sj, _all_w(run))
        found["selected"] = [w.label() for w in out.selected]
        found["sigmas"] = [float(s) for s in out.sigmas]
        found["a_exact_selected"] = _exact_fit(run, ls0, out.selected) if out.selected else float("nan")
        found["b_exact_all"] = _exact_fit(run, ls0, list(run.candidates))
        found["b_optimiser"] = OPTIMISERS[-1]
        found["n_candidates"] = len(run.candidates)
        two = [w for w in run.candidates if len(w.left) + len(w.right) == 2]
        found["b2_exact_2way"] = _exact_fit(run, ls0, two)
        rho = run.sched.rho_links / len(two)  # equal split, no selection
        found["d_noisy_2way"] = _exact_fit(run, ls0, two, run.sched.sigma_of(rho))
        found["d_sigma"] = run.sched.sigma_of(rho)
        return out

    relational_run.learn_links = wrapped


def main(argv: list[str] | None = None) -> int:
    """One row per (seed, ε_rel): random, floor, (c), (a), (b) and their ratios to the floor."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", choices=["movielens", "airbnb"])
    ap.add_argument("--eps-rel", type=float, nargs="+", default=[2.0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--param", action="append", default=[], metavar="KEY=JSON")
    ap.add_argument("--users", type=int, default=600, help="MovieLens-shaped generator: users")
    ap.add_argument("--movies", type=int, default=400, help="MovieLens-shaped generator: movies")
    ap.add_argument("--mean-degree", type=float, default=5.0, help="MovieLens-shaped generator: ratings per user")
    a = ap.parse_args(argv)
    from privcube.relational.stages.run import run_relational
    from privcube.privacy.noise import NoiseSource

    extra = {}
    for kv in a.param:
        k, v = kv.split("=", 1)
        extra[k] = json.loads(v)
    found: dict = {}
    instrument(found)
    print(f"{a.data}; params {extra}; % L1 over cross 3-way marginals (NON-private)")
    print(f"{'seed':>4} {'eps':>5} {'random':>7} {'floor':>7} {'final':>7} {'(c)':>7} {'(a)':>7} {'(b)':>7} "
          f"{'(b2)':>7} {'(d)':>7} {'c/fl':>6} {'a/fl':>6} {'b/fl':>6} {'meas':>4} {'sec':>6} {'load1':>5}")
    for seed in a.seeds:
        if a.data == "movielens":
            from relational_movielens import transplant_floor
            from privcube.relational.example_data import movielens_like

            ds = movielens_like(a.users, a.movies, 6, d_max=10, mean_degree=a.mean_degree, seed=seed)
            base = {"d_max": 10, "iterations": 12, "workloads_per_iteration": 3, "slice_fraction": 0.5,
                    "slices_per_iteration": 2}
            tb = {"users": {"epsilon": 1.0, "delta": 1e-5}, "movies": {"epsilon": 1.0, "delta": 1e-5}}
            delta = 1e-5
        else:
            from relational_airbnb import load_job, real_links_floor
            from privcube.relational.inputs import read_inputs

            job = load_job()
            tables, links = read_inputs(job)
            ds = {"tables": tables, "links": links}
            base = {**job.params, "truncate": True}
            tb = {"users": {"epsilon": 1.0, "delta": 1e-6}, "sessions": {"epsilon": 1.0, "delta": 1e-6}}
            delta = 1e-6
        for eps in a.eps_rel:
            params = {**base, "evaluate_nonprivate": True, **extra}
            budgets = {"tables": tb, "links": {"epsilon": eps, "delta": delta}}
            t0 = time.perf_counter()
            found.clear()
            res = run_relational(ds["tables"], ds["links"], params, budgets, noise=NoiseSource(seed))
            dt = time.perf_counter() - t0
            ev = res.report["nonprivate_evaluation"]
            rng = np.random.default_rng(seed)
            fl = (transplant_floor(ds, res, rng) if a.data == "movielens"
                  else real_links_floor(ds, res, int(params["d_max"]), rng))
            c, aa, b = found["c_pre_repair"], found["a_exact_selected"], found["b_exact_all"]
            print(f"{seed:4d} {eps:5.2f} {ev['initial_random_links_error_pct']:7.2f} {fl:7.2f} "
                  f"{ev['average_cross_error_pct']:7.2f} {c:7.2f} {aa:7.2f} {b:7.2f} {found['b2_exact_2way']:7.2f} {found['d_noisy_2way']:7.2f} {c / fl:6.3f} {aa / fl:6.3f} "
                  f"{b / fl:6.3f} {len(found['selected']):4d} {dt:6.1f} {os.getloadavg()[0]:5.2f}", flush=True)
            print(f"      selected: {', '.join(found['selected'])}; sigma {min(found['sigmas'], default=0):.4f}"
                  f"..{max(found['sigmas'], default=0):.4f}; candidates {found['n_candidates']}; "
                  f"(b2) all 2-way exact, (d) all 2-way noisy equal split sigma {found['d_sigma']:.4f}; (b) optimiser "
                  f"{found['b_optimiser']}, run optimiser {res.report['iterations'][-1].get('optimiser', '?') if res.report['iterations'] else '-'}",
                  flush=True)
    print("load average (1, 5, 15 min): " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
