"""Benchmark (issue 35, US scale): a whole census release on this machine, each stage timed, peak memory stated.

Data: ``privcube.storage.census_geography`` persons (``--rows``, default 3.3·10^8; ``--attributes`` 30 of the census
generator, state dropped since the map gives it) in 51 states / 3,100 counties / 70,000 tracts, generated once
into ``--data`` (outside the repository) and reused. Job: every 1-way table by tract, ``--county-pairs`` 2-way
tables by county, every 2-way table by state, state totals invariant, integer output, ``--bootstrap`` replicates
for the intervals, ε = 1, δ = 1e-9, a 2-worker LocalCluster (``cluster: {type: local, n_workers: 2}``).

The run is ``privcube run`` in a subprocess; printed: wall time, each stage's time from ``report.json`` (counting,
measurement, fit, intervals, writing), the peak RSS of the whole process tree (driver + workers,
``_rss.MemorySampler``), the post-processing diagnostics, and the 1-minute load before and after. With
``--counting`` the counting pass is then run three ways on the same files (``census_counting.py``: privcube's
count_tables on the cluster, numpy's single-process limit, polars' group-by) and the ratios are printed.

    python benchmarks/census_release_scale.py --rows 3.3e8 --data /tmp/census-us/seed0 --counting
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rss import MemorySampler  # noqa: E402


def load() -> float:
    return os.getloadavg()[0]


class ProcessPeaks:
    """Peak RSS of each descendant process (the privcube driver and each dask worker), sampled every 0.2 s."""

    def __init__(self) -> None:
        import threading

        self.peaks: dict[int, tuple[int, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            for c in psutil.Process().children(recursive=True):
                try:
                    rss, role = c.memory_info().rss, ("worker" if "spawn_main" in " ".join(c.cmdline()) else "driver")
                except psutil.Error:
                    continue
                if rss > self.peaks.get(c.pid, (0, ""))[0]:
                    self.peaks[c.pid] = (rss, role)
            self._stop.wait(0.2)

    def __enter__(self) -> "ProcessPeaks":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> str:
        """Largest peak of the driver and of each worker, GiB."""
        big = sorted(self.peaks.values(), reverse=True)
        return ", ".join(f"{role} {rss / 2**30:.2f}" for rss, role in big[:4])


def job_config(data: Path, attrs: list[str], county_pairs: int, bootstrap: int) -> dict:
    """The release's config (2-way tables by county: every k-th pair, deterministic)."""
    pairs = list(itertools.combinations(attrs, 2))
    step = max(1, len(pairs) // county_pairs)
    chosen = [list(p) for p in pairs[::step][:county_pairs]]
    return {"data": {"path": str(data / "persons"), "domain": str(data / "domain.json")},
            "geography": {"attribute": "tract", "map": str(data / "geo-map.parquet"),
                          "levels": ["state", "county", "tract"]},
            "workload": [{"kway": 1, "by": "tract"}, {"marginals": chosen, "by": "county"},
                         {"kway": 2, "by": "state"}],
            "invariants": [{"by": "state"}], "output": {"integer": True, "bootstrap": bootstrap},
            "privacy": {"epsilon": 1.0, "delta": 1e-9},
            "cluster": {"type": "local", "n_workers": 2, "threads_per_worker": 1}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=float, default=3.3e8)
    ap.add_argument("--attributes", type=int, default=30)
    ap.add_argument("--county-pairs", type=int, default=20)
    ap.add_argument("--bootstrap", type=int, default=10)
    ap.add_argument("--data", default="/tmp/census-us/seed0",
                    help="data folder (generated once, outside the repository; census_counting.py's layout)")
    ap.add_argument("--counting", action="store_true", help="then count three ways (census_counting.py)")
    args = ap.parse_args()
    data = Path(args.data)
    if data.resolve().is_relative_to(Path(__file__).resolve().parents[1]):
        raise SystemExit("--data must lie outside the repository")
    if not (data / "geo-map.parquet").exists():
        from privcube.storage.census_geography import generate_census_geo

        t0, l0 = time.perf_counter(), load()
        generate_census_geo(data, int(args.rows), seed=int(data.name.removeprefix("seed") or 0),
                            n_attributes=args.attributes, rows_per_file=1_000_000, workers=2)
        print(f"generated {int(args.rows):,} persons in {time.perf_counter() - t0:.0f} s (load {l0:.1f}-{load():.1f})",
              flush=True)
    domain = json.loads((data / "domain.json").read_text())
    attrs = [a for a in domain if a != "tract"]
    config = job_config(data, attrs, args.county_pairs, args.bootstrap)
    run = data.parent / (data.name + "-run")
    (data.parent / (data.name + "-job.yaml")).write_text(yaml.safe_dump(config))
    before = load()
    t0 = time.perf_counter()
    with MemorySampler() as mem, ProcessPeaks() as procs:
        done = subprocess.run([sys.executable, "-m", "privcube", "run", str(data.parent / (data.name + "-job.yaml")),
                               "--out", str(run), "--seed", "0", "--overwrite"], check=False)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"the run failed (exit {done.returncode})")
    report = json.loads((run / "report.json").read_text())
    t = report["timings"]
    print(f"rows {int(args.rows):,}, attributes {len(attrs)}, tables: {len(attrs)} by tract, {args.county_pairs} by "
          f"county, {len(attrs) * (len(attrs) - 1) // 2} by state; bootstrap {args.bootstrap}")
    print(f"wall {wall:.0f} s; peak RSS of driver + workers {mem.peak / 2**30:.2f} GiB; 1-min load {before:.1f} "
          f"before, {load():.1f} after; largest processes (GiB): {procs.summary()}")
    print("stages: " + ", ".join(f"{k} {v:.1f} s" for k, v in t.items()))
    post = report.get("postprocess", {})
    print(f"post-processing: converged {post.get('nonnegative', {}).get('converged')}, "
          f"2-way second-margin max deviation {post.get('nonnegative', {}).get('b_margin_max_abs_deviation')}")
    if args.counting:
        subprocess.run([sys.executable, str(Path(__file__).with_name("census_counting.py")), "--rows",
                        str(args.rows), "--out", str(data.parent), "--seeds", data.name.removeprefix("seed"),
                        "--attributes", str(args.attributes), "--reuse"], check=False)


if __name__ == "__main__":
    main()
