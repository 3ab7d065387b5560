"""Benchmark (issue 7, issue 5 scale item): census-scale marginals, ResidualPlanner and AIM+GReM.

Generates (or, with ``--reuse``, reuses) an N-row, ~30-attribute census-like Parquet dataset with
``privcube.storage.generate.generate_census``, starts ONE LocalCluster (``--workers`` worker processes,
one thread each, ``--memory-limit`` per worker) and times, stage by stage:

- ``numpy``: the single-process limit: ``ravel_multi_index`` + ``bincount`` for every 1- and 2-way
  marginal on an in-memory sample (``--sample-rows``, default 10^7 rows), scaled to N by rate;
- ``marginals``: all 1- and 2-way marginals in the engine's one-pass ``compute_marginals`` on the
  cluster (Parquet read included);
- ``residual-planner`` and ``aim-grem``: ``privcube.api.run`` over all 2-way marginals (workload
  ``[{kway: 2}]``, eps=1, delta=1e-9, ``--seed``), i.e. the whole engine path: config, ingest, data
  pass, mechanism, outputs written to a run directory.

Every cluster stage runs in a child process that connects to the one cluster's scheduler (the API's
``client=`` argument), so a stage that exceeds ``--time-limit`` seconds is killed and reported as
"did not finish in T s" (the workers are then restarted before the next stage). Peak memory is the
summed RSS of the whole process tree (this process with the scheduler, the nannies, the workers and
the stage process), sampled every 50 ms by a psutil thread; the issue's bound is 8 GB (8e9 bytes).

    python benchmarks/census_scale.py --rows 1e8 --reuse --time-limit 1800
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core per worker process; no BLAS oversubscription

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path (tests), not run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rss import MemorySampler  # noqa: E402

GIB = 2**30
MEMORY_BOUND = 8e9  # issue 7: peak memory must stay below 8 GB
ALL_STAGES = ("numpy", "marginals", "residual-planner", "aim-grem")


# --------------------------------------------------------------------------------------- data
def _parquet_rows(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def dataset(out_dir: Path, rows: int, attrs: int, rows_per_file: int, reuse: bool, workers: int,
            seed: int) -> tuple[Path, Any, float | None]:
    """(data directory, Domain, generation seconds or None if reused)."""
    from privcube.core.domain import Domain
    from privcube.storage.generate import generate_census

    d = out_dir / f"census-{rows}-a{attrs}"
    if reuse and (d / "domain.json").exists():
        domain = Domain.load(d / "domain.json")
        files = sorted(d.glob("part-*.parquet"))
        if len(domain) == attrs and len(files) == -(-rows // rows_per_file) and _parquet_rows(files) == rows:
            print(f"reusing {d} ({len(files)} files)", file=sys.stderr)
            return d, domain, None
        print(f"{d} does not hold {rows:,} rows x {attrs} attributes: regenerating", file=sys.stderr)
    t = time.perf_counter()
    _, domain = generate_census(d, rows, seed=seed, rows_per_file=rows_per_file, n_attributes=attrs,
                                overwrite=True, workers=workers)
    dt = time.perf_counter() - t
    print(f"generated {rows:,} rows x {attrs} attributes in {dt:.1f}s -> {d}", file=sys.stderr)
    return d, domain, dt


def cliques_1_2(attrs: tuple[str, ...]) -> list[tuple[str, ...]]:
    """All 1-way and all 2-way attribute sets, in domain order."""
    return [(a,) for a in attrs] + list(itertools.combinations(attrs, 2))


def numpy_baseline(data_dir: Path, domain: Any, cliques: list[tuple[str, ...]],
                   sample_rows: int) -> tuple[int, float, dict[tuple[str, ...], np.ndarray]]:
    """(rows in the sample, seconds, marginals): ravel_multi_index + bincount, one process, in memory."""
    import pyarrow.parquet as pq

    attrs = list(domain.attributes)
    parts: dict[str, list[np.ndarray]] = {a: [] for a in attrs}
    n = 0
    for f in sorted(data_dir.glob("part-*.parquet")):
        if n >= sample_rows:
            break
        t = pq.read_table(f, columns=attrs)
        take = min(t.num_rows, sample_rows - n)
        for a in attrs:
            parts[a].append(t.column(a).to_numpy()[:take])
        n += take
        del t
    cols = {a: np.concatenate(parts[a]) for a in attrs}
    del parts
    out = {}
    t0 = time.perf_counter()
    for c in cliques:
        shape = domain.shape_of(c)
        flat = cols[c[0]] if len(c) == 1 else np.ravel_multi_index(tuple(cols[a] for a in c), shape)
        out[c] = np.bincount(flat, minlength=math.prod(shape)).reshape(shape)
    return n, time.perf_counter() - t0, out


# ------------------------------------------------------------------------------- stage child
def _warm_up() -> None:
    """Import the engine's modules on a worker (start-up, not the stage)."""
    import pyarrow.parquet  # noqa: F401

    import privcube.graphs.marginals  # noqa: F401
    import privcube.storage.ingest  # noqa: F401


