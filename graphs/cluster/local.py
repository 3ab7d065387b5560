"""A LocalCluster on this machine (``cluster: {type: local}``): sized to the machine, spilling to a private folder.

By default one single-threaded worker per usable CPU, 80% of the memory available to this process split
over them (``local_defaults``). Workers spill partial (exact, pre-noise) counts to disk under memory
pressure, so every LocalCluster started here gets a private scratch folder ``privcube-dask-PID-XXXX``
(mode 0o700, made by ``private_scratch_dir``) under ``local_directory`` or else dask's
``temporary-directory`` / the system temp folder; the scheduler's and every worker's work, spill and log
space live in it, and it is deleted when the cluster closes, on errors too. A folder left behind by a
killed driver is removed by the next LocalCluster started under the same parent (it holds a lock while in
use). A LocalCluster (or thread pool) larger than this machine holds is refused before anything starts
(``check_machine_size``). Workers bind to 127.0.0.1.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from privcube.core.errors import ConfigError
from privcube.core.params import Param
from privcube.graphs.cluster.kind import ClusterKind

SCRATCH_PREFIX = "privcube-dask-"
_SCRATCH_LOCK = ".privcube-scratch.lock"


class LocalKind(ClusterKind):
    """A ``distributed.LocalCluster`` with worker processes, started and closed by the run."""

    name = "local"
    description = "a LocalCluster of worker processes on this machine, sized to it, spilling to a private folder"
    abilities = frozenset({"starts-workers", "sized-before-start", "workers-flag", "tls"})
    OPTIONS = {
        "n_workers": Param(None, "int >= 1", "worker processes (default: one per usable CPU / threads_per_worker)"),
        "threads_per_worker": Param(1, "int >= 1", "threads of each worker"),
        "memory_limit": Param(None, "bytes | size such as 4GB", "memory limit of each worker (default: 80% of the "
                                                                 "memory available, split over the workers)"),
        "local_directory": Param(None, "path", "parent of the private spill folder (default: dask's "
                                               "temporary-directory or the system temp folder)"),
        "processes": Param(True, "bool", "workers are processes (false: threads of this process)"),
        "dashboard_address": Param(None, "host:port", "where the dashboard listens (default: a free port on "
                                                      "127.0.0.1)"),
    }
    LOCAL_PATHS = ("local_directory",)

    def with_workers(self, options: dict[str, Any], workers: int) -> tuple[str, dict[str, Any]]:
        return self.name, {**options, "n_workers": workers}

    def check(self, options: dict[str, Any], *, security_spec: Any, security: Any, flag: str | None) -> None:
        """More workers than this machine can hold are refused before anything starts."""
        check_machine_size(self.name, options, flag)

    def planned_size(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Workers and memory limits as ``local_defaults`` will size them (no distributed import)."""
        from privcube.core.machine import cores, machine_memory

        tpw = int(options.get("threads_per_worker") or 1)
        nw = int(options.get("n_workers") or max(1, cores() // tpw))
        limit = options.get("memory_limit")
        if limit is None:
            limit = int(0.8 * machine_memory() / nw)
        elif isinstance(limit, str):
            from dask.utils import parse_bytes

            limit = parse_bytes(limit)
        return {"workers": nw, "threads": tpw, "worker_limit": int(limit) or None, "kind": "local"}

    def open(self, handle: Any) -> Any:
        """Start the LocalCluster in its private scratch folder and connect a Client to it."""
        import dask
        from distributed import LocalCluster

        from privcube.graphs.cluster.security import client_kwargs, local_cluster_kwargs

        o = handle.options
        kw = local_defaults(o.get("n_workers"), o.get("threads_per_worker"))
        if "memory_limit" in o:
            kw["memory_limit"] = o["memory_limit"]
        handle.scratch_dir, handle._scratch_lock = private_scratch_dir(o.get("local_directory"))
        kw["local_directory"] = handle.scratch_dir
        kw["processes"] = bool(o.get("processes", True))
        # distributed reads dashboard_address=None as its default port (:8787 on every
        # interface); without an explicit address, serve it on a free loopback port instead.
        kw["dashboard_address"] = o.get("dashboard_address") or "127.0.0.1:0"
        # worker processes talk over TCP bound to loopback; processes=False without TLS uses
        # distributed's in-process transport (inproc://), which takes no host at all
        kw.update(local_cluster_kwargs(handle.security, loopback=kw["processes"] or handle.security is not None))
        # the scheduler (created in this process) takes its work folder from the config
        with dask.config.set({"temporary-directory": handle.scratch_dir}):
            handle.cluster = LocalCluster(**kw)
        return handle._connect(handle.cluster, client_kwargs(handle.security))


#: at most this many LocalCluster workers (or in-process threads) per core this process may use
MAX_PER_CORE = 4


def check_machine_size(spec_type: str, options: Mapping[str, Any], flag: str | None = None) -> None:
    """Refuse, in one line, a LocalCluster (or thread pool) this machine cannot hold: more than
    MAX_PER_CORE workers (threads) per core, or more workers than its available memory holds at the
    memory one idle worker takes (``privcube.core.machine.WORKER_BASE``). ``flag``: the CLI flag that set
    the size (else the config key is named)."""
    from privcube.core.machine import WORKER_BASE, available_memory, cores, gib

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


__all__ = ["LocalKind", "MAX_PER_CORE", "SCRATCH_PREFIX", "check_machine_size", "local_defaults",
           "private_scratch_dir", "remove_scratch_dir"]
