"""Where a run's workers come from: cluster kinds (in-process, LocalCluster, a scheduler, Kubernetes, Slurm/PBS)
as registered plug-ins, and TLS.

Deployment lives here, apart from the task-graph modules of :mod:`privcube.graphs`: ``registry`` lists the
cluster kinds (each a small ``kind.ClusterKind`` class: ``inprocess``, ``local``, ``scheduler``,
``kubernetes``, ``hpc``) and checks a config's section, ``handle`` opens and closes a run's Client,
``kubernetes`` and ``hpc`` also render cluster specs, ``security`` holds the TLS rules. The driver
(``privcube.api``) is the only engine module that opens a cluster.
"""
from privcube.graphs.cluster.handle import ClusterHandle, resolve_cluster, worker_resources

__all__ = ["ClusterHandle", "resolve_cluster", "worker_resources"]
