"""Benchmark (issue 35, US-scale item): the counting pass of a census workload, three ways in one run.

Data: ``privcube.storage.census_geography.generate_census_geo`` (``--rows`` persons, ``--attributes`` of the
census generator, 51 states / 3,100 counties / 70,000 tracts, files grouped by tract) written under ``--out``
(default /tmp/cdata-bench; never in the repository), one folder per seed; generation speed is reported.

Workload: every 1-way table of the non-geographic attributes by tract, ``--county-pairs`` 2-way tables by county
(drawn once with a fixed seed), every 2-way table by state; ``()`` totals are not included.

Counted three ways, each over the same files (warm page cache for all three):

- ``privcube``: ``privcube.graphs.census_counts.count_tables`` on a ``--workers``-worker LocalCluster (1 thread
  each): each file read on a worker through the input format and the ingest encoder (the checks of every run),
  counted by ``count_partition``, slices added on the driver as they arrive;
- ``numpy``: the same kernel (``count_partition``) over the files serially in this process, each file read
  with ``pyarrow.parquet.read_table`` (no validation): the single-process limit;
- ``polars``: ``pl.scan_parquet(files)`` joined to the map (tract -> county, state index), one
  ``group_by([unit, *attributes]).len()`` per table, all collected by ``pl.collect_all``, ``POLARS_MAX_THREADS``
  = ``--polars-threads``; polars runs in its own virtual environment that this script creates (``--polars-venv``;
  never a project dependency).

Every table's cell count and a weighted checksum are compared across the three (they must agree exactly). Each
figure is printed with the 1-minute load average (``os.getloadavg``) taken before and after it; peak memory is
the summed RSS of this process tree (``_rss.MemorySampler``).

    python benchmarks/census_counting.py --rows 1e7 --seeds 0 1 2

Measured (2026-11-28, 2-core / 24 GB box shared with four other jobs: 1-minute load 6-12 throughout), 10^7 rows x
29 attributes + tract, 10 files, 455 tables, seeds 0/1/2: generation 37.5 / 48.4 / 60.3 s (median 2.07e5 rows/s);
privcube 48.8 / 52.4 / 46.8 s, numpy single process 50.1 / 41.5 / 45.5 s, polars 2.1.0 188.2 / 142.2 / 141.9 s
(medians: numpy/privcube 0.93, polars/privcube 2.91); all three agree on every table; peak RSS of the process
tree 3.0 GiB (the polars stage; privcube's 2.1 GiB). Extrapolated linearly to 3.3e8 rows (not run): counting
~27 min for privcube at that load, generation ~27 min.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rss import MemorySampler  # noqa: E402

LEVELS = ["state", "county", "tract"]
US_ROWS = 330_000_000

POLARS_SCRIPT = r'''
import json, sys, time
import polars as pl
spec = json.load(open(sys.argv[1]))
start = time.perf_counter()
geo = pl.scan_parquet(spec["map"])
lf = pl.scan_parquet(spec["files"]).with_columns(pl.col("tract").cast(pl.Int64)).join(geo, on="tract", how="left")
unit = {"tract": "tract", "county": "county_i", "state": "state_i"}
frames = pl.collect_all([lf.group_by([unit[level], *attrs]).len() for level, attrs in spec["tables"]])
seconds = time.perf_counter() - start
out = []
for (level, attrs), f in zip(spec["tables"], frames):
    cols = [unit[level], *attrs]
    w = pl.lit(1.0) + pl.col(cols[0]).cast(pl.Float64)
    for i, a in enumerate(attrs):
        w = w + pl.col(a).cast(pl.Float64) * float(spec["weights"][i])
    out.append([f.height, f.select((pl.col("len").cast(pl.Float64) * w).sum()).item(), int(f["len"].sum())])
json.dump({"seconds": seconds, "tables": out, "version": pl.__version__}, open(sys.argv[2], "w"))
'''


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


# ------------------------------------------------------------------------------------------------ workload
def workload(attrs: list[str], county_pairs: int) -> list[Any]:
    """All 1-way by tract, ``county_pairs`` 2-way by county (fixed draw), all 2-way by state."""
    from privcube.storage.census_counts import LevelTable

    pairs = list(itertools.combinations(attrs, 2))
    rng = np.random.default_rng(35)
    chosen = [pairs[i] for i in sorted(rng.choice(len(pairs), min(county_pairs, len(pairs)), replace=False))]
    return ([LevelTable("tract", (a,)) for a in attrs] + [LevelTable("county", p) for p in chosen]
            + [LevelTable("state", p) for p in pairs])


WEIGHTS = (70_001.0, 70_001.0 * 101.0)  # checksum weights of the attribute codes (unit index has weight 1)


def checksums(tables: list[Any], totals: dict[Any, np.ndarray]) -> list[list[float]]:
    """Per table: [non-empty cells, sum of count x (1 + unit + w1 a + w2 b), rows]."""
    out = []
    for t in tables:
        arr = totals[t]
        idx = np.nonzero(arr)
        w = 1.0 + idx[0].astype(np.float64)
        for i in range(1, arr.ndim):
            w = w + idx[i].astype(np.float64) * WEIGHTS[i - 1]
        vals = arr[idx].astype(np.float64)
        out.append([int(len(vals)), float((vals * w).sum()), int(arr.sum())])
    return out


def agree(a: list[list[float]], b: list[list[float]]) -> bool:
    """Same cells, same rows, checksums equal to float rounding."""
    return all(x[0] == y[0] and x[2] == y[2] and abs(x[1] - y[1]) <= 1e-9 * max(abs(x[1]), 1.0) for x, y in zip(a, b))


# ------------------------------------------------------------------------------------------------ stages
def generate(out: Path, rows: int, seed: int, attrs: int, rows_per_file: int, workers: int, reuse: bool) -> dict:
    """The data folder (generated now unless ``reuse`` finds it), with the generation time and load."""
    from privcube.storage.census_geography import FILES, generate_census_geo

    paths = {k: out / v for k, v in FILES.items()}
    if reuse and all(p.exists() for p in paths.values()):
        return {"paths": paths, "seconds": None}
    before = load()
    start = time.perf_counter()
    paths = generate_census_geo(out, rows, seed=seed, n_attributes=attrs, rows_per_file=rows_per_file,
                                workers=workers, overwrite=True)
    seconds = time.perf_counter() - start
    size = sum(f.stat().st_size for f in paths["persons"].glob("*.parquet"))
    return {"paths": paths, "seconds": seconds, "rows_per_s": rows / seconds, "load": (before, load()),
            "bytes": size}


def privcube_stage(client: Any, files: list[str], read: Any, geo: dict, tables: list[Any]) -> tuple[dict, dict]:
    """count_tables on the cluster."""
    from privcube.graphs.census_counts import count_tables
    from privcube.graphs.execution import run_context

    before = load()
    start = time.perf_counter()
    totals = count_tables(run_context(client), files, read, geo["unit_of"], "tract", tables, geo["sizes"],
                          geo["n_units"], title="privcube count_tables")
    return totals, {"seconds": time.perf_counter() - start, "load": (before, load())}


def numpy_stage(files: list[str], columns: list[str], geo: dict, tables: list[Any]) -> tuple[dict, dict]:
    """count_partition over the files serially in this process (pyarrow read, no validation)."""
    import pyarrow.parquet as pq

    from privcube.storage.census_counts import add_slices, count_partition, empty_totals

    before = load()
    start = time.perf_counter()
    totals = empty_totals(tables, geo["sizes"], geo["n_units"])
    for f in files:
        t = pq.read_table(f, columns=columns)
        cols = {c: t.column(c).to_numpy() for c in columns}
        del t
        add_slices(totals, count_partition(cols, geo["unit_of"], "tract", tables, geo["sizes"], geo["n_units"]))
    return totals, {"seconds": time.perf_counter() - start, "load": (before, load())}


def ensure_polars(venv: Path) -> Path:
    """The polars virtual environment's python (created with ``pip install polars`` when missing)."""
    py = venv / "bin" / "python"
    if not (py.exists() and subprocess.run([str(py), "-c", "import polars"], capture_output=True).returncode == 0):
        print(f"creating the polars environment {venv} (pip install polars) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "polars"], check=True)
    return py


def polars_stage(py: Path, work: Path, files: list[str], geo: dict, tables: list[Any], threads: int) -> dict:
    """The polars group-bys in the polars venv (its own process); the child times its query itself."""
    import pandas as pd

    geo_file = work / "polars-map.parquet"
    pd.DataFrame({"tract": np.arange(geo["n_units"]["tract"], dtype=np.int64), "county_i": geo["unit_of"]["county"],
                  "state_i": geo["unit_of"]["state"]}).to_parquet(geo_file, index=False)
    spec = {"files": files, "map": str(geo_file), "tables": [[t.level, list(t.attributes)] for t in tables],
            "weights": list(WEIGHTS)}
    (work / "polars-spec.json").write_text(json.dumps(spec))
    (work / "polars-run.py").write_text(POLARS_SCRIPT)
    env = {**os.environ, "POLARS_MAX_THREADS": str(threads)}
    before = load()
    start = time.perf_counter()
    subprocess.run([str(py), str(work / "polars-run.py"), str(work / "polars-spec.json"),
                    str(work / "polars-out.json")], check=True, env=env)
    wall = time.perf_counter() - start
    res = json.loads((work / "polars-out.json").read_text())
    return {"seconds": res["seconds"], "wall": wall, "load": (before, load()), "checksums": res["tables"],
            "version": res["version"]}


# ------------------------------------------------------------------------------------------------ driver
def geography_of(paths: dict) -> dict:
    """Unit arrays, unit counts, sizes and the finest codes from the written map and domain."""
    from privcube.core.domain import Domain
    from privcube.storage.census_counts import unit_indexes
    from privcube.storage.geography_map import read_geography_map

    unit_of, n_units, codes = unit_indexes(read_geography_map(paths["map"], LEVELS, "tract"), "tract")
    return {"unit_of": unit_of, "n_units": n_units, "codes": codes, "sizes": Domain.load(paths["domain"]).to_dict()}


def one_seed(args: argparse.Namespace, seed: int, client: Any, polars_py: Path | None, mem: MemorySampler) -> dict:
    """Generate (or reuse) one seed's data and count it three ways."""
    from privcube.storage.census_counts import open_partitions

    rows = int(args.rows)
    data = generate(Path(args.out) / f"seed{seed}", rows, seed, args.attributes, int(args.rows_per_file),
                    args.workers, args.reuse)
    paths = data.pop("paths")
    geo = geography_of(paths)
    attrs = [a for a in geo["sizes"] if a != "tract"]
    tables = workload(attrs, args.county_pairs)
    files, read = open_partitions(paths["persons"], paths["domain"], list(geo["sizes"]), finest="tract",
                                  finest_codes=geo["codes"]["tract"])
    result: dict[str, Any] = {"seed": seed, "rows": rows, "files": len(files), "tables": len(tables),
                              "attributes": len(attrs), "generate": data}
    mem.reset_stage()
    totals, result["privcube"] = privcube_stage(client, files, read, geo, tables)
    result["privcube"]["peak_rss"] = mem.stage_peak
    reference = checksums(tables, totals)
    del totals
    mem.reset_stage()
    totals, result["numpy"] = numpy_stage(files, list(geo["sizes"]), geo, tables)
    result["numpy"]["peak_rss"] = mem.stage_peak
    result["numpy"]["agrees"] = agree(checksums(tables, totals), reference)
    del totals
    if polars_py is not None:
        mem.reset_stage()
        res = polars_stage(polars_py, Path(args.out), files, geo, tables, args.polars_threads)
        res["peak_rss"] = mem.stage_peak
        res["agrees"] = agree(res.pop("checksums"), reference)
        result["polars"] = res
    for k in ("privcube", "numpy", "polars"):
        if k in result:
            result[k]["rows_per_s"] = rows / result[k]["seconds"]
    print(json.dumps(result, default=str), flush=True)
    return result


def summary(results: list[dict], args: argparse.Namespace, cluster_start: float) -> dict:
    """Medians over seeds, the ratios, and the extrapolation to 3.3e8 rows."""
    def med(stage: str, key: str) -> float | None:
        vals = [r[stage][key] for r in results if stage in r and r[stage].get(key) is not None]
        return statistics.median(vals) if vals else None

    out: dict[str, Any] = {"cluster_start_s": cluster_start, "seeds": [r["seed"] for r in results]}
    for stage in ("privcube", "numpy", "polars"):
        out[stage] = {"seconds": med(stage, "seconds"), "rows_per_s": med(stage, "rows_per_s"),
                      "agrees": all(r[stage].get("agrees", True) for r in results if stage in r),
                      "loads": [r[stage]["load"] for r in results if stage in r],
                      "peak_rss_gib": max((r[stage]["peak_rss"] for r in results if stage in r), default=0) / 2**30}
    p, n, pl = out["privcube"]["seconds"], out["numpy"]["seconds"], out["polars"]["seconds"]
    out["ratio_numpy_over_privcube"] = n / p if p and n else None
    out["ratio_polars_over_privcube"] = pl / p if p and pl else None
    gen = [r["generate"]["rows_per_s"] for r in results if r["generate"].get("seconds")]
    out["generate_rows_per_s"] = statistics.median(gen) if gen else None
    scale = US_ROWS / float(args.rows)
    out["extrapolated_us_scale_s"] = {k: (out[k]["seconds"] or 0) * scale for k in ("privcube", "numpy", "polars")
                                      if out[k]["seconds"]}
    if gen:
        out["extrapolated_us_generate_s"] = US_ROWS / out["generate_rows_per_s"]
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=float, default=1e7, help="persons per seed")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="data seeds (one dataset each)")
    p.add_argument("--attributes", type=int, default=30, help="census generator attributes (state is dropped)")
    p.add_argument("--rows-per-file", type=float, default=1e6,
                   help="rows per Parquet file (10 files per 10^7 rows: 5 per worker)")
    p.add_argument("--county-pairs", type=int, default=20, help="2-way tables by county")
    p.add_argument("--workers", type=int, default=2, help="LocalCluster workers (1 thread each) and generator threads")
    p.add_argument("--memory-limit", default="4GiB", help="LocalCluster memory limit per worker")
    p.add_argument("--polars-threads", type=int, default=2, help="POLARS_MAX_THREADS for the polars stage")
    p.add_argument("--polars-venv", default="/tmp/cdata-polars-venv", help="polars' own virtual environment")
    p.add_argument("--no-polars", action="store_true", help="skip the polars stage")
    p.add_argument("--out", default="/tmp/cdata-bench", help="data folder (outside the repository)")
    p.add_argument("--reuse", action="store_true", help="reuse data already generated in --out")
    p.add_argument("--json", help="write the results and summary here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if Path(args.out).resolve().is_relative_to(Path(__file__).resolve().parents[1]):
        raise SystemExit("--out must lie outside the repository")
    from distributed import Client, LocalCluster

    polars_py = None if args.no_polars else ensure_polars(Path(args.polars_venv))
    start = time.perf_counter()
    with MemorySampler() as mem, LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                              memory_limit=args.memory_limit, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        cluster_start = time.perf_counter() - start
        results = [one_seed(args, s, client, polars_py, mem) for s in args.seeds]
    out = summary(results, args, cluster_start)
    out["peak_rss_gib"] = mem.peak / 2**30
    print(json.dumps(out, indent=1, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "summary": out}, indent=1, default=str))
    return out


if __name__ == "__main__":
    main()
