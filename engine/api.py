"""Python entry points used by the CLI: plan, run, exact (non-private) marginals, demo.

``run`` validates everything it can before writing anything, reads the private data only through a
marginal oracle (one batched pass per request), and writes the run directory atomically, marking it
complete last. Bad input leaves no partial output behind. The run directory is owner-only (umask
0o077 while writing); a finished run is never rewritten; ``resume`` continues from the last checkpoint
of the same mechanism, seed and config (checked before any data is read); a lost dask worker makes the
run continue from its last checkpoint in-process; write failures (disk full, unwritable) are one-line
``RunDirectoryError``s that keep the last checkpoint.
"""
from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from privcube.config import JobConfig, load_config
from privcube.errors import (
    ConfigError,
    DataError,
    DomainError,
    MemoryLimitError,
    PrivcubeError,
    RunDirectoryError,
    WorkloadError,
)
from privcube.mechanisms import get_mechanism
from privcube.mechanisms.base import MechanismResult, PlanSummary

if TYPE_CHECKING:
    from privcube.result import Result

INPUT_ERRORS = (ConfigError, DataError, DomainError, MemoryLimitError, WorkloadError)


@dataclass
class RunSummary:
    """Where a run wrote its outputs and what it spent."""

    out_dir: Path
    ledger: dict[str, Any]
    report: dict[str, Any]
    result: MechanismResult


def build_mechanism(cfg: JobConfig) -> Any:
    """The configured mechanism, with its parameters checked and the run's noise sampler declared."""
    mech = get_mechanism(cfg.mechanism)(cfg.mechanism_params)
    mech.use_noise_sampler(cfg.noise_sampler)
    return mech


def plan(config: str | Path | Mapping[str, Any] | JobConfig) -> PlanSummary:
    """Data-independent plan of a batch mechanism: expected error and measurements; reads no data."""
    cfg = config if isinstance(config, JobConfig) else load_config(config, need_data=False)
    mech = build_mechanism(cfg)
    summary = mech.plan(cfg.workload, cfg.mechanism_budget)
    add_plan_intervals(summary, mech.plan_noise(cfg.workload, cfg.mechanism_budget),
                       cfg.output.get("ci_level", 0.95))
    if cfg.privacy_unit is not None:  # the plan's privacy figures are per row; the guarantee is per person
        summary.privacy = {**summary.privacy, "privacy_unit": cfg.privacy_unit.to_dict(),
                           "person_level": cfg.budget.to_dict()}
    return summary


def _owns_run_folder(fn: Any) -> Any:
    """Hold the run folder's OS lock (``storage.outputs.run_lock``) for the whole call, taken before any
    data is read: a second run on the same ``out`` (another process) is refused in one line."""
    import functools

    @functools.wraps(fn)
    def owning(config: Any, out: Any, *args: Any, **kwargs: Any) -> Any:
        from privcube.storage.outputs import run_lock

        config, out = _check_run_inputs(config, out, kwargs.get("data"))  # wrong kinds: one line, before the lock
        with run_lock(out):
            return fn(config, out, *args, **kwargs)

    return owning


def add_plan_intervals(summary: PlanSummary, noise: Sequence[Mapping[str, Any]], level: float) -> None:
    """Each plan group gets ``ci_half_width`` (the typical half-width of its answers' intervals at
    ``level``: at the group's RMS noise, or the mean exact width of Laplace combinations), ``ci_level`` and
    ``ci_method`` (``exact`` or a conservative ``bound``); data-independent, like the rest of the plan."""
    from privcube.mechanisms.base import GroupAnswer
    from privcube.privacy.intervals import half_widths

    for g, fields in zip(summary.groups, noise):
        rmse = g.get("rmse")
        if not isinstance(rmse, (int, float)):
            continue
        coefs = fields.get("noise_coefficients")
        n = 1 if coefs is None else int(np.asarray(coefs).shape[0])
        probe = GroupAnswer(None, np.zeros(n), np.full(n, float(rmse) ** 2), **dict(fields))  # type: ignore[arg-type]
        half, method = half_widths(probe, level)
        if half is not None:
            g.update(ci_level=level, ci_half_width=float(np.mean(half)), ci_method=method)


