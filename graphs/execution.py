"""The run context a mechanism receives on a cluster: independent tasks, placement facts, the client.

Built by the driver (``privcube.api``) once the run's Client is open; mechanisms use its ``map``,
``remote`` and ``worker_memory`` and never import this package themselves.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

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


def run_context(client: Any = None, *, checkpoint: Any = None, progress: Callable[[str, float], None] | None = None,
                resume: bool = False) -> RunContext:
    """The :class:`RunContext` of a run on ``client`` (None: this process only)."""
    if client is None:
        return RunContext(checkpoint=checkpoint, progress=progress, resume=resume)
    from privcube.graphs.cluster.handle import worker_resources
    from privcube.graphs.scatter import map_tasks

    return RunContext(client=client, checkpoint=checkpoint, progress=progress, resume=resume,
                      map=functools.partial(map_tasks, client=client), remote=scheduler_is_remote(client),
                      worker_memory=lambda: worker_resources(client)[0])
