"""Benchmark: HDMM end to end on Census SF1 (29,440 cells) and SF1+ (1,501,440 cells), ε = 1.

Two modes (both by default):
* ``strategy``: OPT_⊗ (the HDMM choice on both, Table 6/7), then A x + noise on a synthetic data vector
  (Poisson counts; errors do not depend on the data) and Kronecker least squares for every workload answer,
  over ``--trials`` noise draws. Prints optimiser / measure / reconstruct seconds and the empirical RMSE.
* ``pipeline``: the whole job through ``privcube.api.run``: ``--records`` synthetic census records written to
  Parquet, the SF1/SF1+ workload as 33 query groups (explicit race/age factors), ``mechanism: hdmm`` with
  its automatic meta-choice on a ``LocalCluster`` of ``--workers`` processes, which counts the data vector
  (the marginal over all 4/5 attributes) on the workers, releases A x + noise there and reconstructs. Prints
  the plan (optimiser) seconds, the run's mechanism / total seconds, the expected RMSE and the empirical RMSE
  of the released answers against the exact ones (non-private evaluation).
Both print the expected RMSE from the strategy loss and the paper's HDMM value (ratios). Gaussian uses the
analytic σ = 4.224679 per unit L2 sensitivity (δ = 1e-6), as the paper's tables.
Run: python benchmarks/hdmm_sf1_end_to_end.py [--modes strategy pipeline] [--rows sf1 sf1_plus]
     [--noise laplace gaussian] [--trials 5] [--records 1000000] [--workers 2]
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

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from privcube.linalg.matrices import kron_apply  # noqa: E402
from papers_data import hdmm_workloads as pw  # noqa: E402
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


NAMES = {"sf1": ("sex", "hispanic", "race", "age"), "sf1_plus": ("sex", "hispanic", "race", "age", "state")}


def workload_entries(name: str) -> tuple[dict[str, int], list[dict]]:
    """The domain and the config ``workload`` entries of SF1 / SF1+: one group per product (duplicates kept)."""
    shape, terms = pw.sf1() if name == "sf1" else pw.sf1_plus()
    attrs = NAMES[name]
    entries = []
    for _, factors in terms:
        used, queries = [], {}
        for a, f in zip(attrs, factors):
            f = np.atleast_2d(f)
            if f.shape[0] == 1 and np.all(f == 1):
                continue                                   # summed out
            used.append(a)
            queries[a] = "identity" if np.array_equal(f, np.eye(f.shape[1])) else \
                {"type": "explicit", "matrix": f.tolist()}
        entries.append({"attributes": used, "queries": queries} if used else {"kway": 0})
    return dict(zip(attrs, shape)), entries


def pipeline(name: str, noise: str, records: int, workers: int, seed: int, folder: str) -> None:
    """The whole job through privcube.api.run on a LocalCluster; print one line."""
    import pandas as pd

    from privcube import api
    from privcube.core.domain import Domain
    from privcube.mechanisms.hdmm.implicit import from_workload
    from privcube.core.workload import parse_workload

    domain, entries = workload_entries(name)
    rng = np.random.default_rng(seed)
    data = os.path.join(folder, f"{name}-data")
    if not os.path.isdir(data):
        os.makedirs(data)
        frame = pd.DataFrame({a: rng.integers(0, n, records) for a, n in domain.items()})
        for i, idx in enumerate(np.array_split(np.arange(records), 8)):
            frame.iloc[idx].to_parquet(os.path.join(data, f"part{i}.parquet"), index=False)
    privacy = {"epsilon": 1.0} if noise == "laplace" else {"epsilon": 1.0, "delta": 1e-6}
    mech = {"name": "hdmm", "restarts": 1}
    if noise == "gaussian":
        mech.update(noise="gaussian", calibration="analytic")
    cfg = {"data": {"path": data}, "domain": domain, "mechanism": mech, "privacy": privacy, "workload": entries,
           "cluster": {"type": "local", "n_workers": workers, "threads_per_worker": 1}}
    t = time.perf_counter()
    plan = api.plan(cfg)
    t_plan = time.perf_counter() - t
    t = time.perf_counter()
    summary = api.run(cfg, os.path.join(folder, f"{name}-{noise}-run"), seed=seed, quiet=True, overwrite=True)
    t_run = time.perf_counter() - t
    # non-private evaluation: exact answers from the generated records
    frame = pd.read_parquet(data)
    shape = tuple(domain.values())
    x = np.bincount(np.ravel_multi_index([frame[a].to_numpy() for a in domain], shape),
                    minlength=math.prod(shape)).astype(float)
    iw = from_workload(parse_workload(entries, Domain.from_mapping(domain)))
    sq, m = 0.0, 0
    for (c, f), ans in zip(iw.terms, summary.result.answers):
        truth = kron_apply(list(f), x)
        sq += float(c**2 * ((ans.estimate - truth) ** 2).sum())
        m += truth.size
    emp = math.sqrt(sq / m)
    paper = PAPER_HDMM[(name, noise)]
    mech_s = summary.report.get("timings", {}).get("mechanism_s", math.nan)
    print(f"{name:>9} {noise:>9} {math.prod(shape):>9} {m:>7} {plan.details['optimizer']:>9} {t_plan:>7.1f} "
          f"{mech_s:>7.1f} {t_run:>7.1f} {emp:>8.3f} {plan.rmse:>8.3f} {paper:>7.2f} {plan.rmse / paper:>6.3f}",
          flush=True)


def main() -> None:
    """Print one line per (mode, workload, noise)."""
    import tempfile

    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", nargs="+", default=["strategy", "pipeline"])
    ap.add_argument("--rows", nargs="+", default=["sf1", "sf1_plus"])
    ap.add_argument("--noise", nargs="+", default=["laplace", "gaussian"])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if "strategy" in args.modes:
        print(f"{'workload':>9} {'noise':>9} {'cells':>9} {'queries':>7} {'A rows':>9} {'opt s':>7} {'meas s':>7} "
              f"{'recon s':>7} {'emp':>8} {'expected':>8} {'paper':>7} {'ratio':>6}")
        for name in args.rows:
            for noise in args.noise:
                run(name, noise, args.trials, args.seed)
    if "pipeline" in args.modes:
        print(f"\npipeline: privcube.api.run, {args.records} records in Parquet, LocalCluster of {args.workers} workers")
        print(f"{'workload':>9} {'noise':>9} {'cells':>9} {'queries':>7} {'optimizer':>9} {'plan s':>7} "
              f"{'mech s':>7} {'run s':>7} {'emp':>8} {'expected':>8} {'paper':>7} {'ratio':>6}")
        with tempfile.TemporaryDirectory() as folder:
            for name in args.rows:
                for noise in args.noise:
                    pipeline(name, noise, args.records, args.workers, args.seed, folder)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