@_owns_run_folder
def run(config: str | Path | Mapping[str, Any] | JobConfig, out: str | Path, *, data: Any = None,
        seed: int | None = None, resume: bool = False, scheduler_address: str | None = None,
        scheduler_file: str | None = None, workers: int | None = None, client: Any = None, quiet: bool = False,
        overwrite: bool = False) -> Result:
    """Run the configured mechanism on the configured data and write the run directory ``out``.

    ``data`` stands in for the config's ``data.path``: a pandas or polars DataFrame, a Parquet/CSV path or
    a list of paths (the config still gives the domain or schema). Returns a :class:`privcube.Result`
    (``marginal(...)``, ``ledger``, ``synthetic()``; also ``out_dir``, ``report``, ``result``).

    The run directory is owner-only; a finished run is never rewritten unless ``overwrite`` (then it
    is moved aside and deleted only once the new run is complete, restored if the new run fails);
    ``resume`` continues from the last checkpoint of the same mechanism, seed and config (anything
    else is a ``CheckpointError``). The config's ``output.answers`` / ``output.zarr`` receive copies of
    the answers / tensor store before the run is marked complete; an occupied destination is refused
    before any data is read unless ``overwrite`` or ``resume``.
    """
    from privcube.result import Result
    from privcube.storage.outputs import RunDirectory

    if overwrite and not resume and RunDirectory(out).finished:
        import os
        import shutil

        target = Path(out)
        backup = target.with_name(f".{target.name}.replaced-{time.time_ns()}")
        os.replace(target, backup)
        try:
            summary = run(config, out, data=data, seed=seed, scheduler_address=scheduler_address,
                          scheduler_file=scheduler_file, workers=workers, client=client, quiet=quiet,
                          overwrite=True)
        except BaseException:
            if target.exists():
                shutil.rmtree(target, ignore_errors=True)
            os.replace(backup, target)
            raise
        shutil.rmtree(backup, ignore_errors=True)
        return summary
    from privcube.storage.outputs import RunDirectory, check_publish_targets, owner_only

    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ConfigError(f"--seed must be a non-negative integer, got {seed!r}")
    if not isinstance(config, JobConfig):
        raw, base = _raw_config(config)
        if _mechanism_name(raw) == "relational":
            from privcube.relational_job import run_relational_job

            if "privacy_unit" in raw:
                raise ConfigError("privacy_unit is not supported by mechanism 'relational' (its neighbours change "
                                  "one row and its links); remove privacy_unit or use a single-table mechanism")
            if data is not None:
                raise ConfigError("data=: a relational job reads its tables from data.tables; give their "
                                  "paths in the config")
            with owner_only():
                return Result.of(run_relational_job(raw, base, out, seed=seed, resume=resume,
                                                    scheduler_address=scheduler_address,
                                                    scheduler_file=scheduler_file, workers=workers,
                                                    client=client, quiet=quiet))
        config = load_config(_with_data(raw, data), base_dir=base)
    elif data is not None:
        config = _config_with_data(config, data)
    cfg = config
    if cfg.data_path is None and cfg.data_frame is None:
        raise ConfigError("data.path is missing: a run needs the data's location")
    rundir = RunDirectory(out)
    rundir.check_usable(resume)
    check_publish_targets(cfg.output, replace=resume or overwrite)  # output.answers / output.zarr copies
    mech = build_mechanism(cfg)
    if resume:
        _check_resumable(rundir, cfg, seed)  # refuse a different seed/config before reading any data
    table = _open_input(cfg)  # checks columns against the schema eagerly
    _set_quiet(quiet)
    with owner_only():  # every file and folder of the run directory is owner-only
        return _run_job(cfg, rundir, mech, table, seed=seed, resume=resume, scheduler_address=scheduler_address,
                        scheduler_file=scheduler_file, workers=workers, client=client, quiet=quiet)


