"""Python entry points used by the CLI: plan, run (the one driver of every job kind), exact (non-private)
marginals.

``run`` drives every job the same way (:mod:`privcube.jobs`: single-table, relational): load its config,
take the run folder (an OS lock held for the whole run), refuse before reading any data what cannot run
(a finished or foreign run folder, a resume with another run's checkpoint or unseeded partial outputs),
read the inputs, run under the cluster, write, mark complete. Bad input leaves no partial output behind.
The run directory is owner-only (umask 0o077 while writing); a finished run is never rewritten; a lost
dask worker makes the run continue from its last checkpoint in-process; write failures (disk full,
unwritable) are one-line ``RunDirectoryError``s that keep the last checkpoint. Writing the run folder is
``privcube.storage`` (outputs, answer_store, resume, checkpoint).
"""
from __future__ import annotations

import contextlib
import errno
import functools
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privcube.config import JobConfig, load_config
from privcube.core.errors import (
    ConfigError,
    DataError,
    DomainError,
    MemoryLimitError,
    RunDirectoryError,
    WorkloadError,
)
from privcube.jobs import JobEnv, JobKind, load_job
from privcube.jobs.single_table import add_plan_intervals, build_mechanism, plan_of
from privcube.mechanisms.base import PlanSummary
from privcube.census.report_section import RUN_SECTIONS as CENSUS_RUN
from privcube.relational.report_section import RUN_SECTIONS as RELATIONAL_RUN
from privcube.report.rundata import register_kind, register_planner
from privcube.result import Result, RunSummary

INPUT_ERRORS = (ConfigError, DataError, DomainError, MemoryLimitError, WorkloadError)
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
WORKER_LOSS_RETRIES = 3
_WORKER_LOSS_NAMES = {"KilledWorker", "FutureCancelledError", "CancelledError", "CommClosedError",
                      "FutureLostError"}


def plan(config: str | Path | Mapping[str, Any] | JobConfig, *,
         links: int | Mapping[str, int] | None = None) -> PlanSummary:
    """Data-independent plan of a batch mechanism: expected error and measurements; reads no data. A
    relational job's plan previews each table's measurements and each link's schedule (``links``: the
    public number of links, which sizes the links stage under ``max_noise``; one number for every link, or
    ``{link name: count}`` with the names of ``privacy.links``)."""
    if isinstance(config, (str, os.PathLike, Mapping)):  # anything else: load_config's one-line refusal
        from privcube.config import read_config_file
        from privcube.jobs import mechanism_name

        raw, folder = (dict(config), Path(".").resolve()) if isinstance(config, Mapping) else read_config_file(config)
        from privcube.census.spec import is_census

        if is_census(raw):  # tables by geographic level: the plan reads the public map, never the data
            from privcube.census.plan import plan_census
            from privcube.census.spec import parse_census

            if links is not None:
                raise ConfigError("plan: 'links' (the public number of links) applies to relational jobs only")
            raw.pop("resolved", None)
            return plan_census(parse_census(raw, folder, need_data=False))
        if mechanism_name(raw) == "relational":
            from privcube.relational.plan import plan_relational
            from privcube.relational.report_json import schema_warnings

            job = load_job(raw, base=folder).job  # type: ignore[attr-defined] - the relational job kind's config
            summary = plan_relational(job, links)
            summary.warnings = schema_warnings(job)  # the run's config warnings (report.json), known before it
            return summary
    if links is not None:
        raise ConfigError("plan: 'links' (the public number of links) applies to relational jobs only")
    cfg = config if isinstance(config, JobConfig) else load_config(config, need_data=False)
    summary = plan_of(cfg, build_mechanism(cfg))
    from privcube.jobs.single_table import config_warnings

    summary.warnings = config_warnings(cfg, summary.rmse)  # as a run warns at its end (and in report.json)
    if cfg.privacy_unit is not None:  # the plan's privacy figures are per row; the guarantee is per person
        summary.privacy = {**summary.privacy, "privacy_unit": cfg.privacy_unit.to_dict(),
                           "person_level": cfg.budget.to_dict()}
    from privcube.admission import plan_memory

    summary.memory = plan_memory(cfg, summary)  # peak memory on the config's cluster (see privcube.memory_plan)
    return summary


