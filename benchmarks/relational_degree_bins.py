"""How many degree bins a release can afford: simulated, no data, no privcube run.

    python benchmarks/relational_degree_bins.py [--trials 5]

For Poisson degrees (capped at d_max) of n records and the Gaussian noise of a degree release (σ from
``degree_histograms.degree_sigma`` with ρ), release B equal-width bins, read them with
``degree_histograms.degree_distribution`` (shrunk toward the balanced distribution, spread along the
interpolated density, tilted to the mean) and print the mean total variation distance to the true distribution
for each B, the B that ``bin_counts`` picks (σ·√B/n ≤ BIN_NOISE), the best B, and the balanced degrees' distance.
This is the evidence behind ``BIN_NOISE``.
"""
from __future__ import annotations

import argparse
import math

import numpy as np


def main(argv: list[str] | None = None) -> int:
    """Simulate each setting and print one row."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    a = ap.parse_args(argv)
    from privcube.relational.stages.degree_histograms import (
        bin_counts,
        bin_edges,
        degree_distribution,
        degree_sigma,
    )

    rng = np.random.default_rng(1)
    settings = [(100_000, 50, 10.0, 0.00122), (1_000_000, 50, 10.0, 0.00122), (1_000_000, 10, 5.0, 0.0012),
                (6_040, 10, 5.0, 0.0025), (100_000, 10, 5.0, 0.00122), (20_000, 20, 4.0, 0.0044)]
    for n, d, lam, rho in settings:
        real = np.bincount(np.minimum(rng.poisson(lam, n), d), minlength=d + 1).astype(float)
        mean = float((real * np.arange(d + 1)).sum() / n)
        sigma = degree_sigma(d, rho, False)
        tv = {}
        for b in sorted({2, 3, 4, 6, 8, 11, 17, 26, 51} & set(range(2, d + 2))):
            e = bin_edges(b, d)
            out = []
            for _ in range(a.trials):
                noisy = np.add.reduceat(real, e[:-1]) + rng.normal(0, sigma, e.size - 1)
                p = degree_distribution(noisy, n, sigma, mean, d)
                out.append(0.5 * float(np.abs(p - real / n).sum()))
            tv[b] = float(np.mean(out))
        picked = bin_counts((n, n), d, rho, False)[0]
        if picked and picked not in tv:
            e = bin_edges(picked, d)
            tv[picked] = float(np.mean([0.5 * float(np.abs(degree_distribution(
                np.add.reduceat(real, e[:-1]) + rng.normal(0, sigma, e.size - 1), n, sigma, mean, d) - real / n).sum())
                for _ in range(a.trials)]))
        best = min(tv, key=tv.get)
        bal = np.zeros(d + 1)
        lo = int(math.floor(mean))
        bal[lo] = 1 - (mean - lo)
        bal[min(lo + 1, d)] += mean - lo
        print(f"n {n:>8} d_max {d:>3} mean {mean:5.2f} rho {rho:.5f} sigma {sigma:8.1f}: "
              + " ".join(f"B{b}={v:.3f}" for b, v in sorted(tv.items()))
              + f" | picked B{picked} ({tv.get(picked, float('nan')):.3f}), best B{best} ({tv[best]:.3f}), "
              f"balanced {0.5 * float(np.abs(bal - real / n).sum()):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
