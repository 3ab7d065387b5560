"""HPC batch systems: the config's ``cluster: {type: slurm|pbs, ...}`` section as a dask-jobqueue cluster.

``jobqueue_cluster_from_spec(spec)`` starts a ``SLURMCluster`` / ``PBSCluster`` (the scheduler runs
in this process; each batch job runs ``processes`` workers) and submits ``jobs`` jobs, or adapts
between ``adapt.minimum_jobs`` and ``adapt.maximum_jobs``. ``job_script(spec)`` is the batch script
one worker job would run, without starting anything. For a whole run inside one allocation, use
``deploy/hpc/privcube-slurm.sbatch`` (scheduler file) instead.

Workers start with ``python -m distributed.cli.dask_worker`` (dask-jobqueue's default): that module
is the implementation behind ``dask worker`` and still exists in distributed >= 2026.6, unlike the
removed ``dask-worker`` script.

Spec keys (``cluster.<key>``): ``cores`` and ``memory`` per job (required unless set in the
``jobqueue.<type>`` dask config), ``processes`` (worker processes per job), ``jobs`` (default 1),
``adapt`` ({minimum_jobs, maximum_jobs}), ``queue``, ``account``, ``walltime``, ``job_name``,
``job_extra_directives``, ``job_script_prologue``, ``job_directives_skip``, ``worker_extra_args``,
``local_directory``, ``log_directory``, ``interface``, ``python``, ``death_timeout``,
``scheduler_options``, ``shared_temp_directory``, ``startup_timeout``; SLURM only ``job_cpu``,
``job_mem``; PBS only ``resource_spec``; and, as for every cluster type, ``security`` and
``allow_insecure``.

What privcube adds to dask-jobqueue's defaults (``worker_job_kwargs``, shared by the started cluster
and by the inspector ``python -m privcube.graphs.cluster.hpc CONFIG``, which therefore prints the script that
is really submitted, up to the scheduler address and the names of temporary certificate files):

- every worker job works in a private folder ``privcube-dask-JOBID-XXXXXXXX`` (mode 0o700, made by
  ``mktemp -d`` under ``umask 077``) under ``local_directory`` (its parent; default ``$TMPDIR`` or
  ``/tmp``), and removes it when the job ends, also when it is cancelled (``scancel``/``qdel``);
- the scheduler's dashboard listens on 127.0.0.1:8787 and the workers' on 127.0.0.1 unless
  ``scheduler_options.dashboard_address`` / a ``--dashboard-address``/``--no-dashboard`` worker
  argument says otherwise;
- jobs are submitted synchronously: a refused submission (``sbatch``/``qsub`` exits non-zero) is a
  ``ConfigError`` carrying the batch system's own message on one line; then privcube waits for the
  first worker (so that data passes are sized to the workers' memory), at most ``startup_timeout``
  seconds (default 3600: jobs may queue), and fails as soon as every submitted Slurm job has ended
  without a worker joining. ``adapt`` keeps at least one job for that reason.

TLS (``security`` in the cluster section, see ``privcube.graphs.cluster.security``): the scheduler listens on
``tls://`` and every worker job gets ``--protocol tls:// --tls-ca-file ... --tls-cert ... --tls-key
...``. With ``tls: auto`` dask-jobqueue writes the temporary certificate and key (mode 0o600) into
``shared_temp_directory``, which must be a private folder every compute node can read (default: the
current folder, with a warning); with ``tls: {ca_file, cert, key}`` those files must be readable at the
same paths on the compute nodes. A plain-text scheduler off the loopback interface is refused (unless
``allow_insecure: true``) before any batch job is submitted.
"""
from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from privcube.core.errors import ConfigError
from privcube.core.params import Param
from privcube.graphs.cluster.kind import ClusterKind

