"""Scatter independent optimizations (subworkloads, restarts, per-factor problems) over a cluster."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from privcube.core.context import HEARTBEAT_S, local_map

T = TypeVar("T")
R = TypeVar("R")


def map_tasks(fn: Callable[[T], R], items: Sequence[T], *, client: Any = None,
              cost: Callable[[T], float] | None = None, label: str = "task", title: str | None = None) -> list[R]:
    """``[fn(x) for x in items]``, run as independent tasks on ``client`` when one is given.

    With a client, items are submitted largest ``cost`` first (so the long poles start early) and
    results come back in input order. Without one (or with a single item) they run in this process, in
    order (:func:`privcube.core.context.local_map`). ``title`` shows a progress bar (one step per item,
    elapsed time redrawn every second) on stderr.
    """
    items = list(items)
    if client is None or len(items) <= 1:
        return local_map(fn, items, cost=cost, label=label, title=title)
    from privcube.graphs.progress import track_futures

    order = list(range(len(items)))
    if cost is not None:
        order.sort(key=lambda i: -cost(items[i]))
    futures = client.map(fn, [items[i] for i in order], key=[f"{label}-{i}" for i in order], pure=False)
    if title:
        track_futures(futures, title, heartbeat=HEARTBEAT_S)
    results = client.gather(futures)
    out: list[Any] = [None] * len(items)
    for i, r in zip(order, results):
        out[i] = r
    return out
