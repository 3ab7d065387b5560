"""``privcube run`` for mechanism ``relational``: read two tables (or one self-linked table) and their links,
synthesize, write the run.

Order of work (bad input leaves nothing behind): validate the config and budgets (no data read) → check
the output folder (and, with ``--resume``, the checkpoint's identity) → read each table (schema columns
encoded to codes; key / foreign-key columns kept aside as identifiers, never encoded) and the link
table → ``run_relational`` under one ledger of the composed budget, which checks links, degrees and
sizes before its first charge; the run directory appears with the first checkpoint
(``checkpoint/``, committed after each synthetic table and each link iteration, removed once the run
is complete) → write::

    synthetic/<table>.parquet   key column (synthetic ids 0..n-1), the FK column for one-to-many children,
                                attribute codes, decoded ``<attr>_label`` columns where the schema has labels
    synthetic/links.parquet     many-to-many only: (<left>.<key>, <right>.<key>) pairs; self-referential
                                links: (source, target) under the link file's two column names
    ledger.json                 budget/spent/charges of the composed run (convention in ``composition``)
    config.yaml, report.json    resolved config; DP report (non-private evaluation only on request)
    .complete                   last

Composition convention: the ledger's budget is (Σε_i, Σδ_i) over the tables and the links (basic
composition of (ε_i, δ_i)-DP parts; each part spends ρ_i = cdp_rho(ε_i, δ_i)), ρ = Σρ_i; ``spent``
reads each part's spent ρ at its own δ and adds, so a full run shows ε1+ε2+ε_rel and δ1+δ2+δ_rel; the
tighter zCDP reading (cdp_epsilon(Σρ, Σδ)) is recorded under ``composition.zcdp``. A self-referential
job has one table part: it shows ε_table + ε_rel (the table is synthesized once).

Resume: ``--resume`` continues from ``checkpoint/`` (same config and seed, checked before any data is
read): finished tables are reused, the ledger is replayed from the checkpoint (no budget spent twice),
the link loop restarts after the last committed iteration, output files already written are kept.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from privcube.errors import ConfigError, DataError, RunDirectoryError
from privcube.relational_config import COMPOSITION_NOTE, RelationalJob, TableSpec, load_relational_config


def _read_raw(path: str, columns: list[str], what: str) -> tuple[pd.DataFrame, bool]:
    """The given raw columns of a Parquet/CSV input as pandas (CSV: all text), and whether it was CSV."""
    import dask.dataframe as dd

    from privcube.storage.ingest import input_columns, read_csv

    fmt, target, available = input_columns(path, what=what, columns=columns)
    absent = [c for c in columns if c not in available]
    if absent:
        raise DataError(f"{what}: column {absent[0]!r} is missing from {path!r}; it has columns {available[:30]}")
    if fmt == "csv":
        raw = read_csv(target, usecols=columns, dtype={c: "string" for c in columns})
    else:
        raw = dd.read_parquet(target, columns=columns)
    return raw.compute().reset_index(drop=True), fmt == "csv"


def _ids(series: pd.Series) -> pd.Series:
    """Identifier values in a comparable form (numbers written as text become numbers)."""
    if pd.api.types.is_string_dtype(series.dtype) or series.dtype == object:
        num = pd.to_numeric(series, errors="coerce")
        if num.notna().sum() == series.notna().sum() and (num.dropna() == np.floor(num.dropna())).all():
            return num.astype("Int64") if series.isna().any() else num.astype(np.int64)
        return series.astype(object)
    return series


def _read_table(t: TableSpec, id_cols: list[str]) -> pd.DataFrame:
    """Encoded attribute codes (schema order) plus the raw identifier columns of one table."""
    from privcube.storage.ingest import encode_frame

    id_cols = list(dict.fromkeys(c for c in id_cols if c))
    raw, is_csv = _read_raw(t.path, [*t.schema.names, *id_cols], f"table {t.name!r}")
    try:
        codes = encode_frame(raw[list(t.schema.names)], t.schema, parse_text=is_csv)
    except DataError as e:
        raise DataError(f"table {t.name!r}: {e}") from None
    out = codes.astype(np.int64)
    for c in id_cols:
        out[c] = _ids(raw[c]).to_numpy()
    return out


def _link_pairs(job: RelationalJob) -> tuple[pd.DataFrame, list[str]]:
    lk = job.links
    assert lk.path is not None
    if lk.columns is not None:
        cols = list(lk.columns)
    else:
        from privcube.storage.ingest import input_columns

        _, _, available = input_columns(lk.path, what="links")
        dotted = [f"{lk.left}.{lk.left_col}", f"{lk.right}.{lk.right_col}"]
        if dotted[0] != dotted[1] and all(c in available for c in dotted):
            cols = dotted
        elif len(available) == 2:
            cols = available
        else:
            raise ConfigError(f"data.links.columns: the link file has columns {available[:30]}; name the two id "
                              "columns as columns: [left, right]" + (" (source, target)" if lk.left == lk.right else ""))
    raw, _ = _read_raw(lk.path, cols, "links")
    for c in cols:
        raw[c] = _ids(raw[c]).to_numpy()
        if raw[c].isna().any():
            r = int(np.flatnonzero(raw[c].isna().to_numpy())[0])
            raise DataError(f"links: column {c!r} is missing a value in row {r}")
    return raw, cols


def _harmonise(a: pd.Series, b: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Compare text ids with numeric ids as text."""
    na, nb = pd.api.types.is_numeric_dtype(a.dtype), pd.api.types.is_numeric_dtype(b.dtype)
    if na != nb:
        return a.astype(str), b.astype(str)
    return a, b