HPC_TYPES = ("slurm", "pbs")
DEFAULT_STARTUP_TIMEOUT = 3600.0
#: the options of both batch systems (``cluster.<key>``)
HPC_OPTIONS: dict[str, Param] = {
    "cores": Param(None, "int >= 1", "cores per batch job (required unless set in the jobqueue.<type> dask config)"),
    "memory": Param(None, "size such as 32GB", "memory per batch job (required unless set in the jobqueue.<type> "
                                               "dask config)"),
    "processes": Param(None, "int >= 1", "worker processes per job (at most cores; default: dask-jobqueue's)"),
    "jobs": Param(1, "int >= 0", "batch jobs submitted (a fixed size; --workers sets it)"),
    "adapt": Param(None, "{minimum_jobs, maximum_jobs}", "adapt the job count between these bounds instead of jobs"),
    "queue": Param(None, "text", "the queue (Slurm partition) the jobs go to"),
    "account": Param(None, "text", "the account the jobs are charged to"),
    "walltime": Param(None, "time such as '02:00:00'", "each job's walltime (quote it in YAML)"),
    "job_name": Param(None, "text", "the jobs' name"),
    "job_extra_directives": Param(None, "list of text", "extra #SBATCH / #PBS directives"),
    "job_script_prologue": Param(None, "list of text", "shell lines a job runs before its workers start"),
    "job_directives_skip": Param(None, "list of text", "directives dask-jobqueue would write that are left out"),
    "worker_extra_args": Param(None, "list of text", "extra arguments of each worker"),
    "local_directory": Param(None, "path on the nodes", "parent of each job's private work folder (default: "
                                                        "$TMPDIR or /tmp)"),
    "log_directory": Param(None, "path", "where the jobs write their output"),
    "interface": Param(None, "network interface", "the interface workers and scheduler talk over, e.g. ib0"),
    "python": Param(None, "path", "the Python that runs the workers on the nodes"),
    "death_timeout": Param(None, "seconds", "a worker that cannot reach the scheduler this long exits"),
    "scheduler_options": Param(None, "{host, port, interface, dashboard_address, protocol}",
                               "options of the scheduler (it runs in this process)"),
    "shared_temp_directory": Param(None, "path", "a private folder every node reads, for tls: auto's temporary "
                                                 "certificates (default: the current folder)"),
    "startup_timeout": Param(DEFAULT_STARTUP_TIMEOUT, "seconds", "how long to wait for the first worker (jobs "
                                                                 "may queue)"),
}
SLURM_OPTIONS = {"job_cpu": Param(None, "int >= 1", "CPUs requested per job"),
                 "job_mem": Param(None, "size", "memory requested per job (default: memory)")}
PBS_OPTIONS = {"resource_spec": Param(None, "text", "the job's resource request, e.g. select=1:ncpus=8:mem=32GB")}
COMMON_KEYS = frozenset({"type", *HPC_OPTIONS})
SECURITY_KEYS = frozenset({"security", "allow_insecure"})  # read by privcube.graphs.cluster.security
TYPE_KEYS = {"slurm": frozenset(SLURM_OPTIONS), "pbs": frozenset(PBS_OPTIONS)}
SCHEDULER_OPTION_KEYS = frozenset({"host", "port", "interface", "dashboard_address", "protocol"})
ADAPT_KEYS = frozenset({"minimum_jobs", "maximum_jobs"})
PLACEHOLDER_ADDRESS = "tcp://<scheduler-address>:8786"
TLS_PLACEHOLDER_ADDRESS = "tls://<scheduler-address>:8786"
SCHEDULER_DASHBOARD = "127.0.0.1:8787"
WORKER_DASHBOARD_ARGS = ["--dashboard-address", "127.0.0.1:0"]
_DASHBOARD_FLAGS = ("--dashboard-address", "--dashboard", "--no-dashboard")
LOCAL_DIR_VAR = "PRIVCUBE_LOCAL_DIR"
_JOB_ID = "${SLURM_JOB_ID:-${PBS_JOBID:-$$}}"
_WALLTIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")
_STR_KEYS = ("queue", "account", "job_name", "local_directory", "log_directory", "interface", "python",
             "job_mem", "resource_spec", "shared_temp_directory")
_LIST_KEYS = ("job_extra_directives", "job_script_prologue", "job_directives_skip", "worker_extra_args")


def _fail(kind: str, key: str, msg: str) -> ConfigError:
    """A ConfigError naming ``cluster.<key>``."""
    return ConfigError(f"cluster.{key} ({kind}): {msg}")


