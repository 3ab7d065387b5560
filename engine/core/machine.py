"""What this machine can hold: CPUs and memory this process may use, cgroup (container) limits included.

Used to size and admit jobs before anything starts (:mod:`privcube.admission`, the LocalCluster bound in
``privcube.graphs.cluster.local``); imports neither ``distributed`` nor the cluster layer.
"""
from __future__ import annotations

#: resident memory of one dask worker process once it has run privcube's tasks (measured: 210-280 MiB)
WORKER_BASE = 230 * 2**20

_CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # v2
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"))  # v1


def _cgroup_limit_and_usage() -> tuple[int, int] | None:
    """(limit, usage) of this process's memory cgroup, or None without a limit."""
    for limit_file, usage_file in _CGROUP_FILES:
        try:
            with open(limit_file) as f:
                text = f.read().strip()
            if text == "max":
                return None
            limit = int(text)
            if limit >= 2**60:  # v1's "no limit"
                return None
            with open(usage_file) as f:
                return limit, int(f.read().strip())
        except (OSError, ValueError):
            continue
    return None


def available_memory() -> int:
    """Bytes this process could still allocate: the machine's available memory, or less under a cgroup limit
    (the limit minus what the cgroup uses now)."""
    import psutil

    free = int(psutil.virtual_memory().available)
    cg = _cgroup_limit_and_usage()
    return min(free, max(0, cg[0] - cg[1])) if cg is not None else free


def machine_memory() -> int:
    """Total memory this process may use: the machine's, or the cgroup limit when lower."""
    import psutil

    total = int(psutil.virtual_memory().total)
    cg = _cgroup_limit_and_usage()
    return min(total, cg[0]) if cg is not None else total


def cores() -> int:
    """CPUs this process may use (affinity and cgroup CPU quota, as dask counts them)."""
    from dask.system import CPU_COUNT

    return int(CPU_COUNT)


def resident() -> int:
    """This process's resident memory now, in bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def gib(n: float) -> str:
    """Bytes as a short human figure (``1.2 GiB``, ``340 MiB``, ``3.4 TiB``)."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n / 2**20:.0f} MiB"


__all__ = ["WORKER_BASE", "available_memory", "cores", "gib", "machine_memory", "resident"]