def _labelled(frame: pd.DataFrame, t: TableSpec, labels: bool) -> pd.DataFrame:
    """The synthetic table with decoded ``<attr>_label`` columns when the schema has labels."""
    from privcube.synth.sampler import add_labels

    if not labels or not t.has_labels:
        return frame
    return add_labels(frame, t.schema)


def _composed_ledger(ledger: Any, job: RelationalJob, noise: Any) -> dict[str, Any]:
    """ledger.json: budget (Σε, Σδ, Σρ), spent read per part and added, charges, the zCDP reading."""
    from privcube.privacy.zcdp import cdp_epsilon

    d = ledger.to_dict()
    d["noise"] = noise.to_dict()
    spent_rho = {n: 0.0 for n in job.parts}
    for c in d["charges"]:
        lab = c["label"]
        part = "links" if lab.startswith("links:") else lab.split(":")[1] if lab.startswith("table:") else None
        if part not in spent_rho:
            raise ConfigError(f"internal: charge {lab!r} belongs to no budget part")
        spent_rho[part] += float(c["rho"])
    parts = {}
    eps_spent, delta_spent = 0.0, 0.0
    for n, b in job.parts.items():
        r = min(spent_rho[n], b.rho)
        e = b.epsilon if r >= b.rho * (1 - 1e-9) else cdp_epsilon(r, b.delta) if r > 0 else 0.0
        dl = b.delta if r > 0 else 0.0
        parts[n] = {"budget": {"rho": b.rho, "epsilon": b.epsilon, "delta": b.delta},
                    "spent": {"rho": spent_rho[n], "epsilon": e, "delta": dl}}
        eps_spent += e
        delta_spent += dl
    total_rho = sum(spent_rho.values())
    d["budget"] = {"rho": job.total.rho, "epsilon": job.total.epsilon, "delta": job.total.delta}
    d["spent"] = {"rho": total_rho, "epsilon": eps_spent, "delta": delta_spent}
    d["composition"] = {
        "convention": COMPOSITION_NOTE,
        "parts": parts,
        "zcdp": {"rho": total_rho, "delta": job.total.delta,
                 "epsilon": cdp_epsilon(total_rho, job.total.delta) if total_rho > 0 else 0.0},
    }
    return d


def read_inputs(job: RelationalJob) -> tuple[dict[str, tuple[pd.DataFrame, Any]], dict[str, Any]]:
    """Read and encode the job's tables and links: ``(tables, links)`` as ``run_relational`` takes them.

    Every schema column is encoded to codes (bad values raise DataError naming table, column and
    value); key and foreign-key columns are kept as identifiers. Reads private data; writes nothing.
    """
    lk = job.links
    if lk.kind == "one_to_many":
        child, parent = job.tables[lk.left], job.tables[lk.right]
        cframe = _read_table(child, [child.key or "", lk.left_col])
        pframe = _read_table(parent, [lk.right_col])
        a, b = _harmonise(cframe[lk.left_col], pframe[lk.right_col])
        cframe[lk.left_col], pframe[lk.right_col] = a.to_numpy(), b.to_numpy()
        child_key = child.key or next(k for k in ("id", "row_id", "_id") if k not in child.schema and k != lk.left_col)
        tables = {child.name: (cframe, child.domain), parent.name: (pframe, parent.domain)}
        links: Any = {"from": f"{lk.left}.{lk.left_col}", "to": f"{lk.right}.{lk.right_col}", "child_key": child_key}
    else:
        left, right = job.tables[lk.left], job.tables[lk.right]
        lframe = _read_table(left, [lk.left_col])
        rframe = lframe if lk.left == lk.right else _read_table(right, [lk.right_col])
        pairs, cols = _link_pairs(job)
        for c, frame, key in ((cols[0], lframe, lk.left_col), (cols[1], rframe, lk.right_col)):
            a, b = _harmonise(pairs[c], frame[key])
            pairs[c], frame[key] = a.to_numpy(), b.to_numpy()
        tables = {left.name: (lframe, left.domain), right.name: (rframe, right.domain)}
        links = {"pairs": pairs, "left": f"{lk.left}.{lk.left_col}", "right": f"{lk.right}.{lk.right_col}",
                 "columns": cols}
    return tables, links


