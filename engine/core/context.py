"""The run context: what a mechanism, the synthesizer or relational synthesis may use of the run's execution.

The driver builds it (``privcube.graphs.execution.run_context``); the layers that consume it never import
``privcube.graphs``. Its defaults run everything in this process, so a context built here with no
arguments is a complete, cluster-free execution (dask's local scheduler for task graphs).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: a titled bar redraws its elapsed time this often while no item finishes
HEARTBEAT_S = 1.0


def local_map(fn: Callable[[Any], Any], items: Sequence[Any], *, cost: Callable[[Any], float] | None = None,
              label: str = "task", title: str | None = None) -> list[Any]:
    """``[fn(x) for x in items]`` in this process, in order: the ``map`` of a run without a cluster (and of
    one with a single item). ``title`` draws a progress bar on stderr (one step per item, elapsed time
    redrawn every second); ``cost`` and ``label`` only matter on a cluster."""
    items = list(items)
    if not title:
        return [fn(x) for x in items]
    from privcube.core.progress import progress

    out = []
    with progress(title, len(items), heartbeat=HEARTBEAT_S) as update:
        for x in items:
            out.append(fn(x))
            update(1)
    return out


def local_compute(*collections: Any) -> tuple[Any, ...]:
    """``dask.compute`` with dask's default scheduler: the ``compute`` of a run without a cluster."""
    import dask

    return dask.compute(*collections)


def local_persist(*collections: Any) -> tuple[Any, ...]:
    """``dask.persist`` with dask's default scheduler: the ``persist`` of a run without a cluster."""
    import dask

    return dask.persist(*collections)


def local_scatter(data: Any) -> Any:
    """``data`` itself: the ``scatter`` of a run without a cluster (it is already where the tasks run)."""
    return data


@dataclass
class RunContext:
    """What a mechanism may use of the run's execution.

    * ``map(fn, items, *, cost=, label=, title=)`` runs independent tasks (on the cluster when there is one,
      largest ``cost`` first; results in input order);
    * ``compute`` / ``persist`` run dask collections (task graphs of the real data) on the run's cluster
      (``persist`` leaves the results there);
    * ``scatter(data)`` puts data on the cluster once and returns a handle to pass inside the items of later
      ``map`` calls, where each task receives the data itself (locally: the data);
    * ``client`` is the opaque cluster handle (None locally); ``remote`` says the scheduler is on another
      machine (ship work to the data, not data to the driver); ``worker_memory()`` is the smallest worker's
      memory limit in bytes (None: unknown / no cluster), asked when sizing work because batch and adaptive
      clusters gain workers late;
    * ``progress(message, fraction)``, ``checkpoint`` (``save(round, state)`` / ``load()``) and ``resume``
      are the run's reporting and restart state;
    * ``data_oracle(frame, domain)`` is the single-table marginal engine (a
      ``privcube.core.oracle.MarginalOracle`` counting a dask DataFrame of codes where it lives; None: not
      available, the caller counts with ``compute``);
    * ``kernel(name)`` is a named cluster kernel the graphs layer provides (``privcube.graphs.kernels``
      lists them), or None when it is not available here: the caller then does the work in this process.
    """

    client: Any = None
    checkpoint: Any = None  # an object with save(round, state) / load() (see privcube.storage.checkpoint)
    progress: Callable[[str, float], None] | None = None
    resume: bool = False
    map: Callable[..., list[Any]] = local_map
    remote: bool = False
    worker_memory: Callable[[], int | None] = lambda: None
    compute: Callable[..., tuple[Any, ...]] = local_compute
    persist: Callable[..., tuple[Any, ...]] = local_persist
    scatter: Callable[[Any], Any] = local_scatter
    data_oracle: Callable[[Any, Any], Any] | None = None
    kernels: Mapping[str, Callable[..., Any]] = field(default_factory=dict)

    def kernel(self, name: str) -> Callable[..., Any] | None:
        """The cluster kernel registered as ``name`` for this run, or None (do the work in this process)."""
        return self.kernels.get(name)


__all__ = ["HEARTBEAT_S", "RunContext", "local_compute", "local_map", "local_persist", "local_scatter"]
