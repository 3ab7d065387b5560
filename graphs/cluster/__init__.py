"""Where a run's workers come from: LocalCluster, scheduler file, Kubernetes, Slurm/PBS, and TLS.

Deployment lives here, apart from the task-graph modules of :mod:`privcube.graphs`: ``handle`` opens
and closes a run's Client, ``kubernetes`` and ``hpc`` validate and render cluster specs, ``security``
holds the TLS rules. The driver (``privcube.api``) is the only engine module that opens a cluster.
"""
from privcube.graphs.cluster.handle import ClusterHandle, resolve_cluster, worker_resources

__all__ = ["ClusterHandle", "resolve_cluster", "worker_resources"]
