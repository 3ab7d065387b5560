"""Benchmark (issue 37): the empirical privacy audit's lower bounds on ε against the ledgers' claims.

Prints one table: every case of ``privcube audit`` (``--all`` trials by default, ``--fast`` for the quick
subset), then the deliberately broken variants of tests/support/audit_broken.py (noise scale halved, a measurement
not charged, the privacy unit's row bound not enforced, aim-grem's selection without noise), each beside the
real configuration it breaks. A real mechanism passes when its bound is at most its claim; a broken one is
caught when its bound exceeds its claim. The machine's load average is printed before and after.

    python benchmarks/privacy_audit.py [--fast] [--seed 0] [--only rp,hdmm-laplace,...] [--no-broken]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests" / "support"
if str(TESTS) not in sys.path:  # the broken variants are built in tests/, never in the shipped code
    sys.path.insert(0, str(TESTS))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="the --fast trials (default: --all's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated case keys (e.g. rp,hdmm-laplace,rp-halved)")
    ap.add_argument("--no-broken", action="store_true", help="the real cases only")
    args = ap.parse_args()

    from audit_broken import BROKEN, TOTAL_HEAVY

    from privcube.core import progress
    from privcube.audit import cases as audit_cases
    from privcube.audit.runner import format_table, run_case

    progress.set_quiet(True)
    mode = "fast" if args.fast else "all"
    only = {k for k in args.only.split(",") if k}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    t0 = time.perf_counter()
    rows, labels = [], []

    def add(label: str, row) -> None:  # noqa: ANN001
        rows.append(row)
        labels.append(label)
        print(f"  {label}: bound {row.lower_bound:.3f} vs claim {row.claim:.3f} ({row.verdict}, {row.trials} trials, "
              f"{row.seconds:.0f} s)", file=sys.stderr, flush=True)

    for case in audit_cases.suite():
        if mode in case.trials and (not only or case.key in only):
            add(f"real {case.key}", run_case(case, mode, seed=args.seed))
    if not args.no_broken:
        add_real = [("rp-total-heavy", TOTAL_HEAVY)]  # the uncharged variant's real counterpart
        for key, config in add_real:
            if not only or key in only or "rp-uncharged-total" in only:
                real = audit_cases.single_table_case(key, config, audit_cases.BASE2,
                                                     [("add (0, 0)", audit_cases._plus(audit_cases.BASE2, (0, 0)))],
                                                     trials={})
                add(f"real {key}", run_case(real, trials=2000, seed=args.seed))
        for b in BROKEN:
            if only and b.name not in only:
                continue
            with b.patch():
                add(f"BROKEN {b.name}", run_case(b.case(), trials=b.trials, seed=args.seed))
    table = format_table(rows).splitlines()
    width = max(len(x) for x in labels) if labels else 4
    print("case".ljust(width) + "  " + table[0])
    for label, line in zip(labels, table[1:]):
        print(label.ljust(width) + "  " + line)
    caught = [r for lab, r in zip(labels, rows) if lab.startswith("BROKEN")]
    real = [r for lab, r in zip(labels, rows) if lab.startswith("real")]
    print(f"real cases passing: {sum(r.passed for r in real)}/{len(real)}; broken variants caught: "
          f"{sum(not r.passed for r in caught)}/{len(caught)}; {time.perf_counter() - t0:.0f} s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if all(r.passed for r in real) and not any(r.passed for r in caught) else 1


if __name__ == "__main__":
    sys.exit(main())
