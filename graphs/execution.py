"""The run context a mechanism receives: independent tasks, placement facts, the cluster kernels it may ask for.

Built by the driver (``privcube.api``) once the run's Client is open (or without one); mechanisms use its
generic ``map`` / ``compute`` / ``persist`` / ``scatter``, its placement facts (``remote``,
``worker_memory``) and the kernels of :mod:`privcube.graphs.kernels` by name, and never import this
package themselves.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from privcube.core.context import RunContext
from privcube.graphs.kernels import kernels_for


def scheduler_is_remote(client: Any) -> bool:
    """Whether ``client``'s scheduler is on another machine (not on this machine's loopback interface)."""
    from privcube.graphs.cluster.security import is_loopback_host

    if client is None:
        return False
    address = str(getattr(getattr(client, "scheduler", None), "address", "") or "")
    if address.startswith("inproc://"):
        return False
    host = urlsplit(address if "://" in address else f"tcp://{address}").hostname or ""
    return not is_loopback_host(host)


def data_oracle(client: Any, frame: Any, domain: Any) -> Any:
    """The single-table marginal engine over a dask DataFrame of codes (``graphs.marginals.DataOracle``)."""
    from privcube.graphs.marginals import DataOracle

    return DataOracle(frame, domain, client=client)


def client_compute(client: Any, *collections: Any) -> tuple[Any, ...]:
    """Compute dask collections on ``client``'s cluster; the results come to this process."""
    futures = client.compute(list(collections))
    try:
        return tuple(client.gather(futures))
    finally:
        for f in futures:
            f.release()


def client_persist(client: Any, *collections: Any) -> tuple[Any, ...]:
    """Persist dask collections on ``client``'s cluster (results stay on the workers)."""
    return tuple(client.persist(list(collections)))


def client_scatter(client: Any, data: Any) -> Any:
    """Put ``data`` on ``client``'s cluster once; the future stands for it inside the items of later maps."""
    return client.scatter(data, hash=False)


def run_context(client: Any = None, *, checkpoint: Any = None, progress: Callable[[str, float], None] | None = None,
                resume: bool = False) -> RunContext:
    """The :class:`RunContext` of a run on ``client`` (None: this process only, dask's local scheduler for
    chunked graphs)."""
    if client is None:
        return RunContext(checkpoint=checkpoint, progress=progress, resume=resume,
                          data_oracle=functools.partial(data_oracle, None), kernels=kernels_for(None))
    from privcube.graphs.cluster.handle import worker_resources
    from privcube.graphs.scatter import map_tasks

    return RunContext(client=client, checkpoint=checkpoint, progress=progress, resume=resume,
                      map=functools.partial(map_tasks, client=client), remote=scheduler_is_remote(client),
                      worker_memory=lambda: worker_resources(client)[0],
                      compute=functools.partial(client_compute, client), persist=functools.partial(client_persist, client),
                      scatter=functools.partial(client_scatter, client),
                      data_oracle=functools.partial(data_oracle, client), kernels=kernels_for(client))