def _owns_run_folder(fn: Any) -> Any:
    """Hold the run folder's OS lock (``storage.outputs.run_lock``) for the whole call, taken before any
    data is read: a second run on the same ``out`` (another process) is refused in one line."""

    @functools.wraps(fn)
    def owning(config: Any, out: Any, *args: Any, **kwargs: Any) -> Any:
        from privcube.storage.outputs import check_out_location, run_lock

        config, out = _check_run_inputs(config, out, kwargs.get("data"))  # wrong kinds: one line, before the lock
        check_out_location(out, resume=bool(kwargs.get("resume")))  # the root, home, other files: before any lock
        with run_lock(out):
            return fn(config, out, *args, **kwargs)

    return owning


@_owns_run_folder
def run(config: str | Path | Mapping[str, Any] | JobConfig, out: str | Path, *, data: Any = None,
        seed: int | None = None, resume: bool = False, scheduler_address: str | None = None,
        scheduler_file: str | None = None, workers: int | None = None, client: Any = None, quiet: bool = False,
        overwrite: bool = False) -> Result:
    """Run the configured job (any kind: a mechanism over one table, or a relational job) and write the run
    directory ``out``.

    ``data`` stands in for the config's ``data.path``: a pandas or polars DataFrame, a Parquet/CSV path or
    a list of paths (the config still gives the domain or schema). Returns a :class:`privcube.Result`
    (``marginal(...)``, ``ledger``, ``synthetic()``; also ``out_dir``, ``report``, ``result``).

    The run directory is owner-only; a finished run is never rewritten unless ``overwrite`` (then it
    is moved aside and deleted only once the new run is complete, restored if the new run fails; a run
    folder holding files privcube did not write is refused, ``overwrite`` or not); ``resume`` continues
    from the last checkpoint of the same mechanism, seed and config, compared with what the run folder
    recorded when it was made, checkpoint or not (anything else is a ``CheckpointError``; a folder that is
    not a privcube run is refused). The config's ``output.answers`` / ``output.zarr`` receive copies of
    the answers / tensor store before the run is marked complete; a destination holding a copy privcube
    published is refused before any data is read unless ``overwrite`` or ``resume``, one holding anything
    else always, as is a destination on, inside or around the run folder or the input data and schema.
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ConfigError(f"--seed must be a non-negative integer, got {seed!r}")
    return run_job(load_job(config, data), out, seed=seed, resume=resume, scheduler_address=scheduler_address,
                   scheduler_file=scheduler_file, workers=workers, client=client, quiet=quiet, overwrite=overwrite)


def run_job(job: JobKind, out: str | Path, *, seed: int | None = None, resume: bool = False,
            scheduler_address: str | None = None, scheduler_file: str | None = None, workers: int | None = None,
            client: Any = None, quiet: bool = False, overwrite: bool = False) -> Result:
    """The driver: run a loaded job (see :mod:`privcube.jobs`) into run folder ``out``, which it owns for the
    whole call; everything that can be refused without data is refused before ``read_inputs``."""
    from privcube.storage.outputs import RunDirectory, check_out_location, owner_only, run_lock
    from privcube.storage.resume import check_resumable

    check_out_location(out, resume=resume)
    with run_lock(out):
        identity = {"mechanism": job.mechanism, "seed": seed, "config": job.fingerprint()}
        rundir = RunDirectory(out, identity)  # records identity in .started when it makes the folder
        replacing = overwrite and not resume and rundir.finished
        if replacing:
            rundir.check_replaceable()  # --overwrite: a finished run holding nothing privcube did not write
        else:
            rundir.check_usable(resume)
        job.check_outputs(rundir.path)  # the run folder and published copies apart from each other and the inputs
        job.check_before_data(replace=resume or overwrite)
        cluster = {"scheduler_address": scheduler_address, "scheduler_file": scheduler_file, "workers": workers}
        admitted = _admit(job, client, cluster)  # memory (and the cluster's size) before any data is read
        hold = _reserve_budget(job, out, identity, resume)  # privacy.budget_file: refused here if it does not fit
        opened: list[Any] = []
        with _budget_held(hold, lambda: opened[0] if opened else None), \
                rundir.replacing() if replacing else contextlib.nullcontext():
            checkpoint = job.open_checkpoint(rundir, identity)
            opened.append(checkpoint)
            if resume:
                check_resumable(rundir, checkpoint, seed)  # another seed/config is refused before any data is read
            env = JobEnv(rundir, seed=seed, resume=resume, quiet=quiet, checkpoint=checkpoint)
            inputs = job.read_inputs(env)  # checks values against the schema
            _set_quiet(quiet)
            with owner_only():  # every file and folder of the run directory is owner-only
                return Result.of(_drive(job, inputs, env, client, cluster, admitted, hold))


def _reserve_budget(job: JobKind, out: str | Path, identity: Mapping[str, Any], resume: bool) -> Any:
    """The run's reservation on the dataset budget its config names (``privacy.budget_file``; see
    ``privacy.dataset_budget``), or None; a run that does not fit is refused (BudgetError) before any data."""
    cfg = getattr(job, "cfg", None)
    if not isinstance(cfg, JobConfig):
        return None
    from privcube.dataset_budget import reserve

    return reserve(cfg, out, identity, resume=resume)


def _budget_held(hold: Any, checkpoint: Any) -> Any:
    """On failure, the reservation is released unless the run measured or committed a checkpoint."""
    if hold is None:
        return contextlib.nullcontext()
    from privcube.dataset_budget import held

    return held(hold, checkpoint)


def _admit(job: JobKind, client: Any, cluster: Mapping[str, Any]) -> bool:
    """Admission control before any data is read (``privcube.admission``): refuse in one line a LocalCluster
    larger than this machine holds, and a single-table job whose estimated peak memory does not fit where
    it will run. False when a remote cluster's workers must first be asked (then ``_drive`` checks)."""
    from privcube.admission import admit, admit_client

    cfg = getattr(job, "cfg", None)
    if client is not None:
        if isinstance(cfg, JobConfig):
            admit_client(cfg, client)
        return True
    from privcube.graphs.cluster.handle import resolve_cluster

    handle = resolve_cluster(job.cluster, **cluster)  # validates; refuses a cluster the machine cannot hold
    if not isinstance(cfg, JobConfig):  # relational jobs: no estimate
        return True
    return admit(cfg, {"type": handle.type, **handle.options}) is not None


