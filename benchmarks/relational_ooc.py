"""Relational synthesis out of core: partitioned Parquet in, a job through ``privcube.api.run`` on a LocalCluster.

    python benchmarks/relational_ooc.py [--users 1000000] [--movies 1000000] [--links 10000000] [--degree-share 0.05]
                                        [--workers 2] [--eps-rel 1] [--seeds 0 1 2] [--parts 16]

A subprocess generates the many-to-many dataset of ``relational_scale.generate`` (planted age→genre
dependency) and writes it as partitioned Parquet directories (users, movies, pairs) in a temporary folder,
so this process never holds the real data. Each seed then runs the job (``cluster: {type: local}``,
``evaluate_nonprivate: true``) and prints: wall time per stage (checks, tables, links, write; from
report.json), the driver's peak RSS and each worker's (sampled every 0.1 s by pid, not ru_maxrss), the
load average, and the NON-private errors: learned links, the initial random links, the floor (real links
moved onto the synthetic tables). Targets of issue 17: driver ≤ 1 GB, whole run ≤ 10 min.

Measured (2026-11-25, 2 shared cores, ε_rel 1, 2 workers, seeds 0/1/2, seeds 1 and 2 in the same process as 0),
record-type optimiser and the memory work of that day, load 1.1–1.4: run 62.1 / 57.5 / 58.5 s (links stage
53.7 / 50.2 / 51.0 s); driver peak per stage: links 0.85 / 0.92 / 0.93 GB (checks ≤ 0.53, tables ≤ 0.66, write
≤ 0.61 GB); largest worker ≈ 1.5 GB; NON-private learned 3.75 / 0.85 / 1.26 %, random links 9.58 / 9.55 / 9.56 %,
floor 0.00 % (every code combination of these small domains has a synthetic twin). With the slice optimiser
(before): 241–300 s at load 6–15, learned ≈ random, driver 1.29 GB. With left degrees learned per record type
(``left_degrees: learned``, an option; same day, load 3.3–5.4 with another benchmark beside it): run
99.9 / 98.7 / 89.1 s, driver 0.83 / 0.91 / 0.92 GB, learned 4.34 / 0.81 / 1.09 % vs random 9.58 / 9.55 / 9.56 %.
With ``score: auto`` (the default since 2026-11-27: ``gain`` here; load 1.2–2.6 with a probe beside it): run
110 / 102 / 105 s, driver 0.86 / 0.88 / 0.92 GB, largest worker 1.47 GB, learned 3.06 / 1.46 / 1.22 % vs random
9.58 / 9.55 / 9.56 %. With the grouped type operator (same day, seed 0, two other benchmarks on the same cores,
load 2.9–3.6): run 175 s (links 155 s), driver 0.86 GB, largest worker 1.47 GB, learned 3.07 % vs random 9.58 %.
With the warm-started exact capped projection (same day, seeds 0/1/2, another benchmark on the cores, load
1.0–2.6): run 118 / 107 / 108 s, driver 0.86 / 0.89 / 0.94 GB, largest worker 1.45 GB, learned 3.07 / 1.65 / 1.22 %
vs random 9.58 / 9.55 / 9.56 %. With Newton on the multipliers warm-started too (same day, the test suite on the
cores, load 1.5–2.7): run 113 / 102 / 105 s, driver 0.85 / 0.92 / 0.94 GB, largest worker 1.46 GB, learned
3.75 / 0.85 / 1.11 % vs random 9.58 / 9.55 / 9.56 %. With the many-to-many degree release (2026-11-27, seeds
0/1/2, final version, load 0.4–1.6): run 101 / 99 / 99 s, driver 0.85 / 0.92 / 0.89 GB, largest worker 1.5 GB,
learned 3.75 / 0.85 / 1.11 % vs random 9.58 / 9.55 / 9.56 % (unchanged), 51 bins per side; NON-private total
variation between the real and synthetic links-per-record distributions: users 0.042 / 0.040 / 0.040, movies
0.032 / 0.034 / 0.046, against 0.882 / 0.243 with ``--degree-share 0`` (seed 0; 144 s at load 2.7–3.2). The
first version of the re-dealing (a full sort of the links per pass and an extra copy) took 158 s and 1.21 GB
on seed 0. With the record-level steps on record types (stop 29, load 1.1–1.5): run 112 / 108 / 108 s, driver
0.87 / 0.89 / 0.94 GB, largest worker 1.48–1.52 GB, learned 2.81 / 0.37 / 0.39 % vs random 9.58 / 9.55 / 9.56 %.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent


def write_dataset(folder: Path, users: int, movies: int, links: int, parts: int, seed: int) -> None:
    """Generate (``relational_scale.generate``) and write users/, movies/, pairs/ as Parquet directories."""
    import numpy as np

    sys.path.insert(0, str(HERE))
    from relational_scale import generate

    ds = generate(users, movies, links, seed)
    for name, frame in [*((n, f) for n, (f, _) in ds["tables"].items()), ("pairs", ds["links"]["pairs"])]:
        (folder / name).mkdir(parents=True)
        n_parts = parts if name == "pairs" else max(1, parts // 4)
        for k, idx in enumerate(np.array_split(np.arange(len(frame)), n_parts)):
            frame.iloc[idx].to_parquet(folder / name / f"part-{k:03d}.parquet", index=False)


class PidSampler:
    """Peak RSS of this process and of each descendant process (by pid), sampled every ``interval`` seconds."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval, self.driver, self.children = interval, 0, {}
        self.timeline: list[tuple[float, int]] = []  # (time, driver RSS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            try:
                rss = me.memory_info().rss
                self.driver = max(self.driver, rss)
                self.timeline.append((time.perf_counter(), rss))
                for c in me.children(recursive=True):
                    try:
                        name = " ".join(c.cmdline()[-2:])[-40:]
                        self.children[(c.pid, name)] = max(self.children.get((c.pid, name), 0), c.memory_info().rss)
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            self._stop.wait(self.interval)

    def __enter__(self) -> PidSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def config(folder: Path, a: argparse.Namespace) -> dict:
    """The job: users ↔ movies many-to-many from the Parquet directories."""
    return {
        "data": {"tables": {"users": {"path": str(folder / "users"), "key": "id",
                                      "domain": {"gender": 2, "age": 7, "occupation": 21}},
                            "movies": {"path": str(folder / "movies"), "key": "id",
                                       "domain": {f"genre{g}": 2 for g in range(6)}}},
                 "links": {"path": str(folder / "pairs"), "left": "users.id", "right": "movies.id",
                           "columns": ["user_id", "movie_id"]}},
        "mechanism": {"name": "relational", "d_max": a.d_max, "truncate": True, "iterations": a.iterations,
                      "slices_per_iteration": a.slices, "pgd_iters": 50, "evaluate_nonprivate": True,
                      "degree_share": a.degree_share},
        "privacy": {"tables": {"users": {"epsilon": 1.0, "delta": 1e-6}, "movies": {"epsilon": 1.0, "delta": 1e-6}},
                    "links": {"epsilon": a.eps_rel, "delta": 1e-6}},
        "cluster": {"type": "local", "n_workers": a.workers, "threads_per_worker": 1},
    }


