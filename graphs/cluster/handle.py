"""Cluster resolution: turn the config's ``cluster`` section (plus CLI flags) into a Client or None.

Spec ``{"type": ..., **options}``:

- ``none`` (also the default when spec is None): no client; dask's local threaded scheduler.
- ``threads``: no client; options ``num_workers`` (threads) set in dask config inside the context.
- ``local``: a ``distributed.LocalCluster`` with worker processes, sized to the machine by default
  (``local_defaults``: one single-threaded worker per usable CPU, 80% of the memory available to
  this process split over them); options ``n_workers``, ``threads_per_worker``, ``memory_limit``
  (per worker, bytes or "4GB"), ``local_directory`` (parent of the spill folder, see below),
  ``processes`` (default True), ``dashboard_address`` (default: a free port on 127.0.0.1).

  Workers spill partial (exact, pre-noise) counts to disk under memory pressure. Every LocalCluster
  started here therefore gets a private scratch folder ``privcube-dask-PID-XXXX`` (mode 0o700, made
  by ``private_scratch_dir``) under ``local_directory`` or else dask's ``temporary-directory`` / the
  system temp folder; the scheduler's and every worker's work, spill and log space live in it, and
  it is deleted when the cluster closes, on errors too. A folder left behind by a killed driver is
  removed by the next LocalCluster started under the same parent (it holds a lock while in use).
- ``address``: ``Client(address)`` to an existing scheduler; option ``address``.
- ``scheduler-file``: ``Client(scheduler_file=...)``; option ``scheduler_file``.
- ``kubernetes``: a dask-kubernetes ``KubeCluster`` (``privcube.graphs.cluster.kubernetes``); TLS is refused
  here (KubeCluster only talks plain tcp:// to its scheduler) and rendered into DaskJob resources.
- ``slurm``, ``pbs``: a dask-jobqueue cluster (``privcube.graphs.cluster.hpc``): its jobs are submitted and the
  first worker is awaited on entry (a refused submission or jobs that all ended are one-line errors).

Every type also takes ``security`` (``auto`` or ``{tls: {ca_file, cert, key}}``, see
``privcube.graphs.cluster.security``) and ``allow_insecure``. A plain ``tcp://`` scheduler that is not on the
loopback interface is refused unless ``allow_insecure: true``; local clusters bind to 127.0.0.1.

CLI flags override the spec: ``scheduler_address`` → type address, ``scheduler_file`` → type
scheduler-file, ``workers`` → ``n_workers`` of a local cluster (a None/"none" spec becomes local) or
``num_workers`` of threads. A LocalCluster or thread pool larger than this machine holds (more than
``MAX_PER_CORE`` per core, or more workers than its available memory holds) is refused before anything
starts (``check_machine_size``). ``ClusterHandle`` closes only what it created (for address/scheduler-file
that is the Client, never the remote cluster).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from privcube.core.errors import ConfigError

SCRATCH_PREFIX = "privcube-dask-"
_SCRATCH_LOCK = ".privcube-scratch.lock"

_ALLOWED: dict[str, set[str]] = {
    "none": set(),
    "threads": {"num_workers"},
    "local": {"n_workers", "threads_per_worker", "memory_limit", "local_directory", "processes",
              "dashboard_address"},
    "address": {"address"},
    "scheduler-file": {"scheduler_file"},
}
_EXTERNAL = {"kubernetes", "slurm", "pbs"}
_SECURITY_KEYS = {"security", "allow_insecure"}


def _positive_int(spec_type: str, key: str, value: Any) -> int:
    """Validate a positive integer option, naming the key (``workers`` is the ``--workers`` flag)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        if key == "workers":
            raise ConfigError(f"--workers must be a positive integer, got {value!r}")
        raise ConfigError(f"cluster.{key} ({spec_type} cluster) must be a positive integer, got {value!r}")
    return value


#: seconds to wait for a scheduler that accepts connections (distributed's default is 30 s of retries)
CONNECT_TIMEOUT_S = 10
#: seconds for the first TCP probe of a scheduler address: a closed port or unknown host fails at once
PROBE_TIMEOUT_S = 3


