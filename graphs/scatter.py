"""Scatter independent optimizations (subworkloads, restarts, per-factor problems) over a cluster."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_tasks(fn: Callable[[T], R], items: Sequence[T], *, client: Any = None,
              cost: Callable[[T], float] | None = None, label: str = "task", title: str | None = None) -> list[R]:
    """``[fn(x) for x in items]``, run as independent tasks on ``client`` when one is given.

    With a client, items are submitted largest ``cost`` first (so the long poles start early) and
    results come back in input order. Without one they run in this process, in order. ``title``
    shows a progress bar (one step per item, elapsed time redrawn every second) on stderr.
    """
    import contextlib

    from privcube.graphs.progress import progress

    items = list(items)
    bar = progress(title, len(items), heartbeat=1.0) if title else contextlib.nullcontext(None)
    if client is None or len(items) <= 1:
        with bar as update:
            out_local = []
            for x in items:
                out_local.append(fn(x))
                if update is not None:
                    update(1)
        return out_local
    order = list(range(len(items)))
    if cost is not None:
        order.sort(key=lambda i: -cost(items[i]))
    futures = client.map(fn, [items[i] for i in order], key=[f"{label}-{i}" for i in order], pure=False)
    if title:
        from distributed import as_completed

        with bar as update:
            for _ in as_completed(futures):
                update(1)
    results = client.gather(futures)
    out: list[Any] = [None] * len(items)
    for i, r in zip(order, results):
        out[i] = r
    return out
