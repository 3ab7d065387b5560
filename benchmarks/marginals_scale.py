"""Benchmark: one-pass marginal batch on Parquet vs the single-process numpy limit, with peak memory.

Generates (or reuses) an N-row integer-coded census Parquet dataset with
``privcube.storage.generate.generate_census``, then computes a batch of marginals (all 1-way, all
2-way and a set of 3-way) in ONE pass with ``compute_marginals`` on a LocalCluster (and, unless
``--no-threads``, on the local threaded scheduler), versus numpy ``ravel_multi_index`` + ``bincount``
on in-memory arrays in one process (the physical limit; measured on a ``--sample-rows`` in-memory
sample and scaled by rate). Peak memory is the summed RSS of this process tree (scheduler and client
live in this process; workers are child processes), sampled by psutil in a thread.

    python benchmarks/marginals_scale.py --rows 1e7 --out-dir /tmp/privcube_bench --reuse
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path, not run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rss import MemorySampler  # noqa: E402


def _warm_up() -> None:
    """Import the pass's modules on a worker."""
    import pyarrow.parquet  # noqa: F401

    import privcube.graphs.marginals  # noqa: F401


def batch_cliques(attrs: tuple[str, ...], n_three: int) -> list[tuple[str, ...]]:
    """All 1-way, all 2-way, and ``n_three`` evenly spread 3-way cliques."""
    ones = [(a,) for a in attrs]
    twos = list(itertools.combinations(attrs, 2))
    all3 = list(itertools.combinations(attrs, 3))
    step = max(1, len(all3) // max(n_three, 1))
    return ones + twos + all3[::step][:n_three]


def dataset(out_dir: Path, rows: int, attrs: int, rows_per_file: int, reuse: bool, workers: int):
    """(data directory, Domain): reuse a complete dataset if asked, else generate it."""
    from privcube.core.domain import Domain
    from privcube.storage.generate import generate_census

    d = out_dir / (f"census-{rows}" if attrs == 12 else f"census-{rows}-a{attrs}")
    n_files = -(-rows // rows_per_file)
    if reuse and (d / "domain.json").exists() and len(list(d.glob("part-*.parquet"))) == n_files:
        print(f"reusing {d} ({n_files} files)", file=sys.stderr)
        return d, Domain.load(d / "domain.json")
    t = time.perf_counter()
    _, domain = generate_census(d, rows, rows_per_file=rows_per_file, n_attributes=attrs,
                                overwrite=True, workers=workers)
    print(f"generated {rows:,} rows in {time.perf_counter() - t:.1f}s -> {d}", file=sys.stderr)
    return d, domain


def numpy_baseline(data_dir: Path, domain, cliques, roots, sample_rows: int):
    """Seconds for ravel+bincount over all cliques and over roots only, on an in-memory sample."""
    import pyarrow.parquet as pq

    files = sorted(data_dir.glob("part-*.parquet"))
    frames, n = [], 0
    for f in files:
        if n >= sample_rows:
            break
        t = pq.read_table(f, columns=list(domain.attributes)).to_pandas()
        frames.append(t.iloc[: sample_rows - n])
        n += len(frames[-1])
    cols = {a: np.concatenate([f[a].to_numpy() for f in frames]) for a in domain.attributes}
    del frames

    def stride(c, shape):
        flat = cols[c[0]].astype(np.intp)
        for a, s in zip(c[1:], shape[1:]):
            flat *= s
            flat += cols[a]
        return flat

    def run(batch, fast=False):
        out = {}
        t0 = time.perf_counter()
        for c in batch:
            shape = domain.shape_of(c)
            if len(c) == 1:
                flat = cols[c[0]]
            elif fast:
                flat = stride(c, shape)
            else:
                flat = np.ravel_multi_index(tuple(cols[a] for a in c), shape)
            out[c] = np.bincount(flat, minlength=math.prod(shape)).reshape(shape)
        return time.perf_counter() - t0, out

    t_all, ref = run(cliques)
    t_roots, _ = run(roots)
    t_fast, _ = run(roots, fast=True)
    return n, t_all, t_roots, t_fast, ref


def main(argv: list[str] | None = None) -> int:
    """Parse args, run the benchmark, print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=float, default=1e7, help="rows to generate (e.g. 1e7, 1e8)")
    p.add_argument("--out-dir", type=Path, default=Path("/tmp/privcube_bench"))
    p.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes")
    p.add_argument("--threads-per-worker", type=int, default=1)
    p.add_argument("--memory-limit", default="2.5GiB", help="per worker")
    p.add_argument("--attrs", type=int, default=12, help="attributes in the generated census")
    p.add_argument("--three-way", type=int, default=20, help="number of 3-way cliques in the batch")
    p.add_argument("--rows-per-file", type=int, default=1_000_000)
    p.add_argument("--sample-rows", type=float, default=1e7, help="in-memory numpy baseline rows")
    p.add_argument("--split-every", type=int, default=8)
    p.add_argument("--reuse", action="store_true", help="reuse an existing dataset of that size")
    p.add_argument("--repeat", type=int, default=1, help="engine runs per mode; the fastest is reported")
    p.add_argument("--no-threads", action="store_true", help="skip the no-client (threaded) run")
    args = p.parse_args(argv)

    import dask
    import dask.dataframe as dd

    from privcube.graphs.cluster.handle import resolve_cluster
    from privcube.graphs.marginals import compute_marginals, plan_batch

    rows = int(args.rows)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    data_dir, domain = dataset(args.out_dir, rows, args.attrs, args.rows_per_file, args.reuse, args.workers)
    cliques = batch_cliques(domain.attributes, args.three_way)
    roots, derived = plan_batch(domain, [domain.canonical(c) for c in cliques])
    print(f"batch: {len(cliques)} cliques -> {len(roots)} counted, {len(derived)} derived; "
          f"{sum(domain.size(r) for r in roots):,} counted cells", file=sys.stderr)

    results = []  # (label, seconds, rows counted, peak total, peak main, peak children)

    def frame():
        return dd.read_parquet(str(data_dir), columns=list(domain.attributes))

    n_base, t_all, t_roots, t_fast, ref = numpy_baseline(data_dir, domain, cliques, roots, int(args.sample_rows))

    if not args.no_threads:
        with MemorySampler() as mem, dask.config.set(scheduler="threads", num_workers=args.workers):
            dt = math.inf
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                res_t = compute_marginals(frame(), domain, cliques, split_every=args.split_every,
                                          label="threads")
                dt = min(dt, time.perf_counter() - t0)
        results.append(("engine, threads (no client)", dt, mem))
    spec = {"type": "local", "n_workers": args.workers, "threads_per_worker": args.threads_per_worker,
            "memory_limit": args.memory_limit, "local_directory": str(args.out_dir / "dask-spill")}
    with MemorySampler() as mem:
        with resolve_cluster(spec) as client:
            client.run(_warm_up)  # worker imports count as start-up, not as the pass
            dt = math.inf
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                res_c = compute_marginals(frame(), domain, cliques, client=client,
                                          split_every=args.split_every, label="cluster")
                dt = min(dt, time.perf_counter() - t0)
            worker_rss = client.run(lambda: __import__("psutil").Process().memory_info().rss)
    results.append((f"engine, LocalCluster {args.workers}x{args.threads_per_worker}", dt, mem))

    total = int(res_c[cliques[0]].sum())
    assert total == rows, f"count {total} != rows {rows}"
    if not args.no_threads:
        assert all(np.array_equal(res_t[c], res_c[c]) for c in cliques), "threads and cluster disagree"
    if n_base == rows:
        assert all(np.array_equal(ref[c], res_c[c]) for c in cliques), "engine disagrees with numpy"

    rate_all, rate_roots, rate_fast = n_base / t_all, n_base / t_roots, n_base / t_fast
    gib = 2**30
    print(f"\nmarginal batch: N={rows:,} rows, {len(domain)} attributes, {len(cliques)} cliques "
          f"({len(roots)} counted), {len(list(data_dir.glob('part-*.parquet')))} Parquet files")
    hdr = f"{'method':38s} {'seconds':>9s} {'rows/s':>12s} {'vs numpy':>9s} {'vs roots':>9s} {'peak GiB':>9s}"
    print(hdr)
    print("-" * len(hdr))
    print(f"{'numpy 1 proc, all cliques (in-mem)':38s} {rows / rate_all:9.2f} {rate_all:12.3e} {1:9.2f} "
          f"{rate_all / rate_roots:9.2f} {'-':>9s}")
    print(f"{'numpy 1 proc, counted roots (in-mem)':38s} {rows / rate_roots:9.2f} {rate_roots:12.3e} "
          f"{rate_roots / rate_all:9.2f} {1:9.2f} {'-':>9s}")
    print(f"{'numpy 1 proc, roots, stride index':38s} {rows / rate_fast:9.2f} {rate_fast:12.3e} "
          f"{rate_fast / rate_all:9.2f} {rate_fast / rate_roots:9.2f} {'-':>9s}")
    for label, dt, mem in results:
        r = rows / dt
        print(f"{label:38s} {dt:9.2f} {r:12.3e} {r / rate_all:9.2f} {r / rate_roots:9.2f} "
              f"{mem.peak / gib:9.2f}")
    print(f"(numpy measured on {n_base:,} in-memory rows and scaled; seconds for numpy = N / rate; "
          f"engine includes Parquet read, excludes cluster start-up and worker imports; "
          f"engine = fastest of {args.repeat})")
    c_mem = results[-1][2]
    print(f"LocalCluster peak RSS: total {c_mem.peak / gib:.2f} GiB = main process (client+scheduler) "
          f"{c_mem.peak_main / gib:.2f} GiB + workers/nannies {c_mem.peak_children / gib:.2f} GiB; "
          f"workers at end: {', '.join(f'{v / gib:.2f}' for v in worker_rss.values())} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
