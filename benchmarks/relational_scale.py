"""Relational synthesis at scale: a generated many-to-many dataset on a 2-worker LocalCluster.

    python benchmarks/relational_scale.py [--users 100000] [--movies 100000] [--links 1000000]
                                          [--iterations 3] [--slices 40] [--workers 2]

Generates users (gender 2, age 7, occupation 21) and movies (6 binary genres) with a planted age→genre
dependency and ~``links`` distinct ratings (vectorised, O(links) memory), then runs the full mechanism
(stage 1 tables + stage 2 links: ``--optimiser auto`` solves each iteration's relaxed problem over record
types, every link re-solved; ``slices`` runs the slices of each iteration as parallel tasks on the cluster)
and, with ``--evaluate`` (default on), the NON-private evaluation: learned vs random-links error and their
ratio, the right records' largest degree, and per iteration the optimiser and ``relinked_share``. Prints the
wall time per stage, the links kept after d_max truncation, the load average before and after (the
machine may be shared), and the peak resident memory of the driver and of each worker (ru_maxrss) and of
the whole process tree (sampled), which must stay below 8 GB. The n1×n2 matrix is never built: slices
are τn1 × τn2 dense blocks, shipped to the workers as sparse link lists.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rss import MemorySampler  # noqa: E402


def generate(n_users: int, n_movies: int, n_links: int, seed: int = 0) -> dict:
    """Users × movies with ~n_links distinct pairs; older users prefer genre-0 movies."""
    from privcube.core.domain import Domain

    rng = np.random.default_rng(seed)
    age = rng.choice(7, n_users, p=[0.05, 0.2, 0.3, 0.2, 0.1, 0.08, 0.07])
    gender = rng.integers(0, 2, n_users)
    occ = (age * 3 + rng.integers(0, 6, n_users)) % 21
    genres = (rng.random((n_movies, 6)) < 0.3).astype(np.int64)
    g0 = np.flatnonzero(genres[:, 0] == 1)
    other = np.flatnonzero(genres[:, 0] == 0)
    draw = int(n_links * 1.05)
    u = rng.integers(0, n_users, draw)
    likes = rng.random(draw) < np.where(age[u] >= 4, 0.8, 0.15)
    m = np.where(likes, g0[rng.integers(0, g0.size, draw)], other[rng.integers(0, other.size, draw)])
    flat = np.unique(u.astype(np.int64) * n_movies + m)[: n_links]
    ui, mj = np.divmod(flat, n_movies)
    users = pd.DataFrame({"id": np.arange(n_users), "gender": gender, "age": age, "occupation": occ})
    movies = pd.DataFrame({"id": np.arange(n_movies), **{f"genre{g}": genres[:, g] for g in range(6)}})
    pairs = pd.DataFrame({"user_id": ui, "movie_id": mj})
    return {"tables": {"users": (users, Domain(("gender", "age", "occupation"), (2, 7, 21))),
                       "movies": (movies, Domain(tuple(f"genre{g}" for g in range(6)), (2,) * 6))},
            "links": {"pairs": pairs, "left": "users.id", "right": "movies.id", "columns": ["user_id", "movie_id"]}}


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


def main(argv: list[str] | None = None) -> int:
    """Generate, run on a LocalCluster, print time and peak memory."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--movies", type=int, default=100_000)
    ap.add_argument("--links", type=int, default=1_000_000)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--slices", type=int, default=40, help="disjoint slices (parallel tasks) per iteration")
    ap.add_argument("--slice-cells", type=float, default=250_000)
    ap.add_argument("--d-max", type=int, default=50)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--eps-rel", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--optimiser", choices=["auto", "types", "slices"], default="auto")
    ap.add_argument("--no-evaluate", dest="evaluate", action="store_false")
    a = ap.parse_args(argv)
    from distributed import Client, LocalCluster

    from privcube.graphs.execution import run_context
    from privcube.relational.stages.run import run_relational
    from privcube.privacy.noise import NoiseSource

    t0 = time.perf_counter()
    ds = generate(a.users, a.movies, a.links, a.seed)
    t_gen = time.perf_counter() - t0
    print(f"generated users {a.users}, movies {a.movies}, links {len(ds['links']['pairs'])} in {t_gen:.1f}s", flush=True)
    params = {"d_max": a.d_max, "truncate": True, "iterations": a.iterations, "slices_per_iteration": a.slices,
              "slice_cells": a.slice_cells, "pgd_iters": 50, "optimiser": a.optimiser, "evaluate_nonprivate": a.evaluate}
    budgets = {"tables": {"users": {"epsilon": 1.0, "delta": 1e-6}, "movies": {"epsilon": 1.0, "delta": 1e-6}},
               "links": {"epsilon": a.eps_rel, "delta": 1e-6}}
    stages: dict[str, float] = {}
    stage_gb: dict[str, float] = {}
    last = [time.perf_counter()]
    sampler = MemorySampler(0.1)

    def progress(label: str, frac: float) -> None:
        now = time.perf_counter()
        stages[f"{label} @{frac:.2f}"] = now - last[0]
        stage_gb[f"{label} @{frac:.2f}"] = sampler.stage_peak / 1024 ** 3
        sampler.reset_stage()
        last[0] = now

    base_gb = MemorySampler.measure()[0] / 1024 ** 3
    load0 = os.getloadavg()
    with sampler, \
            LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True, dashboard_address=":0") as cl, \
            Client(cl) as client:
        t0 = time.perf_counter()
        last[0] = t0
        res = run_relational(ds["tables"], ds["links"], params, budgets, noise=NoiseSource(a.seed),
                             progress=progress, context=run_context(client))
        total = time.perf_counter() - t0
        stages["after the last iteration (repair, evaluation, outputs)"] = time.perf_counter() - last[0]
        stage_gb["after the last iteration (repair, evaluation, outputs)"] = sampler.stage_peak / 1024 ** 3
        worker_gb = client.run(_peak_gb)
    load1 = os.getloadavg()
    for k, v in stages.items():
        print(f"  {k:40s} {v:8.1f}s  (tree RSS peak in this stage {stage_gb[k]:.2f} GB)")
    rep = res.report
    print(f"total {total:.1f}s; links in {len(ds['links']['pairs'])}, kept after d_max {a.d_max} truncation "
          f"{rep['m']}; links out {len(res.links)} (m_syn {rep['m_syn']}); selections {rep['privacy']['selections']}")
    for h in rep["iterations"]:
        print("  iteration", h["iteration"], {k: v for k, v in h.items() if k not in ("iteration", "selected")})
    ev = rep.get("nonprivate_evaluation")
    if ev:
        print(f"NON-private: learned {ev['average_cross_error_pct']:.2f} %, random links "
              f"{ev['initial_random_links_error_pct']:.2f} %, ratio "
              f"{ev['average_cross_error_pct'] / ev['initial_random_links_error_pct']:.3f}; right max degree "
              f"{ev['right_max_degree']}; degrees {rep.get('degrees')}; degree distributions, total variation real vs "
              f"synthetic: {ev['degree_tv']['left']:.3f} (users) / {ev['degree_tv']['right']:.3f} (movies)")
    print(f"driver RSS sampled: peak {sampler.peak_main / 1024 ** 3:.2f} GB (after generating the data, before the "
          f"run: {base_gb:.2f} GB); workers+nannies sampled peak {sampler.peak_children / 1024 ** 3:.2f} GB")
    print(f"peak RSS: driver {_peak_gb():.2f} GB; workers " + ", ".join(f"{v:.2f} GB" for v in worker_gb.values())
          + f"; whole tree (sampled) {sampler.peak / 1024 ** 3:.2f} GB")
    print("load average (1, 5, 15 min) before " + " ".join(f"{x:.2f}" for x in load0) + ", after "
          + " ".join(f"{x:.2f}" for x in load1) + f" on {os.cpu_count()} cores")
    assert _peak_gb() < 8 and all(v < 8 for v in worker_gb.values()) and sampler.peak < 8 * 1024 ** 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