def _pos_int(kind: str, key: str, value: Any, minimum: int = 1) -> int:
    """An integer option of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(kind, key, f"expected an integer >= {minimum}, got {value!r}")
    return value


def _seconds(kind: str, key: str, value: Any) -> int | float:
    """A duration option in seconds (> 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise _fail(kind, key, f"expected seconds > 0, got {value!r}")
    return value


def validate_hpc_spec(spec: Mapping[str, Any] | None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Check a slurm/pbs section: ``(type, jobqueue keyword arguments, scaling)``; errors name the key.

    ``scaling`` is ``{"jobs": n}`` or ``{"adapt": {"minimum_jobs": a, "maximum_jobs": b}}``.
    """
    import dask
    from dask.utils import parse_bytes

    if not isinstance(spec, Mapping):
        raise ConfigError(f"cluster: expected a mapping such as {{type: slurm, cores: 8, memory: 32GB}}, "
                          f"got {spec!r}")
    kind = spec.get("type")
    if kind not in HPC_TYPES:
        raise ConfigError(f"cluster.type: expected one of {list(HPC_TYPES)}, got {kind!r}")
    allowed = COMMON_KEYS | TYPE_KEYS[kind]
    unknown = sorted(set(spec) - allowed - SECURITY_KEYS)
    if unknown:
        raise ConfigError(f"cluster: unknown key {unknown[0]!r} for cluster type {kind!r}; "
                          f"allowed: {sorted(allowed)}")
    kw: dict[str, Any] = {}
    for key in ("cores", "memory"):
        if spec.get(key) is None and dask.config.get(f"jobqueue.{kind}.{key}", None) is None:
            raise _fail(kind, key, f"missing: give the {key} per batch job (e.g. cores: 8, memory: 32GB)")
    if spec.get("cores") is not None:
        kw["cores"] = _pos_int(kind, "cores", spec["cores"])
    if spec.get("memory") is not None:
        mem = spec["memory"]
        try:
            if isinstance(mem, bool) or parse_bytes(mem) <= 0:
                raise ValueError
        except (ValueError, TypeError):
            raise _fail(kind, "memory", f"expected a size such as '32GB', got {mem!r}") from None
        kw["memory"] = str(mem) if isinstance(mem, str) else f"{int(mem)}B"
    if spec.get("processes") is not None:
        kw["processes"] = _pos_int(kind, "processes", spec["processes"])
        cores = kw.get("cores", dask.config.get(f"jobqueue.{kind}.cores", None))
        if cores is not None and kw["processes"] > cores:
            raise _fail(kind, "processes", f"{kw['processes']} worker processes cannot share {cores} cores")
    if spec.get("walltime") is not None:
        wt = spec["walltime"]
        if not isinstance(wt, str) or not _WALLTIME.match(wt):
            raise _fail(kind, "walltime", f"expected a time such as '02:00:00' (quote it in YAML), got {wt!r}")
        kw["walltime"] = wt
    for key in _STR_KEYS:
        if key in spec and spec[key] is not None:
            if not isinstance(spec[key], str) or not spec[key].strip():
                raise _fail(kind, key, f"expected a non-empty string, got {spec[key]!r}")
            kw[key] = spec[key]
    if spec.get("job_cpu") is not None:
        kw["job_cpu"] = _pos_int(kind, "job_cpu", spec["job_cpu"])
    for key in _LIST_KEYS:
        if spec.get(key) is not None:
            v = spec[key]
            if isinstance(v, str) or not isinstance(v, Sequence) or not all(isinstance(x, str) for x in v):
                raise _fail(kind, key, f"expected a list of strings, got {v!r}")
            kw[key] = list(v)
    for key in ("death_timeout", "startup_timeout"):
        if spec.get(key) is not None:
            kw[key] = _seconds(kind, key, spec[key])
    if spec.get("scheduler_options") is not None:
        so = _section(kind, "scheduler_options", spec["scheduler_options"], SCHEDULER_OPTION_KEYS,
                      "expected a mapping such as {interface: ib0}")
        kw["scheduler_options"] = dict(so)
    return kind, kw, _scaling(kind, spec)


def _section(kind: str, key: str, value: Any, allowed: frozenset[str], expected: str) -> Mapping[str, Any]:
    """A nested mapping of an HPC section whose keys all belong to ``allowed`` (else one error naming the key)."""
    if not isinstance(value, Mapping):
        raise _fail(kind, key, expected)
    bad = sorted(set(value) - allowed)
    if bad:
        raise _fail(kind, f"{key}.{bad[0]}", f"unknown key; allowed: {sorted(allowed)}")
    return value


def _scaling(kind: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The ``jobs`` (fixed) or ``adapt`` (min/max) part of an HPC section: ``{"jobs": n}`` or ``{"adapt": {...}}``."""
    if "jobs" in spec and "adapt" in spec:
        raise _fail(kind, "adapt", "give either 'jobs' (fixed) or 'adapt' (min/max), not both")
    scaling: dict[str, Any] = {"jobs": 1}
    if "jobs" in spec:
        scaling = {"jobs": _pos_int(kind, "jobs", spec["jobs"], 0)}
    elif "adapt" in spec:
        ad = _section(kind, "adapt", spec["adapt"], ADAPT_KEYS, "expected {minimum_jobs, maximum_jobs}")
        lo = _pos_int(kind, "adapt.minimum_jobs", ad.get("minimum_jobs", 0), 0)
        if "maximum_jobs" not in ad:
            raise _fail(kind, "adapt.maximum_jobs", "missing")
        hi = _pos_int(kind, "adapt.maximum_jobs", ad["maximum_jobs"], 1)
        if lo > hi:
            raise _fail(kind, "adapt", f"minimum_jobs {lo} exceeds maximum_jobs {hi}")
        scaling = {"adapt": {"minimum_jobs": lo, "maximum_jobs": hi}}
    return scaling


def _jobqueue(kind: str) -> tuple[Any, Any]:
    """(Cluster class, Job class) for ``kind``; ConfigError when dask-jobqueue is missing."""
    try:
        import dask_jobqueue
    except ImportError:
        raise ConfigError(f"cluster.type {kind!r} needs dask-jobqueue: pip install 'privcube[hpc]'") from None
    if kind == "slurm":
        return dask_jobqueue.SLURMCluster, dask_jobqueue.slurm.SLURMJob
    return dask_jobqueue.PBSCluster, dask_jobqueue.pbs.PBSJob


def _config_list(kind: str, key: str) -> list[str]:
    """A list option from the ``jobqueue.<kind>`` dask config (what dask-jobqueue would use)."""
    import dask

    return list(dask.config.get(f"jobqueue.{kind}.{key}", None) or [])


def _dq(text: str) -> str:
    """``text`` inside double quotes for bash: ``$VAR`` and ``~``-free paths still expand, nothing else."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'


def private_dir_prologue(parent: str | None) -> list[str]:
    """Job-script lines giving the job a private (0o700) work folder in ``$PRIVCUBE_LOCAL_DIR``, removed
    when the job script exits, also on SIGTERM (scancel, qdel, walltime)."""
    base = parent or "${TMPDIR:-/tmp}"
    if base.startswith("~/"):
        base = "$HOME" + base[1:]
    folder = f"{base}/privcube-dask-{_JOB_ID}-XXXXXXXX"
    return [
        "umask 077",
        f"{LOCAL_DIR_VAR}=$(mkdir -p {_dq(base)} && mktemp -d {_dq(folder)}) || exit 1",
        f"trap 'rm -rf \"${LOCAL_DIR_VAR}\"' EXIT",
        "trap 'exit 143' TERM INT",
    ]


def worker_job_kwargs(spec: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any], float]:
    """``(type, cluster kwargs, scaling, startup timeout)`` for a slurm/pbs section, with privcube's
    defaults (private work folder, loopback dashboards) applied. The one place both the started
    cluster and the inspector take their options from."""
    import dask

    kind, kw, scaling = validate_hpc_spec(spec)
    timeout = float(kw.pop("startup_timeout", DEFAULT_STARTUP_TIMEOUT))
    so = dict(kw.get("scheduler_options") or dask.config.get(f"jobqueue.{kind}.scheduler-options", None) or {})
    so.setdefault("dashboard_address", SCHEDULER_DASHBOARD)
    kw["scheduler_options"] = so
    extra = kw.get("worker_extra_args", _config_list(kind, "worker-extra-args"))
    if not any(a.split("=", 1)[0] in _DASHBOARD_FLAGS for a in extra):
        extra = [*extra, *WORKER_DASHBOARD_ARGS]
    kw["worker_extra_args"] = extra
    parent = kw.get("local_directory", dask.config.get(f"jobqueue.{kind}.local-directory", None))
    prologue = kw.get("job_script_prologue", _config_list(kind, "job-script-prologue"))
    kw["job_script_prologue"] = [*private_dir_prologue(parent), *prologue]
    kw["local_directory"] = f'"${LOCAL_DIR_VAR}"'
    if kw.get("log_directory"):  # #SBATCH/#PBS paths get no ~ expansion; dask-jobqueue creates it here
        kw["log_directory"] = _private_folder(kind, "log_directory", kw["log_directory"])
    if "adapt" in scaling:  # one job at least: its workers' memory sizes the data passes
        scaling["adapt"]["minimum_jobs"] = max(1, scaling["adapt"]["minimum_jobs"])
    return kind, kw, scaling, timeout


def _is_temporary(security: Any) -> bool:
    """Whether a Security holds in-memory certificates (``tls: auto``) rather than file paths."""
    values = security.get_tls_config_for_role("worker").values()
    return any(v is not None and "\n" in v for v in values)


def _security_for_spec(spec: Mapping[str, Any]) -> Any:
    """The Security of a cluster section's ``security`` key (None without TLS)."""
    from privcube.graphs.cluster.security import security_from_spec

    return security_from_spec(spec.get("security"))


def jobqueue_cluster_from_spec(spec: Mapping[str, Any], *, check_address: Callable[[str], Any] | None = None,
                               **kwargs: Any) -> Any:
    """Start a SLURMCluster/PBSCluster for the spec and submit its jobs (or enable adaptivity).

    ``check_address(scheduler_address)`` runs once the scheduler listens and before any job is
    submitted (the cluster is closed again if it raises). ``kwargs`` (e.g. ``security``,
    ``protocol``) pass through to the cluster class. Submission is synchronous: a refused job is a
    ConfigError with the batch system's message. ``wait_for_first_worker`` then waits for a worker.
    """
    kind, kw, scaling, timeout = worker_job_kwargs({k: v for k, v in spec.items() if k not in SECURITY_KEYS})
    cluster_cls, _ = _jobqueue(kind)
    if kwargs.get("security") is not None and _is_temporary(kwargs["security"]) and kw.get("shared_temp_directory"):
        _private_folder(kind, "shared_temp_directory", kw["shared_temp_directory"])
    cluster = cluster_cls(**kw, **kwargs)
    cluster.privcube_kind, cluster.privcube_startup_timeout = kind, timeout
    try:
        if check_address is not None:
            check_address(cluster.scheduler_address)
        jobs = scaling["adapt"]["minimum_jobs"] if "adapt" in scaling else scaling["jobs"]
        submit_jobs(cluster, jobs, kind)
        if "adapt" in scaling:
            cluster.adapt(**scaling["adapt"])
    except BaseException:
        cluster.close()
        raise
    return cluster


def _private_folder(kind: str, key: str, path: str) -> str:
    """Create ``cluster.<key>`` owner-only if missing (it receives the temporary TLS key, or worker logs);
    returns the path with ``~`` and variables expanded."""
    import os

    folder = os.path.abspath(os.path.expanduser(os.path.expandvars(path)))
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError as e:
        raise _fail(kind, key, f"cannot create {folder!r}: {e.strerror or e}") from None
    return folder


def submit_jobs(cluster: Any, jobs: int, kind: str) -> None:
    """Submit ``jobs`` worker jobs now and wait for the submission commands (not for the jobs to run).

    ``cluster.scale`` would submit in a background task whose failure is only logged ("Task exception
    was never retrieved") while the caller waits forever; here a refused submission raises a
    ConfigError with the batch system's own message (its stderr) on one line.
    """
    if jobs <= 0:
        return

    async def submit() -> None:
        while len(cluster.worker_spec) < jobs:
            cluster.worker_spec.update(cluster.new_worker_spec())
        await cluster._correct_state()

    try:
        cluster.sync(submit)
    except (RuntimeError, OSError) as e:
        _forget_unsubmitted(cluster)
        if isinstance(e, OSError):
            raise ConfigError(f"cluster ({kind}): cannot run {_submit_command(cluster)}: {e.strerror or e}") from None
        raise ConfigError(f"cluster ({kind}): {_submit_command(cluster)} refused the worker job: "
                          f"{_stderr_line(str(e))}") from None


def _forget_unsubmitted(cluster: Any) -> None:
    """Drop the job objects whose submission failed (they have no job id), so that closing the cluster
    cancels the submitted ones only and does not trip over jobs that never started."""
    from distributed.core import Status

    for name, job in list(cluster.workers.items()):
        if getattr(job, "job_id", None) is None:
            job.status = Status.failed
            del cluster.workers[name]
            cluster.worker_spec.pop(name, None)


def _submit_command(cluster: Any) -> str:
    """The submission command's name (sbatch, qsub)."""
    cmd = str(getattr(cluster.job_cls, "submit_command", "") or "the batch system").split()
    return cmd[0] if cmd else "the batch system"


def _stderr_line(message: str) -> str:
    """The stderr part of dask-jobqueue's command error, as one line (the whole message without one)."""
    text = message.split("stderr:", 1)[1] if "stderr:" in message else message
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return "; ".join(lines) or message.strip().splitlines()[0]


_SLURM_ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                          "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT"})