def _run_job(cfg: JobConfig, rundir: Any, mech: Any, table: Any, *, seed: int | None, resume: bool,
             scheduler_address: str | None, scheduler_file: str | None, workers: int | None, client: Any,
             quiet: bool) -> RunSummary:
    """The body of :func:`run` once inputs are validated: measure, then write the run directory."""
    from privcube.graphs.cluster.handle import resolve_cluster
    from privcube.graphs.execution import run_context
    from privcube.graphs.marginals import DataOracle
    from privcube.privacy.ledger import PrivacyLedger
    from privcube.privacy.discrete import make_noise_source

    timings: dict[str, float] = {}
    t_start = time.perf_counter()
    cluster_ctx = contextlib.nullcontext(client) if client is not None else resolve_cluster(
        cfg.cluster, scheduler_address=scheduler_address, scheduler_file=scheduler_file, workers=workers)
    with cluster_ctx as cl:
        noise = make_noise_source(seed, cfg.noise_sampler)
        frame, weight = _bounded(table, cfg, noise).frame, None
        if cfg.compress:
            from privcube.storage.distinct import compress

            frame, weight = compress(frame), "count"
        oracle = DataOracle(frame, cfg.domain, weight=weight, client=cl)
        rundir.create()
        try:
            checkpoint = _open_checkpoint(rundir, cfg, seed)
            t0 = time.perf_counter()
            for attempt in range(WORKER_LOSS_RETRIES + 1):
                ledger = PrivacyLedger(cfg.mechanism_budget)  # per row; see privcube.privacy.unit
                ctx = run_context(cl, checkpoint=checkpoint, progress=_progress_callback(quiet), resume=resume)
                try:
                    result = mech.run(oracle, cfg.workload, cfg.mechanism_budget, ledger, noise, ctx)
                    break
                except Exception as e:  # noqa: BLE001 - only lost-worker failures are retried
                    if cl is None or attempt == WORKER_LOSS_RETRIES or not _is_worker_loss(e):
                        raise
                    # Data held on a lost worker cannot always be recomputed (scattered state). Continue
                    # from the last committed checkpoint: its ledger is replayed, nothing is charged twice,
                    # and the same noise source redraws identical noise for any round that is repeated.
                    resume = checkpoint is not None and checkpoint.exists()
                    _warn(f"privcube: a dask worker was lost ({type(e).__name__}); continuing from "
                          + (f"checkpoint round {checkpoint.check_identity()}" if resume else "the start"))
            timings["mechanism_s"] = time.perf_counter() - t0
        except INPUT_ERRORS:
            if not resume:
                rundir.discard_if_created()
            raise
        except OSError as e:
            if e.errno in _DISK_ERRNOS:  # a checkpoint could not be written; the last committed one is kept
                raise RunDirectoryError(_write_error(rundir.path, e, "checkpoint")) from None
            rundir.discard_if_empty()
            raise
        except BaseException:  # any other failure, Ctrl-C and SIGTERM too: an empty folder is removed, a
            rundir.discard_if_empty()  # committed checkpoint kept
            raise
        if cfg.privacy_unit is not None:  # the guarantee is per person: every charge rescaled (ρ K², ε K)
            ledger = cfg.privacy_unit.person_ledger(ledger, cfg.budget)
        ledger_dict = ledger.to_dict()
        ledger_dict["noise"] = noise.to_dict()
        if cfg.privacy_unit is not None:
            ledger_dict["privacy_unit"] = cfg.privacy_unit.to_dict()
        try:
            rundir.write_json("ledger.json", ledger_dict)  # first: what was spent is a fact once measured
        except OSError as e:
            raise RunDirectoryError(_write_error(rundir.path, e, "ledger")) from None
        t1 = time.perf_counter()
        post = _postprocess(cfg, mech, result, cl)  # `published`: non-negative, consistent; spends nothing
        timings["postprocess_s"] = time.perf_counter() - t1
        records = None
        if cfg.synthesize:  # post-processing of the answers, while the cluster is up (chunks run there)
            t1 = time.perf_counter()
            try:
                records = _write_records(cfg, result, rundir.path, noise, cl, keep_existing=resume)
            except OSError as e:
                raise RunDirectoryError(_write_error(rundir.path, e, "synthetic records")) from None
            timings["synthesize_s"] = time.perf_counter() - t1

    from privcube.storage.outputs import publish_outputs

    t0 = time.perf_counter()
    try:
        planned = mech.plan(cfg.workload, cfg.mechanism_budget)
        add_plan_intervals(planned, mech.plan_noise(cfg.workload, cfg.mechanism_budget),
                           cfg.output.get("ci_level", 0.95))
        expected = planned.to_dict()
    except PrivcubeError:
        expected = None
    try:
        rundir.write_config(cfg.resolved())
        rundir.write_answers(result.answers, cfg.domain, cfg.schema, labels=cfg.output.get("labels", True),
                             keep_existing=resume, ci_level=cfg.output.get("ci_level", 0.95))
        if result.synthetic:
            rundir.write_synthetic(result.synthetic)
        _write_tensors(rundir.store_path, cfg, result, keep_existing=resume)
    except OSError as e:
        raise RunDirectoryError(_write_error(rundir.path, e, "outputs")) from None
    timings["write_s"] = time.perf_counter() - t0
    timings["total_s"] = time.perf_counter() - t_start
    report = {
        "mechanism": cfg.mechanism,
        "timings": timings,
        "sizes": {
            "attributes": len(cfg.domain),
            "domain_cells": float(cfg.domain.size()),
            "groups": len(cfg.workload),
            "answers": int(sum(np.asarray(a.estimate).size for a in result.answers)),
            "partitions": int(table.npartitions),
        },
        "expected_error": expected,
        "noise": noise.to_dict(),
        **({"privacy_unit": cfg.privacy_unit.to_dict()} if cfg.privacy_unit is not None else {}),
        "mechanism_report": result.report,
        **({"postprocess": post} if post is not None else {}),
        **({"synthetic_records": records} if records is not None else {}),
    }
    try:
        rundir.write_json("report.json", report)
        rundir.restrict_permissions()
        publish_outputs(rundir.path, cfg.output)
        rundir.mark_complete()
    except OSError as e:
        raise RunDirectoryError(_write_error(rundir.path, e, "outputs")) from None
    from privcube.result import Result

    return Result(rundir.path, ledger_dict, report, result)


