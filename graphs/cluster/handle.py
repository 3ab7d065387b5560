"""Cluster resolution: turn the config's ``cluster`` section (plus CLI flags) into a Client or None.

Spec ``{"type": ..., **options}``; the type names a cluster kind (:mod:`privcube.graphs.cluster.registry`),
which declares its options and abilities, checks them and opens the cluster. Built in: ``none`` (the
default: dask's threaded scheduler) and ``threads`` (:mod:`~privcube.graphs.cluster.inprocess`), ``local``
(a LocalCluster in a private spill folder, :mod:`~privcube.graphs.cluster.local`), ``address`` and
``scheduler-file`` (a scheduler privcube does not start, :mod:`~privcube.graphs.cluster.scheduler`),
``kubernetes`` (:mod:`~privcube.graphs.cluster.kubernetes`) and ``slurm``/``pbs``
(:mod:`~privcube.graphs.cluster.hpc`).

Every type also takes ``security`` (``auto`` or ``{tls: {ca_file, cert, key}}``, see
``privcube.graphs.cluster.security``) and ``allow_insecure``. A plain ``tcp://`` scheduler that is not on the
loopback interface is refused unless ``allow_insecure: true``; local clusters bind to 127.0.0.1.

CLI flags override the spec: ``scheduler_address`` → type address, ``scheduler_file`` → type
scheduler-file, ``workers`` → the kind's size (``n_workers`` of a local cluster, which a None/"none" spec
becomes; ``num_workers`` of threads; the job count of Slurm/PBS). ``ClusterHandle`` closes only what it
created (for address/scheduler-file that is the Client, never the remote cluster).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from privcube.core.errors import ConfigError
from privcube.graphs.cluster.kind import positive_int
from privcube.graphs.cluster.registry import cluster_kind, split_section


def _workers_flag(value: Any) -> int:
    """The ``--workers`` value, a positive integer (ConfigError naming the flag)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--workers must be a positive integer, got {value!r}")
    return value


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
        """Start or connect what the spec asks for (its kind does); the Client, or None for in-process schedulers."""
        return cluster_kind(self.type).open(self)

    def _connect(self, cluster: Any, ckw: dict[str, Any]) -> Any:
        """A Client of ``cluster`` we started (closed again if the Client cannot connect)."""
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
        from privcube.graphs.cluster.local import remove_scratch_dir

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

    spec_type, spec, sec_spec, allow_insecure = split_section(spec or {})
    if not isinstance(allow_insecure, bool):
        raise ConfigError(f"cluster.allow_insecure must be true or false, got {allow_insecure!r}")
    allow_insecure = allow_insecure or allow_insecure_from_spec(sec_spec)
    security = security_from_spec(sec_spec)
    kind = cluster_kind(spec_type)
    if workers is not None and scheduler_address is None and scheduler_file is None and kind.WORKERS_FIRST:
        spec_type, spec = kind.with_workers(spec, _workers_flag(workers))
        workers = None
    kind.validate(spec, sec_spec)
    if scheduler_address is not None and scheduler_file is not None:
        raise ConfigError("give either scheduler_address or scheduler_file, not both")
    if scheduler_address is not None:
        spec_type, spec = "address", {"address": scheduler_address}
    elif scheduler_file is not None:
        spec_type, spec = "scheduler-file", {"scheduler_file": str(scheduler_file)}
    elif workers is not None:
        spec_type, spec = kind.with_workers(spec, _workers_flag(workers))
    for key in ("n_workers", "threads_per_worker", "num_workers"):
        if key in spec:
            positive_int(spec_type, key, spec[key])
    cluster_kind(spec_type).check(spec, security_spec=sec_spec, security=security,
                                  flag="--workers" if workers is not None else None)
    return ClusterHandle(spec_type, spec, security, allow_insecure)


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
