"""Cluster resolution: turn the config's ``cluster`` section (plus CLI flags) into a Client or None.

Spec ``{"type": ..., **options}``:

- ``none`` (also the default when spec is None): no client; dask's local threaded scheduler.
- ``threads``: no client; options ``num_workers`` (threads) set in dask config inside the context.
- ``local``: a ``distributed.LocalCluster`` with worker processes, sized to the machine by default;
  options ``n_workers``, ``threads_per_worker``, ``memory_limit`` (per worker, bytes or "4GB"),
  ``local_directory`` (spill directory), ``processes`` (default True), ``dashboard_address``
  (default: a free port on 127.0.0.1).
- ``address``: ``Client(address)`` to an existing scheduler; option ``address``.
- ``scheduler-file``: ``Client(scheduler_file=...)``; option ``scheduler_file``.
- ``kubernetes``: a dask-kubernetes ``KubeCluster`` (``privcube.graphs.kubernetes``).
- ``slurm``, ``pbs``: a dask-jobqueue cluster (``privcube.graphs.hpc``).

Every type also takes ``security`` (``auto`` or ``{tls: {ca_file, cert, key}}``, see
``privcube.graphs.security``) and ``allow_insecure``. A plain ``tcp://`` scheduler that is not on the
loopback interface is refused unless ``allow_insecure: true``; local clusters bind to 127.0.0.1.

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
_EXTERNAL = {"kubernetes", "slurm", "pbs"}
_SECURITY_KEYS = {"security", "allow_insecure"}


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

    def __init__(self, spec_type: str, options: dict[str, Any], security: Any = None,
                 allow_insecure: bool = False) -> None:
        self.type = spec_type
        self.options = options
        self.security = security
        self.allow_insecure = allow_insecure
        self.client: Any = None
        self.cluster: Any = None
        self._config_ctx: Any = None

    def __enter__(self) -> Any:
        from distributed import Client, LocalCluster

        from privcube.graphs.security import check_address_security, client_kwargs, local_cluster_kwargs

        t, o = self.type, self.options
        ckw = client_kwargs(self.security)
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
            # distributed reads dashboard_address=None as its default port (:8787 on every
            # interface); without an explicit address, serve it on a free loopback port instead.
            kw["dashboard_address"] = o.get("dashboard_address") or "127.0.0.1:0"
            kw.update(local_cluster_kwargs(self.security))
            self.cluster = LocalCluster(**kw)
            return self._connect(self.cluster, ckw)
        if t == "address":
            address = check_address_security(o["address"], self.security, self.allow_insecure)
            self.client = Client(address, **ckw)
            return self.client
        if t == "scheduler-file":
            address = _scheduler_file_address(str(o["scheduler_file"]))
            check_address_security(address, self.security, self.allow_insecure)
            self.client = Client(scheduler_file=str(o["scheduler_file"]), **ckw)
            return self.client
        if t == "kubernetes":
            from privcube.graphs.kubernetes import kube_cluster_from_spec

            self.cluster = kube_cluster_from_spec({"type": t, **o})
            return self._connect(self.cluster, ckw)
        if t in ("slurm", "pbs"):
            from privcube.graphs.hpc import jobqueue_cluster_from_spec

            extra = {"security": self.security, "protocol": "tls://"} if self.security is not None else {}
            self.cluster = jobqueue_cluster_from_spec({"type": t, **o}, **extra)
            check_address_security(self.cluster.scheduler_address, self.security, self.allow_insecure)
            return self._connect(self.cluster, ckw)
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
    from privcube.graphs.security import allow_insecure_from_spec, security_from_spec

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
        from privcube.graphs.kubernetes import validate_kubernetes_spec

        validate_kubernetes_spec({"type": spec_type, **spec})
    elif spec_type in ("slurm", "pbs"):
        from privcube.graphs.hpc import validate_hpc_spec

        if workers is not None and scheduler_address is None and scheduler_file is None:
            spec["jobs"] = _positive_int(spec_type, "workers", workers)
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
        workers = _positive_int(spec_type, "workers", workers)
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
    if spec_type == "address" and not spec.get("address"):
        raise ConfigError("cluster type 'address' needs key 'address' (or --scheduler-address)")
    if spec_type == "scheduler-file" and not spec.get("scheduler_file"):
        raise ConfigError("cluster type 'scheduler-file' needs key 'scheduler_file' (or --scheduler-file)")
    return ClusterHandle(spec_type, spec, security, allow_insecure)


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