def _check_run_inputs(config: Any, out: Any, data: Any) -> tuple[Any, Path]:
    """One-line ConfigErrors for arguments of the wrong kind (by type only: they may hold data)."""
    from privcube.config import is_frame

    if not isinstance(config, (str, os.PathLike, Mapping, JobConfig)):
        raise ConfigError(f"config: expected a file path, a mapping or a JobConfig, got a {type(config).__name__}")
    if not isinstance(out, (str, os.PathLike)) or not str(out).strip():
        raise ConfigError(f"out: expected a folder path (str or pathlib.Path), got "
                          f"{'an empty string' if isinstance(out, str) else 'a ' + type(out).__name__}")
    if data is not None and not is_frame(data) and not isinstance(data, (str, os.PathLike, list, tuple)):
        raise ConfigError(f"data: expected a pandas or polars DataFrame, a path or a list of paths, got a "
                          f"{type(data).__name__}")
    return config, Path(out)


def _with_data(raw: Mapping[str, Any], data: Any) -> dict[str, Any]:
    """The config mapping with ``data`` (frame, path or paths) standing in for ``data.path``."""
    if data is None:
        return dict(raw)
    section = raw.get("data")
    section = {k: v for k, v in section.items() if k != "path"} if isinstance(section, Mapping) else {}
    return {**raw, "data": {**section, "path": data}}


def _config_with_data(cfg: JobConfig, data: Any) -> JobConfig:
    """A validated JobConfig whose data location is replaced by ``data``."""
    import dataclasses

    from privcube.config import data_paths, is_frame

    if is_frame(data):
        return dataclasses.replace(cfg, data_path=None, data_frame=data)
    return dataclasses.replace(cfg, data_path=data_paths(data, Path(".").resolve()), data_frame=None)


def _bounded(table: Any, cfg: JobConfig, noise: Any) -> Any:
    """Under a privacy unit, the table truncated to ``max_rows`` rows per person (keyed by the run's noise
    source, so a seeded run repeats it); otherwise the table itself."""
    if cfg.privacy_unit is None:
        return table
    from privcube.storage.contribution import hash_key_from, truncate_per_id

    return truncate_per_id(table, cfg.privacy_unit.max_rows, hash_key_from(noise))