def _drive(job: JobKind, inputs: Any, env: JobEnv, client: Any, cluster: Mapping[str, Any],
           admitted: bool = True, hold: Any = None) -> RunSummary:
    """Under the cluster: start, measure (retried from the checkpoint when a worker is lost), release; then
    write, publish, mark complete. A job not yet ``admitted`` (a remote cluster) is checked against the
    workers its scheduler reports once the client is connected, before the data is read."""
    from privcube.privacy.discrete import make_noise_source

    if client is not None:
        cluster_ctx: Any = contextlib.nullcontext(client)
    else:
        from privcube.graphs.cluster.handle import resolve_cluster

        cluster_ctx = resolve_cluster(job.cluster, **cluster)
    with cluster_ctx as cl:
        if not admitted:
            from privcube.admission import admit_client

            admit_client(job.cfg, cl)  # type: ignore[attr-defined] - only single-table jobs wait for this
        env.client = cl
        env.noise = make_noise_source(env.seed, job.noise_sampler)
        measured = _measure(job, job.start(inputs, env), env)
        if hold is not None:  # the dataset budget is charged what was spent (a fact once measured)
            from privcube.dataset_budget import spent_ledger

            hold.settle(spent_ledger(job.cfg, measured))  # type: ignore[attr-defined] - single-table jobs only
        job.release(measured, env)
    ledger, report, result = job.write(measured, env)
    rundir = env.rundir
    with rundir.writing("outputs"):
        rundir.restrict_permissions()
        job.publish(env)
        rundir.mark_complete()
    job.completed(env)
    return RunSummary(rundir.path, ledger, report, result)


