"""Benchmark: HDMM end to end on Census SF1 (29,440 cells) and SF1+ (1,501,440 cells), ε = 1.

Optimises OPT_⊗ (the HDMM choice on both, Table 6/7), then measures A x + noise on a synthetic data vector
(Poisson counts; errors do not depend on the data) and reconstructs every workload answer by Kronecker
least squares. Prints optimiser / measure / reconstruct seconds, the empirical RMSE over ``--trials``
noise draws, the expected RMSE from the strategy loss, and the paper's HDMM value (ratios).
Gaussian uses the analytic σ = 4.224679 per unit L2 sensitivity (δ = 1e-6), as the paper's tables.
Run: python benchmarks/hdmm_sf1_end_to_end.py [--rows sf1 sf1_plus] [--noise laplace gaussian] [--trials 5]
"""
from __future__ import annotations

import argparse
import math
import os
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from privcube.linalg.matrices import kron_apply  # noqa: E402
from privcube.mechanisms.hdmm import paper_workloads as pw  # noqa: E402
from privcube.mechanisms.hdmm.lower_bound import rmse_from_loss  # noqa: E402
from privcube.mechanisms.hdmm.opt_kron import opt_kron  # noqa: E402
from privcube.mechanisms.hdmm.strategy import KronStrategy  # noqa: E402

SIGMA = 4.224679
PAPER_HDMM = {("sf1", "laplace"): 7.30, ("sf1", "gaussian"): 9.80,
              ("sf1_plus", "laplace"): 10.23, ("sf1_plus", "gaussian"): 10.90}


def run(name: str, noise: str, trials: int, seed: int) -> None:
    """Optimise, measure and reconstruct one workload; print one line."""
    shape, terms = pw.sf1() if name == "sf1" else pw.sf1_plus()
    m, n = pw.rows(terms), math.prod(shape)
    t = time.perf_counter()
    res = opt_kron(terms, noise, restarts=1, seed=seed)
    t_opt = time.perf_counter() - t
    strat = KronStrategy(res.factors, res.loss)
    rng = np.random.default_rng(seed)
    x = rng.poisson(2.0, n).astype(float)
    truth = [kron_apply(list(f), x) for _, f in terms]
    sens = strat.sensitivity(1 if noise == "laplace" else 2)
    t = time.perf_counter()
    ax = strat.measure(x)
    t_meas = time.perf_counter() - t
    sq, t_rec = 0.0, 0.0
    for _ in range(trials):
        if noise == "laplace":
            y = ax + rng.laplace(0.0, sens / 1.0, ax.shape)
        else:
            y = ax + rng.normal(0.0, SIGMA * sens, ax.shape)
        t = time.perf_counter()
        ans = strat.answer(y, terms)
        t_rec += time.perf_counter() - t
        sq += sum(float(c**2 * ((a - b) ** 2).sum()) for (c, _), a, b in zip(terms, ans, truth))
    emp = math.sqrt(sq / trials / m)
    exp = rmse_from_loss(res.loss * sens**2, m, noise, sigma=SIGMA)
    paper = PAPER_HDMM[(name, noise)]
    print(f"{name:>9} {noise:>9} {n:>9} {m:>7} {strat.rows():>9} {t_opt:>7.1f} {t_meas:>7.2f} "
          f"{t_rec / trials:>7.2f} {emp:>8.3f} {exp:>8.3f} {paper:>7.2f} {exp / paper:>6.3f}", flush=True)


def main() -> None:
    """Print one line per (workload, noise)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", nargs="+", default=["sf1", "sf1_plus"])
    ap.add_argument("--noise", nargs="+", default=["laplace", "gaussian"])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'workload':>9} {'noise':>9} {'cells':>9} {'queries':>7} {'A rows':>9} {'opt s':>7} {'meas s':>7} "
          f"{'recon s':>7} {'emp':>8} {'expected':>8} {'paper':>7} {'ratio':>6}")
    for name in args.rows:
        for noise in args.noise:
            run(name, noise, args.trials, args.seed)


if __name__ == "__main__":
    main()
