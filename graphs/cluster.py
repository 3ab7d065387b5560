"""Cluster resolution: turn the config's ``cluster`` section (plus CLI flags) into a Client or None.

Spec ``{"type": ..., **options}``:

- ``none`` (also the default when spec is None): no client; dask's local threaded scheduler.
- ``threads``: no client; options ``num_workers`` (threads) set in dask config inside the context.
- ``local``: a ``distributed.LocalCluster`` with worker processes, sized to the machine by default;
  options ``n_workers``, ``threads_per_worker``, ``memory_limit`` (per worker, bytes or "4GB"),
  ``local_directory`` (spill directory), ``processes`` (default True), ``dashboard_address``
  (default None: no dashboard).
- ``address``: ``Client(address)`` to an existing scheduler; option ``address``.
- ``scheduler-file``: ``Client(scheduler_file=...)``; option ``scheduler_file``.
- ``kubernetes``, ``slurm``, ``pbs``: ConfigError "not available yet".

CLI flags override the spec: ``scheduler_address`` → type address, ``scheduler_file`` → type
scheduler-file, ``workers`` → ``n_workers`` of a local cluster (a None/"none" spec becomes local) or
``num_workers`` of threads. ``ClusterHandle`` closes only what it created (for address/scheduler-file
that is the Client, never the remote cluster).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import psutil

from privcube.errors import ConfigError

_ALLOWED: dict[str, set[str]] = {
    "none": set(),
    "threads": {"num_workers"},
    "local": {"n_workers", "threads_per_worker", "memory_limit", "local_directory", "processes",
              "dashboard_address"},
    "address": {"address"},
    "scheduler-file": {"scheduler_file"},
}
_LATER = {"kubernetes", "slurm", "pbs"}


def _positive_int(spec_type: str, key: str, value: Any) -> int:
    """Validate a positive integer option, naming the key."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"cluster ({spec_type}) option {key!r} must be a positive integer, got {value!r}")
    return value


def local_defaults(n_workers: int | None = None, threads_per_worker: int | None = None) -> dict[str, Any]:
    """LocalCluster sizing for this machine: one thread per worker, 80% of RAM split over workers."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    tpw = threads_per_worker or 1
    nw = n_workers or max(1, cpus // tpw)
    mem = int(psutil.virtual_memory().total * 0.8 / nw)
    return {"n_workers": nw, "threads_per_worker": tpw, "memory_limit": mem}


class ClusterHandle:
    """Context manager yielding a ``distributed.Client`` (or None) and closing what it created."""

    def __init__(self, spec_type: str, options: dict[str, Any]) -> None:
        self.type = spec_type
        self.options = options
        self.client: Any = None
        self.cluster: Any = None
        self._config_ctx: Any = None

    def __enter__(self) -> Any:
        from distributed import Client, LocalCluster

        t, o = self.type, self.options
        if t == "none":
            return None
        if t == "threads":
            import dask

            cfg: dict[str, Any] = {"scheduler": "threads"}
            if "num_workers" in o:
                cfg["num_workers"] = o["num_workers"]
            self._config_ctx = dask.config.set(cfg)
            self._config_ctx.__enter__()
            return None
        if t == "local":
            kw = local_defaults(o.get("n_workers"), o.get("threads_per_worker"))
            if "memory_limit" in o:
                kw["memory_limit"] = o["memory_limit"]
            if o.get("local_directory") is not None:
                kw["local_directory"] = str(o["local_directory"])
            kw["processes"] = bool(o.get("processes", True))
            kw["dashboard_address"] = o.get("dashboard_address")
            self.cluster = LocalCluster(**kw)
            try:
                self.client = Client(self.cluster)
            except BaseException:
                self.cluster.close()
                self.cluster = None
                raise
            return self.client
        if t == "address":
            self.client = Client(o["address"])
            return self.client
        if t == "scheduler-file":
            self.client = Client(scheduler_file=str(o["scheduler_file"]))
            return self.client
        raise ConfigError(f"unknown cluster type {t!r}")  # unreachable: validated in resolve_cluster

    def close(self) -> None:
        """Close the client and cluster this handle created (idempotent)."""
        if self._config_ctx is not None:
            self._config_ctx.__exit__(None, None, None)
            self._config_ctx = None
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def resolve_cluster(spec: Mapping[str, Any] | None, *, scheduler_address: str | None = None,
                    scheduler_file: str | os.PathLike[str] | None = None,
                    workers: int | None = None) -> ClusterHandle:
    """Validate a cluster spec (CLI flags override it) and return an unopened ``ClusterHandle``."""
    if spec is not None and not isinstance(spec, Mapping):
        raise ConfigError(f"cluster spec must be a mapping with a 'type' key, got {spec!r}")
    spec = dict(spec or {})
    spec_type = str(spec.pop("type", "none"))
    if spec_type in _LATER:
        raise ConfigError(f"cluster type {spec_type!r} is not available yet")
    if spec_type not in _ALLOWED:
        raise ConfigError(f"unknown cluster type {spec_type!r}; choose one of "
                          f"{sorted(_ALLOWED) + sorted(_LATER)}")
    for key in spec:
        if key not in _ALLOWED[spec_type]:
            raise ConfigError(f"unknown key {key!r} for cluster type {spec_type!r}; "
                              f"allowed: {sorted(_ALLOWED[spec_type])}")
    if scheduler_address is not None and scheduler_file is not None:
        raise ConfigError("give either scheduler_address or scheduler_file, not both")
    if scheduler_address is not None:
        spec_type, spec = "address", {"address": scheduler_address}
    elif scheduler_file is not None:
        spec_type, spec = "scheduler-file", {"scheduler_file": str(scheduler_file)}
    elif workers is not None:
        workers = _positive_int(spec_type, "workers", workers)
        if spec_type == "threads":
            spec["num_workers"] = workers
        elif spec_type in ("none", "local"):
            spec_type = "local"
            spec["n_workers"] = workers
        else:
            raise ConfigError(f"workers={workers} cannot apply to cluster type {spec_type!r}")

    for key in ("n_workers", "threads_per_worker", "num_workers"):
        if key in spec:
            _positive_int(spec_type, key, spec[key])
    if spec_type == "address" and not spec.get("address"):
        raise ConfigError("cluster type 'address' needs key 'address' (or --scheduler-address)")
    if spec_type == "scheduler-file" and not spec.get("scheduler_file"):
        raise ConfigError("cluster type 'scheduler-file' needs key 'scheduler_file' (or --scheduler-file)")
    return ClusterHandle(spec_type, spec)