def _check_reachable(address: str, where: str) -> None:
    """One ConfigError line, within seconds, when nothing listens at a tcp:// or tls:// scheduler ``address``
    (a closed port, an unknown host): distributed would retry for 30 s and end in a long traceback."""
    import socket

    from distributed.comm import parse_address, parse_host_port

    try:
        scheme, loc = parse_address(address)
    except (ValueError, TypeError):
        raise ConfigError(f"scheduler address {address!r} ({where}) is not an address such as "
                          "tcp://host:8786") from None
    if scheme not in ("tcp", "tls"):
        return
    try:
        host, port = parse_host_port(loc)
    except (ValueError, TypeError):
        raise ConfigError(f"scheduler address {address!r} ({where}) needs a host and a port, e.g. "
                          "tcp://host:8786") from None
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S):
            return
    except OSError as e:
        reason = "connection refused: no scheduler listens there" if isinstance(e, ConnectionRefusedError) else \
            "timed out" if isinstance(e, (TimeoutError, socket.timeout)) else (e.strerror or type(e).__name__)
        raise ConfigError(f"cannot reach the Dask scheduler at {address} ({where}): {reason}; start it, or give "
                          "the address it prints") from None


def _client_or_one_line(connect: Any, address: str) -> Any:
    """``connect()``; a connection that fails or times out after the probe is one ConfigError line."""
    try:
        return connect()
    except (OSError, TimeoutError) as e:
        raise ConfigError(f"cannot connect to the Dask scheduler at {address}: "
                          f"{' '.join(str(e).split())[:200] or type(e).__name__}") from None


def _workers_flag(value: Any) -> int:
    """The ``--workers`` value, a positive integer (ConfigError naming the flag)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--workers must be a positive integer, got {value!r}")
    return value


#: at most this many LocalCluster workers (or in-process threads) per core this process may use
MAX_PER_CORE = 4


def check_machine_size(spec_type: str, options: Mapping[str, Any], flag: str | None = None) -> None:
    """Refuse, in one line, a LocalCluster (or thread pool) this machine cannot hold: more than
    MAX_PER_CORE workers (threads) per core, or more workers than its available memory holds at the
    memory one idle worker takes (``privcube.memory_plan.WORKER_BASE``). ``flag``: the CLI flag that set
    the size (else the config key is named)."""
    from privcube.core.machine import available_memory, cores
    from privcube.memory_plan import WORKER_BASE, gib

    n_cores = cores()
    if spec_type == "threads":
        n = options.get("num_workers")
        if n is not None and n > MAX_PER_CORE * n_cores:
            raise ConfigError(f"{flag or 'cluster.num_workers'} {n}: more threads than this machine can run, at most "
                              f"{MAX_PER_CORE * n_cores} ({MAX_PER_CORE} per core, {n_cores} core(s)); use "
                              f"{flag or 'cluster.num_workers'} {MAX_PER_CORE * n_cores} or fewer")
        return
    n = options.get("n_workers")
    if n is None:
        return
    threads = options.get("threads_per_worker") or 1
    by_cores = max(1, MAX_PER_CORE * n_cores // threads)
    free = available_memory()
    by_memory = max(1, free // WORKER_BASE)
    most = min(by_cores, by_memory)
    if n > most:
        name = flag or "cluster.n_workers"
        raise ConfigError(
            f"{name} {n}: a LocalCluster on this machine holds at most {most} workers ({MAX_PER_CORE} threads per "
            f"core on {n_cores} core(s) give {by_cores}; {gib(free)} available memory holds {by_memory} workers of "
            f"{gib(WORKER_BASE)} each); use {name} {most} or fewer, or a cluster with more machines "
            "(--scheduler-address)")


def local_defaults(n_workers: int | None = None, threads_per_worker: int | None = None) -> dict[str, Any]:
    """LocalCluster sizing for this machine: one thread per worker, 80% of the memory split over workers.

    CPUs and memory are what this process may use, not what the host has: dask's ``CPU_COUNT``
    honours CPU affinity and cgroup CPU quotas, distributed's ``MEMORY_LIMIT`` the cgroup memory
    limit and ``RLIMIT_RSS`` (so a container with 4 GiB gets workers sized to 4 GiB, not to the host).
    """
    from dask.system import CPU_COUNT
    from distributed.system import MEMORY_LIMIT

    tpw = threads_per_worker or 1
    nw = n_workers or max(1, CPU_COUNT // tpw)
    mem = int(MEMORY_LIMIT * 0.8 / nw)
    return {"n_workers": nw, "threads_per_worker": tpw, "memory_limit": mem}


def private_scratch_dir(parent: str | os.PathLike[str] | None = None) -> tuple[str, Any]:
    """Create an owner-only (0o700) scratch folder for one LocalCluster; returns (path, held lock).

    ``parent`` defaults to dask's ``temporary-directory`` config or the system temp folder and is
    created (0o700) if missing. The folder holds an exclusive ``flock`` on a lock file for as long as
    the returned lock object stays open; folders under the same parent whose lock is free (their
    driver was killed) are deleted first. Errors are ``ConfigError`` naming ``cluster.local_directory``.
    """
    import dask

    base = Path(os.path.expanduser(os.fspath(parent))) if parent is not None else Path(
        dask.config.get("temporary-directory", None) or tempfile.gettempdir())
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        _sweep_stale_scratch(base)
        path = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=base)  # mode 0o700
    except OSError as e:
        raise ConfigError(f"cluster.local_directory {str(base)!r} cannot hold the private spill folder: "
                          f"{e.strerror or e}") from None
    os.chmod(path, 0o700)
    lock = _hold_lock(Path(path))
    return path, lock


def _hold_lock(folder: Path) -> Any:
    """Open the folder's lock file and take an exclusive flock (None where flock does not exist)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    # lock first, then give the file its name: a sweeper never sees an unlocked lock file of a live folder
    staged = folder / f"{_SCRATCH_LOCK}.new"
    fh = open(staged, "w")  # noqa: SIM115 - held open for the cluster's lifetime
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(staged, folder / _SCRATCH_LOCK)
    except OSError:  # pragma: no cover - a brand-new folder cannot be locked by anyone else
        fh.close()
        return None
    return fh


