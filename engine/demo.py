"""``privcube demo``: a seeded census-like table (no download), then the main job on a LocalCluster.

The demo data is generated, not private, so the demo may compare the private answers with the exact
ones and print an error summary next to the plan's expected error. The demo folder lists its own files in
``.privcube-files.json``: only those are ever replaced (issue 33), and a folder holding anything else is
refused in one line before anything is written.
"""
from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from privcube.core.atomic import atomic_write_text

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


#: the demo folder's own files (listed in its manifest): the only ones ``privcube demo`` replaces or deletes
_DATA_ENTRY = re.compile(r"data/(part-\d{3}\.parquet|\.rows-\d+)")
_RUN_FOLDER = re.compile(r"runs/(run-\d{3,}/|\.run-\d{3,}\.lock)")  # a run folder, or the lock a killed run left
#: what ``privcube.core.atomic`` leaves beside a file ``NAME`` if the process is killed mid-write
_LEFTOVER = re.compile(r"(?P<dir>(?:[^/]+/)?)\.(?P<name>[^/]+)\.[^/]+\.tmp")
DEMO_KIND = "demo"


def _entries(folder: Path) -> list[str]:
    """The demo folder's entries as relative paths (folders end in ``/``): the top level, ``data/`` and
    ``runs/`` one level down (a run folder's contents are the run's, guarded by ``privcube run``)."""
    out: list[str] = []
    for top in sorted(os.listdir(folder)):
        path = folder / top
        if top in ("data", "runs") and path.is_dir() and not path.is_symlink():
            out.append(top + "/")
            for sub in sorted(os.listdir(path)):
                inner = path / sub
                is_dir = inner.is_dir() and not inner.is_symlink()
                out.append(f"{top}/{sub}" + ("/" if is_dir else ""))
        else:
            out.append(top + ("/" if path.is_dir() and not path.is_symlink() else ""))
    return out


def _legacy_demo(folder: Path) -> bool:
    """A demo folder from before its manifest: its ``demo-config.yaml`` reads this folder's data and schema."""
    try:
        cfg = yaml.safe_load((folder / "demo-config.yaml").read_text())
        data = cfg["data"]
        return data["path"] == str(folder / "data") and data["schema"] == str(folder / "schema.yaml")
    except Exception:  # noqa: BLE001 - missing, unreadable or another shape: not a demo folder privcube wrote
        return False


def demo_owned(folder: Path) -> set[str]:
    """The files of ``folder`` that ``privcube demo`` wrote (and may replace or delete): those its manifest
    lists (or, in a demo folder from before the manifest, the demo's data, schema and config), with the
    temporary files a killed write left beside them. Refuses in one line a folder holding anything else,
    before anything is written; ``runs/`` may hold run folders only."""
    from privcube.core.errors import ConfigError
    from privcube.storage.ownership import COPY_MANIFEST, read_json, some

    if not folder.exists() and not folder.is_symlink():
        return set()
    if not folder.is_dir():
        raise ConfigError(f"demo --out {str(folder)!r} is not a folder; give a new or empty folder")
    entries = _entries(folder)
    record = read_json(folder / COPY_MANIFEST)
    if isinstance(record, dict) and record.get("written_by") == "privcube" and record.get("kind") == DEMO_KIND \
            and isinstance(record.get("files"), list):
        listed = {str(f) for f in record["files"]} | {COPY_MANIFEST}
    elif _legacy_demo(folder):
        listed = {e for e in entries if _DATA_ENTRY.fullmatch(e)} | {"schema.yaml", "demo-config.yaml"}
    else:
        listed = set()
    owned = {e for e in entries if e in listed or (
        (m := _LEFTOVER.fullmatch(e)) is not None and m["dir"] + m["name"] in listed)}
    foreign = [e for e in entries if e not in owned and e not in ("data/", "runs/") and not _RUN_FOLDER.fullmatch(e)]
    if foreign:
        raise ConfigError(f"demo --out {str(folder)!r} holds {some(foreign)} that privcube did not write; nothing was "
                          "changed: give a new or empty folder for the demo")
    return owned - {COPY_MANIFEST}


def _write_demo_manifest(folder: Path, files: set[str]) -> None:
    """Record the demo's own files in ``folder/.privcube-files.json`` (kind ``demo``); ``runs/`` is not listed
    (its run folders carry their own records), so no other command takes the demo folder for one of its copies."""
    import json

    from privcube.core.atomic import atomic_write_bytes
    from privcube.storage.ownership import COPY_MANIFEST

    record = {"written_by": "privcube", "kind": DEMO_KIND, "files": sorted(files), "dirs": ["data"]}
    atomic_write_bytes(folder / COPY_MANIFEST, (json.dumps(record, indent=2) + "\n").encode())


def write_demo_data(folder: Path, rows: int, files: int = 4, seed: int = 20261121) -> tuple[Path, Path]:
    """Generate the demo table as ``files`` Parquet parts plus its rich schema; reuse if present.

    Only files the demo wrote are ever replaced or deleted (see :func:`demo_owned`): the names about to be
    written are recorded before writing, so an interrupted demo leaves nothing privcube would not own."""
    from privcube.storage.generate import demo_schema, generate_demo_frame
    from privcube.storage.outputs import atomic_write_parquet

    owned = demo_owned(folder)  # refuses a folder of other files, before anything is written
    data_dir = folder / "data"
    schema_path = folder / "schema.yaml"
    marker = f"data/.rows-{rows}"
    keep = {"demo-config.yaml"}  # written next by run_demo
    if marker in owned and "schema.yaml" in owned:
        _write_demo_manifest(folder, owned | keep)
        return data_dir, schema_path
    new = {f"data/part-{i:03d}.parquet" for i in range(files)} | {marker, "schema.yaml"}
    data_dir.mkdir(parents=True, exist_ok=True)
    _write_demo_manifest(folder, owned | new | keep)  # claimed before written
    for rel in sorted(owned - keep - {"schema.yaml"}):  # the demo's earlier data and what killed writes left
        (folder / rel).unlink(missing_ok=True)
    frame = generate_demo_frame(rows, seed)
    for i, part in enumerate(np.array_split(np.arange(len(frame)), files)):
        atomic_write_parquet(data_dir / f"part-{i:03d}.parquet", frame.iloc[part])
    schema = demo_schema()
    atomic_write_text(schema_path, yaml.safe_dump(schema.to_dict(), sort_keys=False))
    (folder / marker).write_text("")
    _write_demo_manifest(folder, new | keep)
    return data_dir, schema_path


def run_demo(out: str | Path | None = None, rows: int = 200_000, seed: int | None = None,
             workers: int | None = None, quiet: bool = False) -> Any:
    """Generate (or reuse) demo data, run the job into a fresh run folder, print an error summary."""
    from privcube import api
    from privcube.config import load_config

    folder = Path(out or "privcube-demo").resolve()
    if rows < 1000:
        from privcube.core.errors import ConfigError

        raise ConfigError(f"--rows must be at least 1000, got {rows}")
    data_dir, schema_path = write_demo_data(folder, rows)
    cfg_dict = demo_config(data_dir, schema_path, workers)
    cfg_path = folder / "demo-config.yaml"
    atomic_write_text(cfg_path, yaml.safe_dump(cfg_dict, sort_keys=False))
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
    from privcube.core.oracle import ArrayOracle
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