def run_seed(folder: Path, out: Path, a: argparse.Namespace, seed: int) -> dict:
    """One job; returns figures."""
    import privcube

    load0 = os.getloadavg()
    t0 = time.perf_counter()
    with PidSampler(0.1) as s:
        privcube.run(config(folder, a), out=out, seed=seed, quiet=True)
    t_end = time.perf_counter()
    wall = t_end - t0
    rep = json.loads((out / "report.json").read_text())
    mr = rep["mechanism_report"]
    st, tm = mr.get("stage_timings") or {}, rep["timings"]
    # stage windows counted back from the end (write, then links, tables, checks): approximate by the
    # cluster's shutdown between links and write (seconds)
    ends = {"write": t_end}
    ends["links"] = ends["write"] - tm.get("write_s", 0.0)
    ends["tables"] = ends["links"] - st.get("links_s", 0.0)
    ends["checks"] = ends["tables"] - st.get("tables_s", 0.0)
    starts = {"checks": ends["checks"] - st.get("checks_s", 0.0), "tables": ends["checks"], "links": ends["tables"],
              "write": ends["links"]}
    stage_peak = {k: max((r for t, r in s.timeline if starts[k] <= t <= ends[k]), default=0) / 2**30 for k in starts}
    ev = rep["nonprivate_evaluation"]  # top level of the job report (NON-PRIVATE)
    return {"seed": seed, "wall_s": wall, "timings": rep["timings"], "stages": mr.get("stage_timings"),
            "driver_gb": s.driver / 2**30, "driver_stage_gb": stage_peak, "children_gb": {k[1]: v / 2**30 for k, v in s.children.items()},
            "learned": ev["average_cross_error_pct"], "random": ev["initial_random_links_error_pct"],
            "floor": ev["floor_pct"], "m": mr["m"], "load": (load0, os.getloadavg()),
            "degree_tv": ev.get("degree_tv"), "degrees": mr.get("degrees")}