def _sweep_stale_scratch(base: Path) -> None:
    """Delete this user's scratch folders under ``base`` whose lock is free (left by a killed driver)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return
    for folder in base.glob(f"{SCRATCH_PREFIX}*"):
        lock_path = folder / _SCRATCH_LOCK
        try:
            if folder.is_symlink() or folder.stat().st_uid != os.getuid() or not lock_path.is_file():
                continue  # not ours, or still being created: leave it
            with open(lock_path) as fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # in use by a running cluster
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue


def remove_scratch_dir(path: str | None, lock: Any) -> None:
    """Delete a folder made by ``private_scratch_dir`` and release its lock (idempotent)."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
    if lock is not None:
        with contextlib.suppress(OSError):
            lock.close()


class ClusterHandle:
    """Context manager yielding a ``distributed.Client`` (or None) and closing what it created."""

    def __init__(self, spec_type: str, options: dict[str, Any], security: Any = None,
                 allow_insecure: bool = False) -> None:
        self.type = spec_type
        self.options = options
        self.security = security
        self.allow_insecure = allow_insecure
        self.client: Any = None
        self.cluster: Any = None
        self.scratch_dir: str | None = None  # private spill folder of a LocalCluster we started
        self._scratch_lock: Any = None
        self._config_ctx: Any = None

    def __enter__(self) -> Any:
        try:
            return self._open()
        except BaseException:
            self.close()  # a failed start leaves no cluster, client or spill folder behind
            raise

    def _open(self) -> Any:
        """Start or connect what the spec asks for; the Client, or None for in-process schedulers."""
        import dask

        t, o = self.type, self.options
        if t == "none":
            return None
        if t == "threads":  # in-process; the scheduler as a function, so that dask does not import distributed
            import dask.threaded

            cfg: dict[str, Any] = {"scheduler": dask.threaded.get}
            if "num_workers" in o:
                cfg["num_workers"] = o["num_workers"]
            self._config_ctx = dask.config.set(cfg)
            self._config_ctx.__enter__()
            return None
        from distributed import Client, LocalCluster

        from privcube.graphs.cluster.security import check_address_security, client_kwargs, local_cluster_kwargs

        ckw = client_kwargs(self.security)
        if t == "local":
            kw = local_defaults(o.get("n_workers"), o.get("threads_per_worker"))
            if "memory_limit" in o:
                kw["memory_limit"] = o["memory_limit"]
            self.scratch_dir, self._scratch_lock = private_scratch_dir(o.get("local_directory"))
            kw["local_directory"] = self.scratch_dir
            kw["processes"] = bool(o.get("processes", True))
            # distributed reads dashboard_address=None as its default port (:8787 on every
            # interface); without an explicit address, serve it on a free loopback port instead.
            kw["dashboard_address"] = o.get("dashboard_address") or "127.0.0.1:0"
            # worker processes talk over TCP bound to loopback; processes=False without TLS uses
            # distributed's in-process transport (inproc://), which takes no host at all
            kw.update(local_cluster_kwargs(self.security, loopback=kw["processes"] or self.security is not None))
            # the scheduler (created in this process) takes its work folder from the config
            with dask.config.set({"temporary-directory": self.scratch_dir}):
                self.cluster = LocalCluster(**kw)
            return self._connect(self.cluster, ckw)
        if t == "address":
            address = check_address_security(o["address"], self.security, self.allow_insecure)
            _check_reachable(address, "--scheduler-address / cluster.address")
            self.client = _client_or_one_line(lambda: Client(address, timeout=CONNECT_TIMEOUT_S, **ckw), address)
            return self.client
        if t == "scheduler-file":
            address = _scheduler_file_address(str(o["scheduler_file"]))
            check_address_security(address, self.security, self.allow_insecure)
            _check_reachable(address, f"scheduler file {str(o['scheduler_file'])!r}")
            self.client = _client_or_one_line(
                lambda: Client(scheduler_file=str(o["scheduler_file"]), timeout=CONNECT_TIMEOUT_S, **ckw), address)
            return self.client
        if t == "kubernetes":
            from privcube.graphs.cluster.kubernetes import kube_cluster_from_spec

            self.cluster = kube_cluster_from_spec({"type": t, **o})
            check_address_security(self.cluster.scheduler_address, None, self.allow_insecure)
            return self._connect(self.cluster, ckw)
        if t in ("slurm", "pbs"):
            from privcube.graphs.cluster.hpc import jobqueue_cluster_from_spec, wait_for_first_worker

            extra = {"security": self.security, "protocol": "tls://"} if self.security is not None else {}
            # refused before any batch job is submitted; a refused submission raises here
            self.cluster = jobqueue_cluster_from_spec(
                {"type": t, **o}, **extra,
                check_address=lambda a: check_address_security(a, self.security, self.allow_insecure))
            client = self._connect(self.cluster, ckw)
            # workers' memory limits size the data passes (worker_resources): wait until one joined
            wait_for_first_worker(self.cluster, client)
            return client
        raise ConfigError(f"unknown cluster type {t!r}")  # unreachable: validated in resolve_cluster

    def _connect(self, cluster: Any, ckw: dict[str, Any]) -> Any:
        from distributed import Client

        try:
            self.client = Client(cluster, **ckw)
        except BaseException:
            cluster.close()
            self.cluster = None
            raise
        return self.client

    def close(self) -> None:
        """Close the client and cluster this handle created (idempotent)."""
        if self._config_ctx is not None:
            self._config_ctx.__exit__(None, None, None)
            self._config_ctx = None
        if self.client is not None:
            client, self.client = self.client, None
            with contextlib.suppress(Exception):  # closing must go on to the cluster and spill folder
                client.close()
        try:
            if self.cluster is not None:
                cluster, self.cluster = self.cluster, None
                cluster.close()
        finally:
            remove_scratch_dir(self.scratch_dir, self._scratch_lock)
            self.scratch_dir = self._scratch_lock = None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def resolve_cluster(spec: Mapping[str, Any] | None, *, scheduler_address: str | None = None,
                    scheduler_file: str | os.PathLike[str] | None = None,
                    workers: int | None = None) -> ClusterHandle:
    """Validate a cluster spec (CLI flags override it) and return an unopened ``ClusterHandle``."""
    if spec is not None and not isinstance(spec, Mapping):
        raise ConfigError(f"cluster spec must be a mapping with a 'type' key, got {spec!r}")
    from privcube.graphs.cluster.security import allow_insecure_from_spec, security_from_spec

    spec = dict(spec or {})
    spec_type = str(spec.pop("type", "none"))
    sec_spec = spec.pop("security", None)
    allow_insecure = spec.pop("allow_insecure", False)
    if not isinstance(allow_insecure, bool):
        raise ConfigError(f"cluster.allow_insecure must be true or false, got {allow_insecure!r}")
    allow_insecure = allow_insecure or allow_insecure_from_spec(sec_spec)
    security = security_from_spec(sec_spec)
    if spec_type not in _ALLOWED and spec_type not in _EXTERNAL:
        raise ConfigError(f"unknown cluster type {spec_type!r}; choose one of "
                          f"{sorted(_ALLOWED) + sorted(_EXTERNAL)}")
    if spec_type == "kubernetes":
        from privcube.graphs.cluster.kubernetes import validate_kubernetes_spec

        validate_kubernetes_spec({"type": spec_type, **spec,
                                  **({"security": sec_spec} if sec_spec is not None else {})})
    elif spec_type in ("slurm", "pbs"):
        from privcube.graphs.cluster.hpc import validate_hpc_spec

        if workers is not None and scheduler_address is None and scheduler_file is None:
            spec["jobs"] = _workers_flag(workers)
            spec.pop("adapt", None)
            workers = None
        validate_hpc_spec({"type": spec_type, **spec})
    else:
        for key in spec:
            if key not in _ALLOWED[spec_type]:
                raise ConfigError(f"unknown key {key!r} for cluster type {spec_type!r}; "
                                  f"allowed: {sorted(_ALLOWED[spec_type] | _SECURITY_KEYS)}")
    if scheduler_address is not None and scheduler_file is not None:
        raise ConfigError("give either scheduler_address or scheduler_file, not both")
    if scheduler_address is not None:
        spec_type, spec = "address", {"address": scheduler_address}
    elif scheduler_file is not None:
        spec_type, spec = "scheduler-file", {"scheduler_file": str(scheduler_file)}
    elif workers is not None:
        workers = _workers_flag(workers)
        if spec_type == "threads":
            spec["num_workers"] = workers
        elif spec_type in ("none", "local"):
            spec_type = "local"
            spec["n_workers"] = workers
        elif spec_type == "kubernetes":
            spec["n_workers"] = workers
        else:
            raise ConfigError(f"workers={workers} cannot apply to cluster type {spec_type!r}")

    for key in ("n_workers", "threads_per_worker", "num_workers"):
        if key in spec:
            _positive_int(spec_type, key, spec[key])
    if spec_type in ("local", "threads"):  # what this machine can hold, before anything starts
        check_machine_size(spec_type, spec, "--workers" if workers is not None else None)
    if spec_type == "address" and not spec.get("address"):
        raise ConfigError("cluster type 'address' needs key 'address' (or --scheduler-address)")
    if spec_type == "scheduler-file" and not spec.get("scheduler_file"):
        raise ConfigError("cluster type 'scheduler-file' needs key 'scheduler_file' (or --scheduler-file)")
    if spec_type in ("address", "scheduler-file") and _tls_auto(sec_spec):
        raise ConfigError(f"cluster.security.tls: 'auto' makes a certificate only this process holds, which a "
                          f"scheduler privcube does not start ({spec_type}) cannot trust; give "
                          f"{{ca_file, cert, key}} of the cluster's CA instead")
    if spec_type == "kubernetes":
        from privcube.graphs.cluster.kubernetes import tls_requested

        if security is not None or tls_requested(spec):
            raise ConfigError(
                "cluster.security.tls (kubernetes): dask-kubernetes' KubeCluster connects to its scheduler over "
                "plain tcp:// only, so privcube cannot start a TLS cluster from here; render a TLS DaskJob with "
                "'python -m privcube.graphs.cluster.kubernetes CONFIG | kubectl apply -f -' instead")
    return ClusterHandle(spec_type, spec, security, allow_insecure)


