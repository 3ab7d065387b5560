"""Cluster kinds as plug-ins: every ``cluster.type`` by name, and the check of a config's ``cluster`` section.

A kind is a small :class:`~privcube.graphs.cluster.kind.ClusterKind` class; the built-in ones are listed
below as import strings and imported on first use. Another package adds one under the entry-point group
``privcube.cluster_kinds``; a script or a test adds one with ``CLUSTER_KINDS.register(name,
"module:Class")``. The config loader (:func:`privcube.config.parse_cluster`) asks
:func:`parse_cluster_section` to check its section; nothing here imports ``distributed``.
"""
from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from privcube.core.errors import ConfigError
from privcube.core.config_files import resolve_path
from privcube.core.plugins import Registry

CLUSTER_KINDS = Registry("cluster kind", "privcube.cluster_kinds", {
    "address": "privcube.graphs.cluster.scheduler:AddressKind",
    "local": "privcube.graphs.cluster.local:LocalKind",
    "none": "privcube.graphs.cluster.inprocess:NoCluster",
    "scheduler-file": "privcube.graphs.cluster.scheduler:SchedulerFileKind",
    "threads": "privcube.graphs.cluster.inprocess:ThreadsKind",
    "kubernetes": "privcube.graphs.cluster.kubernetes:KubernetesKind",
    "pbs": "privcube.graphs.cluster.hpc:PBSKind",
    "slurm": "privcube.graphs.cluster.hpc:SlurmKind",
})


def cluster_kind(name: str) -> Any:
    """The kind registered as ``name`` (an instance); an unknown name is one ConfigError listing the known ones."""
    if name not in CLUSTER_KINDS:
        raise ConfigError(f"unknown cluster type {name!r}; choose one of {CLUSTER_KINDS.names()}")
    return CLUSTER_KINDS.get(name, "cluster.type")()


def split_section(spec: Mapping[str, Any]) -> tuple[str, dict[str, Any], Any, Any]:
    """``(type, own options, security, allow_insecure)`` of a cluster section (type ``none`` when absent)."""
    options = dict(spec)
    spec_type = str(options.pop("type", "none"))
    return spec_type, options, options.pop("security", None), options.pop("allow_insecure", False)


def parse_cluster_section(cluster: Any, base: Path | None = None) -> dict[str, Any]:
    """The ``cluster`` section as a checked mapping (a bare name means ``{type: name}``; absent: ``{}``).

    Its kind checks its own keys (the checks of the run's flags and of TLS files come when the cluster is
    resolved). With ``base`` (the config file's folder), paths read on this machine are resolved against it
    like every other relative path of the config: the kind's ``LOCAL_PATHS`` (``local_directory`` of a
    ``local`` cluster, ``scheduler_file``) and the ``security.tls`` files. Paths of remote clusters
    (kubernetes, slurm, pbs) are left as written: they are read on other machines.
    """
    cluster = cluster or {}
    if isinstance(cluster, str):
        cluster = {"type": cluster}
    if not isinstance(cluster, Mapping):
        raise ConfigError("cluster: expected a mapping such as {type: local}")
    cluster = copy.deepcopy(dict(cluster))
    spec_type, options, security, _ = split_section(cluster)
    kind = cluster_kind(spec_type)
    kind.validate(options, security)
    if base is None:
        return cluster
    for key in kind.LOCAL_PATHS:
        if isinstance(cluster.get(key), str):
            cluster[key] = resolve_path(os.path.expanduser(cluster[key]), base)
    tls = cluster.get("security", {}).get("tls") if isinstance(cluster.get("security"), Mapping) else None
    if isinstance(tls, Mapping):
        cluster["security"] = {**cluster["security"], "tls": {
            k: resolve_path(os.path.expanduser(v), base) if isinstance(v, str) else v for k, v in tls.items()}}
    return cluster


__all__ = ["CLUSTER_KINDS", "cluster_kind", "parse_cluster_section", "split_section"]