def _open_input(cfg: JobConfig) -> Any:
    """The run's EncodedTable: the DataFrame given in Python, else the files at ``data.path`` (with the
    person id column too under a privacy unit; truncated once the run's noise key exists)."""
    if cfg.privacy_unit is not None:
        from privcube.storage.contribution import open_with_id

        return open_with_id(cfg.data_path, cfg.schema, cfg.privacy_unit.id, frame=cfg.data_frame)
    if cfg.data_frame is not None:
        from privcube.storage.frames import open_frame

        return open_frame(cfg.data_frame, cfg.schema)
    from privcube.storage.ingest import open_table

    return open_table(cfg.data_path, cfg.schema)


def _postprocess(cfg: JobConfig, mech: Any, result: MechanismResult, client: Any = None) -> dict[str, Any] | None:
    """Set ``published`` on every marginal answer (``postprocess``; None when off or no marginal group).
    Each cell counts with its marginal's variance (measured better than ResidualPlanner's per-residual σ²
    metric on adult15 and nltcs: benchmarks/postprocess_candidates.py); above POSTPROCESS_TASK_CELLS cells
    the per-clique chunks run as cluster tasks. Post-processing: no charge."""
    from privcube.postprocess import marginal_answers, publish
    from privcube.postprocess.consistency import serial_map

    groups = marginal_answers(result.answers)
    if cfg.postprocess is None or not groups:
        return None
    mapper = serial_map
    if client is not None and sum(np.size(a.estimate) for a in groups) > POSTPROCESS_TASK_CELLS:
        from privcube.graphs.scatter import map_tasks

        def mapper(fn: Any, items: Any) -> list[Any]:
            return map_tasks(fn, items, client=client, label="postprocess")
    return publish(result.answers, cfg.domain, cfg.postprocess, map=mapper)


POSTPROCESS_TASK_CELLS = 20_000_000  # below this, reconstruction runs in process (seconds)
_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
WORKER_LOSS_RETRIES = 3
_WORKER_LOSS_NAMES = {"KilledWorker", "FutureCancelledError", "CancelledError", "CommClosedError",
                      "FutureLostError"}


def _is_worker_loss(e: BaseException) -> bool:
    """Whether ``e`` (or its cause) is dask reporting lost workers or lost results (no distributed import)."""
    seen = 0
    while e is not None and seen < 5:
        for cls in type(e).__mro__:
            if cls.__name__ in _WORKER_LOSS_NAMES and cls.__module__.split(".")[0] in (
                    "distributed", "asyncio", "concurrent"):
                return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _warn(line: str) -> None:
    import sys

    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _write_error(path: Path, e: OSError, what: str) -> str:
    """One line: which run directory could not be written, why, and what is kept."""
    reason = e.strerror or str(e) or type(e).__name__
    where = f" ({e.filename})" if getattr(e, "filename", None) else ""
    msg = (f"cannot write the {what} of run directory {str(path)!r}: {reason}{where}; the run is not marked "
           "complete and its last checkpoint is kept (fix the cause, then rerun with --resume)")
    return " ".join(msg.split())