def _tls_auto(sec_spec: Any) -> bool:
    """Whether a ``security`` section asks for temporary certificates (``auto``)."""
    tls = sec_spec.get("tls") if isinstance(sec_spec, Mapping) else sec_spec
    return tls is True or tls == "auto"


def _scheduler_file_address(path: str) -> str:
    """The scheduler address recorded in a scheduler file (so it can be security-checked first)."""
    import json
    import time

    deadline = time.monotonic() + 60.0
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.25)  # the scheduler may still be starting (HPC job scripts)
    try:
        with open(path) as f:
            return str(json.load(f)["address"])
    except FileNotFoundError:
        raise ConfigError(f"scheduler file {path!r} does not exist") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"scheduler file {path!r} is not a Dask scheduler file ({e})") from None


def cluster_workers(client: Any) -> list[tuple[int | None, int]]:
    """``[(memory limit in bytes or None, threads)]``, one per worker of ``client``'s cluster, as its scheduler
    reports them; [] without a client, without workers or when the scheduler cannot be asked."""
    if client is None or not callable(getattr(client, "scheduler_info", None)):
        return []
    try:
        try:
            info = client.scheduler_info(n_workers=-1)
        except TypeError:  # older distributed: no n_workers argument
            info = client.scheduler_info()
        workers = list(dict(info.get("workers") or {}).values())
    except Exception:  # noqa: BLE001 - an unreachable scheduler fails later with its own error
        return []
    return [(int(w.get("memory_limit") or 0) or None, max(int(w.get("nthreads") or 1), 1)) for w in workers]


def worker_resources(client: Any) -> tuple[int | None, int]:
    """``(smallest worker memory limit in bytes or None, largest threads per worker)`` of ``client``'s
    cluster; ``(None, 1)`` without a client, without workers or without limits. Used to size data
    passes so that no task pushes a worker over its limit (a worker over it is restarted, not reported)."""
    workers = cluster_workers(client)
    limits = [m for m, _ in workers if m]
    threads = max([t for _, t in workers] or [1])
    return (min(limits) if limits else None), threads
