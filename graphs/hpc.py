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
``scheduler_options``, ``shared_temp_directory``; SLURM only ``job_cpu``, ``job_mem``; PBS only
``resource_spec``.

TLS (``security`` in the cluster section, see ``privcube.graphs.security``): the scheduler listens on
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

from privcube.errors import ConfigError

HPC_TYPES = ("slurm", "pbs")
COMMON_KEYS = frozenset({
    "type", "cores", "memory", "processes", "jobs", "adapt", "queue", "account", "walltime",
    "job_name", "job_extra_directives", "job_script_prologue", "job_directives_skip",
    "worker_extra_args", "local_directory", "log_directory", "interface", "python", "death_timeout",
    "scheduler_options", "shared_temp_directory",
})
TYPE_KEYS = {"slurm": frozenset({"job_cpu", "job_mem"}), "pbs": frozenset({"resource_spec"})}
SCHEDULER_OPTION_KEYS = frozenset({"host", "port", "interface", "dashboard_address", "protocol"})
ADAPT_KEYS = frozenset({"minimum_jobs", "maximum_jobs"})
PLACEHOLDER_ADDRESS = "tcp://<scheduler-address>:8786"
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
    unknown = sorted(set(spec) - allowed)
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
    if spec.get("death_timeout") is not None:
        dt = spec["death_timeout"]
        if isinstance(dt, bool) or not isinstance(dt, (int, float)) or dt <= 0:
            raise _fail(kind, "death_timeout", f"expected seconds > 0, got {dt!r}")
        kw["death_timeout"] = dt
    if spec.get("scheduler_options") is not None:
        so = spec["scheduler_options"]
        if not isinstance(so, Mapping):
            raise _fail(kind, "scheduler_options", "expected a mapping such as {interface: ib0}")
        bad = sorted(set(so) - SCHEDULER_OPTION_KEYS)
        if bad:
            raise _fail(kind, f"scheduler_options.{bad[0]}", f"unknown key; allowed: {sorted(SCHEDULER_OPTION_KEYS)}")
        kw["scheduler_options"] = dict(so)
    if "jobs" in spec and "adapt" in spec:
        raise _fail(kind, "adapt", "give either 'jobs' (fixed) or 'adapt' (min/max), not both")
    scaling: dict[str, Any] = {"jobs": 1}
    if "jobs" in spec:
        scaling = {"jobs": _pos_int(kind, "jobs", spec["jobs"], 0)}
    elif "adapt" in spec:
        ad = spec["adapt"]
        if not isinstance(ad, Mapping):
            raise _fail(kind, "adapt", "expected {minimum_jobs, maximum_jobs}")
        bad = sorted(set(ad) - ADAPT_KEYS)
        if bad:
            raise _fail(kind, f"adapt.{bad[0]}", f"unknown key; allowed: {sorted(ADAPT_KEYS)}")
        lo = _pos_int(kind, "adapt.minimum_jobs", ad.get("minimum_jobs", 0), 0)
        if "maximum_jobs" not in ad:
            raise _fail(kind, "adapt.maximum_jobs", "missing")
        hi = _pos_int(kind, "adapt.maximum_jobs", ad["maximum_jobs"], 1)
        if lo > hi:
            raise _fail(kind, "adapt", f"minimum_jobs {lo} exceeds maximum_jobs {hi}")
        scaling = {"adapt": {"minimum_jobs": lo, "maximum_jobs": hi}}
    return kind, kw, scaling


def _jobqueue(kind: str) -> tuple[Any, Any]:
    """(Cluster class, Job class) for ``kind``; ConfigError when dask-jobqueue is missing."""
    try:
        import dask_jobqueue
    except ImportError:
        raise ConfigError(f"cluster.type {kind!r} needs dask-jobqueue: pip install 'privcube[hpc]'") from None
    if kind == "slurm":
        return dask_jobqueue.SLURMCluster, dask_jobqueue.slurm.SLURMJob
    return dask_jobqueue.PBSCluster, dask_jobqueue.pbs.PBSJob


def jobqueue_cluster_from_spec(spec: Mapping[str, Any], *, check_address: Callable[[str], Any] | None = None,
                               **kwargs: Any) -> Any:
    """Start a SLURMCluster/PBSCluster for the spec and submit its jobs (or enable adaptivity).

    ``check_address(scheduler_address)`` runs once the scheduler listens and before any job is
    submitted (the cluster is closed again if it raises). ``kwargs`` (e.g. ``security``,
    ``protocol``) pass through to the cluster class.
    """
    kind, kw, scaling = validate_hpc_spec(spec)
    cluster_cls, _ = _jobqueue(kind)
    cluster = cluster_cls(**kw, **kwargs)
    try:
        if check_address is not None:
            check_address(cluster.scheduler_address)
        if "adapt" in scaling:
            cluster.adapt(**scaling["adapt"])
        elif scaling["jobs"]:
            cluster.scale(jobs=scaling["jobs"])
    except BaseException:
        cluster.close()
        raise
    return cluster


def job_script(spec: Mapping[str, Any], *, scheduler_address: str = PLACEHOLDER_ADDRESS,
               security: Any = None) -> str:
    """The batch script of one worker job for the spec, without starting a scheduler.

    ``security`` (a ``distributed.Security`` with certificate *files*) adds the worker's TLS
    options; temporary in-memory certificates (``tls: auto``) exist only once a cluster is started.
    """
    kind, kw, _ = validate_hpc_spec(spec)
    _, job_cls = _jobqueue(kind)
    kw.pop("scheduler_options", None)
    kw.pop("shared_temp_directory", None)
    if security is not None:
        values = security.get_tls_config_for_role("worker").values()
        if any(v is not None and "\n" in v for v in values):
            raise ConfigError(f"cluster.security.tls ({kind}): 'auto' certificates are made when the cluster "
                              "starts; see the started cluster's job_script() instead")
        kw.update(security=security, protocol="tls://")
        if scheduler_address == PLACEHOLDER_ADDRESS:
            scheduler_address = "tls://<scheduler-address>:8786"
    job = job_cls(scheduler_address, name="privcube-worker", **kw)
    return job.job_script()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m privcube.graphs.hpc CONFIG``: print one worker job's batch script."""
    import argparse

    from privcube.config import read_config_file
    from privcube.errors import PrivcubeError

    p = argparse.ArgumentParser(prog="python -m privcube.graphs.hpc",
                                description="Print the dask-jobqueue worker job script for a job config.")
    p.add_argument("config", help="job config whose cluster section has type: slurm or pbs")
    p.add_argument("--scheduler-address", default=PLACEHOLDER_ADDRESS)
    args = p.parse_args(argv)
    try:
        raw, _ = read_config_file(args.config)
        sys.stdout.write(job_script(raw.get("cluster") or {}, scheduler_address=args.scheduler_address))
        sys.stdout.write("\n")
    except PrivcubeError as e:
        print(f"privcube: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
