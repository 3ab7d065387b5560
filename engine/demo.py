"""``privcube demo``: a seeded census-like table (no download), then the main job on a LocalCluster.

The demo data is generated, not private, so the demo may compare the private answers with the exact
ones and print an error summary next to the plan's expected error.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

DEMO_EPSILON = 1.0
DEMO_DELTA = 1e-9


def demo_config(data_dir: Path, schema_path: Path, workers: int | None = None) -> dict[str, Any]:
    """The demo job: ResidualPlanner over all 1- and 2-way marginals at ε = 1, δ = 1e-9."""
    cluster: dict[str, Any] = {"type": "local"}
    if workers:
        cluster["n_workers"] = workers
    return {
        "data": {"path": str(data_dir), "schema": str(schema_path)},
        "mechanism": {"name": "residual-planner"},
        "workload": [{"kway": 1}, {"kway": 2}],
        "privacy": {"epsilon": DEMO_EPSILON, "delta": DEMO_DELTA},
        "cluster": cluster,
    }


def write_demo_data(folder: Path, rows: int, files: int = 4, seed: int = 20261121) -> tuple[Path, Path]:
    """Generate the demo table as ``files`` Parquet parts plus its rich schema; reuse if present."""
    from privcube.storage.generate import demo_schema, generate_demo_frame
    from privcube.storage.outputs import atomic_write_parquet

    data_dir = folder / "data"
    schema_path = folder / "schema.yaml"
    marker = folder / "data" / f".rows-{rows}"
    if marker.exists() and schema_path.exists():
        return data_dir, schema_path
    data_dir.mkdir(parents=True, exist_ok=True)
    for old in data_dir.glob("*.parquet"):
        old.unlink()
    frame = generate_demo_frame(rows, seed)
    for i, part in enumerate(np.array_split(np.arange(len(frame)), files)):
        atomic_write_parquet(data_dir / f"part-{i:03d}.parquet", frame.iloc[part])
    schema = demo_schema()
    schema_path.write_text(yaml.safe_dump(schema.to_dict(), sort_keys=False))
    marker.write_text("")
    return data_dir, schema_path


def run_demo(out: str | Path | None = None, rows: int = 200_000, seed: int | None = None,
             workers: int | None = None, quiet: bool = False) -> Any:
    """Generate (or reuse) demo data, run the job into a fresh run folder, print an error summary."""
    from privcube import api
    from privcube.config import load_config

    folder = Path(out or "privcube-demo").resolve()
    if rows < 1000:
        from privcube.errors import ConfigError

        raise ConfigError(f"--rows must be at least 1000, got {rows}")
    data_dir, schema_path = write_demo_data(folder, rows)
    cfg_dict = demo_config(data_dir, schema_path, workers)
    cfg_path = folder / "demo-config.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg_dict, sort_keys=False))
    runs = folder / "runs"
    runs.mkdir(exist_ok=True)
    k = 1
    while (runs / f"run-{k:03d}").exists():
        k += 1
    run_dir = runs / f"run-{k:03d}"
    cfg = load_config(cfg_path)
    summary = api.run(cfg, run_dir, seed=seed, workers=workers, quiet=quiet)

    # Error summary: the demo data is generated (public), so exact answers may be used here; it was made in
    # memory, so it is counted in memory too (the engine's ArrayOracle, no task graph).
    from privcube.oracle import ArrayOracle
    from privcube.storage.ingest import open_table

    table = open_table(cfg.data_path, cfg.schema)
    cliques = [a.group.attributes for a in summary.result.answers]
    exact = ArrayOracle.from_frame(table.domain, table.frame.compute()).marginals(cliques)
    n = float(np.asarray(exact[cliques[0]]).sum())
    by_k: dict[int, list[float]] = {}
    sq: dict[int, list[float]] = {}
    for ans in summary.result.answers:
        c = ans.group.attributes
        err = np.asarray(ans.estimate).ravel() - np.asarray(exact[c], dtype=float).ravel()
        by_k.setdefault(len(c), []).append(float(np.abs(err).sum() / n))
        sq.setdefault(len(c), []).extend((err**2).tolist())
    spent = summary.ledger["spent"]
    plan = summary.report.get("expected_error") or {}
    print(f"demo data: {data_dir} ({rows} rows, {len(cfg.domain)} attributes; generated, not private)")
    print(f"outputs:   {summary.out_dir}")
    print(f"privacy:   epsilon={spent['epsilon']:.4g}, delta={spent['delta']:.3g} (rho={spent['rho']:.5g})")
    print("error summary (private answers vs the generated data's exact marginals):")
    print(f"  {'k-way':>5} {'marginals':>9} {'mean L1/N':>10} {'RMSE':>9}")
    for kk in sorted(by_k):
        print(f"  {kk:>5} {len(by_k[kk]):>9} {np.mean(by_k[kk]):>10.5f} {math.sqrt(np.mean(sq[kk])):>9.3f}")
    if plan.get("rmse") is not None:
        print(f"  planned RMSE over all cells: {plan['rmse']:.3f}")
    sys.stdout.flush()
    return summary
