"""Benchmark: QuerySmasher timing experiments (paper Tables 6 and 7) and Solve speed-up on a LocalCluster.

Table 6: all 1-way + 2-way prefix on [n]^d.  Table 7: mixed (1-way range + 2-way affine + 3-way prefix).
For each (n, d) row, in a fresh subprocess (so peak memory and caches are per row):

* Decomp: residual decomposition into subworkloads;  Solve: the distinct part solves (with duality-gap
  certificates);  Assem: the closed-form budget split plus the plan's per-group error accounting, and with
  ``--measure`` one noisy measurement + reconstruction of every query on a synthetic 1,000-record table;
* Memory: the subprocess's peak RSS.

Printed beside the paper's figures (a 128-core EPYC server; the paper solved subworkloads sequentially)
as ratios ours / paper (< 1: faster / smaller here).  ``--speedup`` times Solve for a workload with many
distinct parts (mixed workload on a heterogeneous domain) locally and on a LocalCluster with 1 and 2
single-threaded worker processes.

    python benchmarks/querysmasher_tables67.py --tables 6 7 --n 10 20 --d 10 20 30 40 50 --timeout 900
    python benchmarks/querysmasher_tables67.py --speedup
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

# paper figures: (n, d) -> (#Views, Decomp s, Solve s, Assem s, Total s, Mem GB); "<0.1s" -> 0.1, "<1 GB" -> 1
PAPER = {
    6: {(10, 10): (55, 0.1, 2.8, 0.1, 2.8, 1), (10, 20): (210, 0.1, 4.4, 0.1, 4.4, 1),
        (10, 30): (465, 0.1, 2.6, 0.1, 2.6, 1), (10, 40): (820, 0.1, 7.1, 0.1, 7.2, 1),
        (10, 50): (1275, 0.2, 9.5, 0.1, 9.7, 1), (20, 10): (55, 0.1, 2.7, 0.1, 2.7, 1),
        (20, 20): (210, 0.1, 4.2, 0.1, 4.3, 1), (20, 30): (465, 0.1, 6.4, 0.1, 6.4, 1),
        (20, 40): (820, 0.1, 8.1, 0.1, 8.2, 1), (20, 50): (1275, 0.1, 10.1, 0.1, 10.2, 1)},
    7: {(10, 10): (175, 0.1, 4.5, 0.1, 4.6, 0.7), (10, 20): (1350, 0.5, 28.1, 0.8, 29.4, 1.0),
        (10, 30): (4525, 1.2, 25.6, 2.6, 29.4, 2.1), (10, 40): (10700, 2.7, 43.9, 4.7, 51.3, 4.2),
        (10, 50): (20875, 5.5, 88.7, 10.0, 104.2, 7.7), (20, 10): (175, 0.1, 19.8, 1.1, 20.9, 1.0),
        (20, 20): (1350, 0.6, 46.6, 4.1, 51.3, 3.8), (20, 30): (4525, 1.6, 152.1, 13.3, 167.1, 12.1),
        (20, 40): (10700, 3.9, 366.2, 41.3, 411.4, 28.4), (20, 50): (20875, 7.2, 751.0, 79.3, 837.5, 55.8)},
}


def _workload(table: int, n: int, d: int):  # noqa: ANN202
    from privcube.core.domain import Domain
    from privcube.core.workload import mixed, parse_workload

    dom = Domain(tuple(f"x{i}" for i in range(d)), (n,) * d)
    if table == 6:
        return parse_workload([{"kway": 1, "queries": "prefix"}, {"kway": 2, "queries": "prefix"}], dom)
    return mixed(dom)


def run_row(table: int, n: int, d: int, measure: bool) -> dict:
    """One row, in this process: phase timings, RMSE, certificate and peak RSS."""
    import numpy as np

    from privcube.mechanisms.querysmasher import mechanism as qm
    from privcube.mechanisms.querysmasher.assembly import assemble
    from privcube.mechanisms.querysmasher.decomposition import decompose
    from privcube.core.oracle import ArrayOracle
    from privcube.privacy.budget import PrivacyBudget

    budget = PrivacyBudget(0.5, 1.0, 1e-9)  # privacy cost β = 1
    wl = _workload(table, n, d)
    mech = qm.QuerySmasher()
    t0 = time.perf_counter()
    subs = decompose(wl)
    t_dec = time.perf_counter() - t0
    sols, info = mech.optimize(wl, budget)  # decomposes again (cheap) and solves
    t_solve = info["timings"]["solve"]
    t1 = time.perf_counter()
    out = assemble(subs, {p.key: s for x in sols.values() for p, s in zip(x.sub.parts, x.parts)}, 1.0)
    plan = qm._summary(wl, budget, sols, info)  # per-group expected errors (the answers' variances)
    del out
    if measure:
        class _Noise:
            rng = np.random.default_rng(0)

            def gaussian(self, key, shape, sigma):  # noqa: ANN001, ANN201
                return self.rng.normal(0.0, sigma, size=shape)

        class _Ledger:
            def charge(self, *a, **k):  # noqa: ANN002, ANN003, ANN201
                pass

        rng = np.random.default_rng(1)
        oracle = ArrayOracle(wl.domain, rng.integers(0, n, size=(1000, d)))
        mech.run(oracle, wl, budget, _Ledger(), _Noise())
    t_asm = time.perf_counter() - t1
    mem = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB -> GB
    return {"table": table, "n": n, "d": d, "views": len(subs) - 1, "decomp": t_dec, "solve": t_solve,
            "assem": t_asm, "total": t_dec + t_solve + t_asm, "mem_gb": mem, "rmse": plan.rmse,
            "gap": info["max_duality_gap"], "distinct_parts": info["distinct_parts"]}


def speedup(workers: tuple[int, ...] = (1, 2)) -> None:
    """Solve time for many distinct parts: local loop vs LocalCluster with 1 and 2 worker processes."""
    from distributed import Client, LocalCluster, get_task_stream

    from privcube.core.domain import Domain
    from privcube.graphs.execution import run_context
    from privcube.mechanisms.querysmasher.decomposition import decompose
    from privcube.mechanisms.querysmasher.mechanism import _dedupe_parts
    from privcube.mechanisms.querysmasher.solvers import solve_parts
    from privcube.core.workload import mixed

    dom = Domain(tuple(f"x{i}" for i in range(8)), tuple(range(8, 16)))
    subs = decompose(mixed(dom))
    distinct = {p.key: p for s in subs.values() for p in s.parts}
    keys, _ = _dedupe_parts(distinct)
    parts = [distinct[k] for k in keys]
    print(f"speed-up workload: mixed on sizes {dom.shape}: {len(parts)} distinct parts "
          f"(largest {max(p.size for p in parts)} cells)")
    t = time.perf_counter()
    ref = solve_parts(parts)
    base = time.perf_counter() - t
    print(f"  local (this process)   Solve {base:7.2f} s")
    times = {}
    for w in workers:
        with LocalCluster(n_workers=w, threads_per_worker=1, processes=True, dashboard_address=":0") as cl, \
                Client(cl) as client:
            client.run(lambda: __import__("privcube.mechanisms.querysmasher.solvers"))  # warm imports
            with get_task_stream(client) as ts:
                t = time.perf_counter()
                got = solve_parts(parts, map=run_context(client).map)
                times[w] = time.perf_counter() - t
            busy = sum(ss["stop"] - ss["start"] for task in ts.data for ss in task.get("startstops", ())
                       if ss.get("action") == "compute")
        same = all(abs(a.L - b.L) <= 1e-9 * b.L for a, b in zip(got, ref))
        print(f"  LocalCluster {w} worker(s) Solve {times[w]:7.2f} s   task compute {busy:7.2f} s   "
              f"busy/(workers·wall) {busy / (w * times[w]):.2f}   same plan: {same}")
    if 1 in times and 2 in times:
        print(f"  speed-up 1 -> 2 workers: {times[1] / times[2]:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, nargs="+", default=[6, 7], choices=[6, 7])
    ap.add_argument("--n", type=int, nargs="+", default=[10, 20])
    ap.add_argument("--d", type=int, nargs="+", default=[10, 20, 30, 40, 50])
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per row")
    ap.add_argument("--measure", action="store_true", help="include a noisy measurement + reconstruction in Assem")
    ap.add_argument("--speedup", action="store_true", help="only the LocalCluster 1 vs 2 worker Solve timing")
    ap.add_argument("--row", nargs=3, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.row:
        print(json.dumps(run_row(*args.row, measure=args.measure)))
        return
    if args.speedup:
        speedup()
        return
    hdr = (f"{'T':>2} {'n':>3} {'d':>3} {'views':>6} | {'Decomp':>7} {'Solve':>7} {'Assem':>7} {'Total':>7} "
           f"{'MemGB':>6} | {'paperTot':>8} {'ratioTot':>8} {'ratioSolve':>10} {'ratioMem':>8} | {'RMSE':>8} {'gap':>8}")
    print(hdr)
    print("-" * len(hdr))
    for table in args.tables:
        for n in args.n:
            for d in args.d:
                paper = PAPER[table].get((n, d))
                cmd = [sys.executable, __file__, "--row", str(table), str(n), str(d)] + (["--measure"] if args.measure else [])
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=True)
                    r = json.loads(p.stdout.strip().splitlines()[-1])
                except subprocess.TimeoutExpired:
                    print(f"{table:>2} {n:>3} {d:>3}  did not finish in {args.timeout:.0f} s"
                          + (f" (paper total {paper[4]} s)" if paper else ""), flush=True)
                    continue
                except subprocess.CalledProcessError as e:
                    print(f"{table:>2} {n:>3} {d:>3}  failed: {e.stderr.strip().splitlines()[-1:]}", flush=True)
                    continue
                pt = f"{paper[4]:8.1f} {r['total'] / paper[4]:8.2f} {r['solve'] / paper[2]:10.2f} " \
                     f"{r['mem_gb'] / paper[5]:8.2f}" if paper else " " * 38
                print(f"{table:>2} {n:>3} {d:>3} {r['views']:>6} | {r['decomp']:7.2f} {r['solve']:7.2f} "
                      f"{r['assem']:7.2f} {r['total']:7.2f} {r['mem_gb']:6.2f} | {pt} | {r['rmse']:8.3f} "
                      f"{r['gap']:8.1e}", flush=True)
                if paper and r["views"] != paper[0]:
                    print(f"   note: #Views {r['views']} differs from the paper's {paper[0]}")


if __name__ == "__main__":
    main()