def main(argv: list[str] | None = None) -> int:
    """Generate in a subprocess, run each seed, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=1_000_000)
    ap.add_argument("--movies", type=int, default=1_000_000)
    ap.add_argument("--links", type=int, default=10_000_000)
    ap.add_argument("--parts", type=int, default=16, help="Parquet files of the link table (tables: parts/4)")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--slices", type=int, default=8)
    ap.add_argument("--d-max", type=int, default=50)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--eps-rel", type=float, default=1.0)
    ap.add_argument("--degree-share", type=float, default=0.05,
                    help="mechanism parameter degree_share (0: no degree release, the balanced degrees)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--generate", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.generate:
        write_dataset(Path(a.generate), a.users, a.movies, a.links, a.parts, 0)
        return 0
    with tempfile.TemporaryDirectory(prefix="privcube-rel-ooc-") as tmp:
        folder = Path(tmp) / "data"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--generate", str(folder), "--users", str(a.users), "--movies",
                        str(a.movies), "--links", str(a.links), "--parts", str(a.parts)], check=True)
        print(f"generated and wrote partitioned Parquet in {time.perf_counter() - t0:.1f}s "
              f"(users {a.users}, movies {a.movies}, ~{a.links} links, {a.parts} link files)", flush=True)
        rows = []
        for seed in a.seeds:
            r = run_seed(folder, Path(tmp) / f"run-{seed}", a, seed)
            rows.append(r)
            st = r["stages"] or {}
            print(f"seed {seed}: total {r['wall_s']:.1f}s (read {r['timings'].get('read_s', 0):.1f}, checks "
                  f"{st.get('checks_s', 0):.1f}, tables {st.get('tables_s', 0):.1f}, links {st.get('links_s', 0):.1f}, "
                  f"write {r['timings'].get('write_s', 0):.1f}); m {r['m']}", flush=True)
            print("  driver peak per stage (approx. windows): " + ", ".join(f"{k} {v:.2f} GB" for k, v in
                                                                      r["driver_stage_gb"].items()))
            print(f"  driver peak {r['driver_gb']:.2f} GB (sampled); other processes: "
                  + ", ".join(f"{k.strip()} {v:.2f} GB" for k, v in sorted(r["children_gb"].items(), key=lambda x: -x[1])))
            print(f"  NON-private: learned {r['learned']:.2f} %, random links {r['random']:.2f} %, floor "
                  f"{r['floor']:.2f} %, learned/random {r['learned'] / r['random']:.3f}")
            if r["degree_tv"]:
                print(f"  degrees: {r['degrees'].get('source')}; NON-private total variation real vs synthetic "
                      f"links per record: users {r['degree_tv']['left']:.3f}, movies {r['degree_tv']['right']:.3f}")
            print("  load average before " + " ".join(f"{x:.2f}" for x in r["load"][0]) + ", after "
                  + " ".join(f"{x:.2f}" for x in r["load"][1]) + f" on {os.cpu_count()} cores", flush=True)
        if len(rows) > 1:
            import statistics as stt

            for key in ("wall_s", "driver_gb", "learned", "random", "floor"):
                v = [r[key] for r in rows]
                print(f"{key}: mean {stt.mean(v):.2f}, spread {min(v):.2f}–{max(v):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
