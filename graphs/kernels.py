"""The registry of cluster kernels: named task graphs a mechanism asks its run context for.

A mechanism names a kernel (``ctx.kernel("sharded-marginals")``) and, when the answer is None, does the work
in this process. Each entry maps the name to a builder ``(client) -> kernel | None`` (None: the kernel needs
a cluster and there is none). The kernels take the mechanism's numpy kernels, data classes and generic
operators as arguments, so nothing here imports a mechanism:

- ``sharded-marginals``: ``(domain, cliques, truth, truth_futures=None, *, shard, subsets)`` -> a marginal
  table of ``shard`` tables spread over the workers (:mod:`privcube.graphs.lazy_update`; needs a client);
- ``chunked-release``: ``(x, operator, kind, scale, key, noise)`` -> ``operator @ x + noise`` computed as one
  task graph over a lazy chunked exact vector (:mod:`privcube.graphs.release`; dask's local scheduler
  without a client).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

Kernel = Callable[..., Any]


def _sharded_marginals(client: Any) -> Kernel | None:
    """``graphs.lazy_update.sharded_marginals`` on ``client`` (None without a cluster)."""
    if client is None:
        return None
    from privcube.graphs.lazy_update import sharded_marginals

    return functools.partial(sharded_marginals, client)


def _chunked_release(client: Any) -> Kernel | None:
    """``graphs.release.chunked_release`` (its graph computes on the run's default scheduler)."""
    from privcube.graphs.release import chunked_release

    return chunked_release


#: kernel name -> builder ``(client) -> kernel | None``; adding a kernel is one module plus one line here
KERNELS: dict[str, Callable[[Any], Kernel | None]] = {
    "sharded-marginals": _sharded_marginals,
    "chunked-release": _chunked_release,
}


def kernels_for(client: Any) -> dict[str, Kernel]:
    """The kernels available to a run on ``client`` (None: this process only), by name."""
    out = {}
    for name, build in KERNELS.items():
        kernel = build(client)
        if kernel is not None:
            out[name] = kernel
    return out


__all__ = ["KERNELS", "Kernel", "kernels_for"]