class _LazyCheckpoint:
    """The relational job's checkpoint (``<out>/checkpoint``, ``mechanisms.relational.checkpoint``).

    The run directory is created on the first save only, i.e. after every input check has passed and
    the first table has been synthesized: bad input still leaves nothing behind.
    """

    def __init__(self, rundir: Any, identity: Mapping[str, Any]) -> None:
        """Checkpoints of ``rundir`` that must match ``identity`` (mechanism, seed, config fingerprint)."""
        from privcube.mechanisms.relational.checkpoint import RelationalCheckpoint

        self.rundir = rundir
        self.ck = RelationalCheckpoint(Path(rundir.path) / CHECKPOINT_DIR, identity)

    def check_identity(self) -> int | None:
        """Round of the committed checkpoint (CheckpointError if it belongs to another run), None if none."""
        return self.ck.check_identity()

    def load(self) -> Any:
        """(round, {"meta", "arrays"}) of the committed checkpoint, or None."""
        return self.ck.load()

    def save(self, round: int, state: Mapping[str, Any]) -> None:
        """Create the run directory if needed, then commit ``state`` as checkpoint ``round``."""
        self.rundir.create()
        self.ck.save(round, state)


CHECKPOINT_DIR = "checkpoint"


def _fingerprint(job: RelationalJob) -> str:
    """Hash of what a resumed run must share with the original (data paths, schemas, links, budgets, params)."""
    import hashlib
    import json

    resolved = {k: v for k, v in job.resolved().items() if k != "cluster"}
    return hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_relational_job(raw: Mapping[str, Any], base: str | Path, out: str | Path, *, seed: int | None = None,
                       resume: bool = False, scheduler_address: str | None = None, scheduler_file: str | None = None,
                       workers: int | None = None, client: Any = None, quiet: bool = False) -> Any:
    """Run a relational job config and write the run directory ``out``; returns ``api.RunSummary``.

    The run owns ``out`` for its whole duration (``storage.outputs.run_lock``, taken before any data is
    read): a second run on the same folder is refused. See :func:`_run_relational_owned`."""
    from privcube.storage.outputs import run_lock

    with run_lock(out):
        return _run_relational_owned(raw, base, out, seed=seed, resume=resume, scheduler_address=scheduler_address,
                                     scheduler_file=scheduler_file, workers=workers, client=client, quiet=quiet)