def _slurm_job_states(job_ids: Sequence[str]) -> dict[str, str] | None:
    """Slurm states of ``job_ids`` (``ENDED`` for jobs squeue no longer knows), None if squeue fails."""
    import subprocess

    try:
        r = subprocess.run(["squeue", "--noheader", "--format=%i %T", f"--jobs={','.join(job_ids)}"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0 and "Invalid job id" not in r.stderr:
        return None
    states = dict(ln.split()[:2] for ln in r.stdout.splitlines() if len(ln.split()) >= 2)
    return {j: states.get(j, "ENDED") for j in job_ids}


def wait_for_first_worker(cluster: Any, client: Any, *, poll: float = 1.0) -> None:
    """Wait until a worker joined ``client``'s scheduler (jobs may queue), at most the cluster's
    ``startup_timeout``; a ConfigError as soon as every submitted Slurm job ended without one."""
    import time

    kind = getattr(cluster, "privcube_kind", "slurm")
    timeout = float(getattr(cluster, "privcube_startup_timeout", DEFAULT_STARTUP_TIMEOUT))
    if not cluster.worker_spec:
        return  # jobs: 0 - the workers come from elsewhere
    deadline = time.monotonic() + timeout
    next_check = time.monotonic() + 5 * poll
    while True:
        try:
            client.wait_for_workers(1, timeout=poll)  # returns as soon as one joined
            return
        except TimeoutError:
            pass
        now = time.monotonic()
        if now >= deadline:
            raise ConfigError(f"cluster ({kind}): no worker joined within {timeout:g} s of submitting the "
                              f"jobs ({_job_list(cluster)} still queued?); raise cluster.startup_timeout or "
                              "check the queue")
        if kind == "slurm" and now >= next_check:
            next_check = now + 5 * poll
            _fail_if_jobs_ended(cluster, kind)


def _job_list(cluster: Any) -> str:
    """The submitted job ids, for messages."""
    ids = [str(j.job_id) for j in cluster.workers.values() if getattr(j, "job_id", None)]
    return "jobs " + ", ".join(ids) if ids else "no job id"


def _fail_if_jobs_ended(cluster: Any, kind: str) -> None:
    """ConfigError if every submitted job has ended (failed, cancelled, ...) and no worker joined."""
    ids = [str(j.job_id) for j in cluster.workers.values() if getattr(j, "job_id", None)]
    states = _slurm_job_states(ids) if ids else None
    if not states or any(s not in _SLURM_ENDED and s != "ENDED" for s in states.values()):
        return
    desc = ", ".join(f"{j} {s}" for j, s in states.items())
    logs = getattr(cluster._dummy_job, "log_directory", None)
    where = f"their output in {logs}" if logs else "their slurm-JOBID.out files"
    raise ConfigError(f"cluster ({kind}): every worker job ended before a worker joined ({desc}); see {where}")


def _placeholder_security(security: Any, shared_temp_directory: str | None) -> Any:
    """The Security the jobs of a started cluster get: temporary certificates become files named as
    dask-jobqueue names them in ``shared_temp_directory`` (random suffix shown as XXXXXXXX)."""
    import copy
    import os

    if not _is_temporary(security):
        return security
    folder = shared_temp_directory if shared_temp_directory is not None else os.getcwd()
    sec = copy.copy(security)
    for key, value in security.get_tls_config_for_role("worker").items():
        if value is not None and "\n" in value:
            attr = "tls_" + ("worker_" if key != "ca_file" else "") + key
            setattr(sec, attr, os.path.join(folder, f".dask-jobqueue.worker.{key}.XXXXXXXX"))
    return sec


def job_script(spec: Mapping[str, Any], *, scheduler_address: str | None = None,
               security: Any = None) -> str:
    """The batch script of the first worker job a started cluster would submit for the spec, without
    starting a scheduler: same options (``worker_job_kwargs``), same job class and job name.

    ``security`` (a ``distributed.Security``; default: the spec's own ``security`` key) adds the
    worker's TLS options; temporary certificates (``tls: auto``) appear as the files dask-jobqueue
    writes into ``shared_temp_directory`` when the cluster starts (random part ``XXXXXXXX``).
    """
    kind, kw, _, _ = worker_job_kwargs({k: v for k, v in spec.items() if k not in SECURITY_KEYS})
    cluster_cls, job_cls = _jobqueue(kind)
    if security is None:
        security = _security_for_spec(spec)
    kw.pop("scheduler_options", None)
    shared = kw.pop("shared_temp_directory", None)
    if security is not None:
        kw.update(security=_placeholder_security(security, shared), protocol="tls://")
    if scheduler_address is None:
        scheduler_address = TLS_PLACEHOLDER_ADDRESS if security is not None else PLACEHOLDER_ADDRESS
    kw.setdefault("interface", None)
    job = job_cls(scheduler_address, name=f"{cluster_cls.__name__}-0", config_name=kind, **kw)
    return job.job_script()


class _JobqueueKind(ClusterKind):
    """A batch system's cluster (dask-jobqueue): the scheduler here, the workers in batch jobs."""

    abilities = frozenset({"starts-workers", "workers-flag", "tls", "batch-jobs"})
    WORKERS_FIRST = True  # --workers is the job count, replacing the section's jobs or adapt before the check

    def validate(self, options: dict[str, Any], security: Any = None) -> None:
        validate_hpc_spec({"type": self.name, **options})

    def with_workers(self, options: dict[str, Any], workers: int) -> tuple[str, dict[str, Any]]:
        out = {**options, "jobs": workers}
        out.pop("adapt", None)
        return self.name, out

    def open(self, handle: Any) -> Any:
        """Start the scheduler, submit the jobs (refused before any job if the scheduler address is not
        secure enough) and wait for the first worker: its memory limit sizes the data passes."""
        from privcube.graphs.cluster.security import check_address_security, client_kwargs

        extra = {"security": handle.security, "protocol": "tls://"} if handle.security is not None else {}
        handle.cluster = jobqueue_cluster_from_spec(
            {"type": self.name, **handle.options}, **extra,
            check_address=lambda a: check_address_security(a, handle.security, handle.allow_insecure))
        client = handle._connect(handle.cluster, client_kwargs(handle.security))
        wait_for_first_worker(handle.cluster, client)
        return client


class SlurmKind(_JobqueueKind):
    """Workers in Slurm batch jobs (``sbatch``)."""

    name = "slurm"
    description = "workers in Slurm batch jobs submitted by privcube (dask-jobqueue; pip install 'privcube[hpc]')"
    OPTIONS = {**HPC_OPTIONS, **SLURM_OPTIONS}


class PBSKind(_JobqueueKind):
    """Workers in PBS batch jobs (``qsub``)."""

    name = "pbs"
    description = "workers in PBS batch jobs submitted by privcube (dask-jobqueue; pip install 'privcube[hpc]')"
    OPTIONS = {**HPC_OPTIONS, **PBS_OPTIONS}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m privcube.graphs.cluster.hpc CONFIG``: print the batch script of the first worker job that
    ``privcube run CONFIG`` would submit (the config's ``security`` and ``allow_insecure`` included)."""
    import argparse

    from privcube.core.errors import PrivcubeError
    from privcube.core.yaml_io import read_config_file
    from privcube.graphs.cluster.registry import parse_cluster_section

    p = argparse.ArgumentParser(prog="python -m privcube.graphs.cluster.hpc",
                                description="Print the dask-jobqueue worker job script for a job config.")
    p.add_argument("config", help="job config whose cluster section has type: slurm or pbs")
    p.add_argument("--scheduler-address", default=None,
                   help="address to write into the script (default: a placeholder)")
    args = p.parse_args(argv)
    try:
        raw, base = read_config_file(args.config)
        spec = parse_cluster_section(raw.get("cluster"), base)
        sys.stdout.write(job_script(spec, scheduler_address=args.scheduler_address))
        sys.stdout.write("\n")
    except PrivcubeError as e:
        print(f"privcube: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
