"""Admission control: a job whose estimated peak memory does not fit where it would run is refused in one
line, before any data is read (:mod:`privcube.memory_plan` makes the estimate).

What a job is compared with: in this process (``cluster: threads`` or none), the memory this machine has
available (cgroup-aware); on a LocalCluster, each worker's memory limit, and the machine's available memory
for the driver and every worker together (checked before the cluster starts); on a scheduler privcube does
not start (address, scheduler file, Kubernetes, Slurm/PBS, or a client given from Python), each worker's
memory limit as the scheduler reports it, and this machine's memory for the driver, checked once the
client is connected, still before data is read.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from privcube.core.errors import MemoryLimitError
from privcube.core.machine import available_memory, gib, resident
from privcube.memory_plan import DRIVER_BASE, Layout, MemoryEstimate, estimate_peak

#: share of a worker's memory limit its estimated peak may take (dask pauses a worker at 80 %, restarts it at 95 %)
WORKER_FRACTION = 0.95
REMEDY = "use fewer or smaller marginals (coarser attributes, a lower k)"


def planned_layout(spec: Mapping[str, Any] | None) -> Layout:
    """The layout a resolved cluster spec (``{"type": ..., **options}``, CLI flags applied) will have, known
    before anything starts: its cluster kind says (threads in this process, a LocalCluster's workers sized as
    ``privcube.graphs.cluster.local.local_defaults`` sizes them), or ``remote`` (asked once connected)."""
    from privcube.graphs.cluster.registry import cluster_kind, split_section

    kind, options, _, _ = split_section(spec or {})
    size = cluster_kind(kind).planned_size(options)
    return Layout(**size) if size is not None else Layout(workers=0, threads=1, kind="remote")


def client_layout(client: Any) -> Layout | None:
    """The layout of a connected cluster as its scheduler reports it (workers, the smallest memory limit, the
    most threads); None when it reports no worker."""
    from privcube.graphs.cluster.handle import cluster_workers

    workers = cluster_workers(client)
    if not workers:
        return None
    limits = [m for m, _ in workers if m]
    return Layout(workers=len(workers), threads=max(t for _, t in workers),
                  worker_limit=min(limits) if limits else None, kind="remote")


def room() -> int:
    """Bytes a job started from this process may use: what the machine has available plus the part of the
    driver's base memory already resident (counted in the estimate, not asked of the machine again)."""
    return available_memory() + min(resident(), DRIVER_BASE)


def refusal(estimate: MemoryEstimate, available: int | None) -> str | None:
    """The one-line refusal of an estimate that does not fit, or None: the job over ``available`` bytes (the
    driver alone when the workers run elsewhere), or a worker over ``WORKER_FRACTION`` of its memory limit."""
    lay = estimate.layout
    if available is not None:
        if lay.kind == "remote":  # the workers are elsewhere: only the driver uses this machine
            big = max(estimate.steps, key=lambda s: s.driver)
            need, whom, there = big.driver, "this job's driver process", "this machine has available"
        else:
            big, need, whom = estimate.largest, estimate.peak, "this job"
            there = "this machine has available" + (f" for the driver and {lay.workers} workers" if lay.workers else "")
        if need > available:
            return (f"memory: {whom} needs about {gib(need)} at its peak ({big.name}: {big.what}), more than the "
                    f"{gib(available)} {there}; {REMEDY}, or run it where more memory is available"
                    + ("; `privcube plan` shows the estimate" if estimate.plannable else ""))
    if lay.workers and lay.worker_limit:
        step = max(estimate.steps, key=lambda s: s.worker)
        if step.worker > WORKER_FRACTION * lay.worker_limit:
            return (f"memory: each dask worker needs about {gib(step.worker)} at its peak ({step.name}: {step.what}), "
                    f"more than its memory limit of {gib(lay.worker_limit)}; give the workers more memory "
                    f"(cluster.memory_limit{', fewer workers' if lay.kind == 'local' else ''}), fewer threads per "
                    f"worker, or {REMEDY}")
    return None


def admit(config: Any, spec: Mapping[str, Any] | None, plan: Any = None) -> MemoryEstimate | None:
    """Refuse (MemoryLimitError) a single-table job (a JobConfig) that would not fit where ``spec`` (the resolved
    cluster spec) runs it; called before any data is read and before a LocalCluster starts. Returns the
    estimate, or None for a remote cluster (then :func:`admit_client` checks once it is connected)."""
    layout = planned_layout(spec)
    return None if layout.kind == "remote" else _admit_on(config, plan, layout)


def admit_client(config: Any, client: Any, plan: Any = None) -> MemoryEstimate | None:
    """Refuse a single-table job that would not fit a connected cluster's workers (their memory limits as its
    scheduler reports them) or this machine's memory for the driver; before any data is read."""
    layout = client_layout(client)
    return None if layout is None else _admit_on(config, plan, layout)


def _admit_on(config: Any, plan: Any, layout: Any) -> MemoryEstimate:
    """The estimate on ``layout``, or MemoryLimitError with the refusal line when it does not fit."""
    estimate = estimate_peak(config, plan, layout)
    line = refusal(estimate, room())
    if line:
        raise MemoryLimitError(line)
    return estimate


def plan_memory(config: Any, plan: Any = None) -> dict[str, Any]:
    """``privcube plan``'s ``memory``: the estimate on the config's cluster, whether a run would fit (``fits``;
    None on a remote cluster, whose workers are asked when the run starts) and, when it would not, the line
    it would be refused with. The memory available now is not recorded: the plan of a job stays the same."""
    from privcube.config import parse_cluster

    layout = planned_layout(parse_cluster({"cluster": config.cluster}))
    estimate = estimate_peak(config, plan, layout)
    out = estimate.to_dict()
    out["worker_limit_bytes"] = layout.worker_limit
    line = refusal(estimate, None if layout.kind == "remote" else room())
    out["fits"] = None if layout.kind == "remote" and not layout.worker_limit else line is None
    if line:
        out["refusal"] = line
    return out


__all__ = ["REMEDY", "WORKER_FRACTION", "admit", "admit_client", "client_layout", "plan_memory", "planned_layout",
           "refusal", "room"]
