"""What a cluster kind is: a small class that checks, sizes and opens one ``cluster.type``.

A kind declares its options (``OPTIONS``: :class:`~privcube.core.params.Param` with a default, a type and a
one-line meaning), its abilities (from :data:`ABILITIES`) and the options that are paths on this machine;
it checks a config's section (:meth:`ClusterKind.validate`, run when the config is loaded and again when
the cluster is resolved), applies the ``--workers`` flag, checks the section the flags leave
(:meth:`ClusterKind.check`) and opens it for a :class:`~privcube.graphs.cluster.handle.ClusterHandle`
(:meth:`ClusterKind.open`). Kinds are looked up by name in :mod:`privcube.graphs.cluster.registry`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from privcube.core.errors import ConfigError
from privcube.core.params import Param

#: the abilities a kind may declare, with what each means (the reference is generated from these)
ABILITIES: dict[str, str] = {
    "in-process": "tasks run in this process: no dask.distributed Client, nothing to start or stop",
    "starts-workers": "privcube starts the scheduler and workers and stops them when the run ends",
    "connects": "privcube connects to a scheduler someone else runs and never stops it",
    "sized-before-start": "its workers and their memory are known before it starts (memory admission first)",
    "workers-flag": "--workers sets its size",
    "tls": "driver, scheduler and workers can talk TLS (cluster.security)",
    "batch-jobs": "workers are batch jobs that may queue before they join",
}

#: options every kind takes, read by privcube.graphs.cluster.security
SECURITY_OPTIONS: dict[str, Param] = {
    "security": Param(None, "auto | {tls: {ca_file, cert, key}}",
                      "TLS between driver, scheduler and workers (auto: temporary certificates)"),
    "allow_insecure": Param(False, "bool", "allow a plain tcp:// scheduler off the loopback interface"),
}
SECURITY_KEYS = frozenset(SECURITY_OPTIONS)


class ClusterKind:
    """One cluster kind (``cluster.type``). Subclasses set the class attributes and implement :meth:`open`."""

    #: the config name (``cluster: {type: NAME}``)
    name: ClassVar[str]
    #: one line for the reference documentation
    description: ClassVar[str] = ""
    #: what it can do: a subset of :data:`ABILITIES`
    abilities: ClassVar[frozenset[str]] = frozenset()
    #: the keys of its section besides ``type``, ``security`` and ``allow_insecure``
    OPTIONS: ClassVar[Mapping[str, Param]] = {}
    #: options that are paths on this machine: resolved against the config file's folder
    LOCAL_PATHS: ClassVar[tuple[str, ...]] = ()
    #: whether ``--workers`` replaces part of the section before it is checked (batch systems: the job count)
    WORKERS_FIRST: ClassVar[bool] = False

    def validate(self, options: dict[str, Any], security: Any = None) -> None:
        """Check the section's own keys (``options``: without ``type``, ``security``, ``allow_insecure``;
        ``security``: the section's ``security`` value); one ConfigError naming the key. By default every key
        must be declared in ``OPTIONS``."""
        for key in options:
            if key not in self.OPTIONS:
                raise ConfigError(f"unknown key {key!r} for cluster type {self.name!r}; "
                                  f"allowed: {sorted(set(self.OPTIONS) | SECURITY_KEYS)}")

    def with_workers(self, options: dict[str, Any], workers: int) -> tuple[str, dict[str, Any]]:
        """``(type, options)`` once the ``--workers`` flag (a positive integer) is applied."""
        raise ConfigError(f"workers={workers} cannot apply to cluster type {self.name!r}")

    def check(self, options: dict[str, Any], *, security_spec: Any, security: Any, flag: str | None) -> None:
        """Check the section the CLI flags left, before anything starts (``flag``: the flag that set the size,
        if any); nothing more by default."""

    def planned_size(self, options: Mapping[str, Any]) -> dict[str, Any] | None:
        """``{workers, threads, worker_limit, kind}`` it will have, when known before it starts (memory
        admission), else None: the workers are asked once connected."""
        return None

    def open(self, handle: Any) -> Any:
        """Start or connect what ``handle`` (a ClusterHandle: ``options``, ``security``, ``allow_insecure``)
        asks for, recording what it created on the handle; the Client, or None for an in-process scheduler."""
        raise NotImplementedError


def positive_int(spec_type: str, key: str, value: Any) -> int:
    """Validate a positive integer option, naming the key (``workers`` is the ``--workers`` flag)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        if key == "workers":
            raise ConfigError(f"--workers must be a positive integer, got {value!r}")
        raise ConfigError(f"cluster.{key} ({spec_type} cluster) must be a positive integer, got {value!r}")
    return value


__all__ = ["ABILITIES", "ClusterKind", "SECURITY_KEYS", "SECURITY_OPTIONS", "positive_int"]
