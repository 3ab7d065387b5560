"""Benchmark: HDMM OPT_0 (Laplace, p-Identity) on AllRange, n in {256, 1024}.

Prints seconds and RMSE (ε = 1) against the paper: Table 4 OPT0 (8.07 at n=256, 11.08 at n=1024) and
Fig. 2's timing ("under 10 s" for 100 iterations at n=1024; the brief's reference 6.4 s).
Run: OPENBLAS_NUM_THREADS=1 python benchmarks/hdmm_opt0.py [--restarts R] [--sizes 256 1024]
"""
from __future__ import annotations

import argparse
import math
import time

from privcube.mechanisms.hdmm.lower_bound import rmse_from_loss
from privcube.mechanisms.hdmm.opt_0 import opt0_gaussian, opt0_laplace
from privcube.query_types import QueryType, attribute_matrix

PAPER = {256: (8.07, 12.26), 1024: (11.08, 14.85)}


def main() -> None:
    """Run the benchmark and print one table row per size."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--restarts", type=int, default=1)
    ap.add_argument("--gaussian", action="store_true", help="also time the Gaussian OPT_0")
    args = ap.parse_args()
    print(f"{'n':>6} {'noise':>9} {'seconds':>9} {'rmse':>8} {'paper':>7} {'ratio':>6}")
    for n in args.sizes:
        w = attribute_matrix(QueryType("allrange"), n)
        v, m = w.T @ w, w.shape[0]
        t = time.perf_counter()
        res = opt0_laplace(v, restarts=args.restarts, seed=0)
        dt = time.perf_counter() - t
        r = rmse_from_loss(res.loss, m, "laplace")
        paper = PAPER.get(n, (math.nan, math.nan))[0]
        print(f"{n:>6} {'laplace':>9} {dt:>9.2f} {r:>8.3f} {paper:>7.2f} {r / paper:>6.3f}")
        if args.gaussian:
            t = time.perf_counter()
            res = opt0_gaussian(v)
            dt = time.perf_counter() - t
            r = rmse_from_loss(res.loss, m, "gaussian", sigma=4.224679)
            paper = PAPER.get(n, (math.nan, math.nan))[1]
            print(f"{n:>6} {'gaussian':>9} {dt:>9.2f} {r:>8.3f} {paper:>7.2f} {r / paper:>6.3f}")


if __name__ == "__main__":
    main()