def _config_fingerprint(cfg: JobConfig) -> str:
    """Hash of what a resumed run must share with the original: data, domain, workload, privacy, mechanism."""
    import hashlib
    import json

    raw = cfg.raw if isinstance(cfg.raw, Mapping) else {}
    key = {
        "data": str(cfg.data_path) if cfg.data_frame is None else "<DataFrame>", "compress": cfg.compress,
        "noise_sampler": cfg.noise_sampler,
        "domain": cfg.domain.to_dict(), "budget": cfg.budget.to_dict(),
        "mechanism": cfg.mechanism, "params": cfg.mechanism_params, "workload": raw.get("workload"),
    }
    if cfg.privacy_unit is not None:
        key["privacy_unit"] = [cfg.privacy_unit.id, cfg.privacy_unit.max_rows]
    text = json.dumps(key, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _check_resumable(rundir: Any, cfg: JobConfig, seed: int | None) -> None:
    """--resume: a committed checkpoint must belong to this mechanism, seed and config (CheckpointError).

    Without a checkpoint the mechanism starts again. That is safe when nothing was released or the run
    is seeded (identical noise); an unseeded run whose outputs were partly written would release a
    second, independent measurement, so it is refused.
    """
    checkpoint = _open_checkpoint(rundir, cfg, seed)
    if checkpoint is not None and checkpoint.exists():
        checkpoint.check_identity()
        return
    if seed is None:
        partial = sorted(p.name for p in (*rundir.path.glob("answers/*.parquet"), *rundir.path.glob("synthetic/*"),
                                          rundir.path / "ledger.json") if p.exists())
        if partial:
            raise RunDirectoryError(
                f"--resume: {str(rundir.path)!r} holds partly written outputs ({len(partial)} files) of an "
                "unseeded run without a checkpoint; rerunning would draw fresh noise and release a second "
                "measurement. Choose a new --out")


def _raw_config(config: str | Path | Mapping[str, Any]) -> tuple[dict[str, Any], Path]:
    """The config as a mapping plus the folder its relative paths are resolved against."""
    from privcube.config import read_config_file

    if isinstance(config, Mapping):
        return dict(config), Path(".").resolve()
    return read_config_file(config)


def _mechanism_name(raw: Mapping[str, Any]) -> Any:
    mech = raw.get("mechanism")
    return mech.get("name") if isinstance(mech, Mapping) else mech


def _write_records(cfg: JobConfig, result: MechanismResult, run_path: Path, noise: Any, client: Any,
                   keep_existing: bool = False) -> dict[str, Any]:
    """``synthesize``: fit the estimator to the run's noisy marginal answers and write the sampled records
    to ``synthetic/records/`` (Parquet, one file per chunk, codes plus schema labels), chunks sampled in
    parallel (on the cluster when there is one). Post-processing only: nothing is charged. Written into a
    hidden folder and renamed into place, so a folder that exists is complete (kept on resume)."""
    import shutil
    import uuid

    from privcube.graphs.execution import run_context
    from privcube.synth.estimator import get_estimator
    from privcube.synth.records import write_records
    from privcube.synth.sampler import marginals_from_answers, measured_marginals

    spec = cfg.synthesize or {}
    trace = (result.report or {}).get("trace")
    if trace:  # adaptive run: the measured marginals (its public selection trace) and the 1-way margins
        est, var = measured_marginals(result.answers, cfg.domain, [r.get("clique") or [] for r in trace])
    else:
        est, var = marginals_from_answers(result.answers, cfg.domain)
    total = float(np.mean([float(np.sum(m)) for m in est.values()]))  # noisy N: each marginal sums to it
    rows = max(0, int(round(total))) if spec["rows"] == "auto" else int(spec["rows"])
    folder = run_path / "synthetic" / "records"
    info = {"path": "synthetic/records", "rows": rows, "estimator": spec["estimator"],
            "from_marginals": sorted("-".join(c) for c in est)}
    if keep_existing and folder.exists():
        info["files"] = len(list(folder.glob("*.parquet")))
        return info
    options = {"max_cells": spec["max_cells"]} if spec["estimator"] == "junction-tree" else {}
    estimator = get_estimator(spec["estimator"], **options)
    model = estimator.fit(est, cfg.domain, total=max(total, 1.0), variances=var or None)
    info.update({"model": getattr(estimator, "info", {}), "budget_spent": 0.0})
    staging = folder.parent / f".records-{uuid.uuid4().hex[:8]}"
    try:
        info["files"] = write_records(model, cfg.domain, rows, staging, noise=noise, schema=cfg.schema,
                                      key=("synthesize", "records"), chunk_size=spec["chunk_size"],
                                      map=run_context(client).map)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return info


def _write_tensors(path: Path, cfg: JobConfig, result: MechanismResult, keep_existing: bool = False) -> None:
    """Persist the private (noisy) answer tensors and the mechanism's own arrays in ``store.zarr``;
    ``keep_existing`` (resume) leaves arrays an interrupted attempt already committed (renamed into place).

    Every query group's answers are stored as 1-D arrays ``group-NNNN-<label>.estimate`` and ``.variance``
    (query order and name of ``answers/group-NNNN-<label>.parquet``; attrs name the group's attributes,
    query types and weight); marginal groups also as an ``estimate`` tensor shaped like the marginal, and
    with post-processing as ``group-...published`` and a ``published`` tensor."""
    from privcube.storage.outputs import answer_file_stem
    from privcube.storage.zarr_store import TensorStore, marginal_name

    store = TensorStore(path, domain=cfg.domain)
    done = set(store.names()) if keep_existing else set()
    writes: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []  # (function, args, kwargs), all independent
    for i, ans in enumerate(result.answers):
        g = ans.group
        if g.is_marginal and g.attributes:
            shape = cfg.domain.shape_of(g.attributes)
            for kind, values in (("estimate", ans.estimate), ("published", ans.published)):
                if values is not None and marginal_name(g.attributes, kind) not in done:
                    writes.append((store.write_marginal, (g.attributes, np.asarray(values, dtype=float).reshape(shape),
                                                          cfg.domain), {"kind": kind}))
        stem = answer_file_stem(i, g)
        meta = {"group": i, "group_attributes": list(g.attributes), "queries": g.query_types(), "weight": g.weight,
                "answers_file": f"answers/{stem}.parquet"}
        est = np.asarray(ans.estimate, dtype=float).ravel()
        for quantity, values in (("estimate", est), ("variance", ans.variance), ("published", ans.published)):
            if values is not None and f"{stem}.{quantity}" not in done:
                writes.append((store.write, (f"{stem}.{quantity}", np.broadcast_to(
                    np.asarray(values, dtype=float).ravel(), est.shape), {**meta, "quantity": quantity}), {}))
    for name, arr in result.tensors.items():
        if name not in done:
            writes.append((store.write, (name, np.asarray(arr)), {"attrs": result.tensor_attrs.get(name)}))
    _run_writes(writes)
    store.cleanup()  # temporaries left by an interrupted earlier attempt (resume)


def _run_writes(writes: Sequence[tuple[Any, tuple[Any, ...], dict[str, Any]]]) -> None:
    """Run independent array writes on a few threads: each zarr array costs a few file-system round
    trips (create, write, rename), so hundreds of small arrays are bound by latency, not by bytes
    (AIM+GReM on nltcs: 3,548 arrays, 6.4 s one by one). The first failure is raised."""
    from concurrent.futures import ThreadPoolExecutor

    if len(writes) < 16:
        for fn, args, kwargs in writes:
            fn(*args, **kwargs)
        return
    with ThreadPoolExecutor(max_workers=8) as pool:
        for f in [pool.submit(fn, *args, **kwargs) for fn, args, kwargs in writes]:
            f.result()


def exact_marginals(data: str, schema: Any, attrs: Sequence[str], *, client: Any = None) -> np.ndarray:
    """EXACT, NON-PRIVATE marginal counts of ``attrs`` (axes in the order given); for testing/evaluation."""
    from privcube.graphs.marginals import compute_marginals
    from privcube.storage.ingest import open_table
    from privcube.storage.schema import load_schema

    schema = load_schema(schema) if not hasattr(schema, "domain") else schema
    attrs = list(attrs)
    if not attrs:
        raise WorkloadError("--attrs: give at least one attribute")
    for a in attrs:
        if a not in schema.domain:
            raise WorkloadError(f"--attrs: unknown attribute {a!r}; the schema has {list(schema.domain)}")
    if len(set(attrs)) != len(attrs):
        raise WorkloadError(f"--attrs repeats an attribute: {attrs}")
    table = open_table(data, schema, columns=attrs)
    clique = schema.domain.canonical(attrs)
    mu = compute_marginals(table.frame, table.domain, [clique], client=client)[clique]
    return np.transpose(np.asarray(mu), [clique.index(a) for a in attrs])


def _open_checkpoint(rundir: Any, cfg: JobConfig, seed: int | None) -> Any:
    try:
        from privcube.storage.checkpoint import RunCheckpoint
    except ImportError:
        return None
    return RunCheckpoint(rundir.store_path,
                         identity={"mechanism": cfg.mechanism, "seed": seed, "config": _config_fingerprint(cfg)})


def _set_quiet(quiet: bool) -> None:
    with contextlib.suppress(ImportError):
        from privcube.graphs import progress

        progress.set_quiet(quiet)


def _progress_callback(quiet: bool) -> Any:
    if quiet:
        return None
    import sys

    def report(label: str, fraction: float) -> None:
        sys.stderr.write(f"\r{label}: {100 * fraction:5.1f}%" + ("\n" if fraction >= 1 else ""))
        sys.stderr.flush()

    return report