def run_config(spec: dict[str, Any], mechanism: str) -> dict[str, Any]:
    """The job config of a mechanism stage (whole engine path through privcube.api.run)."""
    return {
        "data": {"path": spec["data_dir"], "domain": str(Path(spec["data_dir"]) / "domain.json")},
        "mechanism": {"name": mechanism},
        "workload": [{"kway": 2}],
        "privacy": {"epsilon": 1.0, "delta": 1e-9},
        "cluster": {"type": "address", "address": spec["address"]},
    }


def stage_child(spec: dict[str, Any]) -> None:
    """Body of the stage process: connect to the cluster, run one stage, write a JSON result."""
    import dask.dataframe as dd

    from privcube import api
    from privcube.core.domain import Domain
    from privcube.graphs.cluster.handle import resolve_cluster
    from privcube.graphs.marginals import compute_marginals

    stage = spec["stage"]
    result: dict[str, Any] = {"stage": stage}
    with resolve_cluster({"type": "address", "address": spec["address"]}) as client:
        if stage == "marginals":
            domain = Domain.load(Path(spec["data_dir"]) / "domain.json")
            cliques = cliques_1_2(domain.attributes)
            t0 = time.perf_counter()
            frame = dd.read_parquet(spec["data_dir"], columns=list(domain.attributes))
            res = compute_marginals(frame, domain, cliques, client=client, label="marginals")
            result["seconds"] = time.perf_counter() - t0
            result["total"] = int(res[cliques[0]].sum())
            np.savez(spec["result"] + ".npz", **{"|".join(c): v for c, v in res.items()})
        else:
            t0 = time.perf_counter()
            summary = api.run(run_config(spec, stage), spec["run_dir"], seed=spec["seed"], client=client,
                              quiet=True, overwrite=True)
            result["seconds"] = time.perf_counter() - t0
            rep = summary.report
            result["timings"] = rep.get("timings", {})
            result["answers"] = rep.get("sizes", {}).get("answers")
            mrep = rep.get("mechanism_report") or {}
            for key in ("rounds", "n_rounds"):
                if key in mrep:
                    result["rounds"] = mrep[key]
            if "rounds" not in result and isinstance(mrep.get("trace"), list):
                result["rounds"] = len(mrep["trace"])
            result["rho_spent"] = summary.ledger.get("rho_spent", summary.ledger.get("spent"))
    Path(spec["result"]).write_text(json.dumps(result, default=str))


