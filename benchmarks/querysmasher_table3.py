"""Benchmark: QuerySmasher paper Table 3 (2-way affine / abs-diff workloads on CPS, Adult, Loans, cost 1).

Workload (authors' experiment code, digest §2): 1-way prefix on numeric / identity on categorical
attributes, plus every pair with the joint type (affine or abs-diff) when (d_i − 1)(d_j − 1) ≤ 5000,
else the Kronecker hybrid prefix/identity. RMSE = sqrt(Σ_q Var(q) / #queries) at privacy cost β = 1
(ρ = 0.5). Prints, per cell: #queries (paper's count), our QS RMSE, the paper's QS, ratio, the
certified duality gap and the lower bound on the RMSE, solve time; ``--wff`` adds the WFF column.

    python benchmarks/querysmasher_table3.py                 # all six cells
    python benchmarks/querysmasher_table3.py --data CPS --wff
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests" / "support"
if str(TESTS) not in sys.path:  # the papers' tables are test data (tests/support/papers_data), never shipped code
    sys.path.insert(0, str(TESTS))

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

# paper Table 3: (#queries, RP+, WFF, QS)
PAPER = {
    ("CPS", "affine"): (805, 10.012, 7.147, 5.935), ("CPS", "abs-diff"): (731, 10.476, 7.387, 5.900),
    ("Adult", "affine"): (99_830, 19.395, 21.559, 16.435), ("Adult", "abs-diff"): (99_200, 19.441, 21.587, 16.254),
    ("Loans", "affine"): (66_318, 18.082, 18.671, 14.305), ("Loans", "abs-diff"): (65_682, 18.148, 18.714, 14.330),
}


def cell(name: str, query: str, solver: str = "auto") -> dict:
    """Plan one cell at privacy cost 1; returns the RMSE, certificate and timings."""
    from privcube.mechanisms.querysmasher.mechanism import QuerySmasher
    from privcube.privacy.budget import PrivacyBudget

    from papers_data.querysmasher_workloads import table3_workload

    wl = table3_workload(name, query)
    t0 = time.perf_counter()
    plan = QuerySmasher({"solver": solver}).plan(wl, PrivacyBudget(0.5, 1.0, 1e-9))
    d = plan.details
    return {"rmse": plan.rmse, "count": int(d["num_queries"]), "gap": d["max_duality_gap"],
            "rmse_lower": math.sqrt(d["weighted_sse_lower_bound"] / d["num_queries"]),
            "methods": d["methods"], "solve_s": d["timings"]["solve"], "total_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", nargs="*", default=["CPS", "Adult", "Loans"])
    ap.add_argument("--query", nargs="*", default=["affine", "abs-diff"])
    ap.add_argument("--wff", action="store_true", help="also plan with the Fourier (WFF) solver")
    args = ap.parse_args()
    print(f"{'data':6} {'workload':9} {'#Q':>9} {'paper#Q':>9} {'QS':>8} {'paperQS':>8} {'ratio':>7} "
          f"{'lower':>8} {'gap':>8} {'solve s':>8}" + (f" {'WFF':>8} {'paperWFF':>8}" if args.wff else ""))
    for name in args.data:
        for q in args.query:
            nq, _, wff_p, qs_p = PAPER[(name, q)]
            r = cell(name, q)
            line = (f"{name:6} {q:9} {r['count']:>9,} {nq:>9,} {r['rmse']:8.3f} {qs_p:8.3f} {r['rmse'] / qs_p:7.4f} "
                    f"{r['rmse_lower']:8.3f} {r['gap']:8.1e} {r['solve_s']:8.1f}")
            if args.wff:
                line += f" {cell(name, q, 'fourier')['rmse']:8.3f} {wff_p:8.3f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