def _measure(job: JobKind, source: Any, env: JobEnv) -> Any:
    """``job.measure`` under the run's checkpoint; bad input removes a run folder this run created (unless
    resuming), a failure that committed nothing leaves no empty folder, a committed checkpoint is kept."""
    from privcube.graphs.execution import run_context

    rundir, checkpoint, resume = env.rundir, env.checkpoint, env.resume
    t0 = time.perf_counter()
    try:
        for attempt in range(WORKER_LOSS_RETRIES + 1):
            env.context = run_context(env.client, checkpoint=checkpoint, progress=_progress_callback(env.quiet),
                                      resume=resume)
            try:
                measured = job.measure(source, env)
                break
            except Exception as e:  # noqa: BLE001 - only lost-worker failures are retried
                from privcube.storage.ingest import unreadable_input

                damaged = unreadable_input(e)
                if damaged is not None:
                    raise DataError(damaged) from None
                if env.client is None or attempt == WORKER_LOSS_RETRIES or not _is_worker_loss(e):
                    raise
                # Data held on a lost worker cannot always be recomputed (scattered state). Continue
                # from the last committed checkpoint: its ledger is replayed, nothing is charged twice,
                # and the same noise source redraws identical noise for any round that is repeated.
                resume = checkpoint is not None and checkpoint.exists()
                _warn(f"privcube: a dask worker was lost ({type(e).__name__}); continuing from "
                      + (f"checkpoint round {checkpoint.check_identity()}" if resume else "the start"))
    except INPUT_ERRORS:
        if not resume:
            rundir.discard_if_created()
        raise
    except OSError as e:
        if e.errno in DISK_ERRNOS:  # a checkpoint could not be written; the last committed one is kept
            from privcube.storage.outputs import write_error

            raise RunDirectoryError(write_error(rundir.path, e, "checkpoint")) from None
        rundir.discard_if_empty()
        raise
    except BaseException:  # any other failure, Ctrl-C and SIGTERM too: an empty folder is removed, a
        rundir.discard_if_empty()  # committed checkpoint kept
        raise
    env.timings["mechanism_s"] = time.perf_counter() - t0
    return measured


def _check_run_inputs(config: Any, out: Any, data: Any) -> tuple[Any, Path]:
    """One-line ConfigErrors for arguments of the wrong kind (by type only: they may hold data)."""
    from privcube.storage.formats.frame import is_frame

    if not isinstance(config, (str, os.PathLike, Mapping, JobConfig)):
        raise ConfigError(f"config: expected a file path, a mapping or a JobConfig, got a {type(config).__name__}")
    if not isinstance(out, (str, os.PathLike)) or not str(out).strip():
        raise ConfigError(f"out: expected a folder path (str or pathlib.Path), got "
                          f"{'an empty string' if isinstance(out, str) else 'a ' + type(out).__name__}")
    if data is not None and not is_frame(data) and not isinstance(data, (str, os.PathLike, list, tuple)):
        raise ConfigError(f"data: expected a pandas or polars DataFrame, a path or a list of paths, got a "
                          f"{type(data).__name__}")
    return config, Path(out)


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


def _set_quiet(quiet: bool) -> None:
    with contextlib.suppress(ImportError):
        from privcube.core import progress

        progress.set_quiet(quiet)


def _progress_callback(quiet: bool) -> Any:
    if quiet:
        return None
    from privcube.core.progress import FractionLine

    return FractionLine()  # ends its line at 100.0% and on progress.end_line()


register_planner(plan)  # ``privcube report`` recomputes a plan a run did not store through the driver
register_kind("census", CENSUS_RUN)  # a census run's plan note and levels section (privcube.census)
register_kind("relational", RELATIONAL_RUN)  # a relational run's plan note and links sections (privcube.relational)

__all__ = ["INPUT_ERRORS", "RunSummary", "add_plan_intervals", "build_mechanism", "exact_marginals", "plan", "run",
           "run_job"]
