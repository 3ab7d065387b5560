"""The run context a mechanism receives: independent tasks, placement facts, the graphs it may build.

Built by the driver (``privcube.api``) once the run's Client is open (or without one); mechanisms use its
``map``, ``remote``, ``worker_memory``, ``sharded_marginals`` and ``chunked_release`` and never import this
package themselves.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from privcube.mechanisms.base import RunContext


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


def sharded_marginals(client: Any, domain: Any, cliques: Sequence[tuple[str, ...]],
                      truth: Mapping[Any, np.ndarray] | None, truth_futures: Mapping[Any, Any] | None = None) -> Any:
    """AIM+GReM's marginal table sharded over ``client``'s workers (``graphs.lazy_update.DistributedMarginals``)."""
    from privcube.graphs.lazy_update import DistributedMarginals

    return DistributedMarginals(client, domain, cliques, truth, truth_futures=truth_futures)


def chunked_release(x: Any, strategy: Any, kind: str, scale: float, key: tuple, noise: Any) -> np.ndarray:
    """HDMM's ``A x + noise`` as one task graph over a lazy chunked ``x`` (``graphs.hdmm.chunked_release``)."""
    from privcube.graphs.hdmm import chunked_release as release

    return release(x, strategy, kind, scale, key, noise)


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


def run_context(client: Any = None, *, checkpoint: Any = None, progress: Callable[[str, float], None] | None = None,
                resume: bool = False) -> RunContext:
    """The :class:`RunContext` of a run on ``client`` (None: this process only, dask's local scheduler for
    chunked graphs)."""
    if client is None:
        return RunContext(checkpoint=checkpoint, progress=progress, resume=resume, chunked_release=chunked_release,
                          data_oracle=functools.partial(data_oracle, None))
    from privcube.graphs.cluster.handle import worker_resources
    from privcube.graphs.scatter import map_tasks

    return RunContext(client=client, checkpoint=checkpoint, progress=progress, resume=resume,
                      map=functools.partial(map_tasks, client=client), remote=scheduler_is_remote(client),
                      worker_memory=lambda: worker_resources(client)[0],
                      sharded_marginals=functools.partial(sharded_marginals, client), chunked_release=chunked_release,
                      compute=functools.partial(client_compute, client), persist=functools.partial(client_persist, client),
                      data_oracle=functools.partial(data_oracle, client))