def _run_relational_owned(raw: Mapping[str, Any], base: str | Path, out: str | Path, *, seed: int | None = None,
                          resume: bool = False, scheduler_address: str | None = None,
                          scheduler_file: str | None = None, workers: int | None = None, client: Any = None,
                          quiet: bool = False) -> Any:
    """The body of :func:`run_relational_job`, run while ``out`` is locked.

    Checkpoints (``out/checkpoint``) are committed after each synthetic table and after each
    link iteration. ``resume`` continues a killed run from its last checkpoint: the checkpoint must
    belong to the same config and seed (CheckpointError otherwise, before any data is read), finished
    tables are reused, the ledger is replayed (no budget is spent twice), output files already written
    are not rewritten, and a seeded resume writes exactly what the uninterrupted run writes. An
    unseeded run with partly written outputs but no checkpoint is refused (it would release anew).
    """
    from privcube.api import INPUT_ERRORS, RunSummary, _progress_callback, _set_quiet
    from privcube.graphs.cluster.handle import resolve_cluster
    from privcube.mechanisms.base import MechanismResult
    from privcube.mechanisms.relational.mechanism import run_relational
    from privcube.privacy.discrete import make_noise_source
    from privcube.privacy.ledger import PrivacyLedger
    from privcube.storage.outputs import RunDirectory, _safe

    t_start = time.perf_counter()
    job = load_relational_config(raw, base)
    rundir = RunDirectory(out)
    rundir.check_usable(resume)
    checkpoint = _LazyCheckpoint(rundir, {"mechanism": "relational", "seed": seed, "config": _fingerprint(job)})
    if resume:
        done = checkpoint.check_identity()  # refuse another run's checkpoint before reading any data
        if done is None and seed is None:
            partial = sorted(p.name for p in (*rundir.path.glob("synthetic/*"), rundir.path / "ledger.json")
                             if p.exists())
            if partial:
                raise RunDirectoryError(
                    f"--resume: {str(rundir.path)!r} holds partly written outputs ({len(partial)} files) of an "
                    "unseeded relational run without a checkpoint; rerunning would draw fresh noise and release "
                    "a second time. Choose a new --out")
    _set_quiet(quiet)
    lk = job.links
    timings: dict[str, float] = {}

    # ---- read (validates every value against the schemas; nothing written yet)
    t0 = time.perf_counter()
    tables, links = read_inputs(job)
    timings["read_s"] = time.perf_counter() - t0

    # ---- synthesize (bad links / degrees / budgets raise before the first charge and the first save;
    # the run directory appears with the first checkpoint)
    noise = make_noise_source(seed, job.noise_sampler)
    ledger = PrivacyLedger(job.total, noise=noise)
    cluster_ctx = contextlib.nullcontext(client) if client is not None else resolve_cluster(
        job.cluster, scheduler_address=scheduler_address, scheduler_file=scheduler_file, workers=workers)
    t0 = time.perf_counter()
    try:
        with cluster_ctx as cl:
            res = run_relational(tables, links, job.params, job.budgets, ledger, noise, cl,
                                 progress=_progress_callback(quiet), checkpoint=checkpoint, resume=resume)
    except INPUT_ERRORS:
        if not resume:
            rundir.discard_if_created()
        raise
    timings["mechanism_s"] = time.perf_counter() - t0

    # ---- write (on resume, files a killed attempt already wrote are kept as they are)
    t0 = time.perf_counter()
    labels = bool(job.output.get("labels", True))
    synthetic = {name: _labelled(frame, job.tables[name], labels) for name, frame in res.tables.items()}
    if lk.kind == "many_to_many":
        synthetic["links"] = res.links
    ledger_dict = _composed_ledger(ledger, job, noise)
    mech_report = dict(res.report)
    report = {
        "mechanism": "relational",
        "kind": lk.kind,
        "privacy_note": ("everything here is differentially private or public under the paper's bounded-DP model "
                         "(table sizes n1, n2 and the link count m); 'nonprivate_evaluation' appears only with "
                         "evaluate_nonprivate: true and is NOT private"),
        "cross_table_error": mech_report.get("dp_cross_error"),
        "sizes": {"rows_synthetic": {n: int(len(f)) for n, f in res.tables.items()},
                  "links_synthetic": int(len(res.links))},
        "noise": noise.to_dict(),
        "mechanism_report": mech_report,
    }
    if lk.left == lk.right:
        report["self_referential"] = mech_report.get("self_referential")

    def absent(name: str) -> bool:
        return not (resume and (rundir.path / name).exists())

    rundir.create()
    try:
        todo = {n: f for n, f in synthetic.items() if absent(f"synthetic/{_safe(n)}.parquet")}
        if todo:
            rundir.write_synthetic(todo)
        if absent("ledger.json"):
            rundir.write_json("ledger.json", ledger_dict)
        if absent("config.yaml"):
            rundir.write_config(job.resolved())
        timings["write_s"] = time.perf_counter() - t0
        timings["total_s"] = time.perf_counter() - t_start
        report["timings"] = timings
        if resume:
            report["resumed"] = True
        if absent("report.json"):
            rundir.write_json("report.json", report)
        rundir.restrict_permissions()
        rundir.mark_complete()
    except OSError as e:  # the checkpoint is kept: fix the cause, then --resume writes the outputs
        raise RunDirectoryError(f"cannot write the outputs of run directory {str(rundir.path)!r}: "
                                f"{e.strerror or e}; its last checkpoint is kept (rerun with --resume)") from None
    # a finished run is never resumed: its checkpoint (noisy, DP state only) is removed after .complete
    import shutil

    shutil.rmtree(rundir.path / CHECKPOINT_DIR, ignore_errors=True)
    result = MechanismResult([], report=report, synthetic=synthetic)
    return RunSummary(rundir.path, ledger_dict, report, result)


__all__ = ["read_inputs", "run_relational_job"]