def run_stage(spec: dict[str, Any], time_limit: float) -> dict[str, Any]:
    """Run one stage in a child process; kill it after ``time_limit`` seconds."""
    fd, path = tempfile.mkstemp(prefix=f"census-{spec['stage']}-", suffix=".json")
    os.close(fd)
    os.unlink(path)
    spec = {**spec, "result": path}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--stage-child", json.dumps(spec)])
    try:
        rc = proc.wait(timeout=time_limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return {"stage": spec["stage"], "status": f"did not finish in {time_limit:g}s",
                "wall": time.perf_counter() - t0}
    wall = time.perf_counter() - t0
    if rc != 0 or not Path(path).exists():
        return {"stage": spec["stage"], "status": f"failed (exit {rc}; traceback above)", "wall": wall}
    out = json.loads(Path(path).read_text())
    os.unlink(path)
    if Path(path + ".npz").exists():
        with np.load(path + ".npz") as z:
            out["marginals"] = {tuple(k.split("|")): z[k] for k in z.files}
        os.unlink(path + ".npz")
    out["status"] = "ok"
    out["wall"] = wall
    return out


# --------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=float, default=1e8, help="rows to generate (e.g. 1e6, 1e7, 1e8)")
    p.add_argument("--attributes", type=int, default=30, help="census attributes (<= 30)")
    p.add_argument("--out-dir", type=Path, default=Path("/tmp/privcube_census"))
    p.add_argument("--reuse", action="store_true", help="reuse an existing dataset of that size")
    p.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes (and generator threads)")
    p.add_argument("--memory-limit", default="3GiB", help="LocalCluster memory limit per worker")
    p.add_argument("--stages", default=",".join(ALL_STAGES), help=f"comma list of {','.join(ALL_STAGES)}")
    p.add_argument("--time-limit", type=float, default=1800.0, help="seconds per stage before it is killed")
    p.add_argument("--seed", type=int, default=0, help="run seed for the mechanisms")
    p.add_argument("--data-seed", type=int, default=0, help="generator seed")
    p.add_argument("--rows-per-file", type=int, default=1_000_000)
    p.add_argument("--sample-rows", type=float, default=1e7, help="rows of the in-memory numpy sample")
    p.add_argument("--stage-child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    bad = [s for s in args.stages if s not in ALL_STAGES]
    if bad:
        p.error(f"unknown stage(s) {bad}; choose from {ALL_STAGES}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark and print the table; returns the report (stages, peaks) as a dict."""
    args = parse_args(argv)
    if args.stage_child is not None:
        stage_child(json.loads(args.stage_child))
        return {"ok": True}

    from privcube.graphs.cluster.handle import resolve_cluster

    rows = int(args.rows)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"rows": rows, "attributes": args.attributes, "stages": [],
                              "load_before": os.getloadavg()}
    stages = report["stages"]
    with MemorySampler() as mem:
        data_dir, domain, gen_s = dataset(args.out_dir, rows, args.attributes, args.rows_per_file, args.reuse,
                                          args.workers, args.data_seed)
        if gen_s is not None:
            stages.append({"stage": "generate", "status": "ok", "seconds": gen_s, "peak": mem.stage_peak})
        cliques = cliques_1_2(domain.attributes)
        n_files = len(list(data_dir.glob("part-*.parquet")))

        numpy_rate = ref = None
        n_sample = 0
        if "numpy" in args.stages:
            mem.reset_stage()
            n_sample, t_np, ref = numpy_baseline(data_dir, domain, cliques, int(min(args.sample_rows, rows)))
            numpy_rate = n_sample / t_np
            stages.append({"stage": "numpy", "status": "ok", "seconds": rows / numpy_rate, "rate": numpy_rate,
                           "peak": mem.stage_peak, "note": f"{n_sample:,} in-memory rows, scaled"})
            if n_sample < rows:
                ref = None  # only a sample: no exact comparison
        spec = {"type": "local", "n_workers": args.workers, "threads_per_worker": 1,
                "memory_limit": args.memory_limit, "local_directory": str(args.out_dir / "dask-spill")}
        mem.reset_stage()
        t0 = time.perf_counter()
        with resolve_cluster(spec) as client:
            client.run(_warm_up)
            stages.append({"stage": "cluster start", "status": "ok", "seconds": time.perf_counter() - t0,
                           "peak": mem.stage_peak})
            base = {"address": client.scheduler.address, "data_dir": str(data_dir), "seed": args.seed}
            for stage in [s for s in ALL_STAGES if s in args.stages and s != "numpy"]:
                mem.reset_stage()
                print(f"stage {stage} (time limit {args.time_limit:g}s) ...", file=sys.stderr, flush=True)
                res = run_stage({**base, "stage": stage, "run_dir": str(args.out_dir / "runs" / f"{stage}-{rows}")},
                                args.time_limit)
                res["peak"] = mem.stage_peak
                if res["status"] == "ok":
                    res["rate"] = rows / res["seconds"]
                    if stage == "marginals":
                        mus = res.pop("marginals")
                        if res["total"] != rows:
                            res["status"] = f"wrong total {res['total']} != {rows}"
                        elif ref is not None and not all(np.array_equal(ref[c], mus[c]) for c in cliques):
                            res["status"] = "disagrees with numpy"
                        elif ref is not None:
                            res["note"] = "equal to numpy"
                    elif "timings" in res:
                        t = res["timings"]
                        res["note"] = (f"mechanism {t.get('mechanism_s', math.nan):.1f}s, "
                                       f"write {t.get('write_s', math.nan):.1f}s"
                                       + (f", {res['rounds']} rounds" if res.get("rounds") is not None else ""))
                else:
                    client.restart()  # free whatever the killed stage left on the workers
                stages.append(res)
        report["load_after"] = os.getloadavg()
        report["peak"] = mem.peak
        report["samples"] = mem.samples

    report["ok"] = all(s["status"] == "ok" for s in stages) and report["peak"] < MEMORY_BOUND
    print_table(report, args, n_files, n_sample, numpy_rate)
    return report


def print_table(report: dict[str, Any], args: argparse.Namespace, n_files: int, n_sample: int,
                numpy_rate: float | None) -> None:
    rows = report["rows"]
    print(f"\ncensus scale: N={rows:,} rows, {report['attributes']} attributes, {n_files} Parquet files; "
          f"LocalCluster {args.workers}x1, memory_limit={args.memory_limit}/worker; "
          f"workload: all 1-/2-way marginals; eps=1, delta=1e-9, seed={args.seed}")
    hdr = f"{'stage':18s} {'seconds':>9s} {'rows/s':>11s} {'vs numpy':>9s} {'peak GiB':>9s}  note"
    print(hdr)
    print("-" * len(hdr))
    for s in report["stages"]:
        if s["status"] != "ok":
            print(f"{s['stage']:18s} {'-':>9s} {'-':>11s} {'-':>9s} {s['peak'] / GIB:9.2f}  {s['status']}")
            continue
        rate = s.get("rate")
        ratio = rate / numpy_rate if rate and numpy_rate else None
        print(f"{s['stage']:18s} {s['seconds']:9.2f} "
              f"{(f'{rate:.3e}' if rate else '-'):>11s} {(f'{ratio:.2f}' if ratio else '-'):>9s} "
              f"{s['peak'] / GIB:9.2f}  {s.get('note', '')}")
    la, lb = report.get("load_before"), report.get("load_after")
    print(f"peak RSS of the process tree over the whole run: {report['peak'] / GIB:.2f} GiB "
          f"({'below' if report['peak'] < MEMORY_BOUND else 'NOT below'} the 8 GB bound; "
          f"{report['samples']} samples)")
    print(f"(seconds: numpy = N / rate measured on {n_sample:,} in-memory rows; stages = wall time in the stage "
          f"process after connecting; rows/s = N / seconds; vs numpy = rows/s / numpy rows/s; "
          f"load average before {la[0]:.2f} / after {lb[0]:.2f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    sys.exit(0 if main().get("ok") else 1)
